#!/usr/bin/env bash
# Tandem against llama.cpp's llama-bench on the same files, one type after
# the other (so both see the same machine state), as a markdown table:
#   LLAMA_BENCH=/path/to/llama-bench scripts/llamacpp/side_by_side.sh [TYPE...]
# Models are synth files of shape $SHAPE (default llama-1b; e.g. moe-small
# for a mixture of experts) made once in $TANDEM_BENCH_DIR
# (default ~/.cache/tandem/bench). Defaults: every CPU weight type, 2
# threads, pp512 and tg128, 3 repetitions (THREADS, PP, TG, REPS override);
# DEPTH=N runs both after N cached tokens (-d), CACHE=q8_0 with that KV
# cache type (llama.cpp then needs its flash attention, -fa 1).
# One SIMD level: TANDEM_CPU=avx2 for Tandem, and LLAMA_BENCH from a llama.cpp
# build with -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# -DGGML_AVX512=OFF (README.md here); TANDEM_CPU=avxvnni (AVX2 with AVX-VNNI,
# Alder Lake and later) against the same build with -DGGML_AVX_VNNI=ON. The
# last column is the read bandwidth
# that `tandem bench --calibrate-each` measured before and after its tg row.
# Not run by CI: it needs a llama.cpp build (see README.md here).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
TANDEM=$BUILD_DIR/tools/tandem
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to the path of llama-bench}
MODELS=${TANDEM_BENCH_DIR:-$HOME/.cache/tandem/bench}
SHAPE=${SHAPE:-llama-1b}
THREADS=${THREADS:-2} PP=${PP:-512} TG=${TG:-128} REPS=${REPS:-3} DEPTH=${DEPTH:-0} CACHE=${CACHE:-f16}
LLAMA_CACHE=(-ctk "$CACHE" -ctv "$CACHE")
[ "$CACHE" = f16 ] || LLAMA_CACHE+=(-fa 1)
AT=""
[ "$DEPTH" = 0 ] || AT=" @ d$DEPTH"
TYPES=("$@")
[ ${#TYPES[@]} -gt 0 ] || TYPES=(Q4_K_M Q4_0 Q8_0 Q6_K Q5_K_M Q3_K_M Q2_K Q4_1 Q5_0 Q5_1)
mkdir -p "$MODELS"

rates() {  # rates KEY < jsonl -> "pp tg bw": the mean t/s field KEY of the prompt and generation
    # rows, and the read bandwidth measured before and after the generation row ("-" if none)
    python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
pp = [r[sys.argv[1]] for r in rows if r.get("n_prompt", 0) > 0]
tg = [r for r in rows if r.get("n_gen", 0) > 0]
bw = "-"
if tg and tg[0].get("cpu_gbps_before"):
    lo, hi = sorted([tg[0]["cpu_gbps_before"], tg[0]["cpu_gbps_after"]])
    bw = f"{lo:.0f}-{hi:.0f}"
print(f"{pp[0] if pp else 0:.1f} {tg[0][sys.argv[1]] if tg else 0:.1f} {bw}")' "$1"
}
tandem_rate() {
    "$TANDEM" bench -m "$1" -p "$PP" -n "$TG" -d "$DEPTH" --cache-type "$CACHE" -r "$REPS" -t "$THREADS" \
        --calibrate-each -o jsonl 2>/dev/null | rates tps_mean
}
llama_rate() {
    "$LLAMA_BENCH" -m "$1" -p "$PP" -n "$TG" -d "$DEPTH" "${LLAMA_CACHE[@]}" -r "$REPS" -t "$THREADS" -o jsonl 2>/dev/null |
        rates avg_ts
}

echo "| type | Tandem pp$PP$AT | llama.cpp pp$PP$AT | ratio | Tandem tg$TG$AT | llama.cpp tg$TG$AT | ratio | read GB/s around Tandem tg |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for t in "${TYPES[@]}"; do
    m="$MODELS/$SHAPE-$t.gguf"
    [ -f "$m" ] || "$TANDEM" synth --shape "$SHAPE" --type "$t" -o "$m" >&2
    read -r tp tt bw < <(tandem_rate "$m")
    read -r lp lt _ < <(llama_rate "$m")
    awk -v t="$t" -v tp="$tp" -v lp="$lp" -v tt="$tt" -v lt="$lt" -v bw="$bw" 'BEGIN {
        printf "| %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %s |\n", t, tp, lp, (lp > 0 ? tp / lp : 0), tt, lt, (lt > 0 ? tt / lt : 0), bw
    }'
done
