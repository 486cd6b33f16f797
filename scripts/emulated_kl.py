#!/usr/bin/env python3
"""Mean KL(all-CPU || emulated GPU) of the prompt logits of every shared
model, at -ngl 0, 2 and all layers, through the CUDA emulator:

    scripts/emulated_kl.py [BUILD_DIR] [PROMPT]   (default build-emu, ../shared/golden/p1.txt)

BUILD_DIR must be a TANDEM_CUDA_EMULATE=ON build. Prints a markdown table;
a model the CUDA device does not take gets its error's first line."""
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


def n_vocab(model):
    out = subprocess.run([str(TANDEM), "inspect", "-m", str(model)], capture_output=True, text=True).stdout
    m = re.search(r"tokenizer:\s*\n\s*model \S+, pre \S+, (\d+) tokens", out)
    return int(m.group(1)) if m else None


def logits(model, extra, path):
    env = dict(os.environ, TANDEM_CUDA_EMULATE="1")
    cmd = [str(TANDEM), "run", "-m", str(model), "-f", str(PROMPT), "-n", "0", "--dump-logits", str(path)] + extra
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0 or "running on the CPU" in r.stderr:
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        return None, (lines[-1] if lines else f"exit {r.returncode}")
    a = array.array("f")
    a.frombytes(pathlib.Path(path).read_bytes())
    return a, ""


def log_softmax(row):
    m = max(row)
    z = math.log(sum(math.exp(v - m) for v in row))
    return [v - m - z for v in row]


def mean_kl(p_logits, q_logits, vocab):
    rows = len(p_logits) // vocab
    total = 0.0
    for r in range(rows):
        lp = log_softmax(p_logits[r * vocab:(r + 1) * vocab])
        lq = log_softmax(q_logits[r * vocab:(r + 1) * vocab])
        total += sum(math.exp(a) * (a - b) for a, b in zip(lp, lq))
    return total / rows


def main():
    models = sorted((ROOT.parent / "shared" / "models").glob("*.gguf"))
    print("| model | ngl 0 | ngl 2 | all layers |\n| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            vocab = n_vocab(m)
            ref, why = logits(m, [], pathlib.Path(tmp) / "cpu.bin")
            cells = []
            for ngl in ("0", "2", "99"):
                if ref is None or vocab is None:
                    cells.append("cpu run failed")
                    continue
                got, why = logits(m, ["--device", "cuda0", "--vram", "1GiB", "-ngl", ngl], pathlib.Path(tmp) / "gpu.bin")
                cells.append(f"{mean_kl(ref, got, vocab):.2e}" if got is not None and len(got) == len(ref)
                             else f"not run: {why[:90]}")
            print(f"| {m.stem} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
