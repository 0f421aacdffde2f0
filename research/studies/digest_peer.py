"""The peer (OpenNMT-py copy attention + coverage) on the digests for the digests' table
(research/studies/digest_table.py): its config, its hour of training and its translation of the
scored digests, each through the peer's own commands (its virtual environment, a process of its
own, stopped by its own deadline: pgn_tf.utils.child_process.run_for)."""

from __future__ import annotations

import os
import shutil
import time

import yaml

from pgn_tf.utils import work_dirs
from pgn_tf.utils.child_process import run_for, run_logged
from pgn_tf.utils.errors import UserError

PEER = "OpenNMT-py copy + coverage, same hour"


def peer_yaml(reference: dict, out_dir: str, save_every: int) -> dict:
    """The peer's training config for the digests: its onmt-ref.yaml as bench.sh rewrites it
    with PEER_CORPUS=digests (a 50k vocab, batch 16, a bucket pool of 16,384 examples), with
    no step limit that binds, a checkpoint every `save_every` steps (the last 2 kept) and its
    files under out_dir (relative to the peer's work dir)."""
    cfg = dict(reference)
    cfg.update(src_vocab_size=50_000, tgt_vocab_size=50_000, batch_size=16, bucket_size=16_384,
               train_steps=10_000_000, save_checkpoint_steps=save_every, keep_checkpoint=2,
               report_every=50, save_model=f"{out_dir}/model", save_data=f"{out_dir}/data",
               src_vocab=f"{out_dir}/vocab.src", tgt_vocab=f"{out_dir}/vocab.tgt")
    return cfg


def latest_checkpoint(directory: str, prefix: str = "model_step_") -> tuple[str, int] | None:
    """(path, step) of the highest-step `<prefix>N.pt` in directory, or None."""
    found = []
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        stem = name[len(prefix) : -len(".pt")]
        if name.startswith(prefix) and name.endswith(".pt") and stem.isdigit():
            found.append((int(stem), os.path.join(directory, name)))
    if not found:
        return None
    step, path = max(found)
    return path, step


def train_and_translate(a, log: str) -> tuple[str, dict]:
    """Trains the peer for a.peer_minutes (a DigestSettings: peer_dir, peer_work,
    peer_save_every, score) and translates the first a.score validation digests with its last
    checkpoint and pgn_tf's search settings; (the translations' file, {"wall_seconds",
    "final_step"} of its training)."""
    if not (a.peer_dir and a.peer_work):
        raise SystemExit("the peer stage needs --peer_dir and --peer_work (or --skip_peer)")
    from pgn_tf import config as config_lib

    peer_work = os.path.abspath(a.peer_work)
    try:
        work_dirs.claim(peer_work, "digests")
    except UserError as e:
        raise SystemExit(f"--peer_work: {e}") from None
    env = dict(os.environ, PEER_CORPUS="digests", OMP_NUM_THREADS=str(os.cpu_count()))
    run_logged(["bash", os.path.join(a.peer_dir, "setup_onmt.sh"), peer_work], log, env=env)
    hour = os.path.join(peer_work, "hour")
    shutil.rmtree(hour, ignore_errors=True)
    os.makedirs(hour)
    with open(os.path.join(a.peer_dir, "onmt-ref.yaml")) as f:
        reference = yaml.safe_load(f)
    config = os.path.join(hour, "train.yaml")
    with open(config, "w") as f:
        yaml.safe_dump(peer_yaml(reference, "hour", a.peer_save_every), f)
    bin_dir = os.path.join(peer_work, "venv", "bin")
    run_logged([os.path.join(bin_dir, "onmt_build_vocab"), "-config", config,
                "-n_sample", "-1"], log, cwd=peer_work, env=env)
    t0 = time.time()
    run_for([os.path.join(bin_dir, "onmt_train"), "-config", config],
            60 * a.peer_minutes, log, cwd=peer_work, env=env)
    found = latest_checkpoint(hour)
    if found is None:
        raise SystemExit(f"the peer saved no checkpoint in {a.peer_minutes} minutes (every "
                         f"{a.peer_save_every} steps); see {log}")
    checkpoint, step = found
    seconds = os.path.getmtime(checkpoint) - t0  # when its last checkpoint was written
    src = os.path.join(hour, "valid.src")
    with open(os.path.join(peer_work, "data", "valid.src")) as f_in, open(src, "w") as f_out:
        f_out.writelines(line for _, line in zip(range(a.score), f_in))
    dc = config_lib.resolve("digest_coverage").decode  # the same search as pgn_tf's rows
    pred = os.path.join(hour, "pred.txt")
    run_logged(
        [os.path.join(bin_dir, "onmt_translate"), "-model", checkpoint, "-src", src,
         "-output", pred, "-beam_size", str(dc.beam_size), "-batch_size", "16",
         "-min_length", str(dc.min_dec_steps), "-max_length", str(dc.max_dec_steps),
         "-gpu", "-1"], log, cwd=peer_work, env=env)
    return pred, {"wall_seconds": seconds, "final_step": step}
