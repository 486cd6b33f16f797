#!/usr/bin/env python3
"""The same requests to `tandem serve` and to llama-server, one server after
the other on loopback, and a Markdown table of what each answered.

  python3 scripts/serve_feature_table.py -m SmolLM2-135M-Instruct.Q4_1.gguf \
      --tandem build/tools/tandem --llama-server PATH/llama-server [--json OUT]

Each row is one feature, checked by what the answer must hold (a status, a
field, JSON valid under a schema), not by its text: "yes" when it held,
otherwise what came back. Each server runs with the flags a user would give
it for the feature (printed under the table): the chat server with 4 slots,
a second one with embeddings on, a third with an API key.
"""
import argparse
import gzip
import http.client
import json
import re
import socket
import subprocess
import sys
import tempfile
import time

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "color": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "color", "count", "tags"],
    "additionalProperties": False,
}
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}, {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, argv, key=None):
        self.port = free_port()
        self.key = key
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([*argv, "--port", str(self.port)], stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        deadline = time.time() + 180
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"{argv[0]} exited: {self.log.read()[-2000:].decode(errors='replace')}")
            try:
                if self.raw("GET", "/health", auth=False)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{argv[0]} not ready in 180 s")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def raw(self, method, path, data=None, headers=None, auth=True, timeout=600):
        h = {"Content-Type": "application/json"} if data is not None else {}
        if auth and self.key:
            h["Authorization"] = f"Bearer {self.key}"
        h.update(headers or {})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=data, headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            c.close()

    def post(self, path, body, **kw):
        st, h, b = self.raw("POST", path, json.dumps(body).encode(), **kw)
        try:
            return st, json.loads(b)
        except ValueError:
            return st, b

    def sse(self, path, body):
        """The data lines of a streamed answer, as JSON (or the string [DONE])."""
        st, _, b = self.raw("POST", path, json.dumps(body).encode())
        out = []
        for line in b.decode(errors="replace").splitlines():
            if line.startswith("data: "):
                d = line[6:]
                out.append(d if d == "[DONE]" else json.loads(d))
        return st, out


def chat(s, **kw):
    body = {"model": "m", "messages": ASK, "max_tokens": 24, "temperature": 0}
    body.update(kw)
    return s.post("/v1/chat/completions", body)


def short(v, n=60):
    t = v if isinstance(v, str) else (v.decode(errors="replace") if isinstance(v, bytes) else json.dumps(v))
    t = t.replace("\n", " ").replace("|", "/")
    return t[:n] + ("..." if len(t) > n else "")


def verdict(ok, st, got):
    return "yes" if ok else f"no ({st}: {short(got)})"


# Each check: (feature, function(server) -> cell text). A check that raises gets the exception's text.
def c_chat(s):
    st, r = chat(s)
    return verdict(st == 200 and isinstance(r["choices"][0]["message"]["content"], str), st, r)


def c_stream(s):
    st, ev = s.sse("/v1/chat/completions", {"model": "m", "messages": ASK, "max_tokens": 8, "stream": True,
                                             "stream_options": {"include_usage": True}})
    ok = st == 200 and ev and ev[-1] == "[DONE]" and any(isinstance(e, dict) and e.get("usage") for e in ev)
    return verdict(ok, st, ev[-2:] if ev else "")


def c_completions(s):
    st, r = s.post("/v1/completions", {"model": "m", "prompt": "The capital of France is", "max_tokens": 8})
    return verdict(st == 200 and isinstance(r["choices"][0]["text"], str), st, r)


def c_tools_auto(s):
    st, r = chat(s, tools=TOOLS)
    return verdict(st == 200, st, r)


def call_ok(r, name=None):
    calls = r["choices"][0]["message"].get("tool_calls") or []
    if not calls:
        return False
    f = calls[0]["function"]
    json.loads(f["arguments"])
    return name is None or f["name"] == name


def c_tools_required(s):
    st, r = chat(s, tools=TOOLS, tool_choice="required", max_tokens=64)
    return verdict(st == 200 and call_ok(r), st, r)


def c_tools_named(s):
    st, r = chat(s, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=64)
    return verdict(st == 200 and call_ok(r, "get_time"), st, r)


def c_tools_stream(s):
    st, ev = s.sse("/v1/chat/completions", {"model": "m", "messages": ASK, "max_tokens": 64, "stream": True,
                                             "tools": TOOLS, "tool_choice": "required"})
    args = "".join(tc["function"].get("arguments") or "" for e in ev if isinstance(e, dict) for ch in e["choices"]
                   for tc in (ch.get("delta") or {}).get("tool_calls") or [])
    ok = st == 200 and args != ""
    if ok:
        json.loads(args)
    return verdict(ok, st, ev[-2:] if ev else "")


def c_tool_result(s):
    msgs = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}]
    st, r = s.post("/v1/chat/completions", {"model": "m", "messages": msgs, "tools": TOOLS, "max_tokens": 24})
    return verdict(st == 200 and isinstance(r["choices"][0]["message"].get("content"), str), st, r)


def c_json_object(s):
    st, r = chat(s, response_format={"type": "json_object"}, max_tokens=300,
                 messages=[{"role": "user", "content": "Describe a cat as JSON."}])
    if st != 200:
        return verdict(False, st, r)
    try:
        ok = isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)
    except ValueError:
        ok = False
    return verdict(ok, st, r["choices"][0]["message"]["content"])


def c_json_schema(s, seeds=10):
    import jsonschema
    good = 0
    last = None
    for seed in range(seeds):
        st, r = chat(s, response_format={"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA}},
                     max_tokens=200, temperature=1.0, seed=seed,
                     messages=[{"role": "user", "content": "Make up a thing as JSON."}])
        last = (st, r)
        if st != 200:
            break
        try:
            jsonschema.validate(json.loads(r["choices"][0]["message"]["content"]), SCHEMA)
            good += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    if good == seeds:
        return f"yes ({good}/{seeds} valid)"
    return f"no ({good}/{seeds} valid; last {last[0]}: {short(last[1])})"


def c_grammar(s):
    st, r = chat(s, grammar='root ::= "yes" | "no"', max_tokens=8)
    return verdict(st == 200 and r["choices"][0]["message"]["content"] in ("yes", "no"), st, r)


def c_logprobs_chat(s):
    st, r = chat(s, logprobs=True, top_logprobs=3, max_tokens=6)
    if st != 200:
        return verdict(False, st, r)
    c = (r["choices"][0].get("logprobs") or {}).get("content") or []
    ok = c and all(t["logprob"] <= 0 and len(t["top_logprobs"]) == 3 for t in c)
    return verdict(ok, st, r["choices"][0].get("logprobs"))


def c_logprobs_completions(s):
    st, r = s.post("/v1/completions", {"model": "m", "prompt": "The capital of France is", "max_tokens": 6,
                                        "logprobs": 3, "temperature": 0})
    if st != 200:
        return verdict(False, st, r)
    lp = r["choices"][0].get("logprobs") or {}
    ok = lp.get("token_logprobs") and all(x <= 0 for x in lp["token_logprobs"]) and len(lp.get("top_logprobs", [])) > 0
    return verdict(ok, st, lp)


def c_logprobs_stream(s):
    st, ev = s.sse("/v1/chat/completions", {"model": "m", "messages": ASK, "max_tokens": 6, "stream": True,
                                             "logprobs": True, "top_logprobs": 2})
    lps = [t for e in ev if isinstance(e, dict) for ch in e["choices"]
           for t in ((ch.get("logprobs") or {}).get("content") or [])]
    return verdict(st == 200 and lps and all(t["logprob"] <= 0 for t in lps), st, ev[:2])


def c_n(s):
    st, r = chat(s, n=3)
    if st != 200:
        return verdict(False, st, r)
    texts = [c["message"]["content"] for c in r["choices"]]
    return verdict(len(texts) == 3 and len(set(texts)) == 1, st, texts)


def c_logit_bias(s):
    st, r = s.post("/v1/completions", {"model": "m", "prompt": "The capital of France is", "max_tokens": 1,
                                        "temperature": 0})
    if st != 200:
        return verdict(False, st, r)
    first = r["choices"][0]["text"]
    st2, tok = s.post("/tokenize", {"content": first})
    ids = tok.get("tokens") if isinstance(tok, dict) else None
    if not ids:
        return verdict(False, st2, tok)
    st, r2 = s.post("/v1/completions", {"model": "m", "prompt": "The capital of France is", "max_tokens": 1,
                                         "temperature": 0, "logit_bias": {str(ids[0]): -100}})
    return verdict(st == 200 and r2["choices"][0]["text"] != first, st, r2)


def c_penalties(s):
    st, r = chat(s, presence_penalty=1.5, frequency_penalty=1.0, temperature=0)
    return verdict(st == 200, st, r)


def c_seed(s):
    a = chat(s, temperature=1.0, seed=42)
    b = chat(s, temperature=1.0, seed=42)
    return verdict(a[0] == b[0] == 200 and a[1]["choices"][0]["message"] == b[1]["choices"][0]["message"], a[0], a[1])


def c_stop(s):
    st, r = s.post("/v1/completions", {"model": "m", "prompt": "1, 2, 3, 4,", "max_tokens": 24, "temperature": 0,
                                        "stop": ["7"]})
    ok = st == 200 and "7" not in r["choices"][0]["text"] and r["choices"][0]["finish_reason"] == "stop"
    return verdict(ok, st, r)


def c_ignore_eos(s):
    st, r = chat(s, ignore_eos=True, max_tokens=200, messages=[{"role": "user", "content": "Say hi."}])
    return verdict(st == 200 and r["usage"]["completion_tokens"] == 200, st, r.get("usage") if isinstance(r, dict) else r)


def c_messages(s):
    st, r = s.post("/v1/messages", {"model": "m", "max_tokens": 16, "messages": ASK})
    return verdict(st == 200 and r.get("content") and r["content"][0]["type"] == "text", st, r)


def c_messages_tools(s):
    st, r = s.post("/v1/messages", {"model": "m", "max_tokens": 64, "messages": ASK, "tool_choice": {"type": "any"},
                                    "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                                               "input_schema": t["function"]["parameters"]} for t in TOOLS]})
    ok = st == 200 and any(b.get("type") == "tool_use" for b in r.get("content", []))
    return verdict(ok, st, r)


def c_count_tokens(s):
    st, r = s.post("/v1/messages/count_tokens", {"model": "m", "messages": ASK})
    return verdict(st == 200 and isinstance(r.get("input_tokens"), int), st, r)


def c_ollama_chat(s):
    st, r = s.post("/api/chat", {"model": "m", "messages": ASK, "stream": False, "options": {"num_predict": 8}})
    return verdict(st == 200 and isinstance((r.get("message") or {}).get("content"), str), st, r)


def c_ollama_generate(s):
    st, r = s.post("/api/generate", {"model": "m", "prompt": "Hi", "stream": False, "options": {"num_predict": 8}})
    return verdict(st == 200 and isinstance(r.get("response"), str), st, r)


def c_ollama_tags(s):
    st, _, b = s.raw("GET", "/api/tags")
    ok = st == 200 and "models" in json.loads(b)
    return verdict(ok, st, b)


def c_page(s):
    st, h, b = s.raw("GET", "/", auth=False)
    return verdict(st == 200 and h.get("content-type", "").startswith("text/html"), st, h.get("content-type", ""))


def c_route(method, path, body=None):
    def f(s):
        data = json.dumps(body).encode() if body is not None else None
        st, _, b = s.raw(method, path, data)
        return verdict(st == 200, st, b)
    return f


def c_cors(s):
    st, h, b = s.raw("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "http://example.com", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"}, auth=False)
    allow = h.get("access-control-allow-origin")
    return f"allows {allow}" if allow else f"no CORS headers ({st})"


def c_n_too_many(s):
    st, r = chat(s, n=64)
    return "400" if st == 400 else f"{st}: {short(r)}"


def c_bad_json(s):
    st, _, b = s.raw("POST", "/v1/chat/completions", b'{"model": "m", "messages": [')
    try:
        shape = "error" in json.loads(b) and "message" in json.loads(b)["error"]
    except ValueError:
        shape = False
    return f"{st}" + (", OpenAI error shape" if shape else ", other shape")


def c_gzip(s):
    body = gzip.compress(json.dumps({"model": "m", "messages": ASK, "max_tokens": 4}).encode())
    st, _, b = s.raw("POST", "/v1/chat/completions", body, headers={"Content-Encoding": "gzip"})
    return f"{st}"


def c_smuggle(s):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    try:
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        head = c.recv(200).decode(errors="replace")
    except OSError as e:
        head = str(e)
    finally:
        c.close()
    m = re.match(r"HTTP/1\.[01] (\d+)", head)
    return m.group(1) if m else "closed"


def c_huge_length(s):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    t0 = time.time()
    try:
        c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 18446744073709551615\r\n\r\n{")
        head = c.recv(200).decode(errors="replace")
    except OSError as e:
        head = str(e)
    finally:
        c.close()
    m = re.match(r"HTTP/1\.[01] (\d+)", head)
    return f"{m.group(1) if m else 'no answer'} in {time.time() - t0:.1f} s"


CHECKS = [
    ("chat completion", c_chat),
    ("chat, streamed with usage", c_stream),
    ("completions", c_completions),
    ("tools, tool_choice auto", c_tools_auto),
    ("tool_choice required: a call that parses", c_tools_required),
    ("tool_choice named function", c_tools_named),
    ("tool call streamed", c_tools_stream),
    ("tool result sent back", c_tool_result),
    ("response_format json_object", c_json_object),
    ("response_format json_schema, 10 seeds at T=1 (jsonschema)", c_json_schema),
    ("grammar (GBNF)", c_grammar),
    ("logprobs + top_logprobs, chat", c_logprobs_chat),
    ("logprobs, completions", c_logprobs_completions),
    ("logprobs, streamed", c_logprobs_stream),
    ("n=3 at T=0: equal choices", c_n),
    ("n=64 on 4 slots", c_n_too_many),
    ("logit_bias -100 bans the greedy token", c_logit_bias),
    ("presence/frequency penalty", c_penalties),
    ("seed reproduces at T=1", c_seed),
    ("stop strings", c_stop),
    ("ignore_eos in chat (200 tokens)", c_ignore_eos),
    ("Anthropic /v1/messages", c_messages),
    ("Anthropic tools (tool_choice any)", c_messages_tools),
    ("Anthropic /v1/messages/count_tokens", c_count_tokens),
    ("Ollama /api/chat", c_ollama_chat),
    ("Ollama /api/generate", c_ollama_generate),
    ("Ollama /api/tags", c_ollama_tags),
    ("chat page at /", c_page),
    ("/v1/models", c_route("GET", "/v1/models")),
    ("/tokenize", c_route("POST", "/tokenize", {"content": "hello"})),
    ("/detokenize", c_route("POST", "/detokenize", {"tokens": [1, 2]})),
    ("/apply-template", c_route("POST", "/apply-template", {"messages": ASK})),
    ("/slots", c_route("GET", "/slots")),
    ("/metrics", c_route("GET", "/metrics")),
    ("CORS preflight (default flags)", c_cors),
    ("malformed JSON body", c_bad_json),
    ("gzip body", c_gzip),
    ("Content-Length and chunked together", c_smuggle),
    ("Content-Length 2^64-1", c_huge_length),
]


def c_embeddings(s):
    st, r = s.post("/v1/embeddings", {"model": "m", "input": ["The cat sat.", "A dog ran."]})
    if st != 200:
        return verdict(False, st, r)
    widths = {len(d["embedding"]) for d in r["data"]}
    return f"yes (width {widths.pop()})" if len(widths) == 1 and len(r["data"]) == 2 else verdict(False, st, r)


def c_key_routes(s):
    """Which routes answer without the key."""
    open_ = []
    for method, path, body in [("GET", "/slots", None), ("POST", "/tokenize", {"content": "x"}),
                               ("POST", "/detokenize", {"tokens": [1]}), ("POST", "/apply-template", {"messages": ASK}),
                               ("GET", "/metrics", None), ("POST", "/v1/chat/completions", {"messages": ASK})]:
        st, _, _ = s.raw(method, path, json.dumps(body).encode() if body is not None else None, auth=False)
        if st == 200:
            open_.append(path)
    return "all refused (401)" if not open_ else "open: " + ", ".join(open_)


def run_all(label, argv, checks, key=None):
    s = Server(argv, key)
    out = {}
    try:
        for name, f in checks:
            t0 = time.time()
            try:
                out[name] = f(s)
            except Exception as e:  # noqa: BLE001  (a crash of one check is its cell)
                out[name] = f"no ({type(e).__name__}: {short(str(e))})"
            print(f"[{label}] {name}: {out[name]} ({time.time() - t0:.1f} s)", file=sys.stderr, flush=True)
    finally:
        s.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tandem", required=True)
    ap.add_argument("--llama-server", help="leave out for Tandem's column alone")
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("--json", help="also write the cells as JSON here")
    ap.add_argument("--chat-template", help="a Jinja chat template file for the chat servers (one with tools, when "
                                            "the model's own has none)")
    a = ap.parse_args()
    common = ["-m", a.model, "-t", a.threads, "-c", "8192"]
    tmpl_t = ["--chat-template", a.chat_template] if a.chat_template else []
    tmpl_l = ["--chat-template-file", a.chat_template] if a.chat_template else []
    flavours = {
        "tandem": {"chat": [a.tandem, "serve", *common, "-np", "4", *tmpl_t],
                   "embed": [a.tandem, "serve", *common, "--embeddings", "--pooling", "mean"],
                   "key": [a.tandem, "serve", *common, "--api-key", "k1"]},
        "llama-server": {"chat": [a.llama_server, *common, "-np", "4", "--jinja", "--metrics", "--slots", *tmpl_l],
                         "embed": [a.llama_server, *common, "--embeddings", "--pooling", "mean"],
                         "key": [a.llama_server, *common, "--api-key", "k1", "--metrics", "--slots"]},
    }
    if not a.llama_server:
        del flavours["llama-server"]
    cells = {}
    for label, argv in flavours.items():
        cells[label] = run_all(label, argv["chat"], CHECKS)
        cells[label].update(run_all(label, argv["embed"], [("/v1/embeddings (mean pooling)", c_embeddings)]))
        cells[label].update(run_all(label, argv["key"], [("--api-key: admin routes without the key", c_key_routes)],
                                    key="k1"))
    print("| feature | Tandem | llama-server |")
    print("| --- | --- | --- |")
    for name in cells["tandem"]:
        print(f"| {name} | {cells['tandem'][name]} | {cells.get('llama-server', {}).get(name, '')} |")
    print()
    for label, argv in flavours.items():
        for k, v in argv.items():
            print(f"- {label} ({k}): `{' '.join(v[1:])}`")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(cells, f, indent=1)


if __name__ == "__main__":
    main()
