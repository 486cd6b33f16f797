#!/usr/bin/env python3
"""Pipeline stages over MPI (`mpirun -np N tandem ... --pipeline`) on one
machine, against one process:

- `tandem run --dump-logits` (prompt and decode logits) on a dense model and
  a mixture of experts from ../shared, with 2 and 3 ranks, over shared
  memory (btl vader) and over TCP (btl tcp), and with each rank's layers on
  its own stand-in device: the same bytes as one process;
- `--prompt-cache` over 2 ranks: the one-process state file, byte for byte;
  one process's state restored into 3 ranks: the one-process logits;
- -ngl auto: each rank plans its own layers on its own devices (its own
  TANDEM_PIPELINE_DEVICE and TANDEM_PIPELINE_VRAM where given), says so,
  and the logits are the one-process bytes; `tandem bench --pipeline` too;
- a rank reading its own copy of the model (TANDEM_PIPELINE_MODEL): the
  same logits; a different file is refused, naming the rank;
- `tandem serve -np 4` over 2 ranks: 4 concurrent completions, each the
  one-process answer;
- a rank killed while serving: mpirun ends the job within 10 s, with a line
  naming the rank and why.

Exit 0: passed; 77: skipped (no mpirun, a build without MPI, or the models
missing: said why); 1: failed.
"""
import concurrent.futures
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
BINARY = os.environ.get("TANDEM_BINARY", "")
SHARED = pathlib.Path(os.environ.get("TANDEM_SHARED_DIR", pathlib.Path(__file__).resolve().parents[3] / "shared"))
MODELS = ["synth-llama-Q8_0", "synth-qwen3moe-Q8_0"]
PROMPT = "Hello world, this is a test of the pipeline stages"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def mpirun(np, btl, args, **kw):
    return [shutil.which("mpirun"), "--oversubscribe", "--mca", "btl", btl, "-np", str(np), BINARY] + args + ["--pipeline"]


def run_logits(cmd, out):
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, errors="replace", timeout=300)
    if r.returncode != 0:
        return None, r.stderr[-2000:]
    return pathlib.Path(out).read_bytes(), r.stdout


def logits_test(tmp):
    for name in MODELS:
        model = SHARED / "models" / f"{name}.gguf"
        base = [ "run", "-m", str(model), "-p", PROMPT, "-n", "6", "--temp", "0", "-t", "1", "-ub", "4"]
        one, text = run_logits([BINARY] + base + ["--dump-logits", f"{tmp}/one.bin"], f"{tmp}/one.bin")
        check(one is not None and len(one) > 0, f"{name}: one process writes its logits")
        for np in (2, 3):
            for btl in ("vader,self", "tcp,self"):
                got, gtext = run_logits(mpirun(np, btl, base + ["--dump-logits", f"{tmp}/p.bin"]), f"{tmp}/p.bin")
                check(got == one and gtext == text,
                      f"{name}: {np} ranks over {btl.split(',')[0]}: prompt and decode logits bit for bit, same text"
                      + ("" if got is not None else f" (failed: {gtext})"))
        # Every rank puts its own layers on its own (stand-in) device, as
        # rank 0's --device and -ngl say, over the whole model's layers.
        got, gtext = run_logits(mpirun(2, "vader,self", base + ["--device", "cpu2", "-ngl", "99", "--dump-logits",
                                                                 f"{tmp}/d.bin"]), f"{tmp}/d.bin")
        check(got == one, f"{name}: 2 ranks, each with its layers on its own cpu2: bit for bit"
              + ("" if got is not None else f" (failed: {gtext})"))


def auto_per_rank_test(tmp):
    """-ngl auto under --pipeline: each rank plans its own layers with its
    own devices. 3.5 MiB of cpu2 holds either half of synth-llama (with the
    head) but not the whole model (4.8 MiB): each rank puts all its layers
    there, where one plan over the whole model would stop at layer 2 and
    leave rank 1's device empty. A rank's own TANDEM_PIPELINE_DEVICE and
    TANDEM_PIPELINE_VRAM (mpirun -x) replace rank 0's --device and --vram
    there. The logits stay the one-process bytes."""
    model = SHARED / "models" / f"{MODELS[0]}.gguf"
    base = ["run", "-m", str(model), "-p", PROMPT, "-n", "4", "--temp", "0", "-t", "1", "-c", "256", "-ub", "4"]
    one, _ = run_logits([BINARY] + base + ["--dump-logits", f"{tmp}/one.bin"], f"{tmp}/one.bin")
    flags = ["--device", "cpu2", "--vram", "3.5M", "-ngl", "auto", "--verbose"]
    cmd = mpirun(2, "vader,self", base + flags + ["--dump-logits", f"{tmp}/a.bin"])
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, errors="replace", timeout=300)
    got = pathlib.Path(f"{tmp}/a.bin").read_bytes() if r.returncode == 0 else None
    check(one is not None and got == one, "-ngl auto over 2 ranks, each planning its own layers: bit for bit"
          + ("" if got is not None else f" (failed: {r.stderr[-2000:]})"))
    lines = [l for l in r.stderr.splitlines() if "auto chose" in l]
    check(any(re.match(r"-ngl auto chose 2 of 2 \(this stage's layers \[0, 2\)", l) for l in lines),
          f"rank 0 plans its own layers [0, 2) and puts both on cpu2: {lines}")
    check(any(re.match(r"pipeline rank 1: -ngl auto chose 3 of 3 \(this stage's layers \[2, 4\) and the head", l)
              and l.endswith("holds blk 2 cpu2, blk 3 cpu2, head cpu2") for l in lines),
          f"rank 1 plans its own layers [2, 4) and the head, and holds them all on its cpu2: {lines}")

    def mpmd(env, out):
        args = base + ["--dump-logits", out, "--pipeline"]
        return [shutil.which("mpirun"), "--oversubscribe", "-np", "1", BINARY] + args + flags + \
               [":", "-np", "1"] + [x for e in env for x in ("-x", e)] + [BINARY] + args + flags
    r = subprocess.run(mpmd(["TANDEM_PIPELINE_DEVICE=cpu3", "TANDEM_PIPELINE_VRAM=2M"], f"{tmp}/b.bin"), env=ENV,
                       capture_output=True, text=True, errors="replace", timeout=300)
    got = pathlib.Path(f"{tmp}/b.bin").read_bytes() if r.returncode == 0 else None
    lines = [l for l in r.stderr.splitlines() if l.startswith("pipeline rank 1:")]
    check(got == one and any("chose 1 of 3" in l and l.endswith("holds blk 2 cpu3, blk 3 cpu, head cpu") for l in lines),
          f"rank 1 with its own device cpu3 of 2 MiB plans layer 2 there; bit for bit: {lines}"
          + ("" if got is not None else f" (failed: {r.stderr[-2000:]})"))
    # A stand-in of rank 1's own without a capacity: auto cannot plan it there.
    args = base + ["--pipeline"]
    cmd = [shutil.which("mpirun"), "--oversubscribe", "-np", "1", BINARY] + args + \
          [":", "-np", "1", "-x", "TANDEM_PIPELINE_DEVICE=cpu2", BINARY] + args
    r = subprocess.run(cmd, env=ENV, capture_output=True, text=True, errors="replace", timeout=120)
    check(r.returncode != 0 and "pipeline rank 1: -ngl auto on cpu2 needs --vram" in r.stderr,
          f"rank 1's own stand-in without a capacity is refused, naming the rank: {r.stderr.strip()[-300:]!r}")


def bench_auto_per_rank_test(tmp):
    """`tandem bench --pipeline` with -ngl auto (its default): each rank
    plans its own layers on its own devices, as run does, and says what it
    holds. 3.5 MiB of cpu2 holds either half of synth-llama but not the
    whole model: one plan over the whole model would stop at layer 3 and
    leave rank 1's last layer and head on the host. An explicit -ngl keeps
    its meaning; two devices per rank share its layers (-ts)."""
    model = SHARED / "models" / f"{MODELS[0]}.gguf"
    base = ["bench", "-m", str(model), "-p", "8", "-n", "4", "-r", "1", "-t", "1", "-o", "json"]

    def bench(flags):
        r = subprocess.run(mpirun(2, "vader,self", base + flags), env=ENV, capture_output=True, text=True,
                           errors="replace", timeout=300)
        rows = json.loads(r.stdout) if r.returncode == 0 else []
        lines = [l.removeprefix(f"tandem: {model.name}: ") for l in r.stderr.splitlines()]
        return r, rows, [l for l in lines if l.startswith("pipeline rank")]

    r, rows, lines = bench(["--device", "cpu2", "--vram", "3.5M"])
    failed = "" if r.returncode == 0 else f" (failed: {r.stderr[-1500:]})"
    check(len(rows) == 2 and all(x["tps_mean"] and x["ngl"] == 2 for x in rows),
          f"bench -ngl auto over 2 ranks: both tests measured, the row's ngl rank 0's count (2){failed}")
    check(any(re.match(r"pipeline rank 0: -ngl auto chose 2 of 2 \(this stage's layers \[0, 2\)", l)
              and l.endswith("holds blk 0 cpu2, blk 1 cpu2") for l in lines)
          and any(re.match(r"pipeline rank 1: -ngl auto chose 3 of 3 \(this stage's layers \[2, 4\) and the head", l)
                  and l.endswith("holds blk 2 cpu2, blk 3 cpu2, head cpu2") for l in lines),
          f"bench: each rank plans its own layers and says what it holds: {lines}")
    r, rows, lines = bench(["--device", "cpu2", "--vram", "3.5M", "-ngl", "3"])
    failed = "" if r.returncode == 0 else f" (failed: {r.stderr[-1500:]})"
    check([x["ngl"] for x in rows] == [3, 3] and not lines,
          f"bench -ngl 3 over 2 ranks: the count as given, no per-rank plan: {lines}{failed}")
    r, rows, lines = bench(["--device", "cpu2,cpu3", "-ts", "1,1", "--vram", "2M"])
    failed = "" if r.returncode == 0 else f" (failed: {r.stderr[-1500:]})"
    check(len(rows) == 2 and len(lines) == 2 and all("2 devices share the layers (-ts 1,1)" in l for l in lines),
          f"bench over 2 ranks of cpu2,cpu3 -ts 1,1: each rank shares its own layers: {lines}{failed}")
    r, rows, lines = bench(["--device", "cpu2,cpu3", "-ts", "1,1"])
    check(r.returncode != 0 and "tandem: error: -ngl auto on cpu2,cpu3 needs --vram SIZE" in r.stderr,
          f"bench -ngl auto on stand-ins without --vram is refused in one line: {r.stderr.strip()[:100]!r}")

def per_host_path_test(tmp):
    """A rank whose host keeps the model elsewhere (TANDEM_PIPELINE_MODEL,
    through mpirun's -x): the same logits; a different file is refused,
    naming the rank."""
    model = SHARED / "models" / f"{MODELS[0]}.gguf"
    copy = pathlib.Path(tmp) / "elsewhere.gguf"
    shutil.copyfile(model, copy)
    base = ["run", "-m", str(model), "-p", PROMPT, "-n", "4", "--temp", "0", "-t", "1", "-ub", "4", "--pipeline"]
    one, _ = run_logits([BINARY] + base[:-1] + ["--dump-logits", f"{tmp}/one.bin"], f"{tmp}/one.bin")

    def mpmd(path, out):
        return [shutil.which("mpirun"), "--oversubscribe", "-np", "1", BINARY] + base + ["--dump-logits", out] + \
               [":", "-np", "1", "-x", f"TANDEM_PIPELINE_MODEL={path}", BINARY] + base + ["--dump-logits", out]
    got, err = run_logits(mpmd(copy, f"{tmp}/m.bin"), f"{tmp}/m.bin")
    check(got == one, "rank 1 reading its own copy of the model (TANDEM_PIPELINE_MODEL): bit for bit"
          + ("" if got is not None else f" (failed: {err})"))
    other = SHARED / "models" / f"{MODELS[1]}.gguf"
    r = subprocess.run(mpmd(other, f"{tmp}/x.bin"), env=ENV, capture_output=True, text=True, errors="replace",
                       timeout=120)
    check(r.returncode != 0 and "pipeline rank 1" in r.stderr and "is not rank 0's" in r.stderr,
          f"a different file on rank 1 is refused, naming the rank: {r.stderr.strip()[-300:]!r}")


def start_serve(cmd, log_path):
    log = open(log_path, "w+")
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        text = pathlib.Path(log_path).read_text()
        m = re.search(r"ready on http://127\.0\.0\.1:(\d+)", text)
        if m:
            return proc, int(m.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with {proc.returncode}: {text[-2000:]}")
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("serve did not start within 120 s")


def complete(port, prompt):
    # Evaluated afresh (cache_prompt false). The four prompts share their
    # first 25 tokens, and a request that comes in after another has
    # finished would take that prefix from its slot, as timing gives the
    # slots. Those rows carry the bits of the batch that made them (a
    # 101-token prompt runs the tiled attention, a 51-token one does not),
    # so the rest of the answer could change with the machine's load.
    body = json.dumps({"prompt": prompt, "max_tokens": 12, "temperature": 0, "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())["choices"][0]["text"]


def four_answers(port):
    prompts = [f"{PROMPT} {i}" * (i + 1) for i in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        answers = list(ex.map(lambda p: complete(port, p), prompts))
    # Two choices of one prompt: the second slot gets a copy of the first's
    # rows (under --pipeline gathered from every stage and sent back down).
    # Evaluated afresh, as the four are (complete).
    body = json.dumps({"prompt": PROMPT, "max_tokens": 12, "temperature": 0.9, "seed": 5, "n": 2,
                       "cache_prompt": False}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    choices = json.loads(urllib.request.urlopen(req, timeout=120).read())["choices"]
    return answers + [c["text"] for c in sorted(choices, key=lambda c: c["index"])]


def overlapped_steps(port):
    """The server's count of steps submitted while another was in flight."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    m = re.search(r"^\S*pipeline_overlapped_steps_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)


def serve_test(tmp):
    model = str(SHARED / "models" / "synth-llama-Q8_0.gguf")
    args = ["serve", "-m", model, "--port", "0", "-np", "4", "-c", "1024", "-t", "1"]
    proc, port = start_serve([BINARY] + args, f"{tmp}/one.log")
    try:
        want = four_answers(port)
    finally:
        stop(proc)
    proc, port = start_serve(mpirun(2, "vader,self", args), f"{tmp}/two.log")
    try:
        got = four_answers(port)
        overlapped = overlapped_steps(port)
    finally:
        stop(proc)
    # The slots go through the two stages in two groups a step apart, and
    # a prompt's chunks follow each other.
    check(overlapped is not None and overlapped > 0,
          f"serve over 2 ranks submits steps while others are in flight ({overlapped} overlapped steps)")
    check(got == want, f"serve -np 4 over 2 ranks: the 4 concurrent answers and a request's n=2 choices are the one-process "
          f"answers ({got} vs {want})")


def ranks_of(mpirun_pid):
    """{rank: pid} of mpirun's children, read from their environment."""
    out = {}
    for status in pathlib.Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
            if f"PPid:\t{mpirun_pid}\n" not in text:
                continue
            env = (status.parent / "environ").read_bytes().split(b"\0")
            for e in env:
                if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                    out[int(e.split(b"=")[1])] = int(status.parent.name)
        except OSError:
            continue
    return out


def failure_test(tmp):
    model = str(SHARED / "models" / "synth-llama-Q8_0.gguf")
    log = f"{tmp}/fail.log"
    proc, port = start_serve(mpirun(3, "vader,self", ["serve", "-m", model, "--port", "0", "-np", "2", "-t", "1"]), log)
    try:
        ranks = ranks_of(proc.pid)
        check(sorted(ranks) == [0, 1, 2], f"three ranks under mpirun: {ranks}")
        if 2 not in ranks:
            return
        t0 = time.time()
        os.kill(ranks[2], signal.SIGKILL)
        proc.wait(timeout=30)
        took = time.time() - t0
        text = pathlib.Path(log).read_text()
        check(took < 10, f"a killed rank ends the job in {took:.2f} s (under 10 s)")
        check(re.search(r"rank 2\b.*(signal 9|Killed)", text) is not None,
              f"one line names the rank and why: {[l for l in text.splitlines() if 'rank 2' in l]}")
        check(proc.returncode != 0, f"the job's exit status is a failure ({proc.returncode})")
    finally:
        if proc.poll() is None:
            stop(proc)


def prompt_cache_test(tmp):
    """--prompt-cache under --pipeline: rank 0 gathers every stage's rows, so
    the state file is the one a single process writes, byte for byte; and a
    state one process saved, restored into 3 ranks, continues with the
    one-process logits."""
    model = SHARED / "models" / f"{MODELS[0]}.gguf"
    base = ["run", "-m", str(model), "-p", PROMPT, "-n", "4", "--temp", "0", "-t", "1", "-ub", "4"]
    one, _ = run_logits([BINARY] + base + ["--prompt-cache", f"{tmp}/one.state", "--dump-logits", f"{tmp}/o.bin"],
                        f"{tmp}/one.state")
    two, err = run_logits(mpirun(2, "vader,self", base + ["--prompt-cache", f"{tmp}/two.state"]), f"{tmp}/two.state")
    check(one is not None and two == one, "--prompt-cache over 2 ranks writes the one-process state file, byte for byte"
          + ("" if two is not None else f" (failed: {err})"))
    again = base + ["--prompt-cache", f"{tmp}/one.state", "--prompt-cache-ro", "--dump-logits", f"{tmp}/r.bin"]
    want, _ = run_logits([BINARY] + again, f"{tmp}/r.bin")
    got, err = run_logits(mpirun(3, "vader,self", again[:-1] + [f"{tmp}/r3.bin"]), f"{tmp}/r3.bin")
    check(want is not None and got == want, "a state saved by one process, restored into 3 ranks: the same logits"
          + ("" if got is not None else f" (failed: {err})"))


def main():
    if not BINARY or not os.path.exists(BINARY):
        print("skip: TANDEM_BINARY is not set to the tandem binary")
        return SKIP
    if not shutil.which("mpirun"):
        print("skip: no mpirun (install openmpi-bin)")
        return SKIP
    missing = [m for m in MODELS if not (SHARED / "models" / f"{m}.gguf").exists()]
    if missing:
        print(f"skip: test models missing from {SHARED}: {missing}")
        return SKIP
    probe = subprocess.run([shutil.which("mpirun"), "-np", "2", BINARY, "run", "-m", str(SHARED / "models" / f"{MODELS[0]}.gguf"),
                            "-p", "a", "-n", "1", "-t", "1", "--pipeline"], env=ENV, capture_output=True, text=True, errors="replace",
                           timeout=120)
    if "has no MPI" in probe.stderr:
        print("skip: this build of tandem has no MPI (libopenmpi-dev missing at build time)")
        return SKIP
    with tempfile.TemporaryDirectory(prefix="tandem-pipeline-") as tmp:
        logits_test(tmp)
        auto_per_rank_test(tmp)
        bench_auto_per_rank_test(tmp)
        per_host_path_test(tmp)
        prompt_cache_test(tmp)
        serve_test(tmp)
        failure_test(tmp)
    print(f"pipeline: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
