"""Where one compiled beam-search call peaks, by op: the TensorFlow profiler's memory events
(its XPlane, read with the protobuf TensorFlow ships) for one call on the 64 longest validation
descriptions, beam 4, forced to 30 tokens: the op whose allocation reached the most bytes in use,
and the largest tensors live then (those allocated while the profiler ran). Run from a checkout:

    PYTHONPATH=CHECKOUT python xplane_peak.py MODEL_DIR VALIDATION_JSONL_GZ PROFILE_DIR
"""

import glob
import os
import shutil
import sys

from pgn_tf.utils import onednn

onednn.start()
import tensorflow as tf  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

from pgn_tf.data import dataset  # noqa: E402
from pgn_tf.inference.api import DecodeRequest  # noqa: E402
from pgn_tf.inference.summarizer import Summarizer  # noqa: E402


def profile(model_dir: str, data: str, out: str) -> str:
    ex = sorted(dataset.read_split(data, None, None), key=lambda e: -len(e.article.split()))[:64]
    s = Summarizer.from_model_dir(model_dir, "latest")
    req = DecodeRequest(beam_size=4, max_steps=30, min_steps=30)
    arts = tf.constant([e.article for e in ex])
    s.compiled(arts, req)  # traced and run once before the profiled call
    shutil.rmtree(out, ignore_errors=True)
    tf.profiler.experimental.start(out)
    s.compiled(arts, req)
    tf.profiler.experimental.stop()
    return sorted(glob.glob(os.path.join(out, "**", "*.xplane.pb"), recursive=True))[-1]


def memory_events(plane) -> list:
    names = {k: v.name for k, v in plane.event_metadata.items()}
    stats = {k: v.name for k, v in plane.stat_metadata.items()}
    events = []
    for line in plane.lines:
        for ev in line.events:
            name = names.get(ev.metadata_id, "")
            if name.startswith("Memory"):
                st = {stats.get(s.metadata_id): s.str_value or (
                    s.ref_value and stats.get(s.ref_value)) or s.int64_value or s.uint64_value
                      for s in ev.stats}  # strings are interned: ref_value names them
                events.append((line.timestamp_ns * 1000 + ev.offset_ps, name, st))
    return sorted(events, key=lambda e: e[0])


def main() -> None:
    space = xplane_pb2.XSpace()
    with open(profile(*sys.argv[1:4]), "rb") as f:
        space.ParseFromString(f.read())
    for plane in space.planes:
        events = memory_events(plane)
        if not events:
            continue
        print(plane.name, len(events))
        peak = max(events, key=lambda e: int(e[2].get("bytes_allocated") or 0))
        keys = ("allocator_name", "bytes_allocated", "requested_bytes", "tf_op", "region_type",
                "shape")
        print("max in use at:", peak[1], {k: peak[2].get(k) for k in keys})
        print("-- live big allocations around the peak:")
        live = {}
        for _, name, st in events[: events.index(peak) + 1]:
            if name == "MemoryAllocation":
                live[st.get("addr")] = st
            elif name == "MemoryDeallocation":
                live.pop(st.get("addr"), None)
        for st in sorted(live.values(), key=lambda s: -int(s.get("requested_bytes") or 0))[:15]:
            print(int(st.get("requested_bytes") or 0) >> 20, "MiB", st.get("tf_op"),
                  st.get("shape"), st.get("region_type"))


if __name__ == "__main__":
    main()
