"""Usage: python run_abs.py ENCODER LR SEED PRECISION WORK_DIR (from the repo root).
Train the ABS test's models at a given encoder, lr, seed, precision; print eval losses."""
import json
import os
import sys

from pgn_tf import train
from pgn_tf.data import synthetic, tfrecord

enc, lr, seed, prec, work = sys.argv[1:6]  # prec "" is float32
root = work + "/corpus"
if not os.path.exists(root + "/done"):
    c = synthetic.write_corpus(root, num_train=400, num_eval=40, seed=0)
    exs = list(tfrecord.read_tfrecords(c["train"]))
    open(root + "/train.article.txt", "w").write("".join(e.article + "\n" for e in exs))
    open(root + "/train.title.txt", "w").write("".join(e.summary.replace("\n", " ") + "\n" for e in exs))
    json.dump(c, open(root + "/done", "w"))
c = json.load(open(root + "/done"))
md = work + f"/m_{enc}_{lr}_{seed}_{prec}_{os.getpid()}"
r = train.run(train.build_parser().parse_args([
    "--model_dir", md, "--config", "rush2015_abs", "--quiet",
    "--train_data", root + "/train.article.txt",
    "--eval_data", c["validation"], "--set", f"model.abs_encoder={enc}",
    "--set", "model.hidden_dim=32", "--set", "model.emb_dim=16",
    "--set", "data.vocab_size=200", "--set", "data.max_enc_steps=60",
    "--set", "data.max_dec_steps=14", "--set", "train.batch_size=32",
    "--set", "data.min_count=1", "--set", f"train.mixed_precision={prec}", "--set", f"train.seed={seed}",
    "--set", f"train.learning_rate={lr}", "--set", "train.max_steps=80",
    "--set", "train.eval_every=40", "--set", "train.eval_batches=2",
    "--set", "train.eval_samples=0", "--set", "decode.max_dec_steps=14"]))
print("RESULT", enc, lr, seed, prec, r.get("initial_eval_loss"), r.get("eval_loss"), flush=True)
