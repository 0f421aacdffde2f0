"""What streams waiting for their request message may hold (serving.grpc_server): a stream whose
read is posted is granted its whole message's window, so only `max_reading` of them read (the
memory budget over the receive limit) and the rest are parked with a 64 KiB window; one client
over the reading cap waits behind its own streams while another client's request is read; the
books return to zero; and the bounds reach gRPC.

The window test speaks HTTP/2 itself (h2): a client library never sends a message's first bytes
and stops, which is what a stream filling the server's memory does.
"""

import select
import socket
import struct

import grpc
import pytest

from pgn_tf.serving import grpc_channel_arguments, grpc_server
from pgn_tf.serving.service import Server
from tests.serving.helpers import add_version, wait_until
from tests.serving.test_stalled_streams import PREDICT, channel, predict, stalled

CLAIMED = 1_000_000  # the length prefix each stream announces, under the receive limit


@pytest.fixture
def base(tiny_model, tmp_path):
    path = str(tmp_path / "m")
    add_version(path, 1, tiny_model)
    return path


class _H2Streams:
    """Streams on one raw HTTP/2 connection, each sending a message prefix claiming CLAIMED
    bytes and then as much of the message as the server's flow control lets it."""

    def __init__(self, port: int, n: int):
        import h2.config
        import h2.connection

        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", PREDICT),
                   (":authority", "x"), ("content-type", "application/grpc"),
                   ("te", "trailers")]
        self.sent: dict[int, int] = {}
        for _ in range(n):
            sid = self.conn.get_next_available_stream_id()
            self.conn.send_headers(sid, headers)
            self.conn.send_data(sid, b"\0" + struct.pack(">I", CLAIMED))
            self.sent[sid] = 0
        self.sock.sendall(self.conn.data_to_send())

    def pump(self, until, rounds: int = 100_000) -> None:
        """Sends what the windows allow and reads the server's frames until until()."""
        for _ in range(rounds):
            if until():
                return
            for sid, n in self.sent.items():
                if sid not in self.conn.streams:
                    continue
                room = min(self.conn.local_flow_control_window(sid),
                           self.conn.max_outbound_frame_size, CLAIMED - 1 - n)
                if room > 0:
                    self.conn.send_data(sid, b"x" * room)
                    self.sent[sid] += room
            self.sock.sendall(self.conn.data_to_send())
            if select.select([self.sock], [], [], 0.05)[0]:
                data = self.sock.recv(1 << 16)
                if not data:
                    return
                self.conn.receive_data(data)
                self.sock.sendall(self.conn.data_to_send())
        raise AssertionError("the streams never got there")

    def reset(self, sid: int) -> None:
        self.conn.reset_stream(sid, 8)
        self.sock.sendall(self.conn.data_to_send())

    def close(self) -> None:
        self.sock.close()


@pytest.mark.slow
def test_a_parked_stream_is_granted_only_the_lookahead_window(base):
    """With room for one reading stream, the first stream may send all but the last byte of
    its message while the second, parked, gets no more than 64 KiB; once the first is reset
    the second reads and gets its window."""
    srv = Server({"m": base}, poll_seconds=0, grpc_awaiting_message_memory_mb=1)
    assert srv.grpc.max_reading == 1
    streams = _H2Streams(srv.port, 2)
    first, second = sorted(streams.sent)
    try:
        streams.pump(lambda: streams.sent[first] == CLAIMED - 1)
        assert srv.grpc.reading() == 1 and srv.grpc.parked() == 1
        assert streams.sent[second] <= 64 * 1024
        streams.reset(first)
        streams.pump(lambda: streams.sent[second] == CLAIMED - 1)
        assert wait_until(lambda: srv.grpc.reading() == 1 and srv.grpc.parked() == 0)
        streams.close()  # the connection gone, its streams leave the books
        assert wait_until(lambda: srv.grpc.awaiting() == 0)
    finally:
        streams.close()
        srv.stop()


def test_one_client_over_the_reading_cap_waits_behind_its_own_streams(base):
    """The attacker (IPv6 loopback) fills the reading places and parks the rest of its
    streams; a request from another client (IPv4) takes the attacker's oldest place, and the
    attacker's stream ended for it is RESOURCE_EXHAUSTED, naming the flag."""
    srv = Server({"m": base}, host="::", poll_seconds=0, grpc_awaiting_message_memory_mb=21)
    reading = srv.grpc.max_reading
    assert reading == 2
    attacker = grpc.insecure_channel(f"[::1]:{srv.port}",
                                     options=[("grpc.use_local_subchannel_pool", 1)])
    client = channel(srv.port)
    try:
        with stalled(attacker, 6) as stalls:
            assert wait_until(lambda: srv.grpc.awaiting() == 6)
            assert srv.grpc.reading() == reading and srv.grpc.parked() == 6 - reading
            assert predict(client, "real", timeout=10) == ["real"]
            assert srv.grpc.counts["evicted_reading"] == 1
            ended = [c for c in stalls.calls if c.done()]
            assert len(ended) == 1
            assert ended[0].exception().code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "--grpc_awaiting_message_memory_mb" in ended[0].exception().details()
            # the attacker's place went to its oldest parked stream once the request was read
            assert wait_until(lambda: srv.grpc.reading() == reading
                              and srv.grpc.parked() == 5 - reading)
    finally:
        attacker.close()
        client.close()
        srv.stop()


def test_cancelled_stalls_leave_the_books_empty(base):
    srv = Server({"m": base}, poll_seconds=0, grpc_awaiting_message_memory_mb=21)
    attacker = channel(srv.port)
    try:
        with stalled(attacker, 8) as stalls:
            assert wait_until(lambda: srv.grpc.awaiting() == 8)
            assert srv.grpc.parked() == 8 - srv.grpc.max_reading
            for call in stalls.calls:
                call.cancel()
            assert wait_until(lambda: srv.grpc.awaiting() == 0)
            assert srv.grpc.reading() == 0 and srv.grpc.parked() == 0
            assert srv.grpc.in_progress() == 0
            assert predict(channel(srv.port), "after", timeout=10) == ["after"]
    finally:
        attacker.close()
        srv.stop()


def test_the_servers_bounds_are_handed_to_grpc(base, monkeypatch):
    """What aio.server is given: every default bound, the receive limit of the input checks,
    and a --grpc_channel_arguments pair over the default it names."""
    given = []
    real = grpc_server.aio.server

    def server(**kwargs):
        given.append(dict(kwargs["options"]))
        return real(**kwargs)

    monkeypatch.setattr(grpc_server.aio, "server", server)
    srv = Server({"m": base}, poll_seconds=0,
                 grpc_channel_arguments={"grpc.max_connection_idle_ms": 1234})
    try:
        (options,) = given
        expected = {**grpc_channel_arguments.DEFAULT_CHANNEL_ARGUMENTS,
                    "grpc.max_connection_idle_ms": 1234,
                    "grpc.max_receive_message_length": srv.predictor.limits.max_message_bytes}
        assert {k: options.get(k) for k in expected} == expected
    finally:
        srv.stop()


@pytest.mark.parametrize("arguments, message", [
    ({"grpc.max_receive_message_length": -1}, "must be positive"),
    ({"grpc.max_send_message_length": 0}, "must be positive"),
    ({"grpc.max_receive_message_length": 2**31 - 1}, "raise --max_request_bytes instead"),
])
def test_message_lengths_that_undo_the_receive_limit_are_refused(base, arguments, message):
    with pytest.raises(ValueError, match=message):
        Server({"m": base}, poll_seconds=0, grpc_channel_arguments=arguments).stop()


def test_host_wildcard_ipv6_takes_ipv4_clients_on_both_ports(base):
    """--host :: serves IPv6 and IPv4 clients on gRPC and REST alike (waitress alone would bind
    REST IPv6 only, so an IPv4 client would be refused there but served on gRPC)."""
    import http.client

    srv = Server({"m": base}, host="::", rest_port="auto", poll_seconds=0)
    try:
        for host in ("127.0.0.1", "::1"):
            conn = http.client.HTTPConnection(host, srv.rest_port, timeout=10)
            conn.request("GET", "/v1/models/m")
            assert conn.getresponse().status == 200
            conn.close()
        with grpc.insecure_channel(f"[::1]:{srv.port}") as v6:
            assert predict(v6, "six", timeout=10) == ["six"]
        assert predict(channel(srv.port), "four", timeout=10) == ["four"]
    finally:
        srv.stop()
