#!/bin/bash
# Decode at depth, Tandem and llama-bench taking turns: tgN after D tokens
# already in the cache, for each depth given, ROUNDS rounds (default 2).
#   LLAMA_BENCH=/path/to/llama-bench scripts/llamacpp/depth_side_by_side.sh MODEL.gguf 4096 8192
# Prints one CSV row per run (Tandem's `bench -o csv`, llama-bench's -o csv),
# each after the load average at its start. Threads: T (default 2); N: the
# decode length (default 32).
set -euo pipefail
model=${1:?usage: LLAMA_BENCH=... $0 MODEL.gguf DEPTH...}
shift
tandem=${TANDEM:-build/tools/tandem}
llama=${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}
for d in "$@"; do
  for round in $(seq 1 "${ROUNDS:-2}"); do
    echo "== d$d round $round load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$tandem" bench -m "$model" -p 0 -n "${N:-32}" -d "$d" -r 1 -t "${T:-2}" -o csv 2>/dev/null | tail -1 | sed 's/^/tandem,/'
    "$llama" -m "$model" -p 0 -n "${N:-32}" -d "$d" -r 1 -t "${T:-2}" -o csv 2>/dev/null | tail -1 | sed 's/^/llama,/'
  done
done
