#!/usr/bin/env python3
"""The readings scripts/device-check.sh takes (stdlib only; run from the checkout's root).

  models  MODEL... -- GOLDEN...      are the carried files there? one line; exit 1 naming the missing
  plan    LIST MODEL... -- GOLDEN... which parameterized tests of a `--gtest_list_tests` listing to
                                     leave out: their model is neither carried nor found
  summary JSON LOG STRICT            one stage's counts; with STRICT=1 (a GPU) a skipped Cuda* test fails
  bench   JSONL ERR DEVICE           the bench's rows as table rows; exit 1 if it did not run on DEVICE

Models and golden files are looked for where tests/test_cuda_inputs.h looks.
"""
import json
import os
import re
import sys


def search_dirs(sub):
    dirs = []
    if os.environ.get("TANDEM_SHARED_DIR"):
        dirs.append(os.path.join(os.environ["TANDEM_SHARED_DIR"], sub))
    dirs += [os.path.join("shared", sub), os.path.join("..", "shared", sub)]
    if sub == "models":
        dirs.append(os.path.join("tests", "data"))
    return dirs


def find(sub, name):
    for d in search_dirs(sub):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    return None


def split_lists(args):
    if "--" in args:
        i = args.index("--")
        return args[:i], args[i + 1:]
    return args, []


def mb(n):
    return f"{n / 1e6:.1f} MB"


def cmd_models(args):
    models, golden = split_lists(args)
    missing, total = [], 0
    for sub, names in (("models", models), ("golden", golden)):
        for n in names:
            p = find(sub, n)
            if p:
                total += os.path.getsize(p)
            else:
                missing.append(f"{sub}/{n}")
    if missing:
        print(f"FAILED: missing {', '.join(missing)} (looked in {', '.join(search_dirs('models'))}, "
              "and golden/ beside models/); "
              "run scripts/device-check.sh --stage-models and name shared in carry")
        return 1
    print(f"ok: {len(models)} models, {len(golden)} golden files ({mb(total)})")
    return 0


def needs(suite, param):
    """The shared files a parameterized test reads, from its GetParam()."""
    if not re.match(r"(tiny-llama|synth-)", param):
        return []
    base = param[:-5] if param.endswith(".gguf") else param
    out = [("models", base + ".gguf")]
    if "BatchPath" in suite:
        out += [("golden", base + ".p1.tokens"), ("golden", base + ".p1.logits")]
    return out


def cmd_plan(args):
    listing, rest = args[0], args[1:]
    models, golden = split_lists(rest)
    carried = {("models", m) for m in models} | {("golden", g) for g in golden}
    suite, exclude, left = None, [], {}
    for line in open(listing, errors="replace"):
        line = line.rstrip("\n")
        if not line.strip() or line.startswith("Running main"):
            continue
        if not line.startswith(" "):
            suite = line.split()[0].rstrip(".")
            continue
        m = re.match(r'\s+(\S+)\s+# GetParam\(\) = "(.*)"', line)
        if not m or suite is None:
            continue
        absent = [f for f in needs(suite, m.group(2)) if f not in carried and not find(*f)]
        if absent:
            exclude.append(f"{suite}.{m.group(1)}")
            key = absent[0][1]
            left[key] = left.get(key, 0) + 1
    print("exclude=" + ":".join(exclude))
    print("left_out=" + ", ".join(f"{k} ({n} {'test' if n == 1 else 'tests'})" for k, n in sorted(left.items())))
    return 0


def is_cuda(full):
    return any(part.startswith("Cuda") for part in full.split(".")[0].split("/"))


def reasons(log):
    """The first line gtest printed of why, before each `[  SKIPPED ]` or `[  FAILED  ]` name."""
    found, current, text = {}, None, []
    try:
        lines = open(log, errors="replace").read().splitlines()
    except OSError:
        return found
    for line in lines:
        m = re.match(r"\[ RUN      \] (\S+)", line)
        if m:
            current, text = m.group(1), []
            continue
        m = re.match(r"\[  (?:SKIPPED|FAILED ) \] ([^\s,]+)(?:, where .*)? \(\d+ ms\)$", line)
        if m:
            said = [t.strip() for t in text
                    if t.strip() and t.strip() != "Failed" and not re.search(r": (Skipped|Failure)$", t)]
            found[m.group(1)] = (said[0] if said else "no reason given")[:160]
            current = None
            continue
        if current:
            text.append(line)
    return found


def from_json(path):
    d = json.load(open(path))
    tests = []
    for s in d.get("testsuites", []):
        for t in s.get("testsuite", []):
            if t.get("status") != "RUN":
                continue
            name = f"{t.get('classname', s.get('name'))}.{t.get('name')}"
            if t.get("failures"):
                tests.append((name, "failed"))
            elif t.get("result") == "SKIPPED":
                tests.append((name, "skipped"))
            else:
                tests.append((name, "passed"))
    return tests


def from_log(path):
    """When no JSON came (a crash or a timeout): the log's per-test lines."""
    tests, running = [], None
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return tests, None
    for line in lines:
        m = re.match(r"\[ RUN      \] (\S+)", line)
        if m:
            running = m.group(1)
            continue
        m = re.match(r"\[ {7}OK \] (\S+) \(|\[  FAILED  \] ([^\s,]+)(?:, where .*)? \(\d+ ms\)$|"
                     r"\[  SKIPPED \] (\S+) \(", line)
        if m and running:
            tests.append((running, "passed" if m.group(1) else "failed" if m.group(2) else "skipped"))
            running = None
    return tests, running


def cmd_summary(args):
    path, log, strict = args[0], args[1], args[2] == "1"
    unfinished = None
    try:
        tests = from_json(path)
    except (OSError, ValueError):
        tests, unfinished = from_log(log)
        if unfinished:
            tests.append((unfinished, "failed"))
    count = {k: sum(1 for _, r in tests if r == k) for k in ("passed", "skipped", "failed")}
    counts = f"run {len(tests)}, passed {count['passed']}, " \
             f"skipped {count['skipped']}, failed {count['failed']}"
    notes, bad = [], False
    why = reasons(log)
    failed = [n for n, r in tests if r == "failed" and n != unfinished]
    if failed:
        bad = True
        notes.append("failed: " + "; ".join(f"{n} ({why.get(n, 'see the log')})" for n in failed[:3])
                     + (f"; and {len(failed) - 3} more" if len(failed) > 3 else ""))
    if unfinished:
        notes.append(f"{unfinished} did not finish (a crash or the timeout)")
    skipped = [n for n, r in tests if r == "skipped"]
    gpu_skips = [n for n in skipped if is_cuda(n)] if strict else []
    if gpu_skips:
        bad = True
        notes.append("skipped in a GPU check: " + "; ".join(f"{n} ({why.get(n, 'no reason found')})"
                                                        for n in gpu_skips[:4])
                     + (f"; and {len(gpu_skips) - 4} more" if len(gpu_skips) > 4 else ""))
    elif skipped:
        first = why.get(skipped[0], "")
        notes.append(f"skipped: {len(skipped)}, e.g. {skipped[0]} ({first})")
    if strict and not tests:
        bad = True
        notes.append("no test ran")
    print(("FAILED: " if bad else "ok: ") + counts + "".join("; " + n for n in notes))
    return 1 if bad else 0


def cmd_bench(args):
    path, err, device = args
    rows, bad = [], []
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue
        tps, gbps = r.get("tps_mean"), r.get("gbps")
        meas = f"{tps:.1f} t/s, {gbps:.1f} GB/s" if tps is not None and gbps is not None else \
            f"{tps:.1f} t/s" if tps is not None else "does not fit"
        dev, backend, ngl = r.get("device") or "-", r.get("backend", "?"), r.get("ngl", 0)
        # bench clears the device when it falls back (tools/split.cpp); with layers asked
        # on a device, the backend column says split or gpu, never cpu.
        if dev != device:
            bad.append(f"ngl {ngl} ran on {dev}, not {device}")
        elif ngl and ngl > 0 and backend.split("+")[0] == "cpu":
            bad.append(f"ngl {ngl} has backend {backend}")
        rows.append(f"| bench tiny-llama Q4_K_M ngl {ngl} {r.get('test')}: device {dev}, backend {backend} "
                    f"| {meas} | | |")
    try:
        warn = [w for w in open(err, errors="replace").read().splitlines() if "running on the CPU" in w]
    except OSError:
        warn = []
    if warn:
        bad.insert(0, warn[0].strip())
    bad = list(dict.fromkeys(bad))
    for r in rows:
        print(r)
    if not rows:
        print("FAILED: no rows (see bench.err)" + (": " + bad[0] if bad else ""))
    elif bad:
        print("FAILED: not on " + device + ": " + "; ".join(bad[:3]))
    else:
        print(f"ok: {len(rows)} rows, every one on {device}")
    return 1 if bad or not rows else 0


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    return {"models": cmd_models, "plan": cmd_plan, "summary": cmd_summary, "bench": cmd_bench}[cmd](args)


if __name__ == "__main__":
    sys.exit(main())
