"""The asyncio client: the same calls as gpeserve.Client, awaited.

    async with AsyncClient("127.0.0.1:50051") as client:
        async with await client.stream(wait_k=3) as session:
            await session.push("Hello world ")
            await session.end()
            async for message in session:     # TokenDelta ... SessionDone
                ...
"""
import asyncio
import concurrent.futures

import grpc
import grpc.aio

from . import _config
from .client import Client, _channel_parts
from .errors import Internal, from_grpc
from .v1 import gpeserve_pb2 as pb
from .v1 import gpeserve_pb2_grpc as pb_grpc


class AsyncSession:
    """One live Stream call (asyncio). Send with push/boundary/end while another task iterates;
    it ends with SessionDone, an error, or cancel().

    It drives a gpeserve.Session (the sync client) and reads its responses on a worker thread:
    with grpc.aio's own streams, a write that races the server ending the call (e.g. the end of
    the source right after a refused config) replaces the server's status by INTERNAL, and the
    typed error would be lost."""

    def __init__(self, session, executor):
        self._session = session
        self._executor = executor

    @property
    def done(self):
        """The SessionDone, once received."""
        return self._session.done

    async def push(self, source, boundary=False):
        """Sends source: a list of words, or text the server splits on whitespace."""
        self._session.push(source, boundary)

    async def boundary(self):
        """A long-form segment boundary after the words sent so far."""
        self._session.boundary()

    async def end(self):
        """The source is complete (idempotent)."""
        self._session.end()

    def cancel(self):
        """Ends the call now; the server frees the session."""
        self._session.cancel()

    def __aiter__(self):
        return self

    def _next(self):
        try:
            return next(self._session)
        except StopIteration:
            return _END

    async def __anext__(self):
        message = await asyncio.get_running_loop().run_in_executor(self._executor, self._next)
        if message is _END:
            raise StopAsyncIteration
        return message

    async def result(self):
        """Ends the source if needed, reads the rest and returns the SessionDone."""
        await self.end()
        async for _ in self:
            pass
        if self.done is None:
            raise Internal(grpc.StatusCode.INTERNAL, "the stream ended without a SessionDone")
        return self.done

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if self.done is None:
            self.cancel()
        return False


_END = object()


class AsyncClient:
    """gpeserve.Client for asyncio (the same arguments)."""

    def __init__(self, address="127.0.0.1:50051", *, tls_root=None, tls_server_name=None,
                 token=None, timeout=30.0):
        credentials, options = _channel_parts(address, tls_root, tls_server_name)
        self._channel = (grpc.aio.secure_channel(address, credentials, options) if credentials
                         else grpc.aio.insecure_channel(address, options))
        self._stub = pb_grpc.GpeserveStub(self._channel)
        self._metadata = _config.metadata_for(token)
        self._timeout = timeout
        # Streams: the sync client's, read on worker threads (one per session reading).
        self._streams = Client(address, tls_root=tls_root, tls_server_name=tls_server_name,
                               token=token, timeout=timeout)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1024, thread_name_prefix="gpeserve-stream")

    async def stream(self, config=None, *, timeout=None, **settings):
        """Opens a live session (see Client.stream) and sends its config."""
        return AsyncSession(self._streams.stream(config, timeout=timeout, **settings),
                            self._executor)

    async def generate(self, text, config=None, *, timeout=None, **settings):
        """Batch mode: returns the SessionDone for the whole source `text`."""
        request = pb.GenerateRequest(config=_config.session_config(config, **settings),
                                     text=text.encode() if isinstance(text, str) else text)
        call = self._stub.Generate(request, metadata=self._metadata,
                                   timeout=timeout if timeout is not None else self._timeout)
        done = None
        try:
            async for response in call:
                message = _config.message_of(response)
                if isinstance(message, pb.SessionDone):
                    done = message
        except grpc.RpcError as e:
            raise from_grpc(e) from None
        if done is None:
            raise Internal(grpc.StatusCode.INTERNAL, "the stream ended without a SessionDone")
        return done

    async def models(self, timeout=None):
        """A list of ModelInfo."""
        try:
            response = await self._stub.ListModels(
                pb.ListModelsRequest(), metadata=self._metadata,
                timeout=timeout if timeout is not None else self._timeout)
        except grpc.RpcError as e:
            raise from_grpc(e) from None
        return list(response.models)

    async def health(self, timeout=None):
        """True when SERVING."""
        check = self._channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            return _config.health_status(await check(
                b"", metadata=self._metadata,
                timeout=timeout if timeout is not None else self._timeout))
        except grpc.RpcError as e:
            raise from_grpc(e) from None

    async def close(self):
        await self._channel.close()
        self._streams.close()
        self._executor.shutdown(wait=False)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False
