# bash ab_threads.sh REPO LOG_DIR: tests/test_train.py before (TF_NUM_INTRAOP_THREADS=0) and after (the conftest default), in the order before, after, after, before
cd "$1"  # the repository
for side in before after after before; do
  if [ $side = before ]; then export TF_NUM_INTRAOP_THREADS=0; else unset TF_NUM_INTRAOP_THREADS; fi
  s=$(date +%s.%N)
  python -m pytest -q -p no:cacheprovider tests/test_train.py > "$2"/ab_threads_$side.log 2>&1
  rc=$?
  e=$(date +%s.%N)
  echo "$side rc=$rc $(python -c "print(round($e-$s,1))") s $(tail -1 "$2"/ab_threads_$side.log)"
done
