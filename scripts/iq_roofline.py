#!/usr/bin/env python3
"""The i-quant CUDA kernels' work a block, counted from their sm_90 SASS (no
GPU needed): docs/performance.md's table "CUDA i-quants: the work a block".

    scripts/iq_roofline.py [OLD_REV]     (default 1f177a3: block_dot_kernel)

Compiles OLD_REV's kernels_cuda/matmul.cu (its block_dot_kernel on the
i-quants) and the work tree's kernels_cuda/matmul_iq.cu with nvcc for
sm_90, disassembles them (cuobjdump: the CUDA toolkit's, or pip's
nvidia-cuda-cuobjdump), and takes each kernel's per-block loop at one
token. Bounds, in GB/s of weights on 132 SMs at 1.98 GHz (H100 SXM and
H200 alike): integer ops (ALU, IMAD, IDP) at 64 a SM a clock, instructions
at 128, and L1/shared wavefronts at one a clock (a global load: one per
128-byte line it touches; a shared one: its bank-conflict passes, the grid
gathers' simulated)."""
import collections
import glob
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
OLD_REV = sys.argv[1] if len(sys.argv) > 1 else "1f177a3"
SMS, CLK, HBM = 132, 1.98e9, {"H100": 3350, "H200": 4800}
# name, decoder, bytes a block, grid rows, grid row bytes
TYPES = [("IQ2_XXS", "Iq2xxs", 66, 256, 8), ("IQ2_XS", "Iq2xs", 74, 512, 8), ("IQ2_S", "Iq2s", 82, 1024, 8),
         ("IQ3_XXS", "Iq3xxs", 98, 256, 4), ("IQ3_S", "Iq3s", 110, 512, 4), ("IQ1_S", "Iq1s", 50, 2048, 8),
         ("IQ1_M", "Iq1m", 56, 2048, 8), ("IQ4_XS", "Iq4xs", 136, 0, 0)]


def cuobjdump():
    found = shutil.which("cuobjdump") or next(iter(glob.glob(
        str(pathlib.Path(sys.prefix) / "lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump"))), None)
    if not found:
        sys.exit("no cuobjdump: pip install nvidia-cuda-cuobjdump")
    return found


def sass(tree, source, out):
    cubin = out.with_suffix(".cubin")
    subprocess.run(["nvcc", "-O3", "-DNDEBUG", "-arch=sm_90", "-cubin", "--expt-relaxed-constexpr", "--fmad=false",
                    "-std=c++20", "-DTANDEM_HAVE_CUDA=1", f"-I{tree}", "-o", str(cubin), str(tree / source)],
                   check=True)
    return subprocess.run([cuobjdump(), "-sass", str(cubin)], check=True, capture_output=True, text=True).stdout


def functions(text):
    name, body = None, []
    for line in text.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            if name:
                yield name, body
            name, body = m.group(1), []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and name:
            body.append((int(m.group(1), 16), m.group(2).strip()))
    if name:
        yield name, body


def loop(text, pattern):
    """The biggest loop's instructions, with inner loops that hold dp4a run
    8 times (IQ1_S's lane loop in block_dot_kernel)."""
    for name, body in functions(text):
        if not re.search(pattern, name):
            continue
        loops = []
        for addr, ins in body:
            t = re.search(r"BRA\s+(0x[0-9a-f]+)", ins)
            if t and int(t.group(1), 16) < addr:
                loops.append((int(t.group(1), 16), addr))
        loops.sort(key=lambda x: x[1] - x[0], reverse=True)
        lo, hi = loops[0]
        ins = [i for a, i in body if lo <= a <= hi]
        for a0, b0 in loops[1:]:
            inner = [i for a, i in body if a0 <= a <= b0]
            if lo <= a0 and b0 <= hi and any("IDP" in i for i in inner):
                ins += inner * 7
        return ins
    sys.exit(f"no kernel matches {pattern}")


def kind(ins):
    op = re.sub(r"^@!?U?P\w+\s+", "", ins).split()[0]
    base = op.split(".")[0]
    if base in ("LDG", "LDS", "STS", "SHFL"):
        return op
    if base in ("IDP", "IMAD", "IMUL"):
        return "FMA-pipe integer"
    if base in ("FFMA", "FMUL", "FADD", "HADD2", "HFMA2", "I2F", "I2FP", "F2I", "F2F", "MUFU"):
        return "float"
    if base in ("BRA", "EXIT", "BSSY", "BSYNC", "BAR", "NOP", "WARPSYNC"):
        return "control"
    if base.startswith("U") or base in ("MOV", "S2R", "S2UR", "CS2R", "LDC", "R2UR"):
        return "move"
    return "ALU integer"


def bank_passes(n, width, trials=4000):
    """Shared-memory passes of a warp's 32 random grid rows (two half-warp
    passes for 8-byte rows): the most distinct words any bank serves."""
    total = 0
    for _ in range(trials):
        idx = [random.randrange(n) for _ in range(32)]
        for part in ([idx[:16], idx[16:]] if width == 8 else [idx]):
            banks = collections.defaultdict(set)
            for i in part:
                for w in range(width // 4):
                    banks[(i * width // 4 + w) % 32].add(i * width // 4 + w)
            total += max(len(s) for s in banks.values())
    return total / trials


def lines(n, width, trials=4000):
    return sum(len({random.randrange(n) * width // 128 for _ in range(32)}) for _ in range(trials)) / trials


def old_weight_lines(b):
    """Lines a load instruction of block_dot_kernel touches: 4 rows of 8
    blocks b bytes apart."""
    return 4 * sum(len({(off + b * j) // 128 for j in range(8)}) for off in range(0, 128, 2)) / 64


def new_copy_lines(b):
    """Lines one 64-byte copy instruction of the staged 8-row tile touches."""
    w, total, n = b // 2, 0, 0
    for start in range(0, 8 * w, 32):
        for base in range(0, 128, 2):
            total += len({(e // w, (base + 2 * (e % w)) // 128) for e in range(start, min(start + 32, 8 * w))})
            n += 1
    return total / n


def main():
    random.seed(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        old_tree = tmp / "old"
        old_tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_REV], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old_tree)], input=archive, check=True)
        old = sass(old_tree, "kernels_cuda/matmul.cu", tmp / "old")
        new = sass(ROOT, "kernels_cuda/matmul_iq.cu", tmp / "new")
    print("| type (bytes a block) | instructions a block | integer ops a block (a byte) | L1 + shared wavefronts a block"
          " | integer bound | issue bound | L1/shared bound | least: share of H100, of H200 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, dec, b, grid_rows, width in TYPES:
        ins_old = loop(old, rf"block_dot_kernel.*IqLanesOrder.*{dec}ELNS.*ELi1EEEv")
        ins_new = loop(new, rf"iq_dot_kernel.*IqLanesOrder.*{dec}ELNS.*ELi1EEEv")
        k_old = collections.Counter(kind(i) for i in ins_old)
        k_new = collections.Counter(kind(i) for i in ins_new)
        # block_dot_kernel: one thread a block, a load instruction over 32
        # blocks; activations a byte at a time (256, over 8 blocks' lines).
        act, grid = 257, (k_old["LDG.E.64.CONSTANT"] if width == 8 else 64 if width == 4 else 0)
        table = 256 if name == "IQ4_XS" else 0
        ldg = sum(v for k, v in k_old.items() if k.startswith("LDG"))
        shared = sum(v for k, v in k_old.items() if k.startswith(("LDS", "STS")))
        wf_old = ((ldg - act - grid - table) * old_weight_lines(b) + act * 8 + grid * (lines(grid_rows, width) if width else 0)
                  + table + shared) / 32
        # iq_dot_kernel: four threads a block, an instruction over 8 blocks.
        copies = -(-8 * (b // 2) // 32)
        grid_lds = (8 if width == 8 else 16) if width else 0
        lds = sum(v for k, v in k_new.items() if k.startswith("LDS"))
        ldg = sum(v for k, v in k_new.items() if k.startswith("LDG"))
        wf_new = (copies * new_copy_lines(b) + copies + (lds - grid_lds) + grid_lds * (bank_passes(grid_rows, width) if width else 0)
                  + (ldg - copies) + k_new["SHFL.BFLY"]) / 8
        rows = []
        for ins, k, wf, threads in ((ins_old, k_old, wf_old, 1), (ins_new, k_new, wf_new, 4)):
            total = threads * len(ins)
            ints = threads * (k["ALU integer"] + k["FMA-pipe integer"])
            bounds = {"integer": b / (ints / 64) * SMS * CLK / 1e9, "issue": b / (total / 128) * SMS * CLK / 1e9,
                      "L1/shared": b / wf * SMS * CLK / 1e9}
            rows.append((total, ints, wf, bounds))
        (to, io, wo, bo), (tn, inn, wn, bn) = rows
        least = [min(x.items(), key=lambda kv: kv[1]) for x in (bo, bn)]
        share = ", ".join(f"{100 * least[0][1] / h:.0f}% -> {100 * least[1][1] / h:.0f}%" for h in HBM.values())
        print(f"| {name} ({b}) | {to} -> {tn} | {io} ({io / b:.1f}) -> {inn} ({inn / b:.1f}) | {wo:.0f} -> {wn:.1f} | "
              + " | ".join(f"{bo[n]:.0f} -> {bn[n]:.0f} GB/s" for n in ("integer", "issue", "L1/shared"))
              + f" | {least[0][1]:.0f} -> {least[1][1]:.0f} GB/s ({least[0][0]} -> {least[1][0]}): {share} |")


if __name__ == "__main__":
    main()
