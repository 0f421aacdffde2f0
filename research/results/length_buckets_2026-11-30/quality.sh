#!/bin/bash
# reference_onmt trained 1,200 steps from nothing, the buckets it had when measured (n0: 4 of
# article length x T/4, T/2, T, stated in full) against 10 x 10 (n10),
# two seeds; then each model decodes and scores every validation article; run from a checkout of the
# commit measured: quality.sh TRAIN_DATA VALIDATION_DATA OUT_DIR. Kept in quality/: each
# training log's [pgn_tf] lines (train_*.log), each evaluation's metrics line (metrics_*.json)
# and decoded.jsonl (decoded_*.jsonl.gz).
train=$1; valid=$2; out=$3
for seed in 1234 99; do for n in 0 10; do
  d=$out/s${seed}_n${n}
  if [ $n = 0 ]; then
    sets="--set data.buckets_per_length=0 --set data.bucket_by_summary_length=true"; else
    sets="--set data.bucket_by_summary_length=false --set data.buckets_per_length=$n"; fi
  python -m pgn_tf.train --config reference_onmt --train_data "$train" --eval_data "$valid" \
    --model_dir "$d" --quiet --set train.max_steps=1200 --set train.max_minutes=0 \
    --set train.eval_every=600 --set train.eval_batches=100 --set train.checkpoint_every=600 \
    --set train.seed=$seed $sets > "$d.log" 2>&1
done; done
for r in s1234_n0 s1234_n10 s99_n0 s99_n10; do
  python -m pgn_tf.evaluate --model_dir "$out/$r" --data "$valid" --output_dir "$out/eval_$r" \
    --quiet > "$out/eval_$r.log" 2>&1
done
