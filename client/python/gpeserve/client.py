"""The synchronous client. A live session:

    with Client("127.0.0.1:50051") as client, client.stream(wait_k=3) as session:
        session.push(["Hello", "world"])     # words; a str is text the server splits
        session.end()
        for message in session:               # TokenDelta ... SessionDone
            ...

Iterating a session yields the messages the server sends, as the protobuf classes this package
exports: TokenDelta (new target tokens and their text), WaitingForSource (with
report_waiting=True: the session needs more source), SegmentDone (long-form sessions) and last
SessionDone (also kept as `session.done`). Failures raise GpeserveError subclasses (errors.py).
"""
import queue

import grpc

from . import _config
from .errors import Internal, from_grpc
from .v1 import gpeserve_pb2 as pb
from .v1 import gpeserve_pb2_grpc as pb_grpc


def _read_root(tls_root):
    if tls_root is None or isinstance(tls_root, bytes):
        return tls_root
    if "-----BEGIN" in tls_root:
        return tls_root.encode()
    with open(tls_root, "rb") as f:  # a path
        return f.read()


def _channel_parts(address, tls_root, tls_server_name):
    options = []
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    credentials = None
    if tls_root is not None:
        credentials = grpc.ssl_channel_credentials(root_certificates=_read_root(tls_root))
    return credentials, options


class Session:
    """One live Stream call. push/boundary/end may be called from any thread while another
    iterates; the session ends with SessionDone, an error, or cancel()."""

    def __init__(self, stub, config, metadata, timeout):
        self._requests = queue.Queue()
        self._requests.put(_config.config_request(config))
        self._ended = False
        self.done = None  # the SessionDone, once received
        self._call = stub.Stream(self._request_stream(), metadata=metadata, timeout=timeout)
        self._responses = iter(self._call)

    def _request_stream(self):
        while True:
            request = self._requests.get()
            if request is None:
                return
            yield request

    def push(self, source, boundary=False):
        """Sends source: a list of words, or text (str or bytes) that the server splits on
        whitespace (a word cut at the end of the text waits for the next chunk). boundary=True
        ends a long-form segment after it."""
        if self._ended:
            raise ValueError("the source has ended; no more chunks can be sent")
        self._requests.put(_config.chunk_request(source, boundary))

    def boundary(self):
        """A long-form segment boundary after the words sent so far."""
        self.push([], boundary=True)

    def end(self):
        """The source is complete (idempotent)."""
        if not self._ended:
            self._ended = True
            self._requests.put(_config.end_request())
            self._requests.put(None)

    def cancel(self):
        """Ends the call now; the server frees the session."""
        self._ended = True
        self._call.cancel()  # first: ending the request stream would end the source
        self._requests.put(None)

    def __iter__(self):
        return self

    def __next__(self):
        """The next message (blocks until the server sends one); StopIteration after
        SessionDone."""
        try:
            response = next(self._responses)
        except grpc.RpcError as e:
            raise from_grpc(e) from None
        message = _config.message_of(response)
        if isinstance(message, pb.SessionDone):
            self.done = message
        return message

    def result(self):
        """Ends the source if needed, reads the rest and returns the SessionDone."""
        self.end()
        for _ in self:
            pass
        if self.done is None:
            raise Internal(grpc.StatusCode.INTERNAL, "the stream ended without a SessionDone")
        return self.done

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.done is None:
            self.cancel()
        return False


class Client:
    """A connection to a gpeserve server.

    address: "host:port". tls_root: PEM root certificates (bytes, a PEM string, or a file path):
    connect with TLS; tls_server_name: the name expected in the server's certificate instead of
    the host. token: sent as "authorization: Bearer <token>" (gpeserve --auth_token_file).
    timeout: seconds for ListModels, health and generate (None: no limit); streams take their
    own (default: none, a session may last hours).
    """

    def __init__(self, address="127.0.0.1:50051", *, tls_root=None, tls_server_name=None,
                 token=None, timeout=30.0):
        credentials, options = _channel_parts(address, tls_root, tls_server_name)
        self._channel = (grpc.secure_channel(address, credentials, options) if credentials
                         else grpc.insecure_channel(address, options))
        self._stub = pb_grpc.GpeserveStub(self._channel)
        self._metadata = _config.metadata_for(token)
        self._timeout = timeout

    def stream(self, config=None, *, timeout=None, **settings):
        """Opens a live session: `config` (a SessionConfig) and/or the keyword settings of
        gpeserve.session_config (wait_k=3, max_new_tokens=..., report_waiting=True, ...)."""
        return Session(self._stub, _config.session_config(config, **settings), self._metadata,
                       timeout)

    def generate_stream(self, text, config=None, *, timeout=None, **settings):
        """Batch mode: the whole source at once; yields TokenDelta messages, then SessionDone."""
        request = pb.GenerateRequest(config=_config.session_config(config, **settings),
                                     text=text.encode() if isinstance(text, str) else text)
        call = self._stub.Generate(request, metadata=self._metadata,
                                   timeout=timeout if timeout is not None else self._timeout)
        try:
            for response in call:
                yield _config.message_of(response)
        except grpc.RpcError as e:
            raise from_grpc(e) from None

    def generate(self, text, config=None, *, timeout=None, **settings):
        """Batch mode: returns the SessionDone for the whole source `text`."""
        done = None
        for message in self.generate_stream(text, config, timeout=timeout, **settings):
            if isinstance(message, pb.SessionDone):
                done = message
        if done is None:
            raise Internal(grpc.StatusCode.INTERNAL, "the stream ended without a SessionDone")
        return done

    def models(self, timeout=None):
        """What the server serves: a list of ModelInfo (profiles, adapters, KV blocks...)."""
        try:
            return list(self._stub.ListModels(
                pb.ListModelsRequest(), metadata=self._metadata,
                timeout=timeout if timeout is not None else self._timeout).models)
        except grpc.RpcError as e:
            raise from_grpc(e) from None

    def health(self, timeout=None):
        """grpc.health.v1 status: True when SERVING, False when NOT_SERVING (draining)."""
        check = self._channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            return _config.health_status(check(b"", metadata=self._metadata,
                                               timeout=timeout if timeout is not None
                                               else self._timeout))
        except grpc.RpcError as e:
            raise from_grpc(e) from None

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
