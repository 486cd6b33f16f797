#!/usr/bin/env bash
# Writes tests/data/imatrix/: llama-imatrix's outputs that test_imatrix_files
# compares `tandem imatrix` with (--in-file, --output-format dat,
# --show-statistics, --process-output). Needs llama.cpp's llama-imatrix
# (README.md here: LLAMA_IMATRIX=$L/build/bin/llama-imatrix) and the shared
# synth-llama-F16.gguf (SHARED, default ../shared). Run from the repo root;
# nothing in CI runs it.
set -euo pipefail
IMATRIX=${LLAMA_IMATRIX:?set LLAMA_IMATRIX to a llama-imatrix binary}
MODEL=$(realpath "${SHARED:-../shared}/models/synth-llama-F16.gguf")
OUT=tests/data/imatrix
mkdir -p "$OUT"
cd "$OUT"
# Relative names, so the datasets recorded in the files are "calib.txt".
python3 - <<'PY'
words = ["the", "river", "ran", "past", "an", "old", "mill", "where", "children", "played",
         "in", "summer", "and", "farmers", "brought", "grain", "to", "be", "ground", "slowly"]
text = "".join(words[(i * 7 + i // 20) % 20] + (". " if i % 13 == 12 else " ") for i in range(700))
open("calib.txt", "w").write(text.rstrip() + "\n")
PY
run() { "$IMATRIX" -m "$MODEL" -t 2 --no-ppl "$@" > /dev/null 2>&1; }
# Two matrices of the text's chunks 0-1 and 2-3 (64 tokens each), one of each format.
run -f calib.txt -c 64 --chunks 2 -o a.gguf
run -f calib.txt -c 64 --chunk 2 --chunks 2 -o b.dat --output-format dat
# Combined without a text, as GGUF and as .dat.
# (llama-imatrix wants -m even here, and loads nothing from it.)
"$IMATRIX" -m "$MODEL" -c 64 --in-file a.gguf,b.dat -o combined.gguf > /dev/null 2>&1
"$IMATRIX" -m "$MODEL" -c 64 --in-file a.gguf,b.dat -o combined.dat --output-format dat > /dev/null 2>&1
# Chunks 2-3 added to a.gguf's sums; the output head's sums.
run -f calib.txt -c 64 --chunk 2 --chunks 2 --in-file a.gguf -o seeded.gguf
run -f calib.txt -c 64 --chunks 2 --process-output -o process-output.gguf
# The statistics tables (llama-imatrix logs them on stderr). Its logger
# thread loses lines at exit (llama.cpp issue 22142): a preloaded library
# waits 0.3 s at exit so that it writes them all.
SHIM=$(mktemp -d)
printf '#include <unistd.h>\n__attribute__((destructor)) static void wait_for_log(void) { usleep(300000); }\n' \
    > "$SHIM/shim.c"
cc -shared -fPIC -o "$SHIM/shim.so" "$SHIM/shim.c"
for f in combined.gguf b.dat process-output.gguf; do
    LD_PRELOAD="$SHIM/shim.so" "$IMATRIX" -m "$MODEL" -c 64 --in-file "$f" --show-statistics \
        --no-log-prefix --no-log-timestamps 2>&1 >/dev/null | sed -n '/^Computing statistics/,$p' > "$f.stats.txt"
done
rm -r "$SHIM"
ls -l
