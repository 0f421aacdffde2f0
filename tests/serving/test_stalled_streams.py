"""gRPC clients that stall (serving.grpc_server): streams that send headers and never a request
message hold no worker and are ended by the receive deadline, their number is capped, and the
connection bounds (streams per connection, age, idle time, ping enforcement) hold; plus
`--grpc_channel_arguments` as tensorflow_model_server parses it.

A stall is a real client-streaming call on a real channel whose request iterator blocks on a
threading.Event: gRPC sends the call's headers at once and no message until the event is set.
On grpcio's synchronous server (before serving.grpc_server) 32 such streams, one per thread of
`--grpc_max_threads`, left every real Predict waiting until its deadline.
"""

import contextlib
import threading

import grpc
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from pgn_tf.serving import grpc_channel_arguments
from pgn_tf.serving.server import main
from pgn_tf.serving.service import Server
from tests.serving.helpers import add_version, request, stub, summaries, wait_until

PREDICT = "/tensorflow.serving.PredictionService/Predict"


@pytest.fixture
def base(tiny_model, tmp_path):
    path = str(tmp_path / "m")
    add_version(path, 1, tiny_model)
    return path


def channel(port: int, **options) -> grpc.Channel:
    """A channel with a connection of its own (channels to one target otherwise share one)."""
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.use_local_subchannel_pool", 1), *options.items()])


def predict(ch: grpc.Channel, text: str, timeout: float = 30.0) -> list[str]:
    resp = prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(
        request({"articles": [text]}, name="m"), timeout=timeout)
    return summaries(resp)


class Stalls:
    """`n` Predict calls on `ch` that send headers and no message until release() (then each
    sends a real request, and those the server has not ended yet are answered)."""

    def __init__(self, ch: grpc.Channel, n: int):
        self._release = threading.Event()
        body = request({"articles": ["late"]}, name="m").SerializeToString()

        def requests():
            self._release.wait()
            yield body

        multi = ch.stream_unary(PREDICT,
                                response_deserializer=predict_pb2.PredictResponse.FromString)
        self.calls = [multi.future(requests()) for _ in range(n)]

    def release(self) -> None:
        self._release.set()


@contextlib.contextmanager
def stalled(ch: grpc.Channel, n: int):
    stalls = Stalls(ch, n)
    try:
        yield stalls
    finally:
        stalls.release()  # the clients' threads blocked in the iterators go on and end


def test_stalled_streams_beyond_the_worker_threads_leave_predict_answering(base):
    """64 stalls on one connection, twice the default 32 worker threads: on the synchronous
    server each held a thread and a real Predict on another connection never ran."""
    srv = Server({"m": base}, poll_seconds=0)
    n = 2 * srv.options.grpc_max_threads
    attacker, client = channel(srv.port), channel(srv.port)
    try:
        with stalled(attacker, n) as stalls:
            assert wait_until(lambda: srv.grpc.awaiting() == n)
            assert predict(client, "real", timeout=10) == ["real"]
            assert srv.grpc.in_progress() == 0 and srv.grpc.awaiting() == n
            assert not any(c.done() for c in stalls.calls)  # still held, not refused
            stalls.release()
            assert [summaries(c.result(timeout=30)) for c in stalls.calls] == [["late"]] * n
    finally:
        attacker.close()
        client.close()
        srv.stop()


def test_only_requests_whose_message_arrived_count_towards_the_rpc_cap(base):
    """One worker, a cap of one RPC: eight stalls do not take the slot a real request needs."""
    srv = Server({"m": base}, poll_seconds=0, grpc_max_threads=1, grpc_max_concurrent_rpcs=1)
    attacker, client = channel(srv.port), channel(srv.port)
    try:
        with stalled(attacker, 8):
            assert wait_until(lambda: srv.grpc.awaiting() == 8)
            assert predict(client, "real", timeout=10) == ["real"]
    finally:
        attacker.close()
        client.close()
        srv.stop()


def test_a_stalled_stream_is_ended_by_the_receive_deadline(base):
    srv = Server({"m": base}, poll_seconds=0, grpc_request_receive_timeout_s=0.5)
    attacker, client = channel(srv.port), channel(srv.port)
    try:
        with stalled(attacker, 3) as stalls:
            for call in stalls.calls:
                err = call.exception(timeout=20)  # raises if the server never ended it
                assert err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                assert "--grpc_request_receive_timeout_seconds" in err.details()
            assert wait_until(lambda: srv.grpc.awaiting() == 0)
            assert srv.grpc.counts["receive_timeout"] == 3
        assert predict(client, "real", timeout=10) == ["real"]  # a message in time is read
    finally:
        attacker.close()
        client.close()
        srv.stop()


def test_past_the_cap_of_streams_awaiting_their_message_the_oldest_is_ended(base):
    srv = Server({"m": base}, poll_seconds=0, grpc_max_streams_awaiting_request=4)
    attacker, client = channel(srv.port), channel(srv.port)
    try:
        with contextlib.ExitStack() as held:
            first = held.enter_context(stalled(attacker, 1))
            assert wait_until(lambda: srv.grpc.awaiting() == 1)  # the oldest
            held.enter_context(stalled(attacker, 3))
            assert wait_until(lambda: srv.grpc.awaiting() == 4)
            last = held.enter_context(stalled(attacker, 1))
            err = first.calls[0].exception(timeout=20)
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "--grpc_max_streams_awaiting_request" in err.details()
            assert wait_until(lambda: srv.grpc.counts["evicted_awaiting"] == 1)
            assert srv.grpc.awaiting() == 4
            # a real request past the cap ends the oldest stall, and its message is read at once
            assert predict(client, "real", timeout=10) == ["real"]
            assert srv.grpc.counts["evicted_awaiting"] == 2 and not last.calls[0].done()
    finally:
        attacker.close()
        client.close()
        srv.stop()


def test_streams_beyond_the_per_connection_cap_wait_and_other_connections_go_on(base):
    srv = Server({"m": base}, poll_seconds=0,
                 grpc_channel_arguments={"grpc.max_concurrent_streams": 4})
    attacker, client = channel(srv.port), channel(srv.port)
    try:
        with stalled(attacker, 4) as stalls:
            assert wait_until(lambda: srv.grpc.awaiting() == 4)
            # a fifth stream on the full connection waits in the client for a free one: the
            # server never sees it, so only the client's own deadline ends it
            with pytest.raises(grpc.RpcError) as e:
                predict(attacker, "fifth", timeout=1)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert srv.grpc.awaiting() == 4
            assert predict(client, "other", timeout=10) == ["other"]
            stalls.release()  # the four are answered and free their streams
            assert [summaries(c.result(timeout=30)) for c in stalls.calls] == [["late"]] * 4
            assert predict(attacker, "sixth", timeout=10) == ["sixth"]
    finally:
        attacker.close()
        client.close()
        srv.stop()


def test_connection_age_and_its_grace_end_a_stalled_stream(base):
    srv = Server({"m": base}, poll_seconds=0, grpc_channel_arguments={
        "grpc.max_connection_age_ms": 300, "grpc.max_connection_age_grace_ms": 300})
    attacker = channel(srv.port)
    try:
        with stalled(attacker, 1) as stalls:
            err = stalls.calls[0].exception(timeout=20)
            assert err.code() == grpc.StatusCode.UNAVAILABLE  # the receive deadline is 30 s
        assert summaries(stub(srv).Predict(request({"articles": ["a"]}, name="m"),
                                           timeout=10)) == ["a"]
    finally:
        attacker.close()
        srv.stop()


def _closed_by_server(ch: grpc.Channel) -> threading.Event:
    """Set once the channel's connection, after being READY, is gone (the server's GOAWAY)."""
    seen, gone = [], threading.Event()

    def on_state(state):
        seen.append(state)
        if state != grpc.ChannelConnectivity.READY and grpc.ChannelConnectivity.READY in seen:
            gone.set()

    ch.subscribe(on_state, try_to_connect=True)
    return gone


@pytest.mark.parametrize("arguments, client_options", [
    ({"grpc.max_connection_idle_ms": 300}, {}),
    # pings every 10 ms with nothing else sent: strikes against the 5-minute minimum interval,
    # the default, and the connection is closed (GOAWAY too_many_pings) well before it would
    # be as idle (5 minutes too)
    ({}, {"grpc.keepalive_time_ms": 10, "grpc.keepalive_permit_without_calls": 1,
          "grpc.http2.max_pings_without_data": 0}),
], ids=["idle", "too_many_pings"])
def test_idle_connections_and_ping_floods_are_closed(base, arguments, client_options):
    srv = Server({"m": base}, poll_seconds=0, grpc_channel_arguments=arguments)
    ch = channel(srv.port, **client_options)
    try:
        assert _closed_by_server(ch).wait(20)
    finally:
        ch.close()
        srv.stop()


def test_stop_ends_stalled_streams_and_frees_the_port(base):
    import socket

    srv = Server({"m": base}, poll_seconds=0)
    attacker = channel(srv.port)
    try:
        with stalled(attacker, 16) as stalls:
            assert wait_until(lambda: srv.grpc.awaiting() == 16)
            srv.stop()
            for call in stalls.calls:
                assert call.exception(timeout=20) is not None
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", srv.port)) != 0
    finally:
        attacker.close()
        srv.stop()


@pytest.mark.parametrize("text, expected", [
    ("", {}),
    ("grpc.max_connection_age_ms=2000", {"grpc.max_connection_age_ms": 2000}),
    ("grpc.max_concurrent_streams=8, grpc.primary_user_agent=pgn , grpc.x=-3",
     {"grpc.max_concurrent_streams": 8, "grpc.primary_user_agent": "pgn", "grpc.x": -3}),
    ("grpc.x=2147483648", {"grpc.x": "2147483648"}),  # past int32: a string, as TF Serving
])
def test_grpc_channel_arguments_parse_as_tf_serving_parses_them(text, expected):
    assert grpc_channel_arguments.parse_channel_arguments(text) == expected


@pytest.mark.parametrize("text, message", [
    ("grpc.max_connection_age_ms", "is not key=value"),
    ("=5", "is not key=value"),
    ("grpc.x=", "is not key=value"),
    ("grpc.x=1=2", "is not key=value"),
    ("grpc.x=1,grpc.x=2", "given twice"),
    ("grpc.max_concurrent_streams=many", "takes an integer"),
    ("grpc.max_connection_age_ms=4000000000", "takes an integer"),
    ("grpc.max_connection_idle_ms=-1", "must not be negative"),
])
def test_malformed_grpc_channel_arguments_are_one_line_errors(text, message):
    with pytest.raises(ValueError, match=message) as e:
        grpc_channel_arguments.parse_channel_arguments(text)
    assert "--grpc_channel_arguments" in str(e.value) and "\n" not in str(e.value)


def test_the_command_refuses_malformed_channel_arguments_before_serving(base, capsys):
    code = main(["--model_base_path", base, "--model_name", "m", "--port", "0",
                 "--grpc_channel_arguments", "grpc.max_concurrent_streams"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--grpc_channel_arguments" in err


def test_the_bounds_are_applied_unless_overridden():
    """ServerOptions carries only the overrides; the server passes its defaults under them."""
    from pgn_tf.serving.service import ServerOptions

    assert ServerOptions().grpc_channel_arguments == {}
    assert grpc_channel_arguments.DEFAULT_CHANNEL_ARGUMENTS["grpc.max_concurrent_streams"] > 0
    with pytest.raises(ValueError, match="takes an integer"):
        ServerOptions(grpc_channel_arguments={"grpc.max_connection_age_ms": "soon"}).validate()
    with pytest.raises(ValueError, match="--grpc_request_receive_timeout_seconds"):
        ServerOptions(grpc_request_receive_timeout_s=0).validate()


def test_a_second_server_cannot_take_a_share_of_the_grpc_port(base):
    """gRPC binds with SO_REUSEPORT unless told not to: a second process could then bind the
    same port and be handed some of the clients' connections. Off here, it is refused."""
    srv = Server({"m": base}, poll_seconds=0)
    try:
        with pytest.raises(ValueError, match="cannot bind gRPC"):
            Server({"m": base}, poll_seconds=0, port=srv.port)
        with channel(srv.port) as ch:
            assert predict(ch, "still here") == ["still here"]
    finally:
        srv.stop()
