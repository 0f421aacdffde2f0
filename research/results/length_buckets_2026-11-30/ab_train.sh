#!/bin/bash
# One timed train_throughput run of a preset with the buckets it had when measured (n = 0:
# 4 of article length x T/4, T/2, T, stated in full) or n x n equal-width ones; run from a
# checkout of the commit measured, in the order of throughput/rounds.txt (ABBA):
#   ab_train.sh TAG CONFIG TRAIN_DATA n STEPS WARMUP OUT_DIR
# reference_onmt: STEPS 300, WARMUP 100; reference_onmt_digests: 150, 60.
tag=$1; cfgname=$2; data=$3; n=$4; steps=$5; warmup=$6; out=$7
if [ "$n" = 0 ]; then
  sets="--set data.buckets_per_length=0 --set data.bucket_by_summary_length=true"; else
  sets="--set data.bucket_by_summary_length=false --set data.buckets_per_length=$n"; fi
python -m benchmarks.train_throughput --config "$cfgname" --data "$data" --steps "$steps" \
  --warmup "$warmup" $sets 2>/dev/null | tail -1 > "$out/$tag.json"
python - "$out/$tag.json" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
print(sys.argv[1].split("/")[-1], r["config"], r["overrides"], r["src_tokens_per_sec"],
      r["sec_per_step"], r["gflop_per_step_real_tokens"], r["gflop_per_step_padded"],
      r["achieved_gflops_real_tokens"], r["src_tokens_per_step"], r["cpu_flags"], r["tf_onednn"])
P
