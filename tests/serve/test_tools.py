#!/usr/bin/env python3
"""A tool call round trip through `tandem serve` on loopback, with the
official `openai` client and SmolLM2-135M-Instruct: the model writes a call,
the server parses it into `tool_calls` (whole and streamed), the client sends
the result back as a `tool` message, and a final answer comes. The same on
Anthropic's /v1/messages with the official `anthropic` client, when it is
installed: tool_use blocks (whole and streamed), a tool_result sent back,
count_tokens, and errors naming the field.

SmolLM2's own template has no tools, so the server runs with
--chat-template tests/data/chat_templates/qwen2_5.jinja (Qwen 2.5's template:
ChatML, whose tokens SmolLM2 has, with Hermes-style <tool_call> calls). A
135M model does not choose to call a tool by itself: the user asks it to
repeat a call's text, which it does at temperature 0, and the server finds
the call in what it wrote.

With tool_choice "required" the arguments are held to the tool's
parameters (an enum, an integer with bounds, patterns): 10 seeds at
temperature 1 (3 under the sanitizers), each call's arguments validated by
Python's `jsonschema` (skipped, said why, when it is missing).

Exit 0: passed; 77: skipped (the binary, the model or the client is missing:
said why); 1: failed. Every request is bounded (max_tokens, timeouts).
"""
import importlib.util
import json
import pathlib
import sys
import time

from serve_harness import BINARY, SANITIZED, Checks, Server, serve_test_inputs, skip

# Seeds of the schema-held calls: 10, or 3 under the sanitizers (~10x slower).
N_SEEDS = 3 if SANITIZED else 10
TEMPLATE = pathlib.Path(__file__).resolve().parent.parent / "data" / "chat_templates" / "qwen2_5.jinja"
check = Checks()


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                   "required": ["city"]}}}
CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
BOOKING = {"type": "function", "function": {
    "name": "book_table", "description": "Book a table at a restaurant",
    "parameters": {"type": "object", "properties": {
        "restaurant": {"type": "string", "pattern": "^[A-Z][a-z]{2,12}$"},
        "guests": {"type": "integer", "minimum": 1, "maximum": 8},
        "time": {"type": "string", "enum": ["18:00", "19:30", "21:00"]},
        "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}},
        "required": ["restaurant", "guests", "time", "code"], "additionalProperties": False}}}


def streamed_calls(client, **kw):
    """The calls of a streamed answer, put together from the chunks' tool_calls deltas by index."""
    calls, finish, content = {}, None, ""
    for chunk in client.chat.completions.create(stream=True, **kw):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            c["id"] += tc.id or ""
            c["name"] += (tc.function.name or "") if tc.function else ""
            c["arguments"] += (tc.function.arguments or "") if tc.function else ""
        finish = chunk.choices[0].finish_reason or finish
    return [calls[i] for i in sorted(calls)], finish, content


def round_trip(client, server):
    import openai

    ask = [{"role": "user", "content": "Repeat exactly, with nothing else:\n" + CALL_TEXT}]
    common = dict(model="m", tools=[WEATHER], temperature=0, max_tokens=60)

    # The tools reach the template: Qwen 2.5's prompt lists them in <tools>.
    _, body = server.request("POST", "/apply-template", {"messages": ask, "tools": [WEATHER]}, timeout=60)
    prompt = json.loads(body)["prompt"]
    check("<tools>" in prompt and '"name": "get_weather"' in prompt, f"the prompt lists the tools: {prompt[:300]!r}")

    # 1. The model writes the call; the server answers tool_calls.
    r = client.chat.completions.create(messages=ask, **common)
    msg = r.choices[0].message
    print(f"first answer: content={msg.content!r} tool_calls={msg.tool_calls} ({r.choices[0].finish_reason})")
    check(r.choices[0].finish_reason == "tool_calls", f"finish_reason tool_calls (got {r.choices[0].finish_reason})")
    check(msg.tool_calls is not None and len(msg.tool_calls) == 1, "one tool call")
    if not msg.tool_calls:
        return
    call = msg.tool_calls[0]
    check(call.type == "function" and call.function.name == "get_weather", f"the call names get_weather: {call}")
    check(json.loads(call.function.arguments) == {"city": "Paris"}, f"arguments are JSON text: {call.function.arguments!r}")
    check(call.id.startswith("call_") and msg.content in (None, ""), f"an id, no content: {call.id!r} {msg.content!r}")

    # The same, streamed: OpenAI's tool_calls deltas.
    calls, finish, content = streamed_calls(client, messages=ask, **common)
    check(finish == "tool_calls" and content == "", f"streamed: finish tool_calls, no content ({finish}, {content!r})")
    check(len(calls) == 1 and calls[0]["name"] == "get_weather" and json.loads(calls[0]["arguments"]) == {"city": "Paris"}
          and calls[0]["id"].startswith("call_"), f"streamed: the same call: {calls}")

    # 2. The result goes back as a tool message; the model answers in text.
    history = ask + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 18, "sky": "cloudy"})}]
    _, body = server.request("POST", "/apply-template", {"messages": history, "tools": [WEATHER]}, timeout=60)
    prompt = json.loads(body)["prompt"]
    check(CALL_TEXT in prompt and "<tool_response>" in prompt and "cloudy" in prompt,
          f"the call and its result are rendered back: {prompt[-400:]!r}")
    final = client.chat.completions.create(messages=history, **common)
    fm = final.choices[0].message
    print(f"final answer: {fm.content!r} ({final.choices[0].finish_reason})")
    check(final.choices[0].finish_reason in ("stop", "length") and fm.content and not fm.tool_calls,
          f"a final answer in text: {fm.content!r}, {final.choices[0].finish_reason}")

    # tool_choice "none": the same request gives text only, the call's text included.
    none = client.chat.completions.create(messages=ask, tool_choice="none", **common)
    check(not none.choices[0].message.tool_calls and "get_weather" in (none.choices[0].message.content or ""),
          f"tool_choice none: all content: {none.choices[0].message.content!r}")

    # tool_choice naming a function, or "required": generation is held to a
    # call by a grammar, so a call comes back every time, its arguments a
    # JSON object (one call: with parallel calls allowed, this small model
    # goes on writing calls until max_tokens).
    for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
        held = client.chat.completions.create(
            messages=[{"role": "user", "content": "What is the weather in Rome?"}], tool_choice=choice,
            parallel_tool_calls=False, **common)
        tc = held.choices[0].message.tool_calls or []
        check(len(tc) >= 1 and tc[0].function.name == "get_weather" and
              isinstance(json.loads(tc[0].function.arguments), dict) and
              held.choices[0].finish_reason == "tool_calls",
              f"tool_choice {choice} gives a call to get_weather: {held.choices[0].message} "
              f"({held.choices[0].finish_reason})")
        print(f"tool_choice {choice}: {[(c.function.name, c.function.arguments) for c in tc]}")

    held_to_schema(client, openai)

    # A bad tool is a 400 in OpenAI's error shape, naming the field.
    try:
        client.chat.completions.create(messages=ask, model="m", max_tokens=4,
                                       tools=[{"type": "function", "function": {"name": "bad name"}}])
        check(False, "a bad tool name is refused")
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        check(body.get("param") == "tools[0].function.name", f"400 names tools[0].function.name: {e.body}")


ANTHROPIC_WEATHER = {"name": "get_weather", "description": WEATHER["function"]["description"],
                     "input_schema": WEATHER["function"]["parameters"]}


def sse_events(payload):
    """[(event name, data as JSON)] of a server-sent event stream."""
    out = []
    for block in payload.decode().split("\n\n"):
        lines = block.strip().split("\n")
        name = next((ln[len("event: "):] for ln in lines if ln.startswith("event: ")), None)
        data = "\n".join(ln[len("data: "):] for ln in lines if ln.startswith("data: "))
        if block.strip():
            out.append((name, json.loads(data)))
    return out


def anthropic_round_trip(server, openai_client):
    """/v1/messages with tools, through the anthropic client: the call the model writes as a tool_use block
    (whole and streamed), tool_choice any and tool held to a call, the tool_result sent back for a final answer
    (the OpenAI route's, as the template gets the same conversation), count_tokens, errors naming the field."""
    import anthropic
    client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{server.port}", api_key="none", max_retries=0,
                                 timeout=120)
    ask = [{"role": "user", "content": "Repeat exactly, with nothing else:\n" + CALL_TEXT}]
    rome = [{"role": "user", "content": "What is the weather in Rome?"}]
    # temperature through extra_body: newer clients (2.x) no longer take it as an argument.
    common = dict(model="m", max_tokens=60, tools=[ANTHROPIC_WEATHER], extra_body={"temperature": 0})
    one_call = {"type": "any", "disable_parallel_tool_use": True}

    # 1. The model writes the call (tool_choice auto): a tool_use block with the parsed input.
    m = client.messages.create(messages=ask, **common)
    uses = [b for b in m.content if b.type == "tool_use"]
    print(f"anthropic: {m.content} ({m.stop_reason})")
    check(m.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather" and
          uses[0].input == {"city": "Paris"} and uses[0].id.startswith("toolu_") and
          all(b.type == "tool_use" for b in m.content), f"anthropic: one tool_use block, no text: {m}")
    # count_tokens: what the same request evaluates, and what the OpenAI route's same request does.
    n = client.messages.count_tokens(model="m", messages=ask, tools=[ANTHROPIC_WEATHER])
    o = openai_client.chat.completions.create(messages=ask, model="m", tools=[WEATHER], temperature=0, max_tokens=1)
    check(n.input_tokens == m.usage.input_tokens == o.usage.prompt_tokens,
          f"count_tokens {n.input_tokens} = usage.input_tokens {m.usage.input_tokens} = the OpenAI route's "
          f"prompt_tokens {o.usage.prompt_tokens}")

    # The same, streamed with the client's helper: the final message holds the block, its input parsed.
    with client.messages.stream(messages=ask, **common) as s:
        kinds = [e.type for e in s]
        final = s.get_final_message()
    check(final.stop_reason == "tool_use" and [b.type for b in final.content] == ["tool_use"] and
          final.content[0].input == {"city": "Paris"} and final.content[0].name == "get_weather" and
          "input_json" in kinds, f"anthropic stream: the tool_use block ({final.content}, events {set(kinds)})")

    # 2. tool_choice any (one call) and tool: a grammar holds the reply to a call, for a question the model
    # would answer in text.
    for choice in (one_call, {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}):
        forced = client.messages.create(messages=rome, tool_choice=choice, **common)
        uses = [b for b in forced.content if b.type == "tool_use"]
        print(f"anthropic tool_choice {choice}: {[(b.name, b.input) for b in uses]} ({forced.stop_reason})")
        check(forced.stop_reason == "tool_use" and len(uses) == 1 and uses[0].name == "get_weather" and
              isinstance(uses[0].input, dict), f"anthropic tool_choice {choice}: one call: {forced}")
    call = uses[0]

    # Streamed as Anthropic's events: the block starts with an empty input, the input comes as JSON.
    st, ctype, payload = server.post("/v1/messages", {"model": "m", "max_tokens": 60, "temperature": 0,
                                                      "messages": rome, "tools": [ANTHROPIC_WEATHER],
                                                      "tool_choice": one_call, "stream": True})
    events = sse_events(payload)
    names = [nm for nm, _ in events]
    check(st == 200 and ctype.startswith("text/event-stream") and
          names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
                    "message_delta", "message_stop"], f"streamed tool_use events: {names}")
    if len(events) == 7:
        start, delta, delta_msg = events[2][1], events[3][1], events[5][1]
        block = start.get("content_block", {})
        check(start.get("index") == 0 and block.get("type") == "tool_use" and block.get("input") == {} and
              block.get("name") == "get_weather" and block.get("id", "").startswith("toolu_"),
              f"content_block_start: the tool_use block, input empty ({start})")
        check(delta.get("delta", {}).get("type") == "input_json_delta" and
              json.loads(delta["delta"].get("partial_json", "null")) == call.input,
              f"input_json_delta: the call's input ({delta} vs {call.input})")
        check(delta_msg.get("delta", {}).get("stop_reason") == "tool_use", f"message_delta: tool_use ({delta_msg})")

    # 3. The result goes back as a tool_result block; the model answers in text, as the OpenAI route does
    # for the same conversation.
    result = json.dumps({"temperature_c": 18, "sky": "cloudy"})
    history = rome + [{"role": "assistant", "content": forced.content},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}]}]

    def same():
        return openai_client.chat.completions.create(
            model="m", tools=[WEATHER], temperature=0, max_tokens=60, messages=rome + [
                {"role": "assistant", "content": None, "tool_calls": [{"id": call.id, "type": "function", "function": {
                    "name": call.name, "arguments": json.dumps(call.input)}}]},
                {"role": "tool", "tool_call_id": call.id, "content": result}])
    # The OpenAI route's request first, so that both answers below start from the same cached prompt (a prompt
    # evaluated afresh or from the cache can differ in the last digits, and this small model's greedy text
    # with them).
    same()
    final = client.messages.create(messages=history, **common)
    print(f"anthropic final answer: {final.content} ({final.stop_reason})")
    check(final.stop_reason in ("end_turn", "max_tokens") and [b.type for b in final.content] == ["text"] and
          final.content[0].text, f"anthropic: a final answer in text ({final})")
    same = same()
    check(final.content[0].text == same.choices[0].message.content and
          final.usage.input_tokens == same.usage.prompt_tokens,
          f"the OpenAI route's answer to the same conversation ({same.choices[0].message.content!r}, "
          f"{same.usage.prompt_tokens} vs {final.usage.input_tokens} prompt tokens)")
    n = client.messages.count_tokens(model="m", messages=history, tools=[ANTHROPIC_WEATHER])
    check(n.input_tokens == final.usage.input_tokens, f"count_tokens of the history ({n.input_tokens})")

    # tool_choice none: the tools are shown, the reply is all text (the call's text included).
    none = client.messages.create(messages=ask, tool_choice={"type": "none"}, **common)
    check(none.stop_reason != "tool_use" and [b.type for b in none.content] == ["text"] and
          "get_weather" in none.content[0].text, f"anthropic tool_choice none: all text ({none.content})")

    # 4. Bad tools and blocks: a 400 in Anthropic's shape naming the field.
    bad = [(dict(tools=[{"name": "bad name", "input_schema": {"type": "object"}}]), "tools[0].name"),
           (dict(tool_choice={"type": "tool", "name": "nothing"}), "tool_choice.name"),
           (dict(tools=[{"name": "f", "input_schema": {"type": "string"}}]), "tools[0].input_schema.type"),
           (dict(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_none",
                                                         "content": "x"}]}]), "messages[0].content[0].tool_use_id"),
           (dict(messages=rome + [{"role": "assistant", "content": forced.content}]), "messages")]
    for change, field in bad:
        kw = dict(common, messages=rome)
        kw.update(change)
        try:
            client.messages.create(**kw)
            check(False, f"anthropic: {field} refused")
        except anthropic.BadRequestError as e:
            err = e.body.get("error", {}) if isinstance(e.body, dict) else {}
            check(e.status_code == 400 and err.get("type") == "invalid_request_error" and
                  f"'{field}'" in err.get("message", ""), f"anthropic: a 400 naming {field} ({e.body})")
        try:
            client.messages.count_tokens(**{k: v for k, v in kw.items() if k not in ("max_tokens", "extra_body")})
            check(False, f"anthropic count_tokens: {field} refused")
        except anthropic.BadRequestError as e:
            check(f"'{field}'" in str(e), f"anthropic count_tokens: a 400 naming {field} ({e})")


def held_to_schema(client, openai):
    """tool_choice "required": every call's arguments valid under the tool's parameters."""
    try:
        import jsonschema
    except ImportError:
        print("SKIP (part): the jsonschema Python package is not installed; arguments not validated")
        return
    schema = BOOKING["function"]["parameters"]
    ask = [{"role": "user", "content": "Book a table for four at Luigi's tonight."}]
    valid = 0
    t0 = time.time()
    for seed in range(N_SEEDS):
        r = client.chat.completions.create(model="m", messages=ask, tools=[BOOKING, WEATHER], tool_choice="required",
                                           parallel_tool_calls=False, seed=seed, temperature=1.0, max_tokens=150)
        tc = r.choices[0].message.tool_calls or []
        try:
            check(len(tc) == 1 and r.choices[0].finish_reason == "tool_calls",
                  f"seed {seed}: one call ({r.choices[0].finish_reason}): {r.choices[0].message}")
            if tc and tc[0].function.name == "book_table":
                jsonschema.validate(json.loads(tc[0].function.arguments), schema)
            elif tc:
                jsonschema.validate(json.loads(tc[0].function.arguments), WEATHER["function"]["parameters"])
            valid += 1 if tc else 0
            print(f"seed {seed}: {tc[0].function.name if tc else None} {tc[0].function.arguments if tc else ''} ({r.usage.completion_tokens} tokens, {time.time() - t0:.1f} s)")
        except (ValueError, jsonschema.ValidationError) as e:
            check(False, f"seed {seed}: arguments follow the schema ({type(e).__name__}: {str(e)[:200]}): "
                         f"{tc[0].function.arguments!r}")
    check(valid == N_SEEDS, f"tool_choice required: every call's arguments validate ({valid} of {N_SEEDS}, "
                            f"{time.time() - t0:.1f} s)")

    # A keyword the converter refuses, with strict: a 400 naming where
    # (without strict that tool's arguments are any JSON object:
    # ServeTools.RequiredCallsFollowTheParametersOrSayWhyNot).
    lookahead = {"type": "function", "function": {"name": "find", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "pattern": "^(?=a)"}}, "required": ["q"]}}}
    strict = {"type": "function", "function": dict(lookahead["function"], strict=True)}
    try:
        client.chat.completions.create(model="m", messages=ask, tools=[strict], tool_choice="required", max_tokens=4)
        check(False, "a strict tool with a refused schema is refused")
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        body = body.get("error", body)
        check(body.get("param") == "tools[0].function.parameters.properties.q.pattern" and
              "lookahead" in body.get("message", ""), f"400 names the pattern: {e.body}")


def main():
    model, why = serve_test_inputs(BINARY)
    if why:
        return skip(why)
    import openai
    t0 = time.time()
    with Server(model, "-np", "1", "-c", "2048", "-t", "2", "--chat-template", str(TEMPLATE),
                prefix="tandem-tools-") as server:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", max_retries=0,
                               timeout=120)
        round_trip(client, server)
        print(f"openai checks: {time.time() - t0:.1f} s", flush=True)
        if importlib.util.find_spec("anthropic") is not None:
            t1 = time.time()
            anthropic_round_trip(server, client)
            print(f"anthropic checks: {time.time() - t1:.1f} s", flush=True)
        else:
            print("note: the anthropic client is not installed (pip install anthropic): its tool checks skipped")
    print(f"tool round trip: {check.summary()}, {time.time() - t0:.1f} s")
    return check.exit_code()


if __name__ == "__main__":
    sys.exit(main())
