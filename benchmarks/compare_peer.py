"""Speed against the reference system (OpenNMT-py, copy attention + coverage): its benchmark
and this project's on the same corpus in one run, printed as one table of ratios.

    python -m benchmarks.compare_peer --peer_dir PEER --peer_work PEER_WORK --data_dir DATA \
        [--corpus descriptions|digests] \
        [--config reference_onmt] [--set SECTION.KEY=VALUE ...] [--work_dir runs/compare_peer] \
        [--steps 150] [--warmup 20] [--decode_train_steps 1500] [--forced_length N] \
        [--matmul_peak] [--cpu native|avx2] \
        [--variant NAME:SECTION.KEY=VALUE[,SECTION.KEY=VALUE...] ...] [--skip_peer | --skip_ours]

PEER is the directory holding the reference system's bench.sh, setup_onmt.sh, onmt-ref.yaml and
README.md. `PEER/bench.sh PEER_WORK both` runs first (the first run is the long one: its virtual
environment, tokenized corpus and 1,500-step model stay in PEER_WORK for the next run), then this
project's half, so the two never share the CPU. The peer's figures are read from its output
(`parse_peer`); its examples/s is the batch of sentences bench.sh trained with over its s/step.
DATA holds the corpus the peer's setup tokenizes, train.jsonl.gz and validation.jsonl.gz.

This project's half runs at the sizes of --config (a preset or config file; default the
reference_onmt preset, which matches onmt-ref.yaml) with the --set overrides:

  training  benchmarks/train_throughput.py's `measure`: a fresh model on DATA/train.jsonl.gz,
            --warmup steps untimed (tracing, the input pipeline filling up), then --steps timed
            ones (the peer times its steps 150-300). Source tokens are real article tokens
            (padding not counted), as the peer counts them; parameters are the trainable ones.
  decoding  a model trained --decode_train_steps steps by `python -m pgn_tf.train` in
            <work_dir>/decode_model (reused when it already holds that step, as the peer keeps its
            model) decodes every article of DATA/validation.jsonl.gz with beam 4, batch 64, at
            most 30 tokens, batches of articles of similar length, by the one batched decode
            every caller runs (`SummarizerAPI.decode`, through `pgn_tf.inference.evaluator.decode_split`). Timed: the decoding of every batch. Not timed: reading
            the data, loading the model, and the beam search's first trace and run (one warm-up
            batch); the peer's figure likewise leaves out its start-up and model load.

--variant (repeatable) adds one more training measurement of this project, the --set overrides
plus the variant's, in the same run after the default's: e.g. `--variant
xla:train.jit_compile=true`. Its row gives its source tokens/s, its ratio to the reference and its
ratio to this project's default, which is how a speed switch is kept or dropped. Variants are
timed for training only (decoding is timed on the default's model).

--corpus digests runs both systems at See et al.'s lengths on the Debian digests (DATA holds
them): the peer's bench.sh with PEER_CORPUS=digests (article 400 tokens, summary 100, vocab 50k,
batch 16, decoding at most 100 tokens; the reference's network sizes), this project with the
reference_onmt_digests preset (the same settings) decoding at most 100 tokens. PEER_WORK must be
the digests' own (setup_onmt.sh rewrites its data per corpus, and bench.sh keeps its model):
a marker file in it says which corpus it holds, and another corpus' is refused.

Peak RSS (pgn_tf/utils/procfs.py says why VmHWM): the peer's, the largest VmHWM of its
onmt_train processes (training) and of its onmt_translate process (decoding), read every 0.2 s
while bench.sh runs; this project's training, the VmHWM of this process over the timed
training (reset before it where the kernel allows, so the data conversion before it is left
out), and its decoding, measured in a fresh child process that decodes and reports its own
VmHWM (in this process the training's memory would count). Both include their framework's
start-up (TensorFlow, PyTorch).

TensorFlow's oneDNN kernels are on, as pgn_tf's commands run them (pgn_tf.utils.onednn: where
TF_ENABLE_ONEDNN_OPTS is unset the process restarts with it set; TensorFlow's own default leaves
them off on CPUs with AVX2 only); the printed setting and the JSON line name it.

--cpu avx2 runs the whole comparison as a CPU with AVX2 only would (the process restarts with
oneDNN and MKL capped at AVX2, which the peer's bench.sh inherits; `auto` precision then picks
float32, and an explicit bf16 setting is refused), so one machine measures every CPU type; the
printed flags and the JSON line name the caps beside the real flags.

--forced_length N decodes every article to exactly N tokens in both systems (the end token
impossible before N, the search stopped at N), so that articles/s compares equal work whatever
the two models' summary lengths: a model early in training may stop at a few tokens or loop to
the limit, and a search's cost grows with its steps. The peer then runs `bench.sh PEER_WORK
train` (its training figures, and the 300-step model that mode saves), and this script runs
the peer's onmt_translate on that model with bench.sh's decoding flags plus `-min_length N
-max_length N`, timed as bench.sh times it (its -report_time translation time, start-up and
model load left out), its peak RSS read as above; this project's decoding model is trained
--decode_train_steps steps (default 300 in this mode, the peer's model's steps: give it a
--work_dir of its own, since a kept model trained longer is refused).

--matmul_peak adds the training step's achieved GFLOP/s (train_throughput's analytic count of the
model's matmuls on real tokens, padding not counted) as a share of this machine's matmul peak
(benchmarks/matmul_peak.py, in the training step's compute dtype).

Prints the table (ratio = pgn_tf / OpenNMT-py: above 1, pgn_tf's figure is higher; for s/step
lower is faster), the CPU's vector flags, the date, then one JSON line. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import tensorflow as tf

from benchmarks import matmul_peak, train_throughput
from benchmarks.common import (
    add_cpu_flag,
    cpu_flags,
    emulate_cpu,
    refuse_emulated_bf16,
    result_line,
)
from benchmarks.peer import (
    BATCH,
    BEAM,
    PEER_DECODE_STEPS,
    PEER_TRAIN_STEPS,
    peer_forced_decoding,
    peer_variant,
    run_peer,
    tail,
)
from benchmarks.peer_table import ratios, table, variant_table, with_token_rate
from pgn_tf import config as config_lib
from pgn_tf.data import dataset
from pgn_tf.decoding.search import DecodeRequest
from pgn_tf.inference.evaluator import decode_split
from pgn_tf.inference.summarizer import Summarizer
from pgn_tf.model_dir import ModelDir
from pgn_tf.utils import onednn, procfs, work_dirs
from pgn_tf.utils.child_process import run_python
from pgn_tf.utils.errors import UserError, run_cli

# Per corpus: this project's preset at the peer's sizes, the decoded tokens' limit, and what
# bench.sh is told (PEER_CORPUS).
CORPORA = {
    "descriptions": {"config": "reference_onmt", "max_tokens": 30, "peer_corpus": "descriptions"},
    "digests": {"config": "reference_onmt_digests", "max_tokens": 100, "peer_corpus": "digests"},
}

# --forced_length's limit: twice the longest summary either corpus is decoded to (a search's
# memory and time grow with its steps).
MAX_FORCED = 200

def parse_variant(text: str) -> tuple[str, list[str]]:
    """"NAME:SECTION.KEY=VALUE[,SECTION.KEY=VALUE...]" -> (NAME, the overrides); UserError when
    it is not of that form."""
    name, sep, sets = text.partition(":")
    overrides = [x.strip() for x in sets.split(",") if x.strip()]
    if not sep or not name.strip() or not overrides or not all(
            "=" in x and "." in x.split("=", 1)[0] for x in overrides):
        raise UserError(f"--variant {text!r}: expected NAME:SECTION.KEY=VALUE[,SECTION.KEY=VALUE"
                        f"...], e.g. xla:train.jit_compile=true")
    return name.strip(), overrides


def our_training(cfg: config_lib.Config, files: list[str], steps: int, warmup: int,
                 peak: bool) -> dict:
    """train_throughput.measure in a throw-away model dir; with `peak`, the share of the matmul
    peak its FLOP count reaches."""
    print(f"== pgn_tf training: {warmup} warm-up + {steps} timed steps", flush=True)
    reset = procfs.reset_peak()  # leaves out what came before: imports, data conversion
    with tempfile.TemporaryDirectory(prefix="compare_peer-") as tmp:
        result = train_throughput.measure(cfg, files, steps, warmup, work_dir=tmp)
    result["peak_rss_mib"] = procfs.peak_mib()
    result["peak_rss_since"] = "training start" if reset else "process start"
    # printed as it comes, so a run stopped later keeps what it measured
    print(f"   {result['src_tokens_per_sec']} source tokens/s, {result['sec_per_step']} s/step "
          f"({result['precision']}; warm-up {result['warmup_seconds']} s)", flush=True)
    if peak:
        dtype = tf.bfloat16 if "bfloat16" in str(result["precision"]) else tf.float32
        best = max(matmul_peak.gflops(n, dtype, seconds=3.0) for n in (1024, 2048))
        result.update(matmul_dtype=dtype.name, matmul_peak_gflops=round(best, 1),
                      share_of_matmul_peak=round(result["achieved_gflops_real_tokens"] / best, 3))
    return result


def check_decode_model(cfg_name: str, cfg: config_lib.Config, model_dir: str,
                       steps: int) -> str | None:
    """The kept decoding model's checkpoint at `steps`, or None when it has to be trained (or
    continued) to it; UserError when the kept model is of another configuration or longer
    trained."""
    mdir = ModelDir(model_dir)
    if mdir.has_config():
        kept = mdir.read_config()
        if (kept.model, kept.data) != (cfg.model, cfg.data):
            raise UserError(f"{model_dir} holds a model of another configuration than "
                            f"--config {cfg_name} with these --set values; give another "
                            f"--work_dir or delete it")
    latest = mdir.latest_checkpoint()
    done = int(latest.rsplit("-", 1)[1]) if latest else 0
    if done > steps:
        raise UserError(f"{model_dir} holds a model trained {done} steps, more than "
                        f"--decode_train_steps {steps}; give another --work_dir or delete it")
    return latest if done == steps else None


def decode_model(cfg_name: str, overrides: list[str], cfg: config_lib.Config, train_data: str,
                 model_dir: str, steps: int) -> str:
    """<model_dir> trained `steps` steps (no validation, as the peer trains), reused when its
    latest checkpoint is at that step, continued when it is before; returns that checkpoint."""
    kept = check_decode_model(cfg_name, cfg, model_dir, steps)
    if kept:
        print(f"== pgn_tf decoding model: reusing {kept}", flush=True)
        return kept
    log = os.path.join(os.path.dirname(os.path.abspath(model_dir)), "decode_model_train.log")
    print(f"== pgn_tf decoding model: training {steps} steps in {model_dir} (log: {log})",
          flush=True)
    sets = [*overrides, f"train.max_steps={steps}", "train.max_minutes=0"]
    try:
        run_python(["-m", "pgn_tf.train", "--config", cfg_name, "--train_data", train_data,
                    "--model_dir", model_dir, "--quiet", *sum((["--set", s] for s in sets), [])],
                   log)
    except RuntimeError as e:
        raise UserError(str(e)) from None
    return ModelDir(model_dir).latest_checkpoint()


def our_decoding(cfg: config_lib.Config, model_dir: str, checkpoint: str, data: str,
                 max_tokens: int, min_tokens: int | None = None) -> dict:
    """Beam-BEAM decoding of every article of `data` in batches of BATCH, at most max_tokens
    tokens (at least min_tokens: the preset's minimum when None), by `checkpoint` of
    model_dir; the decode section otherwise from cfg (the module docstring says what is
    timed)."""
    examples = dataset.read_split(data, None, None)
    loaded = Summarizer.from_model_dir(model_dir, checkpoint)
    # the preset's decode section (its constraints, penalties); beam and lengths per request
    decode_cfg = dataclasses.replace(cfg.decode, batch_size=BATCH)
    summarizer = Summarizer(loaded.model, loaded.vocab,
                            dataclasses.replace(loaded.cfg, decode=decode_cfg).validate())
    min_steps = min(cfg.decode.min_dec_steps if min_tokens is None else min_tokens, max_tokens)
    request = DecodeRequest(beam_size=BEAM, max_steps=max_tokens, min_steps=min_steps)
    print(f"== pgn_tf decoding: {len(examples)} articles, beam {BEAM}, batch {BATCH}, "
          f"{min_steps}-{max_tokens} tokens", flush=True)
    # The warm-up batch traces the same compiled call (same request, batch BATCH) as the timed.
    warmup = decode_split(summarizer, examples[:BATCH], batch_size=BATCH, request=request).seconds
    cpu0 = time.process_time()
    out = decode_split(summarizer, examples, batch_size=BATCH, request=request)
    tokens, seconds = out.tokens, out.seconds
    cpu = time.process_time() - cpu0
    return {
        "articles": len(examples), "seconds": round(seconds, 2),
        "articles_per_sec": round(len(examples) / seconds, 2),
        "cpu_ms_per_article": round(1000 * cpu / len(examples), 2),
        "mean_tokens": round(sum(len(t) for t in tokens) / len(tokens), 2),
        "warmup_seconds": round(warmup, 2), "min_dec_steps": min_steps,
        "max_tokens": max_tokens, "peak_rss_mib": procfs.peak_mib(),
    }


# The line a decoding child prints its figures on (decoding_in_child).
CHILD_RESULT = "compare_peer decoding result: "


def decoding_in_child(job: dict) -> dict:
    """our_decoding in a fresh process (`python -m benchmarks.compare_peer --decoding_job
    JSON`, from the repository's root), so that its
    peak RSS is decoding's alone; job: config, set, model_dir, checkpoint, data, max_tokens,
    min_tokens (None: the preset's)."""
    print("== pgn_tf decoding, in a child process (its own peak RSS)", flush=True)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.compare_peer", "--decoding_job",
                           json.dumps(job)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, cwd=root, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    found = [line for line in proc.stdout.splitlines() if line.startswith(CHILD_RESULT)]
    if proc.returncode or not found:
        raise UserError(f"the decoding child failed (status {proc.returncode}); the last lines "
                        f"of its output:\n{tail(proc.stdout)}")
    return json.loads(found[-1][len(CHILD_RESULT):])


def run_decoding_job(text: str) -> dict:
    """The child's side of decoding_in_child: decodes, prints its figures on one line."""
    job = json.loads(text)
    cfg = config_lib.resolve(job["config"], job["set"])
    result = our_decoding(cfg, job["model_dir"], job["checkpoint"], job["data"],
                          job["max_tokens"], job.get("min_tokens"))
    print(CHILD_RESULT + json.dumps(result), flush=True)
    return result


def ours(a, cfg: config_lib.Config, variants: list) -> dict:
    """This project's figures (the keys of ROWS) and the measurements behind them; variants:
    (name, overrides, config) for the extra training measurements."""
    train_data = os.path.join(a.data_dir, "train.jsonl.gz")
    model_dir = os.path.join(a.work_dir, "decode_model")
    # The TFRecord cache of the decoding model's dir: converted once, read by both halves.
    files = dataset.resolve_files(train_data, ModelDir(model_dir).cache_dir)
    training = our_training(cfg, files, a.steps, a.warmup, a.matmul_peak)
    measured = {}
    for name, overrides, variant_cfg in variants:
        print(f"== pgn_tf training, variant {name}: {' '.join(overrides)}", flush=True)
        measured[name] = our_training(variant_cfg, files, a.steps, a.warmup, False)
    checkpoint = decode_model(a.config, a.set, cfg, train_data, model_dir, a.decode_train_steps)
    decoding = decoding_in_child({
        "config": a.config, "set": a.set, "model_dir": model_dir, "checkpoint": checkpoint,
        "data": os.path.join(a.data_dir, "validation.jsonl.gz"),
        "max_tokens": a.max_tokens,
        "min_tokens": a.forced_length})
    figures = {
        "train_src_tokens_per_sec": training["src_tokens_per_sec"],
        "train_examples_per_sec": training["examples_per_sec"],
        "train_sec_per_step": training["sec_per_step"], "params": training["params"],
        "decode_articles_per_sec": decoding["articles_per_sec"],
        "decode_mean_tokens": decoding["mean_tokens"],
        "train_peak_rss_mib": training["peak_rss_mib"],
        "decode_peak_rss_mib": decoding["peak_rss_mib"],
    }
    return {"figures": figures, "training": training, "decoding": decoding,
            "variants": measured}


def run(a) -> dict:
    a.config = a.config or CORPORA[a.corpus]["config"]
    # the peer decodes the model of bench.sh's decode mode, or of its train mode when forced
    peer_steps = PEER_TRAIN_STEPS if a.forced_length else PEER_DECODE_STEPS
    if a.decode_train_steps is None:
        a.decode_train_steps = peer_steps
    a.max_tokens = a.forced_length or CORPORA[a.corpus]["max_tokens"]
    try:
        cfg = config_lib.resolve(a.config, a.set)
    except ValueError as e:
        raise UserError(f"--config {a.config}: {e}; give a preset or config file at the "
                        f"sizes of the reference's onmt-ref.yaml") from None
    refuse_emulated_bf16(a.cpu, cfg.train.mixed_precision, "--config/--set")
    variants = []
    for text in a.variant:
        name, overrides = parse_variant(text)
        if name in [v[0] for v in variants]:
            raise UserError(f"--variant {text}: the name {name!r} is given twice")
        try:
            variants.append((name, overrides,
                             config_lib.resolve(a.config, [*a.set, *overrides])))
            refuse_emulated_bf16(a.cpu, variants[-1][2].train.mixed_precision, "--variant")
        except ValueError as e:
            raise UserError(f"--variant {text}: {e}") from None
    if not a.skip_peer and not os.path.isfile(os.path.join(a.peer_dir, "bench.sh")):
        raise UserError(f"--peer_dir {a.peer_dir} holds no bench.sh")
    if a.peer_set and not a.skip_peer:  # the reference with these yaml settings, from a copy
        a.peer_dir = peer_variant(a.peer_dir, a.peer_set,
                                  os.path.join(os.path.abspath(a.work_dir), "peer_variant"))
    if not a.skip_ours:
        for name in ("train.jsonl.gz", "validation.jsonl.gz"):
            if not os.path.isfile(os.path.join(a.data_dir, name)):
                raise UserError(f"--data_dir {a.data_dir} holds no {name}")
        check_decode_model(a.config, cfg, os.path.join(a.work_dir, "decode_model"),
                           a.decode_train_steps)
    if not a.skip_peer:
        work_dirs.claim(os.path.abspath(a.peer_work), a.corpus)
    peer = {} if a.skip_peer else run_peer(a.peer_dir, os.path.abspath(a.peer_work),
                                           "train" if a.forced_length else "both",
                                           CORPORA[a.corpus]["peer_corpus"])
    if a.forced_length and not a.skip_peer:
        peer.update(peer_forced_decoding(os.path.abspath(a.peer_work), a.forced_length))
    mine = {"figures": {}} if a.skip_ours else ours(a, cfg, variants)
    mine["figures"], peer = with_token_rate(mine["figures"]), with_token_rate(peer)
    ratio = ratios(mine["figures"], peer)
    date = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    print(f"\n== pgn_tf (--config {a.config}) vs OpenNMT-py (the reference's bench.sh, "
          f"PEER_CORPUS={CORPORA[a.corpus]['peer_corpus']}); decoding "
          f"{'forced to' if a.forced_length else 'at most'} {a.max_tokens} tokens by models of "
          f"{a.decode_train_steps} (pgn_tf) and {peer_steps} (the reference) training steps")
    print(table(mine["figures"], peer, ratio))
    if "training" in mine and "share_of_matmul_peak" in mine["training"]:
        t = mine["training"]
        print(f"pgn_tf training: {t['achieved_gflops_real_tokens']} GFLOP/s on real tokens = "
              f"{100 * t['share_of_matmul_peak']:.0f}% of the {t['matmul_dtype']} matmul peak "
              f"({t['matmul_peak_gflops']} GFLOP/s)")
    if mine.get("variants"):
        print(variant_table(mine["variants"], mine["training"], peer))
    n_ours, n_peer = mine.get("decoding", {}).get("articles"), peer.get("decode_articles")
    if n_ours and n_peer and n_ours != n_peer:
        print(f"note: the reference decoded {n_peer} articles, pgn_tf {n_ours}: not the same "
              f"validation file?")
    print(f"cpu_flags: {cpu_flags()}")
    print(f"TensorFlow's oneDNN: {onednn.state()}")
    print(f"date: {date}")
    if a.peer_set:
        print(f"the reference ran with: {', '.join(a.peer_set)} (onmt-ref.yaml otherwise)")
    result = {"corpus": a.corpus, "config": a.config, "overrides": a.set, "date": date,
              "peer_set": a.peer_set,
              "cpu": a.cpu,
              "decode": {"beam": BEAM, "batch": BATCH, "max_tokens": a.max_tokens,
                         "forced_length": a.forced_length,
                         "train_steps": a.decode_train_steps},
              "pgn_tf": {k: v for k, v in mine.items() if k != "figures"},
              "peer": peer, "ratios": ratio}
    print(result_line("compare_peer", result), flush=True)
    return result


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer_dir", help="the directory holding the reference system's bench.sh")
    p.add_argument("--peer_work", help="bench.sh's work dir (its venv, data and model are kept)")
    p.add_argument("--data_dir", help="the directory holding train.jsonl.gz and "
                   "validation.jsonl.gz")
    p.add_argument("--corpus", choices=sorted(CORPORA), default="descriptions",
                   help="descriptions (the reference sizes, 100/30 tokens) or digests (See et "
                        "al.'s lengths: 400/100 tokens, vocab 50k, batch 16)")
    p.add_argument("--config", help="this project's preset or config file at the reference "
                                    "sizes (default: reference_onmt, or reference_onmt_digests "
                                    "with --corpus digests)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    p.add_argument("--work_dir", default="runs/compare_peer",
                   help="this project's decoding model (kept and reused) and logs")
    p.add_argument("--steps", type=int, default=150, help="timed training steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed training steps before them")
    p.add_argument("--decode_train_steps", type=int,
                   help="training steps of the model that decoding is timed on (default "
                        f"{PEER_DECODE_STEPS}, or {PEER_TRAIN_STEPS} with --forced_length, as "
                        "the peer's model)")
    p.add_argument("--forced_length", type=int, metavar="N",
                   help="both systems decode every article to exactly N tokens (equal work "
                        "whatever the models' summary lengths)")
    p.add_argument("--matmul_peak", action="store_true",
                   help="the training step's GFLOP/s as a share of this machine's matmul peak")
    p.add_argument("--variant", action="append", default=[],
                   metavar="NAME:SECTION.KEY=VALUE[,...]",
                   help="one more training measurement with these overrides (repeatable)")
    p.add_argument("--peer_set", action="append", default=[], metavar="KEY=VALUE",
                   help="run the reference with this onmt-ref.yaml setting (repeatable; e.g. "
                        "share_embeddings=true: one embedding table, as this project's)")
    add_cpu_flag(p)
    p.add_argument("--skip_peer", action="store_true", help="only this project's half")
    p.add_argument("--skip_ours", action="store_true", help="only the reference's half")
    p.add_argument("--decoding_job", help=argparse.SUPPRESS)  # decoding_in_child's child
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    emulate_cpu(a.cpu, "benchmarks.compare_peer", sys.argv[1:] if argv is None else argv)
    if a.decoding_job:
        return run_cli("compare_peer", run_decoding_job, a.decoding_job)
    if a.skip_peer and a.skip_ours:
        p.error("--skip_peer and --skip_ours leave nothing to run")
    if not a.skip_peer and not (a.peer_dir and a.peer_work):
        p.error("--peer_dir and --peer_work are required unless --skip_peer")
    if not a.skip_ours and not a.data_dir:
        p.error("--data_dir is required unless --skip_ours")
    if a.steps < 1 or a.warmup < 0 or (a.decode_train_steps is not None
                                       and a.decode_train_steps < 1):
        p.error("--steps and --decode_train_steps must be positive, --warmup not negative")
    if a.forced_length is not None and not 1 <= a.forced_length <= MAX_FORCED:
        p.error(f"--forced_length must lie between 1 and {MAX_FORCED}")
    return run_cli("compare_peer", run, a)


if __name__ == "__main__":
    sys.exit(main())
