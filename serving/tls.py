"""TLS for the gRPC port, configured as tensorflow_model_server configures it.

`--ssl_config_file` is a text-format `tensorflow.serving.SSLConfig`
(tensorflow_serving/config/ssl_config.proto), so one file serves both servers:

    server_key: "-----BEGIN PRIVATE KEY-----\\n...\\n-----END PRIVATE KEY-----\\n"
    server_cert: "-----BEGIN CERTIFICATE-----\\n...\\n-----END CERTIFICATE-----\\n"
    custom_ca: "-----BEGIN CERTIFICATE-----\\n...\\n-----END CERTIFICATE-----\\n"
    client_verify: true

The fields hold the PEM texts, not paths. With `client_verify: true` only clients presenting a
certificate that `custom_ca` signed (and that is within its validity dates) are admitted. The
texts are checked when the file is read, with the standard library's `ssl`, so a bad key or
certificate is one error naming the field (gRPC's own refusal is a C log line and "Failed to
bind"). `SSLConfig.from_files(...).to_text()` writes such a file from PEM files.

Clients: `channel_credentials(ca, cert, key)` reads PEM files into gRPC channel credentials.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import ssl
import tempfile

import grpc
from google.protobuf import text_format


@functools.cache
def _ssl_config_class():
    """tensorflow_serving's SSLConfig message class. tensorflow-serving-api does not ship
    ssl_config_pb2, so the message (four fields, ssl_config.proto) is built here, in a
    descriptor pool of its own, when the package lacks it."""
    try:
        from tensorflow_serving.config import ssl_config_pb2

        return ssl_config_pb2.SSLConfig
    except ImportError:
        pass
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tensorflow_serving/config/ssl_config.proto", package="tensorflow.serving",
        syntax="proto3")
    message = proto.message_type.add(name="SSLConfig")
    for number, (name, kind) in enumerate([("server_key", field.TYPE_STRING),
                                           ("server_cert", field.TYPE_STRING),
                                           ("custom_ca", field.TYPE_STRING),
                                           ("client_verify", field.TYPE_BOOL)], start=1):
        message.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(proto.SerializeToString())
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.SSLConfig"))


@dataclasses.dataclass(frozen=True)
class SSLConfig:
    """The PEM texts of TF Serving's SSLConfig (the key is left out of the repr).

    Args:
      server_key: the server's private key, unencrypted PEM.
      server_cert: its certificate (chain), PEM.
      custom_ca: PEM certificates of the CA that signs admitted clients' certificates.
      client_verify: admit only clients with a certificate custom_ca signed.
    """

    server_key: str = dataclasses.field(repr=False)
    server_cert: str
    custom_ca: str = ""
    client_verify: bool = False

    @classmethod
    def from_files(cls, server_key: str, server_cert: str, custom_ca: str | None = None,
                   client_verify: bool = False) -> SSLConfig:
        """Reads PEM files (paths) into a config; OSError for a file that cannot be read."""
        return cls(read_pem(server_key), read_pem(server_cert),
                   read_pem(custom_ca) if custom_ca else "", client_verify)

    def to_text(self) -> str:
        """The config as a text-format SSLConfig, the --ssl_config_file both servers read."""
        msg = _ssl_config_class()(server_key=self.server_key, server_cert=self.server_cert,
                                  custom_ca=self.custom_ca, client_verify=self.client_verify)
        return text_format.MessageToString(msg)

    def validate(self, where: str = "ssl_config") -> SSLConfig:
        """ValueError naming the field when a text is empty or not what it should be, when
        the key does not match the certificate, or when client_verify has no custom_ca."""
        if not self.server_key.strip():
            raise ValueError(f"{where}: server_key is empty (it holds the PEM text of the "
                             "server's private key, not a path)")
        if not self.server_cert.strip():
            raise ValueError(f"{where}: server_cert is empty (it holds the PEM text of the "
                             "server's certificate, not a path)")
        _check_certificates(self.server_cert, f"{where}: server_cert")
        if self.custom_ca.strip():
            _check_certificates(self.custom_ca, f"{where}: custom_ca")
        elif self.client_verify:
            raise ValueError(f"{where}: client_verify needs custom_ca, the PEM certificate of "
                             "the CA that signs admitted clients' certificates")
        _check_key_pair(self.server_key, self.server_cert, where)
        return self


def read_ssl_config(path: str) -> SSLConfig:
    """A text-format SSLConfig file -> a checked SSLConfig; ValueError for a file that is
    missing, unreadable, not an SSLConfig, or whose key or certificates are unusable."""
    where = f"--ssl_config_file {path}"
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeError) as e:
        raise ValueError(f"cannot read {where}: {getattr(e, 'strerror', None) or e}") from None
    msg = _ssl_config_class()()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise ValueError(f"bad {where}: {e}") from None
    return SSLConfig(msg.server_key, msg.server_cert, msg.custom_ca,
                     msg.client_verify).validate(where)


def server_credentials(config: SSLConfig) -> grpc.ServerCredentials:
    """What tensorflow_model_server builds from an SSLConfig: the key and certificate, and with
    client_verify a client certificate signed by custom_ca required."""
    return grpc.ssl_server_credentials(
        [(config.server_key.encode(), config.server_cert.encode())],
        root_certificates=config.custom_ca.encode() or None,
        require_client_auth=config.client_verify)


def read_pem(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def channel_credentials(ca: str | None = None, cert: str | None = None,
                        key: str | None = None) -> grpc.ChannelCredentials:
    """gRPC channel credentials from PEM files (paths): `ca` the CA to trust (None: the
    system's), `cert` and `key` the client's certificate and key (both or neither).
    ValueError for one without the other, OSError for a file that cannot be read."""
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs its key and a key its certificate: give "
                         "both --ssl_cert and --ssl_key, or neither")
    return grpc.ssl_channel_credentials(
        root_certificates=read_pem(ca).encode() if ca else None,
        private_key=read_pem(key).encode() if key else None,
        certificate_chain=read_pem(cert).encode() if cert else None)


def _check_certificates(pem: str, what: str) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as e:
        raise ValueError(f"{what} is not a PEM certificate ({e.__class__.__name__}: "
                         f"{getattr(e, 'reason', None) or e})") from None


class _EncryptedKey(Exception):
    pass


def _no_password():
    raise _EncryptedKey  # never a prompt on the terminal: the server may be unattended


def _check_key_pair(key: str, cert: str, where: str) -> None:
    """The key is an unencrypted PEM private key and it matches the certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with _pem_file(cert) as cert_path, _pem_file(key) as key_path:
        try:
            ctx.load_cert_chain(cert_path, key_path, password=_no_password)
        except _EncryptedKey:
            raise ValueError(f"{where}: server_key is encrypted; SSLConfig takes an unencrypted "
                             "PEM key") from None
        except ssl.SSLError as e:
            if e.reason == "KEY_VALUES_MISMATCH":
                raise ValueError(f"{where}: server_key does not match server_cert") from None
            raise ValueError(f"{where}: server_key is not a PEM private key") from None


@contextlib.contextmanager
def _pem_file(text: str):
    """A path holding `text` for ssl's file-only loaders: an anonymous in-memory file where the
    system has them (Linux), else a file in a private temporary directory, removed after."""
    data = text.encode("utf-8")
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("pgn-tf-pem", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory() as tmp:  # mode 0700
        path = os.path.join(tmp, "pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path
