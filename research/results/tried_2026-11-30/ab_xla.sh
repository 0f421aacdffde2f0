#!/bin/bash
# Interleaved A/B of the vocabulary product as an XLA cluster (xla_vocab_projection.patch applied
# to a worktree of ec0d46b) against ec0d46b itself, alone on the machine. Each arm runs from its
# own tree, so `python -m` imports that tree's pgn_tf.
#   MAIN=checkout of ec0d46b  XLA=worktree with the patch  MODEL_DIR=reference_onmt trained 300
#   steps (python -m pgn_tf.train --config reference_onmt ... --set train.max_steps=300)
#   DATA=folder with train.jsonl.gz and validation.jsonl.gz (the Debian descriptions)
#   bash ab_xla.sh decode > ab_xla_decode_rounds.txt; bash ab_xla.sh train > ab_xla_train_rounds.txt
set -u
for r in 1 2 3; do
  for arm in main xla; do
    d=$MAIN; [ $arm = xla ] && d=$XLA
    if [ "$1" = decode ]; then
      (cd "$d" && python -m benchmarks.decode_throughput --model_dir "$MODEL_DIR" \
         --data "$DATA/validation.jsonl.gz" --articles 512 --beams 4 --batches 64 \
         --set decode.min_dec_steps=30 --set decode.max_dec_steps=30 --skip_saved_model \
         --passes 2 2>/dev/null | grep '^{' | sed "s/^/$r $arm /")
    else
      (cd "$d" && python -m benchmarks.train_throughput --config reference_onmt \
         --data "$DATA/train.jsonl.gz" --steps 200 --warmup 60 2>/dev/null \
         | grep '^{' | sed "s/^/$r $arm /")
    fi
  done
done
