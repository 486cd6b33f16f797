#!/usr/bin/env bash
# Regenerates the fuzzer's seed corpus in tests/fuzz/corpus/: small valid
# GGUF files (each < 50 KB) that between them reach every part of the
# reader: all value types and nested arrays, every tensor type family,
# a non-default alignment, version 2, a header-only file, a file without
# tensors, and a miniature Llama header. Only python3's standard library is
# needed, so the seeds do not depend on Tandem's own writer being correct.
set -euo pipefail
out="${1:-$(cd "$(dirname "$0")" && pwd)/corpus}"
mkdir -p "$out"

python3 - "$out" <<'PY'
import os
import struct
import sys

out = sys.argv[1]
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block elements, block bytes)
TYPES = {0: (1, 4), 1: (1, 2), 30: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
         8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210)}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STRING:
        return gstr(v)
    if t == ARRAY:
        elem, items = v
        return struct.pack("<IQ", elem, len(items)) + b"".join(value(elem, i) for i in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors=(), alignment=32, version=3, write_data=True, pad_end=True, seed=1):
    """kvs: [(key, type, value)]; tensors: [(name, [ne...], type_id)]."""
    if alignment != 32:
        kvs = kvs + [("general.alignment", U32, alignment)]
    body = b"".join(gstr(k) + struct.pack("<I", t) + value(t, v) for k, t, v in kvs)
    infos, blobs, offset = b"", [], 0
    for name, ne, type_id in tensors:
        elems, block_bytes = TYPES[type_id]
        rows = 1
        for n in ne[1:]:
            rows *= n
        size = ne[0] // elems * block_bytes * rows
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", type_id, offset)
        blobs.append((offset, bytes((seed * 131 + i * 7) & 0xFF for i in range(size))))
        offset = (offset + size + alignment - 1) // alignment * alignment
    data = struct.pack("<IIQQ", 0x46554747, version, len(tensors), len(kvs)) + body + infos
    if not (pad_end or tensors):
        return data
    data += b"\0" * (-len(data) % alignment)
    if write_data:
        start = len(data)
        for off, blob in blobs:
            data += b"\0" * (start + off - len(data)) + blob
        data += b"\0" * (-len(data) % alignment)
    return data


arch = [("general.architecture", STRING, "llama")]
files = {}
files["minimal.gguf"] = gguf(arch)
files["vocab_only.gguf"] = gguf(arch + [("tokenizer.ggml.tokens", ARRAY, (STRING, ["<unk>", "<s>", "</s>", "a"]))],
                                pad_end=False)
files["all_values.gguf"] = gguf(arch + [
    ("v.u8", U8, 200), ("v.i8", I8, -100), ("v.u16", U16, 60000), ("v.i16", I16, -30000),
    ("v.u32", U32, 4000000000), ("v.i32", I32, -2000000000), ("v.f32", F32, 1e-5),
    ("v.bool", BOOL, 1), ("v.string", STRING, "h\u00e9llo"), ("v.u64", U64, 2**64 - 1),
    ("v.i64", I64, -2**63), ("v.f64", F64, 0.1),
    ("v.strings", ARRAY, (STRING, ["", "x", "\u2581the"])),
    ("v.floats", ARRAY, (F32, [0.5, -1.0])),
    ("v.empty", ARRAY, (U64, [])),
    ("v.nested", ARRAY, (ARRAY, [(U32, [1, 2]), (STRING, ["a"]), (ARRAY, [(I8, [-1])])])),
])
files["tensor_types.gguf"] = gguf(arch, [
    ("f32", [32, 2], 0), ("f16", [32], 1), ("bf16", [16], 30), ("q4_0", [32], 2), ("q4_1", [32], 3),
    ("q5_0", [32], 6), ("q5_1", [32], 7), ("q8_0", [64], 8), ("q2_k", [256], 10), ("q3_k", [256], 11),
    ("q4_k", [256, 2], 12), ("q5_k", [256], 13), ("q6_k", [256, 1, 2], 14),
])
files["v2_align64.gguf"] = gguf(arch + [("llama.block_count", U32, 1)],
                                [("a", [8, 2, 1, 2], 0), ("b", [32], 8)], alignment=64, version=2)
files["header_only.gguf"] = gguf(arch + [("tandem.header_only", BOOL, 1)],
                                 [("big", [4096, 4096], 12), ("norm", [4096], 0)], write_data=False)
vocab = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % i for i in range(16)] + ["\u2581" + w for w in
         ["the", "a", "of", "to", "and", "in", "is", "it", "that", "was", "for", "on", "with", "as", "at"]]
files["mini_llama.gguf"] = gguf(arch + [
    ("general.name", STRING, "mini"),
    ("llama.context_length", U32, 64), ("llama.embedding_length", U32, 256),
    ("llama.block_count", U32, 1), ("llama.feed_forward_length", U32, 256),
    ("llama.attention.head_count", U32, 2), ("llama.attention.head_count_kv", U32, 1),
    ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5), ("llama.rope.freq_base", F32, 10000.0),
    ("tokenizer.ggml.model", STRING, "llama"),
    ("tokenizer.ggml.tokens", ARRAY, (STRING, vocab)),
    ("tokenizer.ggml.scores", ARRAY, (F32, [-float(i) for i in range(len(vocab))])),
    ("tokenizer.ggml.token_type", ARRAY, (I32, [2, 3, 3] + [6] * 16 + [1] * 15)),
    ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.add_bos_token", BOOL, 1),
], [
    ("output_norm.weight", [256], 0), ("token_embd.weight", [256, len(vocab)], 14),
    ("blk.0.attn_norm.weight", [256], 0), ("blk.0.attn_q.weight", [256, 16], 12),
    ("blk.0.attn_k.weight", [256, 8], 12), ("blk.0.ffn_down.weight", [256, 8], 14),
])

for name, data in files.items():
    assert len(data) < 50 * 1024, (name, len(data))
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    print(f"{name}: {len(data)} bytes")
PY
