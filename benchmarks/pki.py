"""A throw-away CA and a server certificate for loopback (SAN 127.0.0.1, ::1 and localhost), so a
benchmark can serve gRPC over TLS the way a deployment does (benchmarks/soak.py --tls).

`write_pki(folder)` writes the PEM files and the server's SSLConfig text (serving.tls), the
config file (serving.tls.write_ssl_config) and the key readable by their owner only, and returns their paths.
"""

from __future__ import annotations

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pgn_tf.serving import tls


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key, issuer: str, issuer_key, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(days=1))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
             x509.IPAddress(ipaddress.ip_address("::1"))]),
            critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_pki(folder: str) -> dict[str, str]:
    """{"ca": CA PEM, "cert": server PEM, "key": server key PEM, "ssl_config": SSLConfig text}
    under `folder` (created if missing)."""
    os.makedirs(folder, exist_ok=True)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("benchmark ca", ca_key, "benchmark ca", ca_key, ca=True)
    cert = _certificate("localhost", key, "benchmark ca", ca_key, ca=False)
    paths = {name: os.path.join(folder, f"{name}.pem") for name in ("ca", "cert", "key")}
    with open(paths["ca"], "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["cert"], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths["key"], key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    paths["ssl_config"] = os.path.join(folder, "ssl.config")
    tls.write_ssl_config(paths["ssl_config"], tls.SSLConfig.from_files(paths["key"],
                                                                       paths["cert"]))
    return paths
