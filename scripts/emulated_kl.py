#!/usr/bin/env python3
"""Mean KL(all-CPU || emulated GPU) of every shared model's logits, through
the CUDA emulator, at -ngl 0, half the layers and all (the head too):

    scripts/emulated_kl.py [BUILD_DIR] [PROMPT] [STEPS]
        (default build-emu, ../shared/golden/p1.txt, 32)

Each cell is "prompt / decode": the mean over the prompt batch's positions,
then over STEPS greedy decode steps after it. Where the GPU's greedy
tokens part from the CPU's, the cell says at which step (its decode KL is
then over the steps before). BUILD_DIR must be a TANDEM_CUDA_EMULATE=ON
build. Prints a markdown table and the worst cell; a model the CUDA device
does not take gets its error's first line."""
import os
import pathlib
import re
import subprocess
import sys
import tempfile

import array
import math

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build-emu")
PROMPT = pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else ROOT.parent / "shared" / "golden" / "p1.txt")
TANDEM = BUILD / "tools" / "tandem"


STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 32


def inspect(model):
    out = subprocess.run([str(TANDEM), "inspect", "-m", str(model)], capture_output=True, text=True).stdout
    vocab = re.search(r"tokenizer:\s*\n\s*model \S+, pre \S+, (\d+) tokens", out)
    layers = re.search(r"\.block_count = (\d+)", out)
    return (int(vocab.group(1)) if vocab else None), (int(layers.group(1)) if layers else None)


def logits(model, extra, path):
    env = dict(os.environ, TANDEM_CUDA_EMULATE="1")
    cmd = [str(TANDEM), "run", "-m", str(model), "-f", str(PROMPT), "-n", str(STEPS + 1), "--temp", "0",
           "--ignore-eos", "--dump-logits", str(path)] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
    if r.returncode != 0 or "running on the CPU" in r.stderr:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        return None, (lines[-1] if lines else f"exit {r.returncode}")
    a = array.array("f")
    a.frombytes(pathlib.Path(path).read_bytes())
    return a, ""


def argmax(row):
    return max(range(len(row)), key=row.__getitem__)


def log_softmax(row):
    m = max(row)
    z = math.log(sum(math.exp(v - m) for v in row))
    return [v - m - z for v in row]


def kl_rows(p_logits, q_logits, vocab, rows):
    out = []
    for r in rows:
        lp = log_softmax(p_logits[r * vocab:(r + 1) * vocab])
        lq = log_softmax(q_logits[r * vocab:(r + 1) * vocab])
        out.append(sum(math.exp(a) * (a - b) for a, b in zip(lp, lq)))
    return out


def cell(ref, got, vocab):
    """(text, worst KL) of one GPU run against the CPU's."""
    rows = len(ref) // vocab
    prompt_rows = rows - STEPS
    if len(got) != len(ref) or prompt_rows <= 0:
        return f"{len(got) // vocab} rows, not {rows}", 0.0
    prompt = kl_rows(ref, got, vocab, range(prompt_rows))
    # Row prompt_rows - 1 + k chose decode token k; the steps agree while
    # every earlier choice agreed.
    steps = 0
    while steps < STEPS and argmax(ref[(prompt_rows - 1 + steps) * vocab:(prompt_rows + steps) * vocab]) == \
            argmax(got[(prompt_rows - 1 + steps) * vocab:(prompt_rows + steps) * vocab]):
        steps += 1
    decode = kl_rows(ref, got, vocab, range(prompt_rows, prompt_rows + steps)) if steps else [0.0]
    p, d = sum(prompt) / len(prompt), sum(decode) / len(decode)
    text = f"{p:.1e} / {d:.1e}" + ("" if steps == STEPS else f" (tokens part at step {steps})")
    return text, max(p, d)


def main():
    models = sorted((ROOT.parent / "shared" / "models").glob("*.gguf"))
    print("| model | ngl 0 | half | all layers |\n| --- | --- | --- | --- |")
    worst = (0.0, "")
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            vocab, layers = inspect(m)
            ref, why = logits(m, [], pathlib.Path(tmp) / "cpu.bin")
            if ref is None or vocab is None:
                print(f"| {m.stem} | not run on the CPU: {why[:100]} | | |", flush=True)
                continue
            cells = []
            for name, ngl in (("ngl 0", 0), ("half", (layers or 2) // 2), ("all", 999)):
                got, why = logits(m, ["--device", "cuda0", "--vram", "1GiB", "-ngl", str(ngl)],
                                  pathlib.Path(tmp) / "gpu.bin")
                if got is None:
                    cells.append(f"not run: {why[:90]}")
                    continue
                text, kl = cell(ref, got, vocab)
                cells.append(text)
                if kl >= worst[0]:
                    worst = (kl, f"{m.stem} {name}")
            print(f"| {m.stem} | " + " | ".join(cells) + " |", flush=True)
    print(f"\nworst: {worst[0]:.2e} ({worst[1]})")


if __name__ == "__main__":
    main()
