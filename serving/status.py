"""Request outcomes as TF Serving reports them: a gRPC status code, its HTTP status, and a
one-line message that is safe to send to a remote client (it never names a file-system path).

Every exception raised while a request is handled goes through `from_exception`, so a client
sees INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED or UNAVAILABLE for
what it sent or for the server's load; INTERNAL is left for faults of the server itself.
"""

from __future__ import annotations

import re

import grpc
import tensorflow as tf

Code = grpc.StatusCode

# TF Serving's mapping of status codes to HTTP (its REST handler's ToHTTPStatusCode).
HTTP_STATUS = {
    Code.OK: 200,
    Code.CANCELLED: 499,
    Code.INVALID_ARGUMENT: 400,
    Code.OUT_OF_RANGE: 400,
    Code.FAILED_PRECONDITION: 412,
    Code.NOT_FOUND: 404,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.DEADLINE_EXCEEDED: 504,
    Code.UNAVAILABLE: 503,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNKNOWN: 500,
}

MAX_MESSAGE_CHARS = 500  # gRPC sends the message as metadata (8 KiB by default, headers too)
MAX_ECHO_CHARS = 80  # of one piece of client input quoted back in a message

# An absolute POSIX path of two or more components, or a URI with a scheme TF reads from.
_PATH = re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|(?<![\w.])/)[^\s'\"\]\[,;:()]*/[^\s'\"\]\[,;:()]*")
_ASSERT_PARTS = re.compile(r"\[([^\[\]]*)\]")


class RequestError(Exception):
    """A request the server refuses or cannot complete.

    Args:
      code: a grpc.StatusCode; message: one line for the client (no file-system path).
    """

    def __init__(self, code: grpc.StatusCode, message: str):
        message = _cap(str(message), MAX_MESSAGE_CHARS)  # whatever a caller put in, bounded
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def echo(value) -> str:
    """Client input quoted in an error message, cut to MAX_ECHO_CHARS: a 100,000-character
    version label or a 4,000-digit number must not come back whole (over gRPC it would overflow
    the status metadata and turn NOT_FOUND into RESOURCE_EXHAUSTED)."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= MAX_ECHO_CHARS:
        return text
    return f"{text[: MAX_ECHO_CHARS - 3]}... ({len(text)} characters)"


def invalid(message: str) -> RequestError:
    return RequestError(Code.INVALID_ARGUMENT, message)


def not_found(message: str) -> RequestError:
    return RequestError(Code.NOT_FOUND, message)


def redact(message: str) -> str:
    """The first line of `message`, paths replaced by <path>, at most MAX_MESSAGE_CHARS."""
    line = next((s.strip() for s in str(message).splitlines() if s.strip()), "")
    return _cap(_PATH.sub("<path>", line), MAX_MESSAGE_CHARS)


def tf_message(e: tf.errors.OpError) -> str:
    """A TF op error as one client-facing line. A failed tf.debugging.Assert has a line
    'assertion failed: [beam_size must be between 1 and 16, got] [40]' (after TF's "Graph
    execution error" preamble): its bracketed parts become 'beam_size must be between 1 and 16,
    got 40'. Otherwise the first line that is not the preamble."""
    lines = [s.strip() for s in str(e.message).splitlines() if s.strip()]
    for line in lines:
        if line.startswith("assertion failed:"):
            parts = _ASSERT_PARTS.findall(line)
            if parts:
                return redact(" ".join(p.strip() for p in parts))
    skip = ("Graph execution error", "Detected at node", "<stack traces", "[[{{node")
    useful = [s for s in lines if not s.startswith(skip)]
    return redact(useful[0] if useful else type(e).__name__)


def from_exception(e: BaseException) -> RequestError:
    """The status a client gets for an exception raised while handling its request."""
    if isinstance(e, RequestError):
        return e
    if isinstance(e, (tf.errors.InvalidArgumentError, tf.errors.OutOfRangeError)):
        return RequestError(Code.INVALID_ARGUMENT, tf_message(e))
    if isinstance(e, tf.errors.ResourceExhaustedError):
        return RequestError(Code.RESOURCE_EXHAUSTED, tf_message(e))
    if isinstance(e, tf.errors.DeadlineExceededError):
        return RequestError(Code.DEADLINE_EXCEEDED, tf_message(e))
    if isinstance(e, MemoryError):
        return RequestError(Code.RESOURCE_EXHAUSTED, "the server ran out of memory for this "
                                                     "request; send fewer or shorter inputs")
    if isinstance(e, tf.errors.OpError):
        return RequestError(Code.INTERNAL, f"model run failed: {tf_message(e)}")
    return RequestError(Code.INTERNAL, f"internal error: {type(e).__name__}")
