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
bind"). `write_ssl_config(path, SSLConfig.from_files(...))` writes such a file from PEM files,
readable by its owner only.

No error quotes the file: it holds the private key, and a parse error's usual quote of the
offending line (protobuf's) would print the key wherever the error goes. Errors give the line,
the column and the field (one of SSLConfig's four names) and a fixed description. A file that
group or others may open (a mode bit beyond 0700, as ssh judges a key file) gets one warning;
with `--ssl_config_file_strict_permissions` it is an error.

Clients: `channel_credentials(ca, cert, key)` reads PEM files into gRPC channel credentials,
checked as the server's are.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import ssl
import stat
import tempfile

import grpc
from google.protobuf import text_format

log = logging.getLogger("serving")

_FIELDS = ("server_key", "server_cert", "custom_ca", "client_verify")
_GROUP_OR_OTHERS = stat.S_IRWXG | stat.S_IRWXO  # any access but the owner's, as ssh refuses


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
        _check_key_pair(self.server_key, self.server_cert, f"{where}: server_key")
        return self


def read_ssl_config(path: str, strict_permissions: bool = False) -> SSLConfig:
    """A text-format SSLConfig file -> a checked SSLConfig; ValueError for a file that is
    missing, unreadable, not an SSLConfig, or whose key or certificates are unusable. A file
    that group or others may open is one warning, or with `strict_permissions` a ValueError:
    it holds the private key. No message quotes the file's text."""
    where = f"--ssl_config_file {path}"
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode  # of the file read, not of a name swapped since
            data = f.read()
    except OSError as e:
        raise ValueError(f"cannot read {where}: {e.strerror or type(e).__name__}") from None
    if os.name == "posix" and mode & _GROUP_OR_OTHERS:
        problem = (f"{where} is open to group or others (mode {stat.S_IMODE(mode):04o}) and "
                   f"holds the private key: chmod 600 it")
        if strict_permissions:
            raise ValueError(problem)
        log.warning("%s (--ssl_config_file_strict_permissions refuses such a file)", problem)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"bad {where}: line {line} is not UTF-8 text") from None
    msg = _ssl_config_class()()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as e:
        raise ValueError(f"bad {where}: {_describe_parse_error(e, text)}") from None
    except Exception:  # any other parser error: its text, too, may quote the key
        raise ValueError(f"bad {where}: not a text-format SSLConfig") from None
    return SSLConfig(msg.server_key, msg.server_cert, msg.custom_ca,
                     msg.client_verify).validate(where)


def write_ssl_config(path: str, config: SSLConfig) -> None:
    """Writes `config`, checked first (validate), as the text-format SSLConfig file at `path`,
    readable by its owner only (0600) whatever the umask, since it holds the key. It is written
    to a new file beside `path` and renamed over it, so an existing file's wider mode is not
    kept and no reader sees half a file."""
    text = config.validate(f"ssl config for {path}").to_text()
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                               prefix=".ssl-config-")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# protobuf's parse errors quote the token or line they stopped at, which in an SSLConfig is a
# piece of the key: only these fixed descriptions are shown, chosen by what the message says.
_PARSE_PROBLEMS = [
    ("missing ending quote", "a string misses its closing quote"),
    ("Couldn't parse string", "a string that is not UTF-8 once its escapes are undone"),
    ("codec can't decode", "a bad escape sequence inside a string"),
    ('Expected "true" or "false"', "expected true or false"),
    ("Expected string", "expected a quoted string (the PEM text, \\n for each line end)"),
    ("should not have multiple", "the field is given twice"),
    ('Expected ":"', 'expected ":" after the field name'),
]
# A name holding "_" cannot be a piece of a PEM body (base64 has no "_"), so it may be shown; any
# other unknown name may be a line of the key left unquoted.
_SHOWABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+")


def _describe_parse_error(e: text_format.ParseError, text: str) -> str:
    """Where the parse stopped (line, column, the field it was in) and what was wrong, in words
    of this module: never a token or a line of the file."""
    message = str(e)
    unknown = re.search(r'has no field named "([^"]*)"', message)
    if unknown:
        name = unknown.group(1)
        what = (f'no field named "{name}"' if len(name) <= 64 and _SHOWABLE_NAME.fullmatch(name)
                else "a name that is no field (not shown: it may be a line of the key)")
        what += f"; SSLConfig's fields are {', '.join(_FIELDS)}"
    else:
        what = next((d for pattern, d in _PARSE_PROBLEMS if pattern in message),
                    "not text-format SSLConfig syntax")
    line, column = e.GetLine(), e.GetColumn()
    if line is None:
        return what
    field = next((m.group(1) for m in (re.match(r"\s*(\w+)", s) for s in
                                       reversed(text.split("\n")[:line]))
                  if m and m.group(1) in _FIELDS), None)
    return f"line {line} column {column}" + (f" (in field {field})" if field else "") + \
        f": {what}"


def server_credentials(config: SSLConfig) -> grpc.ServerCredentials:
    """What tensorflow_model_server builds from an SSLConfig: the key and certificate, and with
    client_verify a client certificate signed by custom_ca required."""
    return grpc.ssl_server_credentials(
        [(config.server_key.encode(), config.server_cert.encode())],
        root_certificates=config.custom_ca.encode() or None,
        require_client_auth=config.client_verify)


def read_pem(path: str, what: str | None = None) -> str:
    """A PEM file's text; OSError when it cannot be read, ValueError naming `what` (default: the
    path), never the bytes, when it is not text."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what or path} is not a PEM text file (a DER one? openssl pkey or "
                         "openssl x509 with -inform DER converts it)") from None


def channel_credentials(ca: str | None = None, cert: str | None = None,
                        key: str | None = None) -> grpc.ChannelCredentials:
    """gRPC channel credentials from PEM files (paths): `ca` the CA to trust (None: the
    system's), `cert` and `key` the client's certificate and key (both or neither).
    ValueError for one without the other or for a file that is not what it should be (checked
    here, as the server's are: gRPC would only fail the connection later), OSError for a file
    that cannot be read."""
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs its key and a key its certificate: give "
                         "both --ssl_cert and --ssl_key, or neither")
    ca_pem = read_pem(ca, f"--ssl_ca {ca}") if ca else None
    if ca_pem is not None:
        _check_certificates(ca_pem, f"--ssl_ca {ca}")
    key_pem = cert_pem = None
    if key and cert:
        key_pem, cert_pem = read_pem(key, f"--ssl_key {key}"), read_pem(cert, f"--ssl_cert {cert}")
        _check_certificates(cert_pem, f"--ssl_cert {cert}")
        _check_key_pair(key_pem, cert_pem, f"--ssl_key {key}", f"--ssl_cert {cert}")
    return grpc.ssl_channel_credentials(
        root_certificates=ca_pem.encode() if ca_pem is not None else None,
        private_key=key_pem.encode() if key_pem is not None else None,
        certificate_chain=cert_pem.encode() if cert_pem is not None else None)


def _check_certificates(pem: str, what: str) -> None:
    """ValueError unless `pem` holds PEM certificates; the message names `what` and OpenSSL's
    reason code, never the text (a key put in the wrong field would be quoted)."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError, TypeError) as e:  # TypeError: a character not ASCII
        reason = getattr(e, "reason", None)
        detail = f" ({reason})" if isinstance(reason, str) and re.fullmatch(r"[A-Z0-9_]+",
                                                                             reason) else ""
        if "PRIVATE KEY-----" in pem:
            detail += " (it holds a private key, not a certificate)"
        raise ValueError(f"{what} is not a PEM certificate{detail}") from None


class _EncryptedKey(Exception):
    pass


def _no_password():
    raise _EncryptedKey  # never a prompt on the terminal: the server may be unattended


def _check_key_pair(key: str, cert: str, key_what: str, cert_what: str = "server_cert") -> None:
    """The key is an unencrypted PEM private key and it matches the certificate; the messages
    name `key_what` and `cert_what`, never the texts."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with _pem_file(cert) as cert_path, _pem_file(key) as key_path:
        try:
            ctx.load_cert_chain(cert_path, key_path, password=_no_password)
        except _EncryptedKey:
            raise ValueError(f"{key_what} is encrypted; an unencrypted PEM key is needed "
                             "(openssl pkey -in KEY -out PLAIN.key)") from None
        except ssl.SSLError as e:
            if e.reason == "KEY_VALUES_MISMATCH":
                raise ValueError(f"{key_what} does not match {cert_what}") from None
            raise ValueError(f"{key_what} is not a PEM private key") from None


_PEM_BLOCK = re.compile(r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|\Z)",
                        re.DOTALL)
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{40,}")


def without_key_material(message: str) -> str:
    """`message` with PEM blocks and long base64 runs (lines of a key or certificate) cut out:
    the last guard of the commands' error lines, for a message this module did not write."""
    message = _PEM_BLOCK.sub("[PEM text not shown]", message)
    return _BASE64_RUN.sub(lambda m: "[not shown]" if all(
        re.search(c, m.group()) for c in ("[a-z]", "[A-Z]", "[0-9]")) else m.group(), message)


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
