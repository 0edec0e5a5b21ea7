"""gpeserve: the Python client of the gpeserve streaming server (group position encoding).

    from gpeserve import Client
    with Client("127.0.0.1:50051") as client, client.stream(wait_k=3) as session:
        session.push("the speaker said that ")
        session.end()
        for message in session:
            if isinstance(message, gpeserve.TokenDelta):
                print(message.text, end="", flush=True)

Client (sync) and aio.AsyncClient (asyncio); the messages are gpeserve.v1's protobuf classes
(re-exported here); errors are gpeserve.errors' GpeserveError subclasses. The SimulEval agent is
gpeserve.simuleval_agent (pip install "./client/python[simuleval]").
"""
from . import errors
from ._config import session_config
from .aio import AsyncClient, AsyncSession
from .client import Client, Session
from .errors import (Cancelled, DeadlineExceeded, FailedPrecondition, GpeserveError, Internal,
                     InvalidArgument, NotFound, ResourceExhausted, Unauthenticated, Unavailable)
from .v1.gpeserve_pb2 import (ModelInfo, SegmentDone, SessionConfig, SessionDone, TokenDelta,
                              WaitingForSource)

__all__ = [
    "AsyncClient", "AsyncSession", "Cancelled", "Client", "DeadlineExceeded",
    "FailedPrecondition", "GpeserveError", "Internal", "InvalidArgument", "ModelInfo",
    "NotFound", "ResourceExhausted", "SegmentDone", "Session", "SessionConfig", "SessionDone",
    "TokenDelta", "Unauthenticated", "Unavailable", "WaitingForSource", "errors",
    "session_config",
]
