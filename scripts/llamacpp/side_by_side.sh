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
# ROUNDS=N (default 1) measures every type N times, the two programs taking
# turns within each round and the types in turn across rounds, so a slow
# minute of a shared host touches both; each cell is then the best of the N
# (noise only slows a run) with the range after it, and each ratio the
# best over the best with the range of the rounds' own ratios; the
# bandwidth column is then the last round's.
# Not run by CI: it needs a llama.cpp build (see README.md here).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
TANDEM=$BUILD_DIR/tools/tandem
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to the path of llama-bench}
MODELS=${TANDEM_BENCH_DIR:-$HOME/.cache/tandem/bench}
SHAPE=${SHAPE:-llama-1b}
THREADS=${THREADS:-2} PP=${PP:-512} TG=${TG:-128} REPS=${REPS:-3} DEPTH=${DEPTH:-0} CACHE=${CACHE:-f16} ROUNDS=${ROUNDS:-1}
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
declare -A TP TT LP LT BW  # per type: the rounds' rates, space-separated
for t in "${TYPES[@]}"; do
    m="$MODELS/$SHAPE-$t.gguf"
    [ -f "$m" ] || "$TANDEM" synth --shape "$SHAPE" --type "$t" -o "$m" >&2
done
for ((round = 1; round <= ROUNDS; ++round)); do
    for t in "${TYPES[@]}"; do
        m="$MODELS/$SHAPE-$t.gguf"
        read -r tp tt bw < <(tandem_rate "$m")
        read -r lp lt _ < <(llama_rate "$m")
        TP[$t]+="$tp " TT[$t]+="$tt " LP[$t]+="$lp " LT[$t]+="$lt " BW[$t]="$bw"
        [ "$ROUNDS" = 1 ] || echo "round $round $t: Tandem $tp $tt, llama.cpp $lp $lt" >&2
    done
done
for t in "${TYPES[@]}"; do
    awk -v t="$t" -v tp="${TP[$t]}" -v lp="${LP[$t]}" -v tt="${TT[$t]}" -v lt="${LT[$t]}" -v bw="${BW[$t]}" '
    function best(list,   a, n, i, b) { n = split(list, a, " "); b = a[1]; for (i = 2; i <= n; ++i) if (a[i] > b) b = a[i]; return b }
    function cell(list,   a, n, i, lo, hi) {
        n = split(list, a, " "); lo = hi = a[1]
        for (i = 2; i <= n; ++i) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
        return n == 1 ? sprintf("%.1f", a[1]) : sprintf("%.1f (%.1f-%.1f)", hi, lo, hi)
    }
    function ratio(num, den,   a, b, n, i, r, lo, hi, bn, bd) {
        n = split(num, a, " "); split(den, b, " "); bn = best(num); bd = best(den)
        if (bd <= 0) return "0.00x"
        if (n == 1) return sprintf("%.2fx", bn / bd)
        for (i = 1; i <= n; ++i) { r = b[i] > 0 ? a[i] / b[i] : 0; if (i == 1 || r < lo) lo = r; if (i == 1 || r > hi) hi = r }
        return sprintf("%.2fx (%.2f-%.2f)", bn / bd, lo, hi)
    }
    BEGIN { printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", t, cell(tp), cell(lp), ratio(tp, lp), cell(tt), cell(lt), ratio(tt, lt), bw }'
done
