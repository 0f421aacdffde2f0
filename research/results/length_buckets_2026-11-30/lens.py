"""Article and summary token counts of a JSONL(.gz) split, as the training pipeline tokenizes
and truncates them: python lens.py SPLIT MAX_ENC MAX_DEC OUT.npy"""

import gzip
import json
import sys

import numpy as np
import tensorflow as tf

from pgn_tf.config import DataConfig
from pgn_tf.data.dataset import tokenize_fn

path, max_enc, max_dec, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cfg = DataConfig(max_enc_steps=max_enc, max_dec_steps=max_dec)
with gzip.open(path, "rt") as f:
    recs = [json.loads(line) for line in f]
ds = tf.data.Dataset.from_tensor_slices({"article": [r["article"] for r in recs],
                                         "summary": [r["summary"] for r in recs],
                                         "id": [str(i) for i in range(len(recs))]})
ds = ds.map(tokenize_fn(cfg), num_parallel_calls=2).map(
    lambda d: (tf.size(d["enc_tokens"]), tf.size(d["dec_tokens"]))).batch(4096)
lengths = np.concatenate([np.stack([a.numpy(), s.numpy()], 1) for a, s in ds])
np.save(out, lengths)
print(lengths.shape, "mean", lengths.mean(0), "at the article cap", (lengths[:, 0] == max_enc).mean())
