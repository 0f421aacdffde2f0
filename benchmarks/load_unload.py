"""Memory of loading and dropping one SavedModel version again and again, as a server swapping
versions does: RSS and live tf.function count after each drop (and RSS after glibc's
malloc_trim, which hands freed pages back), then a JSON line.

    python -m benchmarks.load_unload --saved_model runs/soak_export/pgn/1 --times 8
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import sys

import tensorflow as tf

from benchmarks.common import emit
from pgn_tf.utils import procfs


def rss_mb() -> float:
    return procfs.memory_mb().get("rss_mb", float("nan"))


def live_functions() -> int:
    return sum(type(o).__name__ == "AtomicFunction" for o in gc.get_objects())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--saved_model", required=True, help="a version dir")
    p.add_argument("--times", type=int, default=8)
    args = p.parse_args(argv)
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except OSError:
        trim = None
    rows = []
    for i in range(args.times):
        loaded = tf.saved_model.load(args.saved_model)
        loaded.signatures["serving_default"](articles=tf.constant(["a b c . d e f ."]))
        del loaded
        gc.collect()
        row = {"load": i + 1, "rss_mb": rss_mb(), "live_functions": live_functions()}
        if trim is not None:
            trim(0)
            row["rss_after_trim_mb"] = rss_mb()
        rows.append(row)
        print(row, flush=True)
    first, last = rows[0], rows[-1]
    key = "rss_after_trim_mb" if trim is not None else "rss_mb"
    emit("load_unload", {"times": args.times, "rss_first_mb": first[key], "rss_last_mb": last[key],
                         "mb_per_load": round((last[key] - first[key]) / max(1, args.times - 1), 2),
                         "live_functions_first": first["live_functions"],
                         "live_functions_last": last["live_functions"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
