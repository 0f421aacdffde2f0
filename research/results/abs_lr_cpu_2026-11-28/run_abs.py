"""Usage: python run_abs.py ENCODER LR SEED PRECISION WORK_DIR (from the repo root).
Train the ABS test's models at a given encoder, lr, seed, precision; print eval losses."""
import json
import os
import sys

from pgn_tf.data import synthetic, tfrecord
from pgn_tf.training.run import train

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
settings = ["model.hidden_dim=32", "model.emb_dim=16", "data.vocab_size=200",
            "data.max_enc_steps=60", "data.max_dec_steps=14", "train.batch_size=32",
            "data.min_count=1", f"train.mixed_precision={prec}", f"train.seed={seed}",
            f"train.learning_rate={lr}", "train.max_steps=80", "train.eval_every=40",
            "train.eval_batches=2", "train.eval_samples=0", "decode.max_dec_steps=14",
            f"model.abs_encoder={enc}"]
# the library call (the first runs went through the train command in-process, same settings)
r = train(md, "rush2015_abs", settings, train_data=root + "/train.article.txt",
          eval_data=c["validation"], progress=False).as_dict()
print("RESULT", enc, lr, seed, prec, r.get("initial_eval_loss"), r.get("eval_loss"), flush=True)
