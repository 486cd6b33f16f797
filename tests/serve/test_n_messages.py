#!/usr/bin/env python3
"""`tandem serve` end to end on loopback with SmolLM2-135M-Instruct: OpenAI's
`n` (several choices of one prompt, through the openai client and plain
HTTP) and Anthropic's Messages API (/v1/messages and its count_tokens, plain
HTTP, and the `anthropic` client when it is installed; its tools are in
test_tools.py). Exit 0: passed; 77: skipped (the binary, the model or the
openai client is missing: said why); 1: failed.

Every request is bounded (max_tokens, timeouts); the servers bind 127.0.0.1 only.
"""
import concurrent.futures
import importlib.util
import json
import re
import sys
import time

from serve_harness import BINARY, Checks, Server, serve_test_inputs, skip

SLOTS = 4
check = Checks()


def sse_events(payload):
    """[(event name or None, data text)] of a server-sent event stream."""
    out = []
    for block in payload.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data.append(line[len("data: "):])
        out.append((name, "\n".join(data)))
    return out


def json_or(payload, default=None):
    try:
        return json.loads(payload)
    except ValueError:
        return default


MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
STORY = [{"role": "user", "content": "Write a short story about a dragon."}]


def n_test(server, client):
    """n choices: equal at temperature 0, different with a seed at temperature 1 (each what a request of seed + i
    gives), streamed with each index and one [DONE], bounded by the slot count."""
    one = client.chat.completions.create(model="m", messages=STORY, temperature=0, max_tokens=24)
    r = client.chat.completions.create(model="m", messages=STORY, temperature=0, max_tokens=24, n=3)
    texts = [c.message.content for c in r.choices]
    check([c.index for c in r.choices] == [0, 1, 2], f"n=3: choices 0, 1, 2 ({[c.index for c in r.choices]})")
    check(len(set(texts)) == 1 and texts[0] == one.choices[0].message.content,
          f"n=3 at temperature 0: three equal choices, the n=1 text ({texts!r})")
    check(all(c.finish_reason == one.choices[0].finish_reason for c in r.choices), "each choice has its finish_reason")
    check(r.usage.prompt_tokens == one.usage.prompt_tokens and
          r.usage.completion_tokens == 3 * one.usage.completion_tokens,
          f"usage: the prompt once, the completions summed ({r.usage} vs {one.usage})")

    seeded = client.chat.completions.create(model="m", messages=STORY, temperature=1, seed=42, max_tokens=24, n=3,
                                            extra_body={"cache_prompt": False})
    stexts = [c.message.content for c in seeded.choices]
    check(len(seeded.choices) == 3 and len(set(stexts)) > 1,
          f"n=3 at temperature 1 with a seed: the choices differ ({stexts!r})")
    alone = [client.chat.completions.create(model="m", messages=STORY, temperature=1, seed=42 + i, max_tokens=24,
                                            extra_body={"cache_prompt": False}).choices[0].message.content
             for i in range(3)]
    check(stexts == alone, f"choice i is what seed + i gives alone ({stexts!r} vs {alone!r})")

    # Streamed: chunks name their choice; each choice gets its finish chunk; one [DONE].
    st, ctype, payload = server.post("/v1/chat/completions", {"messages": STORY, "temperature": 0, "max_tokens": 24,
                                                              "n": 2, "stream": True,
                                                              "stream_options": {"include_usage": True}})
    events = sse_events(payload)
    data = [d for _, d in events]
    chunks = [json_or(d, {}) for d in data if d != "[DONE]"]
    streamed, finishes, usage = {}, {}, None
    for c in chunks:
        for ch in c.get("choices", []):
            streamed[ch["index"]] = streamed.get(ch["index"], "") + (ch["delta"].get("content") or "")
            if ch.get("finish_reason"):
                finishes[ch["index"]] = finishes.get(ch["index"], 0) + 1
        usage = c.get("usage") or usage
    check(st == 200 and ctype.startswith("text/event-stream"), f"streamed n=2: 200 event-stream ({st} {ctype})")
    check(sorted(streamed) == [0, 1] and all(t == one.choices[0].message.content for t in streamed.values()),
          f"streamed n=2: both indexes, each the text ({streamed!r})")
    check(finishes == {0: 1, 1: 1}, f"streamed n=2: one finish chunk per choice ({finishes})")
    check(data.count("[DONE]") == 1 and data[-1] == "[DONE]", "streamed n=2: one [DONE], last")
    check(usage is not None and usage.get("completion_tokens") == 2 * one.usage.completion_tokens,
          f"streamed n=2: one usage chunk summing the choices ({usage})")
    text = ""
    for chunk in client.chat.completions.create(model="m", messages=STORY, temperature=0, max_tokens=24, n=2,
                                                stream=True):
        text += "".join(c.delta.content or "" for c in chunk.choices if c.index == 1)
    check(text == one.choices[0].message.content, f"the openai client streams choice 1 ({text!r})")

    c = client.completions.create(model="m", prompt="The capital of France is", temperature=0, max_tokens=12, n=2)
    check([x.index for x in c.choices] == [0, 1] and c.choices[0].text == c.choices[1].text and c.choices[0].text,
          f"completions n=2 at temperature 0: two equal choices ({[x.text for x in c.choices]!r})")

    for n in (0, SLOTS + 1, -2):
        st, _, payload = server.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 4, "n": n})
        err = (json_or(payload, {}) or {}).get("error", {})
        check(st == 400 and err.get("param") == "n" and f"1..{SLOTS}" in err.get("message", "") and
              err.get("type") == "invalid_request_error",
              f"n={n}: 400 naming n and the limit ({st} {payload[:200]!r})")

    # More choices than free slots at once: every request waits for its slots, none holds some while waiting.
    def ask(n):
        return client.chat.completions.create(model="m", messages=STORY, temperature=0, max_tokens=16, n=n)
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        got = list(pool.map(ask, [3, 3, 4, 1, 2, 3]))
    check(all(len(g.choices) == n for g, n in zip(got, [3, 3, 4, 1, 2, 3])),
          f"six requests of 1..4 choices at once on 4 slots all answer ({time.time() - t0:.1f} s)")


def metrics_test(server, client):
    """/metrics counts a request of n choices as llama-server does: its prompt evaluated once (the other choices
    copy its cells), every choice's tokens predicted, and one request."""
    names = ("prompt_tokens_total", "tokens_predicted_total", "requests_done_total", "http_requests_total")
    no_cache = {"cache_prompt": False}  # the whole prompt evaluated, whatever the slots hold
    for n in (1, 3):
        before = {k: server.metric(k) for k in names}
        r = client.chat.completions.create(model="m", messages=STORY, temperature=0, max_tokens=16, n=n,
                                           extra_body=no_cache)
        after = {k: server.metric(k) for k in names}
        delta = {k: None if before[k] is None or after[k] is None else after[k] - before[k] for k in names}
        # Each choice ran to max_tokens: its completion tokens are all it sampled (no end token).
        check(all(c.finish_reason == "length" for c in r.choices), f"n={n}: every choice ends at max_tokens")
        check(delta["prompt_tokens_total"] == r.usage.prompt_tokens,
              f"n={n}: the prompt counted once ({delta['prompt_tokens_total']}, usage {r.usage.prompt_tokens})")
        check(delta["tokens_predicted_total"] == r.usage.completion_tokens == 16 * n,
              f"n={n}: every choice's tokens predicted ({delta['tokens_predicted_total']}, usage "
              f"{r.usage.completion_tokens})")
        check(delta["requests_done_total"] == 1 and delta["http_requests_total"] == 1,
              f"n={n}: one request ({delta['requests_done_total']} done, {delta['http_requests_total']} HTTP)")


def anthropic_events(payload):
    return [(name, json_or(d, {})) for name, d in sse_events(payload)]


def messages_test(server, client):
    """/v1/messages: the text of /v1/chat/completions at temperature 0, whole and streamed as Anthropic's events,
    stop reasons, count_tokens, errors in Anthropic's shape."""
    chat = client.chat.completions.create(model="m", messages=MESSAGES, temperature=0, max_tokens=48)
    ref = chat.choices[0].message.content
    req = {"model": "claude-any", "messages": MESSAGES, "max_tokens": 48, "temperature": 0}
    st, ctype, payload = server.post("/v1/messages", req)
    m = json_or(payload, {})
    content = m.get("content") or [{}]
    check(st == 200 and ctype.startswith("application/json") and m.get("type") == "message" and
          m.get("role") == "assistant" and re.fullmatch(r"msg_\w+", m.get("id", "")) and m.get("model"),
          f"/v1/messages answers a message ({st} {payload[:300]!r})")
    check(content == [{"type": "text", "text": ref}], f"/v1/messages gives the chat route's text ({content!r} vs {ref!r})")
    expect_reason = {"stop": "end_turn", "length": "max_tokens"}[chat.choices[0].finish_reason]
    check(m.get("stop_reason") == expect_reason and m.get("stop_sequence") is None,
          f"stop_reason {m.get('stop_reason')} for finish_reason {chat.choices[0].finish_reason}")
    check(m.get("usage") == {"input_tokens": chat.usage.prompt_tokens, "output_tokens": chat.usage.completion_tokens},
          f"usage: input and output tokens ({m.get('usage')} vs {chat.usage})")

    st, ctype, payload = server.post("/v1/messages", dict(req, stream=True))
    events = anthropic_events(payload)
    names = [n for n, _ in events]
    check(st == 200 and ctype.startswith("text/event-stream"), f"streamed /v1/messages: event-stream ({st} {ctype})")
    body = [n for n in names if n not in ("ping", "content_block_delta")]
    check(body == ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"] and
          names[:2] == ["message_start", "content_block_start"] and names[-3:] == body[-3:] and
          all(d.get("type") == n for n, d in events), f"Anthropic's event sequence: {names}")
    start = events[0][1].get("message", {}) if events else {}
    check(start.get("role") == "assistant" and start.get("content") == [] and
          start.get("usage", {}).get("input_tokens") == chat.usage.prompt_tokens, f"message_start: {start}")
    text = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta" and
                   d.get("delta", {}).get("type") == "text_delta")
    check(text == ref, f"the streamed text deltas make the chat route's text ({text!r})")
    delta = next((d for n, d in events if n == "message_delta"), {})
    check(delta.get("delta", {}).get("stop_reason") == expect_reason and
          delta.get("usage", {}).get("output_tokens") == chat.usage.completion_tokens, f"message_delta: {delta}")

    # A system prompt (string or text blocks) is the chat route's system message.
    sys_chat = client.chat.completions.create(
        model="m", messages=[{"role": "system", "content": "Answer in one word."}] + MESSAGES, temperature=0,
        max_tokens=16).choices[0].message.content
    for system in ("Answer in one word.", [{"type": "text", "text": "Answer in one "}, {"type": "text", "text": "word."}]):
        st, _, payload = server.post("/v1/messages", dict(req, system=system, max_tokens=16,
                                                          messages=[{"role": "user", "content": [
                                                              {"type": "text", "text": MESSAGES[0]["content"]}]}]))
        got = (json_or(payload, {}).get("content") or [{}])[0].get("text")
        check(st == 200 and got == sys_chat, f"system {type(system).__name__}: the chat route's text ({got!r} vs {sys_chat!r})")

    # max_tokens and stop_sequences.
    st, _, payload = server.post("/v1/messages", {"messages": STORY, "max_tokens": 4, "temperature": 0})
    m = json_or(payload, {})
    check(m.get("stop_reason") == "max_tokens" and m.get("usage", {}).get("output_tokens") == 4,
          f"max_tokens 4: stop_reason max_tokens, 4 tokens ({payload[:300]!r})")
    story = client.chat.completions.create(model="m", messages=STORY, temperature=0, max_tokens=40).choices[0].message.content
    words = story.split()
    if len(words) >= 6:
        stop = words[4]
        st, _, payload = server.post("/v1/messages", {"messages": STORY, "max_tokens": 40, "temperature": 0,
                                                      "stop_sequences": ["zzzq", stop]})
        m = json_or(payload, {})
        got = (m.get("content") or [{}])[0].get("text")
        check(m.get("stop_reason") == "stop_sequence" and m.get("stop_sequence") == stop and
              got == story[:story.find(stop)], f"stop_sequences: stops before {stop!r} and names it ({payload[:300]!r})")
        st, _, payload = server.post("/v1/messages", {"messages": STORY, "max_tokens": 40, "temperature": 0,
                                                      "stop_sequences": [stop], "stream": True})
        delta = next((d for n, d in anthropic_events(payload) if n == "message_delta"), {})
        check(delta.get("delta") == {"stop_reason": "stop_sequence", "stop_sequence": stop},
              f"streamed stop_sequences: message_delta names it ({delta})")
    else:
        check(False, f"the story has at least 6 words: {story!r}")

    # count_tokens: the prompt tokens the same request evaluates (usage.input_tokens), max_tokens and the
    # sampling fields aside; a system text and a prefill count.
    prefill = MESSAGES + [{"role": "assistant", "content": "The capital"}]
    for extra in ({}, {"system": [{"type": "text", "text": "Answer in one word."}]}, {"messages": prefill}):
        st, _, payload = server.post("/v1/messages", dict(req, max_tokens=2, **extra))
        used = json_or(payload, {}).get("usage", {}).get("input_tokens")
        counted = {k: v for k, v in dict(req, **extra).items() if k not in ("max_tokens", "temperature")}
        cst, ctype, cpayload = server.post("/v1/messages/count_tokens", counted)
        check(st == cst == 200 and ctype.startswith("application/json") and used and
              json_or(cpayload, {}) == {"input_tokens": used},
              f"count_tokens {sorted(extra)}: usage.input_tokens {used} ({cst} {cpayload[:200]!r})")
    for body, needle in [({"model": "m"}, "'messages'"), ({"messages": [{"role": "system", "content": "x"}]},
                                                           "'messages[0].role'"),
                         ({"messages": MESSAGES, "tools": [{"name": "f", "input_schema": {"type": "object"}}]},
                          "'tools'"), (b"[]", "JSON object")]:
        st, _, payload = server.post("/v1/messages/count_tokens", body)
        e = json_or(payload, {})
        check(st == 400 and e.get("type") == "error" and e.get("error", {}).get("type") == "invalid_request_error" and
              needle in e.get("error", {}).get("message", ""),
              f"count_tokens refuses ({needle}): 400 in Anthropic's shape ({st} {payload[:200]!r})")

    # SmolLM2's own template writes no tool calls: tools are refused, naming the field.
    bad = [({"messages": MESSAGES}, "max_tokens"), ({"messages": MESSAGES, "max_tokens": 8, "tools": [
        {"name": "get_weather", "input_schema": {"type": "object"}}]}, "'tools': the model's chat template"),
        ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}], "max_tokens": 8},
         "messages[0].content[0].type"),
        ({"messages": MESSAGES, "max_tokens": 8, "temperature": 2}, "temperature"), (b"{not json", "JSON")]
    for body, needle in bad:
        st, _, payload = server.post("/v1/messages", body)
        e = json_or(payload, {})
        check(st == 400 and e.get("type") == "error" and e.get("error", {}).get("type") == "invalid_request_error" and
              needle in e.get("error", {}).get("message", ""),
              f"a bad request ({needle}): 400 in Anthropic's error shape ({st} {payload[:200]!r})")
    st, _, payload = server.post("/v1/messages/nothing", {})
    check(st == 404 and json_or(payload, {}).get("error", {}).get("type") == "not_found_error",
          f"an unknown /v1/messages route: 404 in Anthropic's shape ({st} {payload[:200]!r})")
    return ref


def anthropic_client_test(port, ref, api_key="none"):
    """The official anthropic client, when installed: create, stream, and an error it raises."""
    import anthropic
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=api_key, max_retries=0)
    # temperature through extra_body: newer clients (2.x) no longer take it as an argument.
    zero = {"temperature": 0}
    m = client.messages.create(model="claude-any", max_tokens=48, messages=MESSAGES, extra_body=zero)
    check(m.content[0].type == "text" and m.content[0].text == ref and m.stop_reason in ("end_turn", "max_tokens"),
          f"anthropic client: messages.create gives the text ({m.content!r})")
    with client.messages.stream(model="claude-any", max_tokens=48, messages=MESSAGES, extra_body=zero) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    check(text == ref and final.usage.output_tokens == m.usage.output_tokens,
          f"anthropic client: messages.stream gives the text ({text!r})")
    n = client.messages.count_tokens(model="claude-any", messages=MESSAGES)
    check(n.input_tokens == m.usage.input_tokens, f"anthropic client: count_tokens {n.input_tokens} is the "
          f"message's usage.input_tokens {m.usage.input_tokens}")
    # Tools with a template that writes no calls (SmolLM2's own): refused (tests/serve/test_tools.py runs them
    # with a template that has them).
    try:
        client.messages.create(model="claude-any", max_tokens=8, messages=MESSAGES,
                               tools=[{"name": "f", "input_schema": {"type": "object"}}])
        check(False, "anthropic client: tools are refused")
    except anthropic.BadRequestError as e:
        check("'tools'" in str(e), f"anthropic client: a BadRequestError naming tools ({e})")


def key_test(model, ref):
    """--api-key: /v1/messages and its count_tokens take x-api-key (Anthropic's header) or Bearer; without, a 401 in Anthropic's shape."""
    keyed = Server(model, "-t", "2", "-np", "1", "-c", "1024", "--api-key", "sesame", prefix="tandem-n-messages-")
    try:
        req = {"messages": MESSAGES, "max_tokens": 4, "temperature": 0}
        st, _, payload = keyed.post("/v1/messages", req)
        e = json_or(payload, {})
        check(st == 401 and e.get("type") == "error" and e.get("error", {}).get("type") == "authentication_error",
              f"/v1/messages without the key: 401 in Anthropic's shape ({st} {payload[:200]!r})")
        st, _, _ = keyed.post("/v1/messages", req, {"x-api-key": "wrong"})
        check(st == 401, f"a wrong x-api-key: 401 (got {st})")
        for h in ({"x-api-key": "sesame"}, {"Authorization": "Bearer sesame"}):
            st, _, payload = keyed.post("/v1/messages", req, h)
            check(st == 200, f"/v1/messages with {list(h)[0]}: 200 ({st} {payload[:200]!r})")
        counted = {"messages": MESSAGES}
        st, _, payload = keyed.post("/v1/messages/count_tokens", counted)
        e = json_or(payload, {})
        check(st == 401 and e.get("error", {}).get("type") == "authentication_error",
              f"count_tokens without the key: 401 in Anthropic's shape ({st} {payload[:200]!r})")
        st, _, payload = keyed.post("/v1/messages/count_tokens", counted, {"x-api-key": "sesame"})
        check(st == 200 and "input_tokens" in json_or(payload, {}), f"count_tokens with x-api-key: 200 ({st})")
        st, _, _ = keyed.post("/v1/chat/completions", req, {"x-api-key": "sesame"})
        check(st == 200, f"/v1/chat/completions with x-api-key: 200 (got {st})")
        if importlib.util.find_spec("anthropic") is not None:
            import anthropic
            client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{keyed.port}", api_key="sesame", max_retries=0)
            m = client.messages.create(model="m", max_tokens=4, messages=MESSAGES, extra_body={"temperature": 0})
            check(len(m.content) == 1, "the anthropic client sends the key as the server wants it")
    finally:
        keyed.stop()


def main():
    model, why = serve_test_inputs(BINARY)
    if why:
        return skip(why)
    import openai

    server = Server(model, "-t", "2", "-np", str(SLOTS), "-c", "4096", prefix="tandem-n-messages-")
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", max_retries=0)
        t0 = time.time()
        n_test(server, client)
        metrics_test(server, client)
        print(f"n checks: {time.time() - t0:.1f} s", flush=True)
        t0 = time.time()
        ref = messages_test(server, client)
        if importlib.util.find_spec("anthropic") is not None:
            anthropic_client_test(server.port, ref)
        else:
            print("note: the anthropic client is not installed (pip install anthropic): plain HTTP only")
        print(f"messages checks: {time.time() - t0:.1f} s", flush=True)
    finally:
        rc = server.stop()
        check(rc == 0, f"the server exits 0 on SIGTERM (got {rc})")
    key_test(model, ref)
    print(check.summary())
    return check.exit_code()


if __name__ == "__main__":
    sys.exit(main())
