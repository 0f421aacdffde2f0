"""gRPC over TLS, configured as tensorflow_model_server is (serving.tls): a CA and the server's
and clients' certificates made at test time with `cryptography`, the tiny SavedModel served
in-process. TLS clients are answered; plaintext clients, clients without a certificate the
server's CA signed, and expired certificates are refused; a bad config stops start-up with one
line before any port is bound."""

import dataclasses
import datetime
import ipaddress
import socket

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tensorflow_serving.apis import prediction_service_pb2_grpc

from pgn_tf.serving import client, tls
from pgn_tf.serving.process import start_server, stop_server
from pgn_tf.serving.server import main
from pgn_tf.serving.service import Server
from tests.serving.helpers import add_version, request, rest, summaries

DAY = datetime.timedelta(days=1)


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
    path = tmp_path_factory.mktemp("config") / "ssl.config"
    path.write_text(tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"], pki["ca.pem"],
                                             client_verify=True).to_text())
    srv = _serve(base, tls.read_ssl_config(str(path)))
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
        path.write_text(texts[case])
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


def test_the_command_line_serves_tls_and_plaintext_rest_only_when_asked(base, pki, tmp_path):
    """The server command in a child process: gRPC on TLS; the REST port (plaintext) is open
    because --allow_plaintext_rest asks for it."""
    path = tmp_path / "ssl.config"
    path.write_text(tls.SSLConfig.from_files(pki["server.key"], pki["server.pem"]).to_text())
    proc, grpc_port, rest_port = start_server(
        base, "m", ["--ssl_config_file", str(path), "--allow_plaintext_rest"])
    try:
        assert _predict(grpc_port, tls.channel_credentials(pki["ca.pem"])) == ["hello"]
        assert _refused(grpc_port) == grpc.StatusCode.UNAVAILABLE
        assert rest(rest_port, "/v1/models/m:predict", {"instances": ["hi"]}) == \
            (200, {"predictions": [{"summaries": "hi", "scores": 2.0}]})
    finally:
        stop_server(proc)
