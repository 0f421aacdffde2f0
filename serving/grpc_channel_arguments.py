"""The gRPC server's channel arguments: its bounds on what a connection may hold
(`DEFAULT_CHANNEL_ARGUMENTS`) and tensorflow_model_server's `--grpc_channel_arguments`, parsed as
it parses it and checked so that no value gRPC would ignore, or read as unlimited, passes.
"""

from __future__ import annotations

import re

# This server's bounds on what a connection may hold, in gRPC's channel-argument names; each
# can be overridden by --grpc_channel_arguments. Stock gRPC (and so stock TF Serving, which
# sets none of them) leaves streams per connection, connection age and idle time unbounded.
DEFAULT_CHANNEL_ARGUMENTS: dict[str, int] = {
    # streams open at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS): a
    # client's further streams wait in its own transport until one ends
    "grpc.max_concurrent_streams": 100,
    # a connection is sent GOAWAY after this (gRPC adds +-10% jitter), so no connection, and no
    # stream on it, outlives it by more than the grace below
    "grpc.max_connection_age_ms": 30 * 60 * 1000,
    # streams still open that long after the GOAWAY are cancelled
    "grpc.max_connection_age_grace_ms": 5 * 60 * 1000,
    # a connection with no stream for this long is closed
    "grpc.max_connection_idle_ms": 5 * 60 * 1000,
    # keepalive enforcement: a client pinging more often than this while no data flows earns a
    # strike, and past max_ping_strikes its connection is closed (GOAWAY ENHANCE_YOUR_CALM)
    "grpc.http2.min_ping_interval_without_data_ms": 5 * 60 * 1000,
    "grpc.http2.max_ping_strikes": 2,
    # a stream's receive window while no read is posted for it (a parked stream, below): 64 KiB,
    # and not grown by bandwidth-delay probing, which would let a stream that sends and is not
    # read fill megabytes. A stream whose read is posted is granted its whole message's window
    # however this is set (gRPC's min-progress rule), so unary requests lose no speed to it
    "grpc.http2.lookahead_bytes": 64 * 1024,
    "grpc.http2.bdp_probe": 0,
    # connections open at once: each holds a file descriptor, and a process out of them can
    # open no file (nor load a model version); past it a new connection is closed at accept
    "grpc.max_allowed_incoming_connections": 1000,
    # a connection's time to finish its TLS (or plaintext HTTP/2) handshake
    "grpc.server_handshake_timeout_ms": 20 * 1000,
    # gRPC binds with SO_REUSEPORT by default: another process of the same user could then bind
    # the same port and be handed a share of the clients' connections (and their requests);
    # off, a port in use is an error at start ("cannot bind gRPC")
    "grpc.so_reuseport": 0,
}
# Arguments that take an integer: a string there would be ignored by gRPC (it logs and falls
# back to its own default, unbounded for most), so it is refused instead.
INTEGER_ARGUMENTS = frozenset(DEFAULT_CHANNEL_ARGUMENTS) | {
    "grpc.max_receive_message_length", "grpc.max_send_message_length",
    "grpc.keepalive_time_ms", "grpc.keepalive_timeout_ms", "grpc.keepalive_permit_without_calls",
    "grpc.http2.max_pings_without_data", "grpc.server_handshake_timeout_ms",
    "grpc.max_metadata_size", "grpc.absolute_max_metadata_size", "grpc.so_reuseport"}
MESSAGE_LENGTH_ARGUMENTS = frozenset({"grpc.max_receive_message_length",
                                      "grpc.max_send_message_length"})
# What a stream reading its message may hold besides the message: its headers (gRPC's metadata
# limit, 16 KiB) and gRPC's and this module's state for it.
STREAM_OVERHEAD_BYTES = 80 * 1024
_INT32 = re.compile(r"[+-]?[0-9]+")


def parse_channel_arguments(text: str) -> dict[str, int | str]:
    """`--grpc_channel_arguments` as tensorflow_model_server reads it: comma-separated
    key=value pairs, a value that is a 32-bit integer passed as one, any other as a string.
    ValueError (one line) for a pair without a key or value, a key given twice, or a value
    that gRPC would ignore (see check_channel_arguments)."""
    out: dict[str, int | str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value or "=" in value:
            raise ValueError(f"--grpc_channel_arguments: '{item[:80]}' is not key=value "
                             "(e.g. grpc.max_connection_age_ms=2000)")
        if key in out:
            raise ValueError(f"--grpc_channel_arguments: {key[:80]} is given twice")
        out[key] = int(value) if _INT32.fullmatch(value) and -2**31 <= int(value) < 2**31 \
            else value
    return check_channel_arguments(out)


def check_channel_arguments(args: dict) -> dict:
    """args, or ValueError: an argument that takes an integer given something else, a bound
    given a negative number, or a value out of the 32-bit range gRPC's integers take."""
    for key, value in args.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"--grpc_channel_arguments: a key must be a name, got {key!r:.80}")
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"--grpc_channel_arguments: {key[:80]} must be an integer or a "
                             f"string, got {type(value).__name__}")
        if isinstance(value, int) and not -2**31 <= value < 2**31:
            raise ValueError(f"--grpc_channel_arguments: {key[:80]}={value} is out of the "
                             "32-bit range of gRPC's integer arguments")
        if key in INTEGER_ARGUMENTS and not isinstance(value, int):
            raise ValueError(f"--grpc_channel_arguments: {key} takes an integer, got "
                             f"'{str(value)[:80]}'")
        if key in DEFAULT_CHANNEL_ARGUMENTS and value < 0:
            raise ValueError(f"--grpc_channel_arguments: {key} must not be negative")
        if key in MESSAGE_LENGTH_ARGUMENTS and value <= 0:  # -1 is gRPC's "unlimited"
            raise ValueError(f"--grpc_channel_arguments: {key} must be positive (gRPC reads "
                             f"{value} as unlimited or nothing)")
    return args
