#!/usr/bin/env python3
"""The Python binding's embeddings (tools/python/tandem.py over libtandem.so,
TANDEM_LIBRARY) on tests/data/tiny-llama-Q4_K_M.gguf:

  - each pooling's vector is llama.cpp's llama-embedding's
    (tests/data/embeddings/llamacpp.json), to the bound test_embeddings.cpp
    uses for this file (6e-3), and far from the other poolings';
  - it is the vector `tandem serve --embeddings --pooling P` answers on
    /v1/embeddings for the same text (TANDEM_BINARY);
  - token ids give the vector of their text; bad input raises tandem.Error.

Exit 0: passed; 1: failed.
"""
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE.parent / "data"
sys.path.insert(0, str(HERE.parent / "serve"))
from serve_harness import Checks, Server  # noqa: E402

MODEL = str(DATA / "tiny-llama-Q4_K_M.gguf")
NAME = "tiny-llama-Q4_K_M.gguf"
TOLERANCE = 6e-3  # test_embeddings.cpp's for Q4_K_M: twice llama.cpp's spread between its own kernels
check = Checks()


def max_diff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")


def main():
    sys.path.insert(0, os.environ["TANDEM_PYTHON_DIR"])
    import tandem

    ref = json.loads((DATA / "embeddings" / "llamacpp.json").read_text())
    text = ref["text"]
    refs = {c["pooling"]: c["embedding"] for c in ref["cases"] if c["model"] == NAME}
    check(sorted(refs) == ["cls", "last", "mean"], f"references for the three poolings ({sorted(refs)})")
    ours = {}
    with tandem.Model(MODEL, n_ctx=512, n_threads=2) as m:
        check(m.n_embd == 256, f"n_embd 256 ({m.n_embd})")
        for pooling, expected in refs.items():
            v = m.embed(text, pooling=pooling)
            ours[pooling] = v
            d = max_diff(v, expected)
            print(f"{pooling}: max |Model.embed - llama.cpp| = {d:.3g}")
            check(d < TOLERANCE, f"{pooling}: within {TOLERANCE} of llama.cpp ({d:.3g})")
            for other, theirs in refs.items():
                if other != pooling:
                    check(max_diff(v, theirs) > 10 * TOLERANCE, f"{pooling} is far from {other}'s reference")
        ids = m.tokenize(text)
        check(m.embed(ids) == ours["mean"], "token ids give their text's vector")
        raw = m.embed(text, normalize=-1)
        norm = sum(x * x for x in raw) ** 0.5
        check(abs(norm - 1) > 0.1 and max_diff([x / norm for x in raw], ours["mean"]) < 1e-6,
              f"normalize=-1: the vector before its Euclidean normalization (length {norm:.3g})")
        for call, words in [(lambda: m.embed(text, pooling="max"), 'found "max"'),
                            (lambda: m.embed(text, pooling=None), "found NULL"),
                            (lambda: m.embed(text, normalize=-3), "params->normalize"),
                            (lambda: m.embed(""), "empty string"),
                            (lambda: m.embed([]), "n_tokens"),
                            (lambda: m.embed([1, 10 ** 6]), "tokens[1]: expected a token id in [0, 32000)")]:
            try:
                call()
                check(False, f"an error mentioning {words!r}")
            except tandem.Error as e:
                check(words in str(e), f"the error {str(e)!r} mentions {words!r}")

    # The server's route on the same model gives the same vectors.
    for pooling in refs:
        server = Server(MODEL, "-t", "2", "-np", "1", "-c", "512", "--embeddings", "--pooling", pooling,
                        prefix="tandem-capi-embed-")
        try:
            status, body = server.post_json("/v1/embeddings", {"input": text, "encoding_format": "float"})
            served = body["data"][0]["embedding"] if status == 200 else []
            d = max_diff(served, ours[pooling])
            print(f"{pooling}: max |Model.embed - /v1/embeddings| = {d:.3g}")
            check(status == 200 and d < 1e-5, f"{pooling}: /v1/embeddings gives Model.embed's vector ({status}, {d:.3g})")
        finally:
            server.stop()
    print(f"embeddings: {check.summary()}")
    return check.exit_code()


if __name__ == "__main__":
    check.run(main)
