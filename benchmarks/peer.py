"""The reference system's half of benchmarks.compare_peer: running OpenNMT-py's bench.sh (from
the peer directory) and its onmt_translate, and reading their figures from their output.
"""

from __future__ import annotations

import os
import re
import shutil
import time

import yaml

from benchmarks.peak_rss import run_watched
from pgn_tf.utils.errors import UserError

# The decoding both systems are timed on (bench.sh: -beam_size 4 -batch_size 64 -max_length 30,
# 100 with PEER_CORPUS=digests).
BEAM, BATCH = 4, 64
# The lines of bench.sh's output: (what the line looks like, its pattern).
PEER_LINES = {
    "training": ("peer training: N source tokens/s, S s/step (steps a-b)", re.compile(
        r"peer training: (?P<src_tokens_per_sec>[\d.]+) source tokens/s, "
        r"(?P<sec_per_step>[\d.]+) s/step \(steps (?P<first>\d+)-(?P<last>\d+)\)")),
    "parameters": ("* number of parameters: N (from its training log)",
                   re.compile(r"number of parameters:\s*(?P<params>[\d,]+)")),
    "decoding": ("peer decoding: N articles in T s = R articles/s", re.compile(
        r"peer decoding: (?P<articles>\d+) articles in (?P<seconds>[\d.]+) s = "
        r"(?P<articles_per_sec>[\d.]+) articles/s")),
}
# OpenNMT-py options --peer_set may add to the reference's yaml (any key already in it may be
# changed): share_embeddings ties the encoder's and decoder's embedding tables, as this
# project's one table (the reference keeps two, 2.56M parameters more at a 20k vocabulary).
PEER_KEYS = frozenset({"share_embeddings"})
# Which lines each mode of bench.sh prints.
PEER_MODES = {"train": ("training", "parameters"), "decode": ("decoding",),
              "both": ("training", "parameters", "decoding")}

# The model bench.sh's train mode leaves (steps_yaml 300: save_checkpoint_steps 300, save_model
# run/model), which --forced_length decodes, and how its translation time is printed.
PEER_TRAIN_STEPS = 300
# The model bench.sh's decode mode trains and decodes.
PEER_DECODE_STEPS = 1500
PEER_TIME = re.compile(r"Total translation time \(s\): ([0-9.]+)")


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def parse_peer(output: str, mode: str = "both") -> dict:
    """The figures in bench.sh's output: {train_src_tokens_per_sec, train_sec_per_step,
    train_steps "a-b", params} for mode train, {decode_articles, decode_seconds,
    decode_articles_per_sec} for decode, all of them for both. Raises UserError naming the
    lines that are missing, with the output's last lines."""
    found = {name: PEER_LINES[name][1].search(output) for name in PEER_MODES[mode]}
    missing = [f"'{PEER_LINES[name][0]}'" for name, m in found.items() if m is None]
    if missing:
        raise UserError(f"the reference's bench.sh printed no {' and no '.join(missing)} "
                        f"line; the last lines of its output:\n{tail(output)}")
    out: dict = {}
    if "training" in found:
        m = found["training"]
        out.update(train_src_tokens_per_sec=float(m["src_tokens_per_sec"]),
                   train_sec_per_step=float(m["sec_per_step"]),
                   train_steps=f"{m['first']}-{m['last']}")
    if "parameters" in found:
        out["params"] = int(found["parameters"]["params"].replace(",", ""))
    if "decoding" in found:
        m = found["decoding"]
        out.update(decode_articles=int(m["articles"]), decode_seconds=float(m["seconds"]),
                   decode_articles_per_sec=float(m["articles_per_sec"]))
    return out


def peer_batch_size(peer_dir: str, peer_work: str | None = None) -> int | None:
    """The batch size of the yaml bench.sh trained with, when it counts sentences (examples),
    else None: PEER_WORK/run-300.yaml, which bench.sh writes from onmt-ref.yaml with the
    corpus' changes (PEER_CORPUS=digests halves the batch to 16), or onmt-ref.yaml itself
    where bench.sh left none."""
    path = os.path.join(peer_work or "", "run-300.yaml")
    if not (peer_work and os.path.exists(path)):
        path = os.path.join(peer_dir, "onmt-ref.yaml")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        ref = yaml.safe_load(f) or {}
    if ref.get("batch_type", "sents") != "sents" or "batch_size" not in ref:
        return None
    return int(ref["batch_size"])


def peer_variant(peer_dir: str, settings: list[str], where: str) -> str:
    """A copy of the peer directory in `where` whose onmt-ref.yaml has the KEY=VALUE settings
    (YAML values: share_embeddings=true) -> the copy's path, for run_peer. bench.sh and
    setup_onmt.sh are copied as they are; setup_onmt.sh reads the corpus from the peer
    directory's parent (its data/), which the copy's parent links to. A key the reference's
    yaml does not have is refused unless it is one of OpenNMT-py's options that this
    comparison is known to need (PEER_KEYS): a typo would otherwise run the reference as is
    and label it a variant."""
    with open(os.path.join(peer_dir, "onmt-ref.yaml")) as f:
        ref = yaml.safe_load(f) or {}
    for text in settings:
        key, sep, value = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--peer_set {text!r}: expected KEY=VALUE, e.g. share_embeddings=true")
        if key not in ref and key not in PEER_KEYS:
            raise UserError(f"--peer_set {text!r}: {key} is neither in the reference's "
                            f"onmt-ref.yaml nor one of {', '.join(sorted(PEER_KEYS))}")
        ref[key] = yaml.safe_load(value)
    if ref.get("share_embeddings") and not ref.get("share_vocab"):
        raise UserError("--peer_set share_embeddings=true needs share_vocab: true (OpenNMT-py)")
    copy = os.path.join(where, "peer")
    os.makedirs(copy, exist_ok=True)
    for name in ("bench.sh", "setup_onmt.sh"):
        shutil.copy2(os.path.join(peer_dir, name), copy)
    with open(os.path.join(copy, "onmt-ref.yaml"), "w") as f:
        yaml.safe_dump(ref, f, sort_keys=False)
    data = os.path.join(where, "data")
    if not os.path.lexists(data):
        os.symlink(os.path.join(os.path.dirname(os.path.abspath(peer_dir)), "data"), data)
    return copy


def mean_tokens(path: str) -> float | None:
    """Mean whitespace tokens a line of a file of decoded summaries (None without the file)."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        counts = [len(line.split()) for line in f]
    return round(sum(counts) / len(counts), 2) if counts else None


def run_peer(peer_dir: str, peer_work: str, mode: str = "both",
             corpus: str = "descriptions") -> dict:
    """Runs `PEER_CORPUS=corpus bench.sh PEER_WORK mode`, echoing its output, and returns its
    parsed figures with the peak RSS of its training and decoding processes."""
    bench = os.path.join(peer_dir, "bench.sh")
    print(f"== the reference: PEER_CORPUS={corpus} bash {bench} {peer_work} {mode}", flush=True)
    output, returncode, peaks = run_watched(["bash", bench, peer_work, mode],
                                            env=dict(os.environ, PEER_CORPUS=corpus))
    if returncode:
        raise UserError(f"{bench} exited with status {returncode}; the last lines of its "
                        f"output:\n{tail(output)}")
    figures = parse_peer(output, mode)
    batch = peer_batch_size(peer_dir, peer_work)
    if batch and "train_sec_per_step" in figures:
        figures["train_examples_per_sec"] = round(batch / figures["train_sec_per_step"], 1)
    # only a decoding run's output: a train-mode run leaves an earlier run's file where it was
    tokens = mean_tokens(os.path.join(peer_work, "run", "valid.pred.txt"))
    if tokens is not None and "decoding" in PEER_MODES[mode]:
        figures["decode_mean_tokens"] = tokens
    for phase, key in (("training", "train_peak_rss_mib"), ("decoding", "decode_peak_rss_mib")):
        if phase in peaks:
            figures[key] = peaks[phase]
    return figures


def peer_forced_decoding(peer_work: str, length: int, steps: int = PEER_TRAIN_STEPS) -> dict:
    """The peer's model of `steps` steps (bench.sh's train mode leaves it) decoding every
    article of PEER_WORK/data/valid.src to exactly `length` tokens, with bench.sh's decoding
    flags (beam BEAM, batch BATCH, CPU) plus -min_length and -max_length; timed as bench.sh
    times it (the translation time onmt_translate reports). Returns the decode_* figures and
    the peak RSS of onmt_translate."""
    model = os.path.join(peer_work, "run", f"model_step_{steps}.pt")
    src = os.path.join(peer_work, "data", "valid.src")
    for path in (model, src):
        if not os.path.isfile(path):
            raise UserError(f"{path} does not exist: `bench.sh {peer_work} train` makes it")
    translate = os.path.join(peer_work, "venv", "bin", "onmt_translate")
    pred = os.path.join(peer_work, "run", f"valid.forced{length}.pred.txt")
    cmd = [translate, "-model", model, "-src", src, "-output", pred, "-beam_size", str(BEAM),
           "-batch_size", str(BATCH), "-min_length", str(length), "-max_length", str(length),
           "-gpu", "-1", "-report_time"]
    print(f"== the reference decoding, forced to {length} tokens: {' '.join(cmd)}", flush=True)
    t0 = time.time()
    output, returncode, peaks = run_watched(
        cmd, cwd=peer_work, env=dict(os.environ, OMP_NUM_THREADS=str(os.cpu_count())))
    wall = time.time() - t0
    found = PEER_TIME.search(output)
    if returncode or not found:
        raise UserError(f"the reference's onmt_translate exited with status {returncode}"
                        f"{'' if found else ', printing no translation time'}; the last lines "
                        f"of its output:\n{tail(output)}")
    with open(src, encoding="utf-8") as f:
        articles = sum(1 for _ in f)
    seconds = float(found.group(1))
    print(f"   {articles} articles in {seconds:.1f} s = {articles / seconds:.2f} articles/s "
          f"(translation time; {wall:.1f} s wall with start-up)", flush=True)
    figures = {"decode_articles": articles, "decode_seconds": seconds,
               "decode_articles_per_sec": round(articles / seconds, 2),
               "decode_mean_tokens": mean_tokens(pred)}
    if "decoding" in peaks:
        figures["decode_peak_rss_mib"] = peaks["decoding"]
    return figures
