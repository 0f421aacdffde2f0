#!/bin/bash
# The issue's target runs, one after the other, alone on the machine.
cd "$(dirname "$0")/../../.."
R=research/results/door_2026-12-02
E=runs/quickstart/export/pgn
filter() { grep -v "^I0000\|^W0000\|cuda\|oneDNN custom\|rebuild TensorFlow\|AVX512_VNNI\|absl::InitializeLog"; }
echo "start $(date -u +%FT%TZ) $(git rev-parse --short HEAD)" > $R/commands.txt
run() { name=$1; shift; echo "$(date -u +%T) $name: python -m $*" >> $R/commands.txt; python -m "$@" 2>&1 | filter > $R/$name.txt; echo "$(date -u +%T) $name rc=${PIPESTATUS[0]}" >> $R/commands.txt; }
run stalled_grpc benchmarks.stalled_grpc --model_base_path $E --streams 1000 --connections 10 --clients 16 --alone_seconds 60 --attack_seconds 300
run trickle_rest benchmarks.trickle_rest --model_base_path $E --connections 2000 --sources 20 --clients 16 --interval 10 --alone_seconds 60 --attack_seconds 300
run soak benchmarks.soak --model_base_path $E --minutes 30 --tls --stalled_streams 1000 --stalled_connections 10 --trickle 2000 --trickle_sources 20 --push_every 30
echo "$(date -u +%T) alone part done" >> $R/commands.txt
( run fuzz_grpc_wire tools.fuzz.fuzz_decoders --target grpc_wire --runs 1000000 --seed 1 --out runs/fuzz_door/grpc_wire ) &
( run fuzz_http tools.fuzz.fuzz_decoders --target http --runs 1000000 --seed 1 --out runs/fuzz_door/http
  run fuzz_model tools.fuzz.fuzz_decoders --target model --runs 100000 --seed 1 --out runs/fuzz_door/model
  echo "$(date -u +%T) lane B done" >> $R/commands.txt ) &
wait
echo "$(date -u +%T) all done" >> $R/commands.txt
