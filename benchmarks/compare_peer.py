"""Speed against the reference system (OpenNMT-py, copy attention + coverage): its benchmark
and this project's on the same corpus in one run, printed as one table of ratios.

    python -m benchmarks.compare_peer --peer_dir PEER --peer_work PEER_WORK --data_dir DATA \
        [--corpus descriptions|digests] \
        [--config reference_onmt] [--set SECTION.KEY=VALUE ...] [--work_dir runs/compare_peer] \
        [--steps 150] [--warmup 20] [--decode_train_steps 1500] [--forced_length N] \
        [--matmul_peak] [--cpu native|avx2] \
        [--variant NAME:SECTION.KEY=VALUE[,SECTION.KEY=VALUE...] ...]
        [--decode_variant NAME:decode.KEY=VALUE[,...] ...] [--decode_rounds 3]
        [--skip_peer | --skip_ours]

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

--decode_variant (repeatable; decode.* keys only) decodes the same articles with the same model
and request under the variant's decoding settings, e.g. `--decode_variant
shortlist:decode.shortlist=2000`. The default and the variants decode interleaved over
--decode_rounds rounds, every arm each round, each decoding in a fresh child process as the
default's does (its own warm-up batch and peak RSS), and each figure is its arm's median
round, so a noisy minute falls on every arm alike. A variant's row gives its
articles/s, its ratios to the reference and to this project's default, and the share of
articles whose summary is the default's, token for token.

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
import datetime
import os
import sys
import tempfile

import tensorflow as tf

from benchmarks import matmul_peak, train_throughput
from benchmarks.common import (
    add_cpu_flag,
    cpu_flags,
    emulate_cpu,
    refuse_emulated_bf16,
    result_line,
)
from benchmarks.compare_decoding import (
    DEFAULT_ARM,
    check_decode_model,
    decode_model,
    interleaved_decoding,
)
from benchmarks.peer import (
    BATCH,
    BEAM,
    PEER_DECODE_STEPS,
    PEER_TRAIN_STEPS,
    peer_forced_decoding,
    peer_variant,
    run_peer,
)
from benchmarks.peer_table import (
    decode_variant_table,
    ratios,
    table,
    variant_table,
    with_token_rate,
)
from pgn_tf import config as config_lib
from pgn_tf.data import dataset
from pgn_tf.model_dir import ModelDir
from pgn_tf.utils import onednn, procfs, work_dirs
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


def parse_decode_variant(text: str) -> tuple[str, list[str]]:
    """--decode_variant's "NAME:decode.KEY=VALUE[,...]" -> (NAME, the overrides); UserError
    for another form or a key outside decode.* (the decoding model is the default's)."""
    try:
        name, overrides = parse_variant(text)
    except UserError:
        raise UserError(f"--decode_variant {text!r}: expected NAME:decode.KEY=VALUE[,...], "
                        f"e.g. shortlist:decode.shortlist=2000") from None
    bad = [x for x in overrides if not x.startswith("decode.")]
    if bad:
        raise UserError(f"--decode_variant {text!r}: {', '.join(bad)} is not a decode.* "
                        f"setting (the variants decode with the default's model)")
    return name, overrides


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
    decoding = interleaved_decoding({
        "config": a.config, "set": a.set, "model_dir": model_dir, "checkpoint": checkpoint,
        "data": os.path.join(a.data_dir, "validation.jsonl.gz"),
        "max_tokens": a.max_tokens,
        "min_tokens": a.forced_length}, a.decode_variants, a.decode_rounds)
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
    a.decode_variants = []
    for text in a.decode_variant:
        name, overrides = parse_decode_variant(text)
        if name in [DEFAULT_ARM, *(v[0] for v in a.decode_variants)]:
            raise UserError(f"--decode_variant {text}: the name {name!r} is taken")
        try:
            config_lib.resolve(a.config, [*a.set, *overrides])
        except ValueError as e:
            raise UserError(f"--decode_variant {text}: {e}") from None
        a.decode_variants.append((name, overrides))
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
    if mine.get("decoding", {}).get("variants"):
        print(decode_variant_table(mine["decoding"], peer))
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
    p.add_argument("--decode_variant", action="append", default=[],
                   metavar="NAME:decode.KEY=VALUE[,...]",
                   help="one more decoding of the default's model with these decode.* "
                        "overrides, interleaved with the default's (repeatable)")
    p.add_argument("--decode_rounds", type=int, default=1,
                   help="rounds of the interleaved decodings; each figure is the median")
    p.add_argument("--peer_set", action="append", default=[], metavar="KEY=VALUE",
                   help="run the reference with this onmt-ref.yaml setting (repeatable; e.g. "
                        "share_embeddings=true: one embedding table, as this project's)")
    add_cpu_flag(p)
    p.add_argument("--skip_peer", action="store_true", help="only this project's half")
    p.add_argument("--skip_ours", action="store_true", help="only the reference's half")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    emulate_cpu(a.cpu, "benchmarks.compare_peer", sys.argv[1:] if argv is None else argv)
    if a.skip_peer and a.skip_ours:
        p.error("--skip_peer and --skip_ours leave nothing to run")
    if not a.skip_peer and not (a.peer_dir and a.peer_work):
        p.error("--peer_dir and --peer_work are required unless --skip_peer")
    if not a.skip_ours and not a.data_dir:
        p.error("--data_dir is required unless --skip_ours")
    if a.decode_rounds < 1:
        p.error("--decode_rounds must be positive")
    if a.steps < 1 or a.warmup < 0 or (a.decode_train_steps is not None
                                       and a.decode_train_steps < 1):
        p.error("--steps and --decode_train_steps must be positive, --warmup not negative")
    if a.forced_length is not None and not 1 <= a.forced_length <= MAX_FORCED:
        p.error(f"--forced_length must lie between 1 and {MAX_FORCED}")
    return run_cli("compare_peer", run, a)


if __name__ == "__main__":
    sys.exit(main())
