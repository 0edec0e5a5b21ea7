"""The asyncio client: the same calls as gpeserve.Client, awaited.

    async with AsyncClient("127.0.0.1:50051") as client:
        async with await client.stream(wait_k=3) as session:
            await session.push("Hello world ")
            await session.end()
            async for message in session:     # TokenDelta ... SessionDone
                ...
"""
import grpc
import grpc.aio

from . import _config
from .client import _channel_parts
from .errors import Internal, from_grpc
from .v1 import gpeserve_pb2 as pb
from .v1 import gpeserve_pb2_grpc as pb_grpc


class AsyncSession:
    """One live Stream call (asyncio). Write with push/boundary/end while another task iterates;
    it ends with SessionDone, an error, or cancel()."""

    def __init__(self, call):
        self._call = call
        self._ended = False
        self.done = None  # the SessionDone, once received

    async def _write(self, request):
        try:
            await self._call.write(request)
        except grpc.RpcError as e:
            raise from_grpc(e) from None

    async def push(self, source, boundary=False):
        """Sends source: a list of words, or text the server splits on whitespace."""
        if self._ended:
            raise ValueError("the source has ended; no more chunks can be sent")
        await self._write(_config.chunk_request(source, boundary))

    async def boundary(self):
        """A long-form segment boundary after the words sent so far."""
        await self.push([], boundary=True)

    async def end(self):
        """The source is complete (idempotent)."""
        if not self._ended:
            self._ended = True
            await self._write(_config.end_request())
            await self._call.done_writing()

    def cancel(self):
        """Ends the call now; the server frees the session."""
        self._ended = True
        self._call.cancel()

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            response = await self._call.read()
        except grpc.RpcError as e:
            raise from_grpc(e) from None
        if response is grpc.aio.EOF:
            code = await self._call.code()
            if code != grpc.StatusCode.OK:
                raise from_grpc(_Finished(code, await self._call.details()))
            raise StopAsyncIteration
        message = _config.message_of(response)
        if isinstance(message, pb.SessionDone):
            self.done = message
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


class _Finished:
    """A finished call's status in the shape from_grpc reads."""

    def __init__(self, code, details):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


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

    async def stream(self, config=None, *, timeout=None, **settings):
        """Opens a live session (see Client.stream) and sends its config."""
        call = self._stub.Stream(metadata=self._metadata, timeout=timeout)
        session = AsyncSession(call)
        await session._write(_config.config_request(_config.session_config(config, **settings)))
        return session

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

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()
        return False
