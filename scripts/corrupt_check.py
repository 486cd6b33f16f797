#!/usr/bin/env python3
"""Hostile-input check from the command line: corrupts or truncates a GGUF
model at random places and runs `tandem inspect` and `tandem run` on each
copy. Every run must end with exit 0 or 1 (never a signal), and every
failure must print exactly one `tandem:` line.

usage: scripts/corrupt_check.py [TANDEM] [MODEL] [ITERATIONS] [SEED]"""
import os
import random
import subprocess
import sys
import tempfile

tandem = sys.argv[1] if len(sys.argv) > 1 else "build/tools/tandem"
model = sys.argv[2] if len(sys.argv) > 2 else "tests/data/tiny-llama-Q4_K_M.gguf"
iterations = int(sys.argv[3]) if len(sys.argv) > 3 else 300
random.seed(int(sys.argv[4]) if len(sys.argv) > 4 else 1)

src = open(model, "rb").read()
header_end = min(len(src), 1 << 20)  # the metadata of the tiny models lies in the first MiB
counts, bad = {}, 0
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "corrupt.gguf")
    for _ in range(iterations):
        b = bytearray(src)
        mode = random.choice(["flip", "cut", "header"])
        if mode == "cut":
            b = b[: random.randrange(len(b))]
        else:
            limit = header_end if mode == "header" else len(b)
            for _ in range(random.randint(1, 8)):
                b[random.randrange(limit)] = random.randrange(256)
        open(path, "wb").write(b)
        cmd = random.choice([["inspect", path], ["run", "-m", path, "-p", "Hello world", "-n", "2", "--temp", "0"]])
        r = subprocess.run([tandem] + cmd, capture_output=True, timeout=120)
        counts[r.returncode] = counts.get(r.returncode, 0) + 1
        lines = [l for l in r.stderr.decode(errors="replace").splitlines() if l.startswith("tandem:")]
        if r.returncode not in (0, 1) or (r.returncode == 1 and len(lines) != 1):
            bad += 1
            print("BAD", mode, cmd[0], r.returncode, r.stderr.decode(errors="replace")[-300:])
print("exit codes", counts, "bad", bad)
sys.exit(1 if bad else 0)
