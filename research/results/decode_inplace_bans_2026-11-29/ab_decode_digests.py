"""`../decode_memory_2026-11-29/ab_decode.py` at the digests' sizes (See et al.'s lengths): the
first ARTICLES validation digests, beam 4, batch 64, forced to 100 tokens, decoded by a
`reference_onmt_digests` model, before and after, ABBA, each run a fresh process:

    python ab_decode_digests.py BEFORE AFTER MODEL_DIR VALIDATION_JSONL_GZ OUT_DIR ROUNDS ARTICLES
"""

import importlib.util
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "ab_decode", os.path.join(HERE, "..", "decode_memory_2026-11-29", "ab_decode.py"))
ab_decode = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab_decode)

articles = int(sys.argv.pop(7))
for old, new in (("max_steps=30, min_steps=30", "max_steps=100, min_steps=100"),
                 ('config_lib.resolve("reference_onmt", [])',
                  'config_lib.resolve("reference_onmt_digests", [])'),
                 ("arts = [e.article for e in dataset.read_split(data, None, None)]",
                  f"arts = [e.article for e in dataset.read_split(data, None, None)][:{articles}]")):
    assert old in ab_decode.CHILD, old
    ab_decode.CHILD = ab_decode.CHILD.replace(old, new)

if __name__ == "__main__":
    ab_decode.main()
