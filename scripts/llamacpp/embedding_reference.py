#!/usr/bin/env python3
"""Writes tests/data/embeddings/llamacpp.json: llama.cpp's pooled, normalized
embeddings of one text, for each model and pooling, as test_embeddings.cpp
reads them. Nothing here runs in CI.

    DUMP_EMBEDDING=/tmp/dump_embedding LLAMA_EMBEDDING=$L/build/bin/llama-embedding \\
        python3 scripts/llamacpp/embedding_reference.py

The vectors come from dump_embedding.cpp (llama.h, every digit); each is
checked against llama-embedding's own JSON (7 decimals), whose command is
stored with it. Build llama-embedding with `cmake --build $L/build --target
llama-embedding` and dump_embedding as README.md says for dump_logits. The
models: tests/data/tiny-llama-Q4_K_M.gguf and
../shared/models/synth-llama-Q8_0.gguf.
"""
import json
import os
import pathlib
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEXT = "The quick brown fox jumps over the lazy dog, and embeddings pool hidden states into one vector."
MODELS = [ROOT / "tests/data/tiny-llama-Q4_K_M.gguf", ROOT.parent / "shared/models/synth-llama-Q8_0.gguf"]
POOLINGS = ["mean", "cls", "last"]


def llama_embedding(exe, model, pooling):
    """llama-embedding's vector and command; its log thread now and then
    exits before the end of the JSON, so it is asked up to 10 times."""
    cmd = [exe, "-m", str(model), "-p", TEXT, "--pooling", pooling, "--embd-normalize", "2",
           "--embd-output-format", "json", "-t", "1"]
    shown = " ".join(shlex.quote(a) for a in ["llama-embedding", "-m", model.name] + cmd[3:])
    for _ in range(10):
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        try:
            return json.loads(out[out.index("{"):out.rindex("}") + 1])["data"][0]["embedding"], shown
        except ValueError:
            continue
    return None, shown


def main():
    exe, dump = os.environ.get("LLAMA_EMBEDDING"), os.environ.get("DUMP_EMBEDDING")
    if not exe or not dump:
        sys.exit("set LLAMA_EMBEDDING to a llama-embedding binary and DUMP_EMBEDDING to dump_embedding")
    cases = []
    for model in MODELS:
        for pooling in POOLINGS:
            out = json.loads(subprocess.run([dump, str(model), TEXT, pooling, "1"], check=True, capture_output=True,
                                            text=True).stdout)
            vec = out["embedding"]
            ref, shown = llama_embedding(exe, model, pooling)
            if ref is None:
                sys.exit(f"llama-embedding gave no JSON: {shown}")
            d = max(abs(a - b) for a, b in zip(vec, ref))
            if len(ref) != len(vec) or d > 1e-6:
                sys.exit(f"dump_embedding and llama-embedding differ by {d}: {shown}")
            cases.append({"model": model.name, "pooling": pooling, "n_tokens": out["n_tokens"], "command": shown,
                          "dump_command": f"dump_embedding {model.name} \"$TEXT\" {pooling} 1",
                          "embedding": vec})
            print(f"{model.name} {pooling}: {len(vec)} floats, {out['n_tokens']} tokens; "
                  f"llama-embedding's 7 decimals within {d:.1e}", file=sys.stderr)
    doc = {"about": "llama.cpp (llama-cpp-python 0.3.36's vendored source, CPU, AVX2): the pooled embedding of "
                    "`text`, L2-normalized (--embd-normalize 2); written by "
                    "scripts/llamacpp/embedding_reference.py",
           "text": TEXT, "cases": cases}
    dest = ROOT / "tests/data/embeddings/llamacpp.json"
    dest.parent.mkdir(exist_ok=True)
    dest.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {dest}", file=sys.stderr)


if __name__ == "__main__":
    main()
