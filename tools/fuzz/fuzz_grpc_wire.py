"""The gRPC transport fuzzed (serving.fuzz's `grpc_wire` campaign): HTTP/2 streams written
frame by frame (h2, a pure-Python HTTP/2 library) to the real gRPC server on loopback, so the
fuzz reaches what a client library never sends: the 5-byte message prefix (its compressed flag
and its length, true or lying), grpc-encoding (gzip, deflate, identity, unknown) over valid and
corrupt payloads, messages around the receive limit, every method path, and malformed headers.

Its parts: serving.fuzz_grpc_inputs (an input's format, what it makes of the stream's headers
and DATA bytes, the seeds and the mutator), serving.fuzz_grpc_client (the HTTP/2 client), and
here the checks (`check`) and the campaign's target (`WireHarness`).

The campaign's server runs with --max_request_bytes of MAX_REQUEST_BYTES instead of the
default 10 MiB (serving.fuzz_child starts it with `server_options()`): its receive limit L (validation.Limits'
max_message_bytes, which the server hands gRPC as grpc.max_receive_message_length) is then
MAX_REQUEST_BYTES plus validation's framing allowance, computed and enforced by the same code,
so the sizes around it (L-1, L, L+1, L+4096: fuzz_grpc_inputs.SIZES) test the same boundary
without megabytes to pad, compress, send and inflate for each; the 4 MiB size, gRPC's own
default limit, is then past it.

An input (fuzz_grpc_inputs.Wire) sends one stream (and a second message, frames split, client
trailers, RST_STREAM instead of the end of the stream, a truncated message, as its bits say)
and reads until the stream is answered or reset or the connection ends. A dishonest stream, and
an honest one whose message is past the receive limit, has a connection of its own, closed after
it; any other honest one may go on the connection of the honest stream before it
(fuzz_grpc_client says what that changes on the wire, and what not).

`check` raises `Finding` for: an honest stream (true framing, a known encoding, well-formed
headers: `Wire.honest`) answered with anything but a status a client's request may get
(HONEST_CODES) or not answered within `answer_timeout_s`; an OK whose body
is not one response message of the method; an error message longer than serving.status allows
or naming the export's path. An honest stream whose message is past the receive limit must be
refused by gRPC before any handler sees it (`WireHarness` raises Finding for one that reached
the `transport` stage); gRPC's status for it comes as late as for a dishonest stream, and is
waited for as long. A dishonest stream may be refused in any way gRPC chooses (a
status, RST_STREAM, GOAWAY, or late: `WireHarness` waits `dishonest_wait_s` for it): what it
must not do is reach the handlers wrongly, which the server's error log shows
(fuzz_loopback.LoopbackServer.end_input), or take the server down, which the next honest
stream's answer shows.

Importing this module needs no atheris and starts nothing; h2 is imported where a campaign
starts (the fuzz and test extras install it).
"""

from __future__ import annotations

import collections
import gzip
import struct
import zlib

from tools.fuzz.fuzz_grpc_client import Answer, WireClient
from tools.fuzz.fuzz_grpc_inputs import PATHS, Wire, message_bytes
from tools.fuzz.fuzz_harness import GRPC_METHODS, Finding
from tools.fuzz.fuzz_loopback import answer_feature, answer_key

# the campaign's server's --max_request_bytes (module docstring)
MAX_REQUEST_BYTES = 64 * 1024
# Statuses an honest stream may get: the API's refusals (serving.status), UNIMPLEMENTED for a
# method not served, RESOURCE_EXHAUSTED past the receive limit, DEADLINE_EXCEEDED.
HONEST_CODES = frozenset({"OK", "INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE",
                          "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "UNIMPLEMENTED",
                          "DEADLINE_EXCEEDED"})


def server_options() -> dict:
    """The ServerOptions fields the campaign's LoopbackServer is started with."""
    return {"max_request_bytes": MAX_REQUEST_BYTES}


def check(wire: Wire, answer: Answer, check_message, over_limit: bool = False) -> str:
    """The outcome ("Predict INVALID_ARGUMENT", "Predict RST_STREAM 1"); Finding for what the
    server must not answer (module docstring). over_limit: the message is past the receive
    limit, and an honest stream may then be "late" too."""
    from pgn_tf.serving.status import MAX_MESSAGE_CHARS

    name = PATHS[wire.path][0].rsplit("/", 1)[-1] if wire.path < 9 else f"path{wire.path}"
    where = f"{name} {'honest' if wire.honest() else 'dishonest'}"
    if answer.status == "no answer":  # (a dishonest stream's is "late": WireHarness)
        raise Finding(f"{where}: no answer within the answer timeout ({wire!r:.300})")
    if wire.honest() and answer.status not in HONEST_CODES and not (
            over_limit and answer.status == "late"):
        raise Finding(f"{where}: answered {answer.status}: {answer.message[:300]} "
                      f"({wire!r:.300})")
    if answer.message:
        check_message(f"{where} {answer.status}", answer.message, MAX_MESSAGE_CHARS)
    if answer.status == "OK":
        _check_response(where, answer.body, GRPC_METHODS[wire.request_index].request)
    answer_feature(answer_key("grpc", wire.path, answer.status, answer.message[:40]))
    return f"{name} {answer.status}"


def _check_response(where: str, body: bytes, request_cls) -> None:
    """An OK answer's body is one uncompressed or gzip message of the method's response."""
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        predict_pb2,
    )

    responses = {predict_pb2.PredictRequest: predict_pb2.PredictResponse,
                 get_model_metadata_pb2.GetModelMetadataRequest:
                     get_model_metadata_pb2.GetModelMetadataResponse,
                 get_model_status_pb2.GetModelStatusRequest:
                     get_model_status_pb2.GetModelStatusResponse}
    if len(body) < 5:
        raise Finding(f"{where}: OK with a body of {len(body)} bytes")
    flag, length = body[0], struct.unpack(">I", body[1:5])[0]
    if length != len(body) - 5 or flag not in (0, 1):
        raise Finding(f"{where}: OK with a message prefix ({flag}, {length}) for "
                      f"{len(body) - 5} bytes")
    message = body[5:]
    if flag:
        message = gzip.decompress(message) if message[:2] == b"\x1f\x8b" else zlib.decompress(
            message)
    cls = responses.get(request_cls)
    if cls is not None:
        try:
            cls.FromString(message)
        except Exception as e:  # noqa: BLE001  (protobuf's DecodeError)
            raise Finding(f"{where}: OK with a body that is not a {cls.__name__}: {e}") from None


class WireHarness:
    """The `grpc_wire` campaign's target: a LoopbackServer over the stand-in export (started
    with server_options()) and a WireClient to its gRPC port; `one(data)` sends one stream.

    An honest stream waits up to `answer_timeout_s` for its answer, on the connection the
    honest stream before it left open (fuzz_grpc_client). A dishonest one, and an honest one
    whose message is past the receive limit, waits `dishonest_wait_s` after it was sent (or
    after the server's flow control stopped it): gRPC answers a stream its transport refuses
    (a message past the limit, a length that lies, a malformed header or timeout) far later
    than anything else is answered, though its server-side call ended long before (the
    handler read nothing), so waited for in full such inputs would take most of a campaign's
    time. One not answered by then is closed and counted "late", unless a handler has its
    request (the `transport` stage): its answer is then waited for as an honest stream's
    is, and checked. What a late stream must not do, reach a handler wrongly or stop the
    server, still shows: in the stages (a message past the limit), in the server's error
    log, and in the answer to the next honest stream.

    Before an input is closed, every gRPC call the server's event loop runs has ended
    (LoopbackServer.wait_for_calls; a dishonest stream's connection is closed by then, which
    ends what gRPC had not answered on it), so that what the server logs for a stream, also
    once its client read the status, is logged in its input's window: a finding is this
    input's, and libFuzzer keeps this input as its reproducer."""

    def __init__(self, loopback, answer_timeout_s: float = 10.0,
                 dishonest_wait_s: float = 0.003):
        self.loopback = loopback
        self.answer_timeout_s = answer_timeout_s
        self.limit = loopback.server.predictor.limits.max_message_bytes
        self.client = WireClient(loopback.grpc_port, self.limit, answer_timeout_s)
        self.dishonest_wait_s = dishonest_wait_s
        self.counts: collections.Counter = collections.Counter()

    def _handled(self) -> bool:
        return "transport" in self.loopback.stages.current()

    def one(self, data: bytes) -> str:
        self.loopback.start_input()
        wire = Wire.parse(data)
        honest = wire.honest()
        size = message_bytes(wire, self.limit)
        if honest and size <= self.limit:
            answer = self.client.send(wire, keep=True)
        else:
            answer = self.client.send(wire, self.dishonest_wait_s, patience=self._handled)
            if answer.status == "no answer":
                answer.status = "late"
        where = f"grpc_wire {PATHS[wire.path][0][-40:]!r}"
        self.loopback.wait_for_calls(self.answer_timeout_s, where)
        if honest and size > self.limit and self._handled():
            raise Finding(f"{where}: a message of {size} bytes, past the receive limit of "
                          f"{self.limit}, reached a handler ({wire!r:.300})")
        outcome = check(wire, answer, self.loopback.check_message, size > self.limit)
        self.loopback.end_input(f"grpc_wire {outcome}")
        self.counts[f"grpc_wire {outcome}"] += 1
        return outcome

    def close(self) -> None:
        self.client.close()
