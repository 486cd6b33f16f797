#!/bin/bash
# The decode cost of a JSON-schema grammar (by hand, not run by ctest):
# tandem run on SmolLM2-135M-Instruct, greedy, 256 tokens, one thread, free
# text (--ignore-eos) and the same prompt under a schema that cannot end
# before (minItems 100), in alternating runs; prints each run's generation
# tok/s and its CPU seconds. From the checkout:
#   TANDEM_SMOLLM2_GGUF=... bash tests/serve/grammar_cost.sh   (RUNS=3, N=256)
set -euo pipefail
M=${TANDEM_SMOLLM2_GGUF:?set TANDEM_SMOLLM2_GGUF to the SmolLM2-135M-Instruct GGUF file}
T=${T:-build/tools/tandem}
P=$'<|im_start|>user\nList people as JSON: name, age, city, pets, employed.<|im_end|>\n<|im_start|>assistant\n'
S='{"type":"array","minItems":100,"items":{"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer"},"city":{"type":"string","maxLength":24},"pets":{"type":"array","items":{"enum":["cat","dog","fish"]},"maxItems":3},"employed":{"type":"boolean"}},"required":["name","age","pets","employed"],"additionalProperties":false}}'
N=${N:-256}
for i in $(seq ${RUNS:-3}); do
  /usr/bin/time -f "free    cpu %U+%S s" $T run -m $M -p "$P" --parse-special --temp 0 -n $N -t 1 --no-display-prompt --ignore-eos 2>&1 >/dev/null | grep -E "generation:|cpu"
  /usr/bin/time -f "grammar cpu %U+%S s" $T run -m $M -p "$P" --parse-special --temp 0 -n $N -t 1 --no-display-prompt -j "$S" 2>&1 >/dev/null | grep -E "generation:|cpu"
done
