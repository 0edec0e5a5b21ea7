"""Typed errors: every failed call raises a GpeserveError subclass chosen by its gRPC status code,
with the server's message (which says what to change) as its text."""
import grpc


class GpeserveError(Exception):
    """A call failed. `code` is the grpc.StatusCode, `message` the server's explanation."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class InvalidArgument(GpeserveError):
    """The request is wrong (a bad configuration, invalid UTF-8, an empty word...)."""


class NotFound(GpeserveError):
    """The server has no such thing (e.g. an adapter or profile name)."""


class ResourceExhausted(GpeserveError):
    """The server or the session is full, or a message is too large; retry later or send less."""


class Unauthenticated(GpeserveError):
    """The server wants a bearer token (Client(token=...)) and got none or a wrong one."""


class Unavailable(GpeserveError):
    """The server is unreachable, draining, or shut down before the session ended."""


class DeadlineExceeded(GpeserveError):
    """The call's timeout passed."""


class Cancelled(GpeserveError):
    """The call was cancelled (by this client or the server)."""


class FailedPrecondition(GpeserveError):
    """The server cannot do this in its present state or configuration."""


class Internal(GpeserveError):
    """A server fault (or a stream that ended without its final message)."""


_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: Unauthenticated,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.INTERNAL: Internal,
}


def from_grpc(error):
    """The GpeserveError for a grpc.RpcError (sync or aio)."""
    code = error.code()
    return _BY_CODE.get(code, GpeserveError)(code, error.details() or "")
