"""Which client a connection belongs to, for the per-client bounds of both servers: REST's
connections per client (serving.rest_transport) and gRPC's share of the streams reading their
request message (serving.grpc_server).

A client is an IPv4 address (an IPv4-mapped IPv6 one too) or the /64 an IPv6 address lies in:
one host is given a /64 and may take any address in it, so counting single IPv6 addresses would
let it hold 2^64 shares.
"""

from __future__ import annotations

import ipaddress
import urllib.parse


def client_key(host: str) -> str:
    """The client `host` (an address as text) is counted against; anything that is not an IP
    address (a Unix socket's path) is its own client."""
    try:
        ip = ipaddress.ip_address(host)
    except (ValueError, TypeError):
        return str(host)
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
    return str(ip)


def grpc_peer_key(peer: str) -> str:
    """client_key of a gRPC peer string: "ipv4:1.2.3.4:5678", "ipv6:[::1]:5678" (gRPC may
    percent-encode the brackets), or "unix:..." and others, kept whole."""
    kind, _, rest = peer.partition(":")
    rest = urllib.parse.unquote(rest)
    if kind == "ipv4":
        return client_key(rest.rpartition(":")[0])
    if kind == "ipv6" and rest.startswith("["):
        return client_key(rest[1:].partition("]")[0].partition("%")[0])
    return peer
