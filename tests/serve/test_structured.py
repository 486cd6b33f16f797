#!/usr/bin/env python3
"""Structured output from `tandem serve` on loopback: response_format
json_schema through the official `openai` client against
SmolLM2-135M-Instruct, 50 requests with different seeds, each reply
validated by Python's `jsonschema`; a schema with patterns and number
bounds over more seeds; json_object, `grammar` on
/v1/completions, streaming, and the 400 answers for bad constraints.
Exit 0: passed; 77: skipped (model, client or jsonschema missing: said
why); 1: failed. The server binds 127.0.0.1 only; every loop is bounded.
"""
import concurrent.futures
import json
import sys
import time

from serve_harness import BINARY, SANITIZED, Checks, Server, serve_test_inputs, skip

# Under the sanitizers (~10x slower) 12 requests do to look for memory
# errors; the claim "50 of 50 valid" is the release build's.
N_REQUESTS = 12 if SANITIZED else 50
check = Checks()

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "city": {"type": "string", "maxLength": 24},
        "pets": {"type": "array", "items": {"$ref": "#/$defs/pet"}, "maxItems": 2},
        "employed": {"type": "boolean"},
    },
    "required": ["name", "age", "pets", "employed"],
    "additionalProperties": False,
    "$defs": {
        "pet": {
            "type": "object",
            "properties": {"kind": {"enum": ["cat", "dog", "fish"]}, "legs": {"type": "integer"}},
            "required": ["kind", "legs"],
            "additionalProperties": False,
        }
    },
}
MESSAGES = [{"role": "user", "content": "Describe a person as JSON: name, age, city, pets and whether employed."}]
# pattern (anchored, and anchored at the start only: anything may follow the
# capital) and bounds. (A pattern unanchored at both ends, such as "ok",
# lets the string close only once it holds a match: a model that does not
# write one goes on to max_tokens.)
BOUNDED = {
    "type": "object",
    "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}-\\d{2,4}$"},
        "count": {"type": "integer", "minimum": -5, "maximum": 250},
        "score": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
        "ratio": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
        "note": {"type": "string", "pattern": "^[A-Z]"},
    },
    "required": ["code", "count", "score", "ratio", "note"],
    "additionalProperties": False,
}
BOUNDED_MESSAGES = [{"role": "user", "content": "Give a product code, a count, a score, a ratio and a short note as JSON."}]


def main():
    model, why = serve_test_inputs(BINARY)
    if why:
        return skip(why)
    import openai
    try:
        import jsonschema
    except ImportError:
        return skip("the jsonschema Python package is not installed (pip install jsonschema)")
    with Server(model, "-np", "8", "-c", "8192", "-t", "2", prefix="tandem-structured-") as server:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", max_retries=0,
                               timeout=300)
        run_suite(client, openai, jsonschema)
    print(check.summary())
    return check.exit_code()


def schema_reply(client, seed):
    r = client.chat.completions.create(
        model="m", messages=MESSAGES, seed=seed, temperature=1.0, max_tokens=400,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}})
    return r.choices[0].message.content, r.choices[0].finish_reason


def run_suite(client, openai, jsonschema):
    # 50 requests, 8 at a time (the server's slots decode them together).
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(lambda s: schema_reply(client, s), range(N_REQUESTS)))
    valid = 0
    for seed, (text, finish) in enumerate(replies):
        try:
            jsonschema.validate(json.loads(text), SCHEMA)
            valid += 1 if finish == "stop" else 0
            if finish != "stop":
                print(f"seed {seed}: valid JSON but finish_reason {finish}")
        except (ValueError, jsonschema.ValidationError) as e:
            print(f"seed {seed}: invalid ({type(e).__name__}: {str(e)[:200]}): {text!r}")
    print(f"json_schema: {valid} of {N_REQUESTS} replies valid in {time.time() - t0:.1f} s; e.g. {replies[0][0]!r}")
    check(valid == N_REQUESTS, f"every json_schema reply validates ({valid} of {N_REQUESTS})")
    distinct = len({t for t, _ in replies})
    check(distinct >= min(10, N_REQUESTS // 2), f"different seeds give different replies ({distinct} distinct of {N_REQUESTS})")

    # pattern and bounds, each reply validated (strings by Python's re).
    n_bounded = max(4, N_REQUESTS // 4)

    def bounded_reply(seed):
        r = client.chat.completions.create(
            model="m", messages=BOUNDED_MESSAGES, seed=seed, temperature=1.0, max_tokens=300,
            response_format={"type": "json_schema", "json_schema": {"name": "bounded", "schema": BOUNDED}})
        return r.choices[0].message.content, r.choices[0].finish_reason

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        bounded = list(pool.map(bounded_reply, range(n_bounded)))
    ok = 0
    for seed, (text, finish) in enumerate(bounded):
        try:
            jsonschema.validate(json.loads(text), BOUNDED)
            ok += 1 if finish == "stop" else 0
            if finish != "stop":
                print(f"bounded seed {seed}: valid JSON but finish_reason {finish}")
        except (ValueError, jsonschema.ValidationError) as e:
            print(f"bounded seed {seed}: invalid ({type(e).__name__}: {str(e)[:200]}): {text!r}")
    print(f"pattern and bounds: {ok} of {n_bounded} replies valid; e.g. {bounded[0][0]!r}")
    check(ok == n_bounded, f"every reply with pattern and bounds validates ({ok} of {n_bounded})")

    # Streamed: the deltas put together validate too.
    text = ""
    for chunk in client.chat.completions.create(
            model="m", messages=MESSAGES, seed=7, temperature=1.0, max_tokens=400, stream=True,
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    whole, _ = schema_reply(client, 7)
    check(text == whole, f"streamed json_schema equals the whole reply of the same seed ({text!r} vs {whole!r})")

    # json_object: any JSON object.
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Give a JSON object with a name and an age."}],
        temperature=0, max_tokens=200, response_format={"type": "json_object"})
    obj_text = r.choices[0].message.content
    try:
        obj = json.loads(obj_text)
        check(isinstance(obj, dict) and r.choices[0].finish_reason == "stop",
              f"json_object gives a JSON object: {obj_text!r}")
    except ValueError:
        check(False, f"json_object gives JSON: {obj_text!r}")

    # llama-server's `grammar` (GBNF) on /v1/completions.
    for seed in range(3):
        c = client.completions.create(model="m", prompt="Is the sky blue? Answer:", max_tokens=8, seed=seed,
                                      extra_body={"grammar": 'root ::= " " ("yes" | "no") "."'})
        check(c.choices[0].text in (" yes.", " no.") and c.choices[0].finish_reason == "stop",
              f"a GBNF grammar constrains /v1/completions: {c.choices[0].text!r}")

    # Bad constraints: 400 with OpenAI's error shape naming the field.
    def bad(kw, param_prefix, words):
        try:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=4, **kw)
            check(False, f"{kw} is refused")
        except openai.BadRequestError as e:
            err = e.body if isinstance(e.body, dict) else {}
            err = err.get("error", err)
            param = err.get("param") or ""
            check(param.startswith(param_prefix) and words in err.get("message", ""),
                  f"400 for {kw}: param {param!r}, message {err.get('message')!r}")

    bad({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"s": {"type": "string", "pattern": "(a)\\1"}}}}}},
        "response_format.json_schema.schema.properties.s.pattern", "backreferences")
    bad({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}}}}},
        "response_format.json_schema.schema.properties.n.multipleOf", "only multipleOf 1")
    bad({"extra_body": {"grammar": "root ::= \"a\" |\nroot ::= x"}}, "grammar", "line 2")
    bad({"response_format": {"type": "xml"}}, "response_format.type", "json_schema")
    bad({"response_format": {"type": "json_object"}, "extra_body": {"grammar": 'root ::= "a"'}}, "grammar",
        "not several")


if __name__ == "__main__":
    sys.exit(main())
