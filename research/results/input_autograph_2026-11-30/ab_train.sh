# bash ab_train.sh BEFORE_CHECKOUT AFTER_CHECKOUT DATA_DIR: benchmarks.train_throughput of
# reference_onmt (150 steps after 20 warm-up) in each checkout, in the order before, after,
# after, before; one line each.
for side in before after after before; do
  if [ $side = before ]; then d=$1; else d=$2; fi
  cd "$d" || exit 1
  r=$(PYTHONPATH=$d TF_CPP_MIN_LOG_LEVEL=2 python -m benchmarks.train_throughput --config reference_onmt \
      --data "$3"/train.jsonl.gz --steps 150 --warmup 20 2>/dev/null | grep '^{' | tail -1)
  echo "$side $(git rev-parse --short HEAD) $(echo "$r" | python -c 'import json,sys; d=json.loads(sys.stdin.read()); print({k: d.get(k) for k in ("src_tokens_per_sec","sec_per_step","median_sec_per_step","warmup_seconds")})')"
done
