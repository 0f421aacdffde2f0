"""gRPC over TLS, configured as tensorflow_model_server is (serving.tls): a CA and the server's
and clients' certificates made at test time with `cryptography`, the tiny SavedModel served
in-process. TLS clients are answered; plaintext clients, clients without a certificate the
server's CA signed, and expired certificates are refused; a bad config stops start-up with one
line before any port is bound."""

import dataclasses
import datetime
import ipaddress
import os
import re
import socket
import stat
import subprocess
import sys

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tensorflow_serving.apis import prediction_service_pb2_grpc

from pgn_tf.serving import client, tls
from pgn_tf.serving.process import start_server, stop_server
from pgn_tf.serving.server import build_parser, main, options_from_args
from pgn_tf.serving.service import Server
from tests.serving.helpers import add_version, request, rest, summaries

DAY = datetime.timedelta(days=1)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _cert(subject, key, issuer=None, issuer_key=None, ca=False, server=False, expired=False):
    """A certificate for `key`, signed by `issuer_key` (self-signed without one)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = (now - 3 * DAY, now - DAY) if expired else (now - DAY, now + DAY)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(subject)).issuer_name(issuer or _name(subject))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return builder.sign(issuer_key or key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """{name: path} of PEM files: the CA, the server's certificate and key (SAN localhost and
    127.0.0.1), a client's, a client's signed by another CA, an expired client's."""
    root = tmp_path_factory.mktemp("pki")
    paths = {}

    def write(name, data):
        path = root / name
        path.write_bytes(data)
        paths[name] = str(path)

    def write_key(name, key):
        write(name, key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))

    def write_cert(name, cert):
        write(name, cert.public_bytes(serialization.Encoding.PEM))

    ca_key, other_ca_key = _key(), _key()
    write_cert("ca.pem", _cert("test ca", ca_key, ca=True))
    write_cert("other_ca.pem", _cert("other ca", other_ca_key, ca=True))
    for name, issuer, issuer_key, kw in [
            ("server", "test ca", ca_key, {"server": True}),
            ("client", "test ca", ca_key, {}),
            ("rogue", "other ca", other_ca_key, {}),
            ("expired", "test ca", ca_key, {"expired": True})]:
        key = _key()
        write_key(f"{name}.key", key)
        write_cert(f"{name}.pem", _cert(name, key, _name(issuer), issuer_key, **kw))
    return paths


@pytest.fixture(scope="module")
def base(tiny_model, tmp_path_factory):
    base = str(tmp_path_factory.mktemp("tls") / "m")
    add_version(base, 1, tiny_model)
    return base


def _serve(base, config, **kw):
    return Server({"m": base}, poll_seconds=0, ssl_config=config, **kw)


@pytest.fixture(scope="module")
def tls_server(base, pki):
    """TLS, no client certificate asked for."""
    srv = _serve(base, tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"]))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def verifying_server(base, pki, tmp_path_factory):
    """TLS with client_verify, configured from an SSLConfig text file as both servers read it."""
    path = str(tmp_path_factory.mktemp("config") / "ssl.config")
    tls.write_ssl_config(path, tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"],
                                                        pki["ca.pem"], client_verify=True))
    srv = _serve(base, tls.read_ssl_config(path))
    yield srv
    srv.stop()


def _predict(port, credentials=None, host="127.0.0.1"):
    """The summaries of one Predict call, over TLS with `credentials`, else in plaintext."""
    with client.channel(f"{host}:{port}", credentials) as ch:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(ch)
        return summaries(stub.Predict(request({"articles": ["hello"]}, name="m"), timeout=30))


def _refused(port, credentials=None) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as e:
        _predict(port, credentials)
    return e.value.code()


def test_the_config_file_is_tf_servings_sslconfig_text(pki, tmp_path):
    cfg = tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"], pki["ca.pem"], True)
    text = cfg.to_text()
    assert text.startswith('server_key: "-----BEGIN PRIVATE KEY-----\\n')
    assert "client_verify: true" in text and "PRIVATE KEY" not in repr(cfg)
    path = tmp_path / "ssl.config"
    path.write_text(text)
    assert tls.read_ssl_config(str(path)) == cfg
    # the fields hold PEM texts, written as TF Serving's docs write them: adjacent strings
    lines = "".join(f'  "{line}\\n"\n' for line in open(pki["server.pem"]).read().splitlines())
    key = open(pki["server.key"]).read().replace("\n", "\\n")
    path.write_text(f'server_key: "{key}"\nserver_cert:\n{lines}')
    assert tls.read_ssl_config(str(path)) == dataclasses.replace(cfg, custom_ca="",
                                                                 client_verify=False)


def test_a_tls_client_is_answered_and_a_plaintext_one_refused(tls_server, pki):
    creds = tls.channel_credentials(pki["ca.pem"])
    assert client.summarize(f"localhost:{tls_server.port}", "m", ["hello"], timeout=30,
                            credentials=creds) == ["hello"]
    assert _predict(tls_server.port, creds) == ["hello"]  # the certificate's IP address
    assert _refused(tls_server.port) == grpc.StatusCode.UNAVAILABLE  # plaintext
    # a client that does not trust the server's CA
    assert _refused(tls_server.port, tls.channel_credentials(pki["other_ca.pem"])) == \
        grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("who", [None, "rogue", "expired"])
def test_client_verify_refuses_clients_without_a_certificate_its_ca_signed(verifying_server,
                                                                          pki, who):
    """No certificate, one another CA signed, one whose dates have passed: all refused."""
    creds = tls.channel_credentials(pki["ca.pem"], pki.get(f"{who}.pem"), pki.get(f"{who}.key"))
    assert _refused(verifying_server.port, creds) == grpc.StatusCode.UNAVAILABLE
    assert _refused(verifying_server.port) == grpc.StatusCode.UNAVAILABLE  # plaintext
    assert _predict(verifying_server.port, tls.channel_credentials(
        pki["ca.pem"], pki["client.pem"], pki["client.key"])) == ["hello"]


def test_the_stock_stub_over_a_secure_channel_is_answered(verifying_server, pki):
    """The unmodified tensorflow-serving-api stub, with grpc's own credentials."""
    def read(name):
        with open(pki[name], "rb") as f:
            return f.read()

    creds = grpc.ssl_channel_credentials(read("ca.pem"), read("client.key"), read("client.pem"))
    with grpc.secure_channel(f"localhost:{verifying_server.port}", creds) as ch:
        grpc.channel_ready_future(ch).result(timeout=30)
        resp = prediction_service_pb2_grpc.PredictionServiceStub(ch).Predict(
            request({"articles": ["a", "b"]}, name="m"), timeout=30)
    assert summaries(resp) == ["a", "b"]


def test_the_client_command_takes_a_ca_a_certificate_and_a_key(verifying_server, pki, capsys):
    server = ["--server", f"localhost:{verifying_server.port}", "--model_name", "m"]
    assert client.main([*server, "--ssl_ca", pki["ca.pem"], "--ssl_cert", pki["client.pem"],
                        "--ssl_key", pki["client.key"], "hello"]) == 0
    assert capsys.readouterr().out == "hello\n"
    assert client.main([*server, "--ssl_ca", pki["ca.pem"], "hello"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "UNAVAILABLE" in err[0]
    with pytest.raises(SystemExit) as e:
        client.main([*server, "--ssl_ca", pki["ca.pem"], "--ssl_cert", pki["client.pem"], "x"])
    assert e.value.code == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _write_private(path, text: str) -> None:
    """A file only its owner may read, as a config holding a key should be."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


@pytest.mark.parametrize("case, message", [
    ("missing", "cannot read --ssl_config_file"),
    ("not_text_format", "bad --ssl_config_file"),
    ("unknown_field", 'no field named "server_key_file"'),
    ("empty_key", "server_key is empty"),
    ("path_not_pem", "server_cert is not a PEM certificate"),
    ("other_key", "server_key does not match server_cert"),
    ("bad_key", "server_key is not a PEM private key"),
    ("bad_ca", "custom_ca is not a PEM certificate"),
    ("verify_without_ca", "client_verify needs custom_ca"),
    ("plaintext_rest", "--allow_plaintext_rest"),
])
def test_a_bad_config_is_one_error_line_and_nothing_listens(base, pki, tmp_path, capsys, case,
                                                             message):
    good = tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"])
    texts = {
        "not_text_format": "server_key {",
        "unknown_field": f'server_key_file: "{pki["server.key"]}"',
        "empty_key": dataclasses.replace(good, server_key="").to_text(),
        "path_not_pem": dataclasses.replace(good, server_cert=pki["server.pem"]).to_text(),
        "other_key": dataclasses.replace(good, server_key=open(pki["client.key"]).read()).to_text(),
        "bad_key": dataclasses.replace(good, server_key="-----BEGIN PRIVATE KEY-----\nAAAA\n"
                                                        "-----END PRIVATE KEY-----\n").to_text(),
        "bad_ca": dataclasses.replace(good, custom_ca="not a certificate").to_text(),
        "verify_without_ca": dataclasses.replace(good, client_verify=True).to_text(),
        "plaintext_rest": good.to_text(),
    }
    path = tmp_path / "ssl.config"
    if case in texts:
        _write_private(path, texts[case])
    port = _free_port()
    argv = ["--model_name", "m", "--model_base_path", base, "--port", str(port),
            "--ssl_config_file", str(path)]
    if case == "plaintext_rest":
        argv += ["--rest_api_port", "auto"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert "BEGIN" not in err[0]  # no key material in the message
    assert not _listening(port)


def test_the_server_class_refuses_the_same_before_it_binds(base, pki):
    good = tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"])
    port = _free_port()
    for config, kw, message in [
            (dataclasses.replace(good, server_key=""), {}, "server_key is empty"),
            (dataclasses.replace(good, server_key=open(pki["client.key"]).read()), {},
             "does not match"),
            (dataclasses.replace(good, client_verify=True), {}, "needs custom_ca"),
            (good, {"rest_port": "auto"}, "--allow_plaintext_rest")]:
        with pytest.raises(ValueError, match=message):
            _serve(base, config, port=port, **kw)
        assert not _listening(port)
    srv = _serve(base, good, port=port, rest_port="auto", allow_plaintext_rest=True)
    try:
        assert srv.port == port and srv.rest_port
    finally:
        srv.stop()


def test_a_missing_pem_file_is_an_error_naming_it(pki, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.key"):
        tls.SSLConfig.from_files(str(tmp_path / "nope.key"), pki["server.pem"])
    with pytest.raises(FileNotFoundError, match="nope.pem"):
        tls.channel_credentials(pki["ca.pem"], str(tmp_path / "nope.pem"), pki["client.key"])
    with pytest.raises(ValueError, match="both --ssl_cert and --ssl_key"):
        tls.channel_credentials(pki["ca.pem"], pki["client.pem"])


@pytest.mark.slow
def test_the_command_line_serves_tls_and_plaintext_rest_only_when_asked(base, pki, tmp_path):
    """The server command in a child process: gRPC on TLS; the REST port (plaintext) is open
    because --allow_plaintext_rest asks for it."""
    path = str(tmp_path / "ssl.config")
    tls.write_ssl_config(path, tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"]))
    proc, grpc_port, rest_port = start_server(
        base, "m", ["--ssl_config_file", str(path), "--allow_plaintext_rest"])
    try:
        assert _predict(grpc_port, tls.channel_credentials(pki["ca.pem"])) == ["hello"]
        assert _refused(grpc_port) == grpc.StatusCode.UNAVAILABLE
        assert rest(rest_port, "/v1/models/m:predict", {"instances": ["hi"]}) == \
            (200, {"predictions": [{"summaries": "hi", "scores": 2.0}]})
    finally:
        stop_server(proc)


# No output shows the key: a malformed config, a bad client file, the real server command. The
# key is the server's (or client's) own, made for this module, so any piece of it is telling.


def _read(path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _assert_no_key(pem: str, *outputs: str) -> None:
    """No line of the PEM text `pem`, and no 16 characters of its body, in any output."""
    lines = pem.strip().splitlines()
    body = "".join(lines[1:-1])
    pieces = lines + [body[i:i + 16] for i in range(0, len(body) - 15, 8)]
    shown = sum(piece in out for piece in pieces for out in outputs)
    assert not shown, f"{shown} pieces of the key are in the output"


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _q(text: str) -> str:
    return f'"{_esc(text)}"'


# form -> (config text from the key and certificate PEMs, what the one error line says)
FORMS = {
    "cut_quote": (lambda k, c: f'server_key: "{_esc(k)}\nserver_cert: {_q(c)}\n',
                  "line 1 column 13 (in field server_key): a string misses its closing quote"),
    "cut_pem": (lambda k, c: f"server_key: {_q(k[:len(k) // 2])}\nserver_cert: {_q(c)}\n",
                "server_key is not a PEM private key"),
    "cut_pem_and_quote": (lambda k, c: f'server_key: "{_esc(k[:len(k) // 2])}',
                          "(in field server_key): a string misses its closing quote"),
    "bad_escape": (lambda k, c: f'server_key: "{_esc(k[:60])}\\xg{_esc(k[60:])}"\n',
                   "(in field server_key): a bad escape sequence inside a string"),
    "key_as_cert": (lambda k, c: f"server_key: {_q(k)}\nserver_cert: {_q(k)}\n",
                    "server_cert is not a PEM certificate (it holds a private key"),
    "key_as_ca": (lambda k, c: f"server_key: {_q(k)}\nserver_cert: {_q(c)}\ncustom_ca: {_q(k)}\n",
                  "custom_ca is not a PEM certificate (it holds a private key"),
    "non_ascii_key_as_cert": (
        lambda k, c: f"server_key: {_q(k)}\nserver_cert: {_q(k[:40] + 'é' + k[40:])}\n",
        "server_cert is not a PEM certificate"),
    "key_as_client_verify": (
        lambda k, c: f"server_key: {_q(k)}\nserver_cert: {_q(c)}\nclient_verify: {_q(k)}\n",
        "line 3 column 16 (in field client_verify): expected true or false"),
    "unknown_field": (lambda k, c: f"server_private_key: {_q(k)}\n",
                      'line 1 column 1: no field named "server_private_key"; SSLConfig\'s fields'),
    "unquoted_key": (lambda k, c: f"server_key: {k}", "(in field server_key): expected a quoted"),
    "unquoted_body": (  # base64 lines where field names go: their names are not shown either
        lambda k, c: f"server_key:\n  {_q(k.splitlines()[0] + chr(10))}\n" +
        "\n".join(k.splitlines()[1:]),
        "line 3 column 1 (in field server_key): a name that is no field (not shown"),
    "key_twice": (lambda k, c: f"server_key: {_q(k)}\nserver_key: {_q(k)}\n",
                  "line 2 column 13 (in field server_key): the field is given twice"),
}


def _malformed(pki, tmp_path, form) -> tuple[str, str, str]:
    """(config path, the key it holds, the expected message) of a malformed form."""
    key = _read(pki["server.key"])
    text, message = FORMS[form]
    path = str(tmp_path / "ssl.config")
    _write_private(path, text(key, _read(pki["server.pem"])))
    return path, key, message


@pytest.mark.parametrize("form", sorted(FORMS))
def test_no_error_of_a_malformed_config_shows_the_key(base, pki, tmp_path, capfd, form):
    """The error line (and anything gRPC or TensorFlow print, fd-level) shows where and what,
    never a piece of the key: protobuf's parse errors quote the line, which is the key."""
    path, key, message = _malformed(pki, tmp_path, form)
    port = _free_port()
    assert main(["--model_name", "m", "--model_base_path", base, "--port", str(port),
                 "--ssl_config_file", path]) == 2
    out, err = capfd.readouterr()
    _assert_no_key(key, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert "BEGIN" not in lines[0]
    assert not _listening(port)


@pytest.mark.slow
@pytest.mark.parametrize("form", ["cut_quote", "bad_escape", "key_as_cert", "unknown_field",
                                  "unquoted_body"])
def test_the_server_command_never_prints_the_key(base, pki, tmp_path, form):
    """`python -m pgn_tf.serving.server --ssl_config_file F` in a child process, with every log
    shown (--verbose): exit status 2, one error line, no piece of the key on stdout or stderr.
    One form of each kind (a parse error, a field's check, a name where a field goes); the test
    above runs every form through the same main() in-process."""
    path, key, message = _malformed(pki, tmp_path, form)
    done = subprocess.run(
        [sys.executable, "-m", "pgn_tf.serving.server", "--model_name", "m", "--model_base_path",
         base, "--port", "0", "--ssl_config_file", path, "--verbose"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)))
    _assert_no_key(key, done.stdout, done.stderr)
    errors = [line for line in done.stderr.splitlines()
              if line.startswith("pgn_tf.serving.server: error:")]
    assert done.returncode == 2 and len(errors) == 1 and message in errors[0], done.stderr[-2000:]


@pytest.mark.parametrize("form, flag, message", [
    ("cut_key", "--ssl_key", "is not a PEM private key"),
    ("der_key", "--ssl_key", "is not a PEM text file"),
    ("key_as_cert", "--ssl_cert", "is not a PEM certificate (it holds a private key"),
    ("key_as_ca", "--ssl_ca", "is not a PEM certificate (it holds a private key"),
    ("other_key", "--ssl_key", "does not match --ssl_cert"),
])
def test_the_client_command_never_prints_its_key(pki, tmp_path, capfd, form, flag, message):
    """A bad --ssl_* file is one error line naming the flag and the file, checked before any
    connection (no server is needed), and no piece of the key it holds."""
    key = _read(pki["client.key"])
    files = {"--ssl_ca": pki["ca.pem"], "--ssl_cert": pki["client.pem"],
             "--ssl_key": pki["client.key"]}
    bad = tmp_path / "bad.pem"
    if form == "cut_key":
        bad.write_text(key[:len(key) // 2])
    elif form == "der_key":
        bad.write_bytes(serialization.load_pem_private_key(key.encode(), None).private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption()))
    elif form == "other_key":
        key = _read(pki["rogue.key"])
        bad.write_text(key)
    else:
        bad.write_text(key)
    files[flag] = str(bad)
    assert client.main(["--server", f"127.0.0.1:{_free_port()}", "--model_name", "m",
                        *[x for kv in files.items() for x in kv], "hello"]) == 1
    out, err = capfd.readouterr()
    _assert_no_key(key, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"{flag} {bad}" in lines[0] and message in lines[0], lines


# The config file holds the key: readable by its owner only.


def test_a_config_others_may_open_is_warned_about_and_refused_when_strict(base, pki, tmp_path,
                                                                        caplog, capsys):
    path = str(tmp_path / "ssl.config")
    tls.write_ssl_config(path, tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"]))
    port = _free_port()
    argv = ["--model_name", "m", "--model_base_path", base, "--port", str(port),
            "--ssl_config_file", path]

    def warnings(args):
        caplog.clear()
        with caplog.at_level("WARNING", logger="serving"):
            _, opts = options_from_args(build_parser().parse_args(args))
        assert opts.ssl_config is not None
        return [r.getMessage() for r in caplog.records if "--ssl_config_file" in r.getMessage()]

    assert warnings(argv) == []  # 0600: as write_ssl_config writes it
    os.chmod(path, 0o644)  # what `to_text() > ssl.config` made under the usual umask
    found = warnings(argv)
    assert len(found) == 1 and "open to group or others (mode 0644)" in found[0], found
    assert "chmod 600" in found[0] and "--ssl_config_file_strict_permissions" in found[0]
    assert main([*argv, "--ssl_config_file_strict_permissions"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "open to group or others (mode 0644)" in err[0], err
    assert not _listening(port)
    os.chmod(path, 0o640)  # group may read: still refused
    assert main([*argv, "--ssl_config_file_strict_permissions=true"]) == 2
    assert "(mode 0640)" in capsys.readouterr().err
    os.chmod(path, 0o600)
    assert warnings([*argv, "--ssl_config_file_strict_permissions"]) == []


def test_write_ssl_config_writes_a_checked_file_only_its_owner_may_open(pki, tmp_path):
    good = tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"], pki["ca.pem"], True)
    path = tmp_path / "ssl.config"
    path.write_text("an older config")
    os.chmod(path, 0o644)
    umask = os.umask(0)
    try:
        tls.write_ssl_config(str(path), good)
    finally:
        os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # not the old file's mode, nor 0666
    assert tls.read_ssl_config(str(path), strict_permissions=True) == good
    with pytest.raises(ValueError, match="server_key does not match server_cert"):
        tls.write_ssl_config(str(path), dataclasses.replace(
            good, server_key=_read(pki["client.key"])))
    assert tls.read_ssl_config(str(path)) == good  # a refused config leaves the file as it was
    assert os.listdir(tmp_path) == ["ssl.config"]  # and no temporary file behind


@pytest.mark.parametrize("doc", [os.path.join("docs", "serving", "tls.md")])
def test_the_documented_recipe_writes_a_config_only_its_owner_may_open(pki, tmp_path, doc):
    """The docs' `python -c` line, run as written (usual umask 022) beside the PEM files it
    names: the config it writes is 0600 and serves (client_verify with the CA)."""
    text = _read(os.path.join(ROOT, doc))
    recipes = re.findall(r"python -c '([^']*write_ssl_config[^']*)'", text)
    assert len(recipes) == 1, f"{doc}: expected one write_ssl_config recipe"
    assert "> ssl.config" not in text  # the shell redirect wrote 0644
    for name in ("server.key", "server.pem", "ca.pem"):
        (tmp_path / name).write_text(_read(pki[name]))
    subprocess.run([sys.executable, "-c", recipes[0]], cwd=tmp_path, check=True, timeout=120,
                   umask=0o022, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                       p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)))
    path = tmp_path / "ssl.config"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert tls.read_ssl_config(str(path), strict_permissions=True).client_verify
