"""Session settings as keyword arguments -> a gpeserve.v1.SessionConfig, and the source as
StreamRequests (shared by the sync and asyncio clients)."""
from .v1 import gpeserve_pb2 as pb

_SPLIT = {"word": pb.SessionConfig.SPLIT_WORD, "token": pb.SessionConfig.SPLIT_TOKEN}
_PARADIGM = {"gpe": pb.SessionConfig.PARADIGM_GPE,
             "reencode": pb.SessionConfig.PARADIGM_REENCODE,
             "interleaved": pb.SessionConfig.PARADIGM_INTERLEAVED}
_COMPAT = {"none": pb.SessionConfig.COMPAT_NONE, "reference": pb.SessionConfig.COMPAT_REFERENCE}


def _choice(name, value, table):
    if value not in table:
        raise ValueError(f"{name} must be one of {', '.join(table)} (got {value!r})")
    return table[value]


def session_config(config=None, *, profile=None, instruction=None, adapter=None, wait_k=None,
                   split=None, paradigm=None, compat=None, max_new_tokens=None,
                   max_write_tokens=None, temperature=None, top_k=None, top_p=None, seed=None,
                   long_form=None, report_waiting=None):
    """A SessionConfig: `config` (a SessionConfig, copied) with the given settings on top.

    Unset settings keep the server's defaults. split: "word" or "token"; paradigm: "gpe",
    "reencode" or "interleaved"; compat: "none" or "reference"; long_form: True, or a dict of
    LongForm fields (sentence_marks as str or bytes, max_segment_words, context_segments);
    report_waiting: answer with a WaitingForSource each time the session needs more source.
    """
    out = pb.SessionConfig()
    if config is not None:
        out.CopyFrom(config)
    if profile is not None:
        out.profile = profile
    if instruction is not None:
        out.instruction = instruction
    if adapter is not None:
        out.adapter = adapter
    if wait_k is not None:
        out.wait_k = wait_k
    if split is not None:
        out.split = _choice("split", split, _SPLIT)
    if paradigm is not None:
        out.paradigm = _choice("paradigm", paradigm, _PARADIGM)
    if compat is not None:
        out.compat = _choice("compat", compat, _COMPAT)
    if max_new_tokens is not None:
        out.max_new_tokens = max_new_tokens
    if max_write_tokens is not None:
        out.max_write_tokens = max_write_tokens
    if temperature is not None:
        out.sampling.temperature = temperature
    if top_k is not None:
        out.sampling.top_k = top_k
    if top_p is not None:
        out.sampling.top_p = top_p
    if seed is not None:
        out.sampling.seed = seed
    if long_form:
        out.long_form.enabled = True
        if isinstance(long_form, dict):
            for key, value in long_form.items():
                if key == "sentence_marks":
                    out.long_form.sentence_marks.extend(
                        m.encode() if isinstance(m, str) else m for m in value)
                elif key in ("max_segment_words", "context_segments", "enabled"):
                    setattr(out.long_form, key, value)
                else:
                    raise ValueError(f"long_form has no setting {key!r}")
    if report_waiting is not None:
        out.report_waiting = report_waiting
    return out


def _utf8(value):
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def chunk_request(source, boundary=False):
    """A StreamRequest with a SourceChunk: `source` is text (str or bytes: the server splits it
    on whitespace, and a word cut at the end waits for the next chunk) or a list of words."""
    chunk = pb.SourceChunk(boundary=boundary)
    if isinstance(source, (str, bytes, bytearray)):
        chunk.text = _utf8(source)
    else:
        chunk.words.extend(_utf8(w) for w in source)
    return pb.StreamRequest(chunk=chunk)


def config_request(config):
    return pb.StreamRequest(config=config)


def end_request():
    return pb.StreamRequest(end=pb.EndOfSource())


def message_of(response):
    """The one message a StreamResponse carries: TokenDelta, WaitingForSource, SegmentDone or
    SessionDone."""
    kind = response.WhichOneof("kind")
    return getattr(response, kind) if kind else None


def metadata_for(token):
    return (("authorization", f"Bearer {token}"),) if token else None


def health_status(response_bytes):
    """grpc.health.v1.HealthCheckResponse{status} from its bytes: SERVING is field 1 = 1."""
    return response_bytes == b"\x08\x01"
