"""The reference system's own server, for benchmarks/serve_load.py: OpenNMT-py 3.5.1's REST
server (`onmt_server`, Flask under waitress) serving the reference model compare_peer trains,
from the peer's virtual environment in PEER_WORK (../peer's setup_onmt.sh makes it).

OpenNMT-py 3.5.1's server cannot decode a copy-attention model as shipped: its request path
(`translation_server.ServerModel.run` -> `text_utils.textbatch_to_tensor`) never adds the
copy keys (`src_map`, `src_ex_vocab`) that the model's copy generator reads, the same gap
setup_onmt.sh closes for `onmt_translate` by passing `copy=` to the data iterator. The launcher
below closes it the same way at start-up (each request's examples get `_addcopykeys`, as the
training and translation iterators give them), and changes nothing else: the server, its
Flask routes, its one-request-at-a-time model lock and its waitress threads are the
reference's own. The peer's venv is not modified.

A request is OpenNMT's REST format, `[{"id": 100, "src": "tokens ..."}]`, one article, its
text tokenized as setup_onmt.sh tokenizes the corpus (`peer_tokens`).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import time

from pgn_tf.serving.process import stop_server

MODEL_ID = 100
URL_ROOT = "/translator"

# Run by the peer's own Python: the copy keys added to a request's examples, then the
# reference's server main(). Its argv is onmt_server's.
LAUNCHER = """\
import onmt.translate.translation_server as ts
from onmt.bin.server import main
from onmt.inputters.text_utils import _addcopykeys

_plain = ts.textbatch_to_tensor


def _with_copy_keys(vocabs, batch, device, is_train=False):
    for ex in batch:
        _addcopykeys(vocabs, ex)
    return _plain(vocabs, batch, device, is_train)


ts.textbatch_to_tensor = _with_copy_keys
main()
"""

_TOKEN = re.compile(r"\w+(?:[-'.]\w+)*|[^\w\s]")


def peer_tokens(article: str, max_tokens: int) -> str:
    """The article as the reference reads it: lowercased, setup_onmt.sh's tokens, the first
    `max_tokens` of them."""
    return " ".join(_TOKEN.findall(article.lower())[:max_tokens])


def newest_model(peer_work: str) -> str:
    """PEER_WORK/run's model_step_N.pt with the largest N; FileNotFoundError when none."""
    run = os.path.join(peer_work, "run")
    found = []
    for name in os.listdir(run) if os.path.isdir(run) else []:
        m = re.fullmatch(r"model_step_(\d+)\.pt", name)
        if m:
            found.append((int(m.group(1)), name))
    if not found:
        raise FileNotFoundError(f"{run} holds no model_step_N.pt: run ../peer's bench.sh first")
    return os.path.join(run, max(found)[1])


def write_config(path: str, model: str, beam: int, min_length: int, max_length: int) -> None:
    """The server's conf.json: one model, loaded at start, never unloaded, decoding with
    beam `beam` and `min_length`-`max_length` tokens on the CPU."""
    conf = {"models_root": os.path.dirname(os.path.abspath(model)), "models": [{
        "id": MODEL_ID, "model": os.path.basename(model), "timeout": -1,
        "on_timeout": "to_cpu", "load": True,
        "opt": {"gpu": -1, "beam_size": beam, "min_length": min_length,
                "max_length": max_length, "batch_size": 64}}]}
    with open(path, "w") as f:
        json.dump(conf, f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(peer_work: str, conf: str, work_dir: str, timeout: float = 300.0
          ) -> tuple[subprocess.Popen, int]:
    """(process, port) of the reference's server on 127.0.0.1 once its model answers a
    request; its output goes to work_dir/onmt_server.log. RuntimeError naming that log when
    it does not come up."""
    python = os.path.join(peer_work, "venv", "bin", "python")
    if not os.access(python, os.X_OK):
        raise RuntimeError(f"{peer_work} holds no venv/bin/python: run ../peer's setup_onmt.sh")
    launcher = os.path.join(work_dir, "onmt_server_with_copy_keys.py")
    with open(launcher, "w") as f:
        f.write(LAUNCHER)
    port = _free_port()
    log_path = os.path.join(work_dir, "onmt_server.log")
    with open(log_path, "w") as log:  # the child writes to its own copy of the descriptor
        proc = subprocess.Popen(
            [python, launcher, "--ip", "127.0.0.1", "--port", str(port), "--url_root",
             URL_ROOT, "--model_config", conf], stdout=log, stderr=subprocess.STDOUT,
            cwd=work_dir, env=dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count() or 1)))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            translate(port, ["ready ?"], timeout=30)
            return proc, port
        except (OSError, http.client.HTTPException, ValueError):
            time.sleep(0.5)  # polling a starting process: no event to wait on
    stop_server(proc)
    raise RuntimeError(f"the reference's server did not come up; see {log_path}")


def translate(port: int, sources: list[str], timeout: float = 120.0,
              conn: http.client.HTTPConnection | None = None) -> list[str]:
    """The server's summaries of `sources` (already tokenized); ValueError for an answer that
    is not one (its JSON "error" when it says one)."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        body = json.dumps([{"id": MODEL_ID, "src": s} for s in sources])
        conn.request("POST", f"{URL_ROOT}/translate", body,
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out = json.loads(resp.read())
    finally:
        if own:
            conn.close()
    if resp.status != 200 or not isinstance(out, list):
        raise ValueError(f"the reference's server answered {resp.status}: "
                         f"{(out.get('error') if isinstance(out, dict) else out)!r:.200}")
    return [r["tgt"] for r in out[0]]

