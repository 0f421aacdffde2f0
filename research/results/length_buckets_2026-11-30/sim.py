"""Padding of training batches under the bucket grid of pgn_tf.data.dataset.bucket_batch, by
simulation over a shuffled epoch: python sim.py LENGTHS.npy MAX_ENC MAX_DEC BATCH. Each line:
article buckets x summary buckets, then (padded / real) for the encoder's positions (B * L_max),
the decoder's (B * T_max) and the attention's (B * L_max * T_max)."""

import sys

import numpy as np

lengths = np.load(sys.argv[1])
max_enc, max_dec, batch = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = np.random.default_rng(0)


def bounds(n, m):
    return sorted({max(1, m * k // n) for k in range(1, n + 1)})


def simulate(enc_bounds, dec_bounds):
    enc_b, dec_b = np.array(enc_bounds), np.array(dec_bounds)
    windows, total, batches = {}, np.zeros(6), 0
    for i in rng.permutation(len(lengths)):
        a, s = lengths[i]
        key = (np.searchsorted(enc_b, a), np.searchsorted(dec_b, s))
        windows.setdefault(key, []).append(i)
        if len(windows[key]) == batch:
            idx = np.array(windows.pop(key))
            ls, ts = lengths[idx, 0], lengths[idx, 1]
            total += [ls.sum(), batch * ls.max(), ts.sum(), batch * ts.max(), (ls * ts).sum(),
                      batch * ls.max() * ts.max()]
            batches += 1
    return batches, total[1] / total[0], total[3] / total[2], total[5] / total[4]


grids = {"4x1 (bucket_by_length)": (bounds(4, max_enc), [max_dec]),
         "4x3 (bucket_by_summary_length: T/4, T/2, T)": (
             bounds(4, max_enc), sorted({max(1, max_dec // 4), max(1, max_dec // 2), max_dec}))}
grids.update({f"{n}x{n} (buckets_per_length={n})": (bounds(n, max_enc), bounds(n, max_dec))
              for n in (6, 8, 10, 12, 16, 20)})
for name, (enc_bounds, dec_bounds) in grids.items():
    b, e, d, at = simulate(enc_bounds, dec_bounds)
    print(f"{name:45s} batches {b:5d}  enc pad {e:.3f}  dec pad {d:.3f}  attn pad {at:.3f}")
