"""What the end-to-end tests of `tandem serve` share: the checks and their
exit codes (0 passed, 1 failed, 77 skipped with the reason printed), and a
server on loopback (`tandem serve -m MODEL --port 0 ...`) with its stderr in
a temp file and HTTP requests to it, each bounded in time."""
import http.client
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from smollm2 import serve_test_inputs  # noqa: E402,F401  (the tests take it from here)

SKIP = 77
BINARY = os.environ.get("TANDEM_BINARY", "")
# Set by CMake when the binary is built with sanitizers (about ten times
# slower): the tests scale their load down.
SANITIZED = os.environ.get("TANDEM_TEST_SANITIZED", "") == "1"
READY_BOUND = 180  # seconds for the model to load and the server to listen
STOP_BOUND = 30  # seconds from SIGTERM to the exit, then SIGKILL


def skip(why):
    """Says why the test is skipped; returns the exit code for it."""
    print(f"SKIP: {why}")
    return SKIP


class Checks:
    """Counts checks; prints each failure as it happens. Call it as check(cond, what): returns cond."""

    def __init__(self):
        self.failures = []
        self.count = 0

    def __call__(self, cond, what):
        self.count += 1
        if not cond:
            self.failures.append(what)
            print(f"FAIL: {what}", flush=True)
        return cond

    def summary(self):
        return f"{self.count - len(self.failures)} passed, {len(self.failures)} failed"

    def exit_code(self):
        return 1 if self.failures else 0

    def run(self, main):
        """sys.exit(main()), where an exception (a failed start, a broken connection) counts as one more
        failure rather than a crash of the test."""
        try:
            sys.exit(main())
        except Exception as e:  # noqa: BLE001
            print(f"FAIL: {type(e).__name__}: {e}")
            print(f"{self.count - len(self.failures)} passed, {len(self.failures) + 1} failed")
            sys.exit(1)


class Server:
    """`tandem serve -m model --port 0 *args` on 127.0.0.1, its stderr in tmp (a new temp dir named
    prefix... unless given). key: sent as `Authorization: Bearer key` with every request unless the
    request's auth=False or its headers say otherwise."""

    def __init__(self, model, *args, tmp=None, prefix="tandem-serve-", key=None):
        self.tmp = tmp or tempfile.mkdtemp(prefix=prefix)
        self.key = key
        self.err = open(os.path.join(self.tmp, f"serve-{len(os.listdir(self.tmp))}.txt"), "w+")
        self.proc = subprocess.Popen([BINARY, "serve", "-m", model, "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=self.err, stdin=subprocess.DEVNULL)
        self.port = None
        deadline = time.time() + READY_BOUND
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tandem serve exited with {self.proc.returncode}: {self.log()}")
            m = re.search(r"ready on http://127\.0\.0\.1:(\d+)", self.log())
            if m:
                self.port = int(m.group(1))
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"tandem serve was not ready in {READY_BOUND} s: " + self.log())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def url(self, path="/"):
        return f"http://127.0.0.1:{self.port}{path}"

    def log(self):
        """What the server wrote to stderr so far."""
        self.err.flush()
        return pathlib.Path(self.err.name).read_text()

    def exchange(self, method, path, body=None, headers=None, raw=None, timeout=120, auth=True):
        """(status, headers with lower-case names, body bytes). body: JSON to send, or bytes sent as
        they are (as raw); Content-Type: application/json goes with either."""
        if raw is None and isinstance(body, (bytes, bytearray)):
            raw = body
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        h = {"Content-Type": "application/json"} if data is not None else {}
        if auth and self.key:
            h["Authorization"] = f"Bearer {self.key}"
        h.update(headers or {})
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            payload = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, payload
        finally:
            conn.close()

    def request(self, method, path, body=None, headers=None, raw=None, timeout=120, auth=True):
        """(status, body bytes)."""
        status, _, payload = self.exchange(method, path, body, headers, raw, timeout, auth)
        return status, payload

    def post(self, path, body, headers=None, timeout=120, auth=True):
        """(status, content type, body bytes)."""
        status, h, payload = self.exchange("POST", path, body, headers, timeout=timeout, auth=auth)
        return status, h.get("content-type", ""), payload

    def post_json(self, path, body, headers=None, timeout=120, auth=True):
        """(status, the answer as JSON, or its bytes when it is not JSON)."""
        status, _, payload = self.exchange("POST", path, body, headers, timeout=timeout, auth=auth)
        try:
            return status, json.loads(payload)
        except ValueError:
            return status, payload

    def metric(self, name):
        """tandem:name from /metrics, or None when it is not there."""
        _, body = self.request("GET", "/metrics")
        m = re.search(rf"^tandem:{name} ([0-9.e+-]+)$", body.decode(), re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        """SIGTERM, then SIGKILL after STOP_BOUND seconds; returns the exit code."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=STOP_BOUND)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
