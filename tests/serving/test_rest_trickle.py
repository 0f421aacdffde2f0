"""The REST door against clients that trickle: a request deadline no byte extends, a deadline
on answers that clients do not read, a cap on one client address' connections, and the optional
Host check (serving.rest_service).

Each test starts a real Server on loopback over the tiny model, with small bounds, and attacks it
with benchmarks.trickle_rest's Trickler, or a raw socket that does not read, from other addresses
of 127.0.0.0/8 (Linux routes the whole block to loopback). The trickler sleeps between its bytes,
the slow reader between its reads: that is the attack; the tests wait on what the server does (a
connection closed, an answer) with a bounded poll.
"""

import contextlib
import http.client
import json
import socket
import time

import pytest

from benchmarks.trickle_rest import Trickler
from pgn_tf.serving.rest_transport import client_key
from pgn_tf.serving.server import build_parser, options_from_args
from pgn_tf.serving.service import Server, ServerOptions
from tests.serving.helpers import add_version, wait_until

MODEL = "m"
STATUS_PATH = f"/v1/models/{MODEL}"


@pytest.fixture(scope="module")
def base(tiny_model, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("trickle") / MODEL)
    add_version(root, 1, tiny_model)
    return root


@contextlib.contextmanager
def serving(base, **options):
    srv = Server({MODEL: base}, rest_port="auto", poll_seconds=0, **options)
    try:
        yield srv
    finally:
        srv.stop()


def get(port, source="127.0.0.1", host=None, path=STATUS_PATH, timeout=10):
    """(status, JSON body, headers) of one GET on a new connection from `source`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                      source_address=(source, 0))
    try:
        conn.request("GET", path, headers={"Host": host} if host else {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), resp
    finally:
        conn.close()


def answer_of(sock: socket.socket) -> bytes:
    """What the server sends on `sock` until it closes it (the socket's timeout bounds it)."""
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


def test_trickling_connections_over_the_connection_cap_leave_room_for_a_real_request(base):
    """20 connections from one address, a byte every 0.2 s (far inside the 30 s idle time-out),
    against --rest_api_max_connections=10: before the per-client cap they held every slot and
    this GET waited in the listen backlog until its time-out."""
    with serving(base, rest_api_max_connections=10, rest_api_max_connections_per_client=4,
                 rest_api_request_read_timeout_s=60) as srv, \
            Trickler(srv.rest_port, 20, 0.2, source="127.0.0.2", reopen=False) as attack:
        # the 16 over the cap are answered 503 and closed at accept; 4 keep trickling
        assert wait_until(lambda: attack.counts()["refused"] == 16, 20), attack.counts()
        assert attack.counts()["open"] == 4
        status, body, _ = get(srv.rest_port)
        assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
        assert attack.counts()["open"] == 4  # still trickling: the deadline played no part


ATTACKERS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")


def test_many_addresses_filling_the_connection_cap_are_shed_for_a_new_connection(base):
    """3 addresses x 4 trickling connections, each address within its cap of 4, against
    --rest_api_max_connections=10: without shedding they held every slot until their 60 s
    deadline and this GET's new connection waited in the listen backlog past its time-out. Each
    new connection replaces the oldest unfinished request, which is answered 408."""
    with serving(base, rest_api_max_connections=10, rest_api_max_connections_per_client=4,
                 rest_api_request_read_timeout_s=60) as srv, \
            Trickler(srv.rest_port, 12, 0.2, source=ATTACKERS, reopen=False) as attack:
        # 10 take the slots; the 2 left in the backlog get in by shedding 2, once those have
        # trickled for the grace
        assert wait_until(lambda: attack.counts()["opened"] == 12 and
                          len(srv.http.active_channels) == 10, 20), attack.counts()
        status, body, _ = get(srv.rest_port)
        assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
        # all 13 connections got a slot in turn: 3 of the attacker's were shed for them
        assert wait_until(lambda: attack.counts()["shed"] == 3, 20), attack.counts()
        counts = attack.counts()
        assert (counts["timed_out"], counts["refused"], counts["closed_other"]) == (0, 0, 0)
        assert srv.http.shed_connections == 3 and srv.http.shed_idle_connections == 0
        answer = next(v for k, v in attack.answers.items() if k.startswith("HTTP/1.1 408"))
        head_text, _, raw = answer.partition(b"\r\n\r\n")
        assert b"Content-Type: application/json" in head_text
        assert "--rest_api_max_connections=10" in json.loads(raw)["error"]
        # the GET's connection closed, the attacker's 9 others trickle on
        assert wait_until(lambda: len(srv.http.active_channels) == 9, 20)


def test_idle_connections_filling_the_connection_cap_are_shed_for_a_new_connection(base):
    """Connections that never send a byte hold a slot until the idle time-out (30 s here): at
    the cap a new connection closes the one idle longest, silently, as that time-out would."""
    with serving(base, rest_api_max_connections=6, rest_api_max_connections_per_client=3,
                 rest_api_idle_timeout_s=30) as srv:
        idle = []
        try:
            for k in range(6):
                idle.append(socket.create_connection(
                    ("127.0.0.1", srv.rest_port), timeout=20,
                    source_address=(ATTACKERS[k % 2], 0)))
            assert wait_until(lambda: len(srv.http.active_channels) == 6, 20)
            status, _, _ = get(srv.rest_port, timeout=20)
            assert status == 200
            assert srv.http.shed_connections == srv.http.shed_idle_connections == 1
            # the first one accepted has been idle longest: closed without an answer
            assert answer_of(idle[0]) == b""
        finally:
            for sock in idle:
                sock.close()


TRICKLES = {
    # (sent at once, then one byte a tick: lead, then filler over and over)
    "headers": (b"", b"GET /v1/models/m HTTP/1.1\r\n", b"X-Trickle: a\r\n"),
    "body": (b"POST /v1/models/m:predict HTTP/1.1\r\nContent-Length: 100000\r\n\r\n",
             b'{"instances": [', b" "),
    # blank lines complete empty requests, which waitress drops: they must not restart the clock
    "blank_lines": (b"", b"", b"\r\n"),
}


@pytest.mark.parametrize("kind", list(TRICKLES))
def test_a_request_that_keeps_trickling_is_closed_at_its_deadline(base, kind):
    """A byte every 0.1 s never lets the 30 s idle time-out fire; the 1 s deadline from the
    request's first byte closes it anyway, with a 408 in the API's JSON form."""
    head, lead, filler = TRICKLES[kind]
    with serving(base, rest_api_request_read_timeout_s=1, rest_api_idle_timeout_s=30) as srv, \
            Trickler(srv.rest_port, 1, 0.1, source="127.0.0.2", lead=lead, filler=filler,
                     head=head, reopen=False) as attack:
        # 20 s: under the idle time-out, so only the deadline can close it in time
        assert wait_until(lambda: attack.counts()["opened"] == 1 and
                          attack.counts()["open"] == 0, 20), attack.counts()
        counts = attack.counts()
        assert counts["timed_out"] == 1, (counts, attack.answers)
        # it was still sending when closed: more bytes than one second's worth at the start
        assert counts["bytes_sent"] > len(head) + 3
        answer = attack.answers["HTTP/1.1 408 Request Timeout"]
        head_text, _, body = answer.partition(b"\r\n\r\n")
        assert b"Content-Type: application/json" in head_text
        assert b"X-Content-Type-Options: nosniff" in head_text
        assert "--rest_api_request_read_timeout_seconds" in json.loads(body)["error"]
        assert get(srv.rest_port)[0] == 200


def test_a_keep_alive_connection_idle_between_requests_outlives_the_request_deadline(base):
    """Between requests the idle time-out governs: a keep-alive connection silent for longer
    than the request deadline still serves its next request."""
    with serving(base, rest_api_request_read_timeout_s=1, rest_api_idle_timeout_s=30) as srv:
        keep = http.client.HTTPConnection("127.0.0.1", srv.rest_port, timeout=20)
        try:
            keep.request("GET", STATUS_PATH)
            resp = keep.getresponse()
            assert resp.status == 200 and resp.read()
            sock = keep.sock
            # the clock: a trickle opened after that answer, closed by the deadline, has lived
            # past it, so the keep-alive connection has been idle longer than the deadline and
            # the server's check has run since
            with Trickler(srv.rest_port, 1, 0.1, source="127.0.0.2", reopen=False) as attack:
                assert wait_until(lambda: attack.counts()["timed_out"] == 1, 20), \
                    attack.counts()
            keep.request("GET", STATUS_PATH)  # raises RemoteDisconnected had it been closed
            resp = keep.getresponse()
            assert resp.status == 200 and resp.read()
            assert keep.sock is sock  # the same connection
        finally:
            keep.close()


def _send_buffer_max() -> int:
    """The most the kernel lets a socket's send buffer grow to (Linux: tcp_wmem's max)."""
    try:
        with open("/proc/sys/net/ipv4/tcp_wmem") as f:
            return int(f.read().split()[2])
    except (OSError, ValueError, IndexError):
        return 4 * 2**20


# An answer bigger than the server's kernel can hold for the client: the rest waits in waitress.
STUCK_ARTICLE = _send_buffer_max() + 2 * 2**20


def unread_predict(port: int, source: str, article_bytes: int, rcvbuf: int = 1024):
    """A connection from `source` whose receive buffer is `rcvbuf` (set before connecting, so
    its window is that small from the start) that has sent one :predict answered with an
    article of `article_bytes` (the tiny model echoes it) and read nothing yet."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        sock.bind((source, 0))
        sock.settimeout(20)
        sock.connect(("127.0.0.1", port))
        body = json.dumps({"instances": ["x" * article_bytes]}).encode()
        sock.sendall(f"POST /v1/models/{MODEL}:predict HTTP/1.1\r\nHost: t\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    except BaseException:
        sock.close()
        raise
    return sock


def channel_of(srv, sock):
    """The server's connection for the client socket `sock`, None once it has closed it."""
    name = sock.getsockname()
    return next((c for c in list(srv.http.active_channels.values())
                 if tuple(c.addr[:2]) == name), None)


def stuck(srv, sock):
    """The server's connection for `sock`, once its answer is written and waits in it for the
    client (before, what waits may be a header about to be sent)."""

    def waiting():
        channel = channel_of(srv, sock)
        return channel is not None and channel.output_since is not None and not channel.requests

    assert wait_until(waiting, 20), \
        "the answer never waited for the client: is it bigger than the kernel's send buffer?"
    return channel_of(srv, sock)


def drain_to_end(sock) -> tuple[int, bool]:
    """(bytes read, whether the stream ended: EOF or a reset) reading `sock` until it ends (its
    timeout bounds each read)."""
    got = 0
    try:
        while chunk := sock.recv(65536):
            got += len(chunk)
    except ConnectionResetError:
        pass
    except TimeoutError:
        return got, False
    return got, True


def test_a_client_that_never_reads_its_answer_is_closed_at_the_write_deadline(base, caplog):
    """The answer waits in waitress for a client whose receive window stays shut: waitress'
    idle time-out only marks such a connection to close on a write event that never comes, so
    it held its output (MBs) and its slot for good. The 1 s write deadline resets it, while a
    well-formed client is answered as usual."""
    with caplog.at_level("WARNING", logger="serving"), \
            serving(base, rest_api_response_write_timeout_s=1, rest_api_idle_timeout_s=30) as srv, \
            unread_predict(srv.rest_port, "127.0.0.2", STUCK_ARTICLE) as sock:
        channel = stuck(srv, sock)
        assert get(srv.rest_port)[0] == 200
        # 20 s: under the idle time-out, so only the write deadline can close it in time
        assert wait_until(lambda: channel_of(srv, sock) is None, 20)
        assert srv.http.timed_out_responses == 1 and not channel.connected
        got, ended = drain_to_end(sock)
        assert ended and got < STUCK_ARTICLE  # the rest of the answer was dropped
        lines = [r.getMessage() for r in caplog.records
                 if "--rest_api_response_write_timeout_seconds" in r.getMessage()]
        assert len(lines) == 1 and "127.0.0" not in lines[0], lines
        assert get(srv.rest_port)[0] == 200


# The trickling reader, once the server has sent it more from its buffers: a read of READ_BYTES
# every READ_PAUSE_S, at most 100 KB/s however fast the machine, which its answer outlasts.
READ_BYTES, READ_PAUSE_S, TRICKLE_DEADLINE_S = 1024, 0.01, 3
TRICKLE_ARTICLE = STUCK_ARTICLE + 8 * 2**20


def test_a_client_reading_a_little_at_a_time_gets_no_longer_than_one_reading_none(base):
    """Each read lets the server send some more, which restarts waitress' idle clock: a reader
    keeping that up would hold its connection and output as long as its answer lasts (hours, a
    byte every few seconds). The write deadline counts from when output first waited, and bytes
    drained since do not restart it. The reader takes 64 KiB a read until the server has sent
    some of what waited (so that is seen well before the deadline, and is not all of it), then
    trickles."""
    with serving(base, rest_api_response_write_timeout_s=TRICKLE_DEADLINE_S,
                 rest_api_idle_timeout_s=30, max_request_bytes=4 * TRICKLE_ARTICLE) as srv, \
            unread_predict(srv.rest_port, "127.0.0.2", TRICKLE_ARTICLE,
                           rcvbuf=64 * 1024) as sock:
        channel = stuck(srv, sock)
        since, waiting = channel.output_since, channel.total_outbufs_len
        drained = 0  # by the server from its own buffers, its clock still at `since`
        got, ended = 0, False
        for _ in range(int(20 / READ_PAUSE_S)):  # 20 s of trickle: under the idle time-out
            try:
                chunk = sock.recv(READ_BYTES if drained else 64 * 1024)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                ended = True
                break
            got += len(chunk)
            if got >= TRICKLE_ARTICLE:
                break  # the whole answer came through: the deadline did not hold
            if not drained and channel.output_since == since:
                drained = max(0, waiting - channel.total_outbufs_len)
            time.sleep(READ_PAUSE_S)  # the slow reader's pace is the attack, not a wait for an event
        assert drained > 0  # the reads made the server send more, and that did not save it
        assert ended and got < TRICKLE_ARTICLE
        assert srv.http.timed_out_responses == 1 and channel_of(srv, sock) is None


def test_connections_whose_answers_are_not_read_are_shed_at_the_connection_cap(base):
    """Two unread answers fill --rest_api_max_connections=2 long before their write deadline:
    without shedding them a new connection waited in the listen backlog. The one whose output
    has waited longest is reset to make room."""
    with serving(base, rest_api_max_connections=2, rest_api_max_connections_per_client=2,
                 rest_api_response_write_timeout_s=60) as srv, \
            unread_predict(srv.rest_port, "127.0.0.2", STUCK_ARTICLE) as first:
        first_channel = stuck(srv, first)
        with unread_predict(srv.rest_port, "127.0.0.3", STUCK_ARTICLE) as second:
            stuck(srv, second)
            status, body, _ = get(srv.rest_port, source="127.0.0.4", timeout=20)
            assert status == 200 and body["model_version_status"][0]["state"] == "AVAILABLE"
            assert (srv.http.shed_connections, srv.http.shed_stuck_connections,
                    srv.http.shed_idle_connections) == (1, 1, 0)
            assert not first_channel.connected and channel_of(srv, second) is not None
            got, ended = drain_to_end(first)
            assert ended and got < STUCK_ARTICLE
            assert srv.http.timed_out_responses == 0


def test_one_address_holds_at_most_its_cap_of_connections(base):
    with serving(base, rest_api_max_connections=20, rest_api_max_connections_per_client=3) as srv:
        held = []
        try:
            for _ in range(3):  # served and kept alive: counted against 127.0.0.3
                conn = http.client.HTTPConnection("127.0.0.1", srv.rest_port, timeout=10,
                                                  source_address=("127.0.0.3", 0))
                conn.request("GET", STATUS_PATH)
                resp = conn.getresponse()
                assert resp.status == 200
                resp.read()
                held.append(conn)
            with socket.create_connection(("127.0.0.1", srv.rest_port), timeout=10,
                                          source_address=("127.0.0.3", 0)) as fourth:
                answer = answer_of(fourth)  # closed at accept, before it sends anything
            assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
            error = json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
            assert "127.0.0.3" in error and "--rest_api_max_connections_per_client" in error
            assert get(srv.rest_port, source="127.0.0.4")[0] == 200  # another address is served
            held.pop().close()

            answers = []

            def served_again():  # once the server has seen the close, 127.0.0.3 has room
                if 200 not in answers:
                    try:
                        answers.append(get(srv.rest_port, source="127.0.0.3")[0])
                    except (OSError, http.client.HTTPException) as e:
                        answers.append(type(e).__name__)
                return 200 in answers

            assert wait_until(served_again, 10)
        finally:
            for conn in held:
                conn.close()


def test_a_client_is_its_ipv4_address_or_the_ipv6_64_it_lies_in():
    """One IPv6 host may take any address of its /64: a cap per address would not hold it."""
    assert client_key(("2001:db8:1:2:aaaa::1", 5, 0, 0)) == \
        client_key(("2001:db8:1:2:ffff::9", 6, 0, 0)) == "2001:db8:1:2::/64"
    assert client_key(("2001:db8:1:3::1", 5, 0, 0)) == "2001:db8:1:3::/64"
    assert client_key(("::ffff:192.0.2.7", 5, 0, 0)) == client_key(("192.0.2.7", 6)) == \
        "192.0.2.7"


def test_the_host_check_refuses_unlisted_hosts_before_routing_and_is_off_by_default(base):
    with serving(base) as srv:  # off: TF Serving answers whatever Host
        assert get(srv.rest_port, host="rebound.example:8501")[0] == 200
    with serving(base, rest_api_allowed_hosts=("localhost", "pgn.example:8501")) as srv:
        port = srv.rest_port
        assert get(port, host=f"localhost:{port}")[0] == 200  # a bare name allows any port
        assert get(port, host="LOCALHOST")[0] == 200
        assert get(port, host="pgn.example:8501")[0] == 200
        for host in ("rebound.example:8501", f"127.0.0.1:{port}", "pgn.example:8502",
                     "localhost.evil.example"):
            status, body, resp = get(port, host=host)
            assert status == 421, host
            assert "--rest_api_allowed_hosts" in body["error"] and host in body["error"]
            assert resp.getheader("Content-Type") == "application/json"
            assert resp.getheader("X-Content-Type-Options") == "nosniff"
        # before any routing: an unknown path is 421 too, not 404
        assert get(port, host="rebound.example", path="/nope")[0] == 421
        # HTTP/1.0 without a Host header
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(f"GET {STATUS_PATH} HTTP/1.0\r\n\r\n".encode())
            answer = answer_of(s)
        assert answer.startswith(b"HTTP/1.0 421") or answer.startswith(b"HTTP/1.1 421"), \
            answer[:200]
        assert b"without a Host header" in answer


def test_bounds_are_flags_with_defaults_and_bad_values_are_refused_in_one_line(tmp_path):
    args = build_parser().parse_args(["--model_base_path", str(tmp_path)])
    _, opts = options_from_args(args)
    assert (opts.rest_api_request_read_timeout_s, opts.rest_api_response_write_timeout_s,
            opts.rest_api_max_connections_per_client, opts.rest_api_allowed_hosts) == \
        (30.0, 30.0, 100, ())
    assert opts.rest_api_max_connections_per_client < opts.rest_api_max_connections
    args = build_parser().parse_args([
        "--model_base_path", str(tmp_path), "--rest_api_request_read_timeout_seconds", "5",
        "--rest_api_response_write_timeout_seconds", "9", "--rest_api_max_connections_per_client", "7",
        "--rest_api_allowed_hosts", "localhost, [::1]:8501,pgn.example"])
    _, opts = options_from_args(args)
    assert opts.rest_api_request_read_timeout_s == 5 and \
        opts.rest_api_response_write_timeout_s == 9 and \
        opts.rest_api_max_connections_per_client == 7
    assert opts.rest_api_allowed_hosts == ("localhost", "[::1]:8501", "pgn.example")
    for bad, match in [
            (dict(rest_api_request_read_timeout_s=0), "--rest_api_request_read_timeout_seconds"),
            (dict(rest_api_response_write_timeout_s=-1),
             "--rest_api_response_write_timeout_seconds"),
            (dict(rest_api_max_connections_per_client=0), "in \\[1, --rest_api_max_connections"),
            (dict(rest_api_max_connections=10, rest_api_max_connections_per_client=11),
             "--rest_api_max_connections_per_client"),
            (dict(rest_api_allowed_hosts=("http://x",)), "'http://x' is not a host"),
            (dict(rest_api_allowed_hosts=("::1",)), "\\[IPv6\\]"),
            (dict(rest_api_allowed_hosts=("x:99999",)), "'x:99999'")]:
        with pytest.raises(ValueError, match=match) as e:
            ServerOptions(**bad).validate()
        assert "\n" not in str(e.value)
