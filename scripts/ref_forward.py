#!/usr/bin/env python3
"""From-scratch numpy reference forward pass for GGUF llama / gemma3 models.

Dequantizes every weight to float32 with the `gguf` package, then runs the
whole prompt as one causal batch in float64 and writes float32 logits
(n_tokens x n_vocab, row-major) -- the same layout as `tandem run --dump-logits`.

Usage:
  python3 scripts/ref_forward.py MODEL.gguf --tokens 2,818,5279 --out ref.logits
  python3 scripts/ref_forward.py MODEL.gguf --prompt-file toks.txt --out ref.logits
  (toks.txt: ids separated by whitespace/commas, e.g. `tandem tokenize` output;
   lines starting with '#' are ignored, and so is anything after a '# greedy' line.)

Variant switches (for localizing a mismatch; defaults are the HF/llama.cpp semantics):
  --rope-style {auto,norm,neox}   --no-post-norms   --swap-rope-base
  --gelu {tanh,erf}   --attn-scale S   --no-qk-norm   --no-embd-scale
  --all-global   --norm-plus-one
  --act-quant  (emulate llama.cpp CPU activation quantization + f16 KV cache)
"""
import argparse
import math
import sys

import numpy as np
import gguf


def field_value(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.contents()
    return v


class Model:
    def __init__(self, path):
        self.reader = gguf.GGUFReader(path)
        r = self.reader
        self.arch = field_value(r, "general.architecture")
        a = self.arch
        g = lambda k, d=None: field_value(r, f"{a}.{k}", d)
        self.n_embd = int(g("embedding_length"))
        self.n_layer = int(g("block_count"))
        self.n_ff = int(g("feed_forward_length"))
        self.n_head = int(g("attention.head_count"))
        self.n_head_kv = int(g("attention.head_count_kv", self.n_head))
        self.eps = float(g("attention.layer_norm_rms_epsilon"))
        self.rope_base = float(g("rope.freq_base", 10000.0))
        self.head_dim_k = int(g("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(g("attention.value_length", self.n_embd // self.n_head))
        self.n_rot = int(g("rope.dimension_count", self.head_dim_k))
        self.sliding_window = g("attention.sliding_window")
        self.rope_scale = None
        st = g("rope.scaling.type")
        if st is not None and st != "none":
            self.rope_scale = (st, float(g("rope.scaling.factor", 1.0)))
        self.softcap = g("final_logit_softcapping")
        self.w = {}
        self.types = {}
        self.act_quant = False
        for t in r.tensors:
            self.types[t.name] = t.tensor_type.name
            arr = gguf.quants.dequantize(t.data, t.tensor_type)
            arr = np.asarray(arr, dtype=np.float32)
            # GGUF shape is ne[0]-first; numpy layout is reversed (rows = ne[1]).
            shape = tuple(int(x) for x in reversed(list(t.shape)))
            self.w[t.name] = arr.reshape(shape)

    def W(self, name):
        return self.w[name]

    def mm(self, x, name):
        """x: (T, n_in) float64 times weight `name` (n_out, n_in) -> (T, n_out).
        With act_quant, x is first rounded the way llama.cpp's CPU backend does
        for this weight type (Q8_0 / Q8_K blocks, or f16)."""
        if self.act_quant:
            x = quantize_activation(x, self.types[name])
        return x @ self.w[name].astype(np.float64).T


def rms_norm(x, w, eps):
    # x: (..., d) float64
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return y * w.astype(np.float64)


def rope(x, pos, n_rot, base, style, freq_scale=1.0):
    """x: (T, H, D). Rotates the first n_rot dims."""
    T, H, D = x.shape
    half = n_rot // 2
    inv = base ** (-2.0 * np.arange(half, dtype=np.float64) / n_rot)
    ang = (pos.astype(np.float64) * freq_scale)[:, None] * inv[None, :]  # (T, half)
    c = np.cos(ang)[:, None, :]
    s = np.sin(ang)[:, None, :]
    out = x.copy()
    if style == "norm":
        x0 = x[:, :, 0:n_rot:2]
        x1 = x[:, :, 1:n_rot:2]
        out[:, :, 0:n_rot:2] = x0 * c - x1 * s
        out[:, :, 1:n_rot:2] = x0 * s + x1 * c
    elif style == "neox":
        x0 = x[:, :, :half]
        x1 = x[:, :, half:n_rot]
        out[:, :, :half] = x0 * c - x1 * s
        out[:, :, half:n_rot] = x0 * s + x1 * c
    else:
        raise ValueError(style)
    return out


def attention(q, k, v, scale, window=None):
    """q: (T, Hq, Dk), k: (T, Hkv, Dk), v: (T, Hkv, Dv) -> (T, Hq*Dv)."""
    T, Hq, _ = q.shape
    Hkv = k.shape[1]
    grp = Hq // Hkv
    qi = np.arange(T)[:, None]
    ki = np.arange(T)[None, :]
    mask = ki > qi
    if window is not None:
        mask = mask | ((qi - ki) >= window)
    out = np.empty((T, Hq, v.shape[2]), dtype=np.float64)
    for h in range(Hq):
        kh = h // grp
        s = (q[:, h, :] @ k[:, kh, :].T) * scale
        s = np.where(mask, -np.inf, s)
        s = s - s.max(axis=1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=1, keepdims=True)
        out[:, h, :] = p @ v[:, kh, :]
    return out.reshape(T, -1)


def attention_fa_f16(q, k, v, scale, window=None):
    """Emulates ggml's CPU flash attention with an f16 KV cache: Q rounded to
    f16, online softmax in f32, the V sum accumulated in f16 (rounded after
    every scale / multiply-add), divided by the running sum at the end."""
    T, Hq, Dk = q.shape
    Hkv = k.shape[1]
    grp = Hq // Hkv
    f16 = lambda a: a.astype(np.float16).astype(np.float32)
    q16 = f16(q)
    k16 = f16(k)
    v16 = f16(v)
    kv_of = np.arange(Hq) // grp
    acc = np.zeros((T, Hq, v.shape[2]), dtype=np.float32)
    M = np.full((T, Hq), -np.inf, dtype=np.float32)
    S = np.zeros((T, Hq), dtype=np.float32)
    scale = np.float32(scale)
    for c in range(T):
        qi = np.arange(T)
        vis = (qi >= c)
        if window is not None:
            vis &= (qi - c) < window
        vis = np.broadcast_to(vis[:, None], (T, Hq))
        kc = k16[c][kv_of]  # (Hq, Dk)
        s = (np.einsum("thd,hd->th", q16.astype(np.float64), kc.astype(np.float64))).astype(np.float32) * scale
        new_max = s > M
        ms = np.where(new_max, np.exp(M - s), np.float32(1)).astype(np.float32)
        vs = np.where(new_max, np.float32(1), np.exp(s - M)).astype(np.float32)
        ms = np.where(vis, ms, np.float32(1))
        vs = np.where(vis, vs, np.float32(0))
        acc_new = np.where(new_max[..., None], f16(acc * ms[..., None]), acc)
        vc = v16[c][kv_of]  # (Hq, Dv)
        acc_new = f16(vc[None] * vs[..., None] + acc_new)
        acc = np.where(vis[..., None], acc_new, acc)
        M = np.where(vis & new_max, s, M)
        S = np.where(vis, S * ms + vs, S)
    out = acc / S[..., None]
    return out.astype(np.float64).reshape(T, -1)


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def _q8_0(x):
    # ggml CPU quantize_row_q8_0: d = amax/127 stored f16, q = rint(x*127/amax)
    xs = x.astype(np.float32).reshape(x.shape[0], -1, 32)
    amax = np.abs(xs).max(axis=2, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        idv = np.where(amax > 0, np.float32(127.0) / amax, 0).astype(np.float32)
    q = np.clip(np.rint(xs * idv), -127, 127)
    d = (amax / np.float32(127.0)).astype(np.float16).astype(np.float64)
    return (q * d).reshape(x.shape)


def _q8_K(x):
    # ggml quantize_row_q8_K_ref: iscale = -127/max (max = signed value of largest |x|)
    xs = x.astype(np.float32).reshape(x.shape[0], -1, 256)
    idx = np.abs(xs).argmax(axis=2)[..., None]
    mx = np.take_along_axis(xs, idx, axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        isc = np.where(mx != 0, np.float32(-127.0) / mx, 0).astype(np.float32)
        d = np.where(mx != 0, np.float32(1.0) / isc, 0).astype(np.float32)
    q = np.minimum(127, np.rint(xs * isc))
    return (q * d.astype(np.float64)).reshape(x.shape)


def quantize_activation(x, wtype):
    if wtype in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"):
        return _q8_0(x)
    if wtype in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"):
        return _q8_K(x)
    if wtype == "F16":
        return x.astype(np.float16).astype(np.float64)
    return x


def mm(x, W):
    # x: (T, n_in) float64, W: (n_out, n_in) -> (T, n_out)
    return x @ W.astype(np.float64).T


def head(m, x):
    if m.act_quant:
        x = quantize_activation(x, m.types.get("output.weight", m.types["token_embd.weight"]))
    out_w = m.w.get("output.weight", m.w["token_embd.weight"])
    V = out_w.shape[0]
    logits = np.empty((x.shape[0], V), dtype=np.float64)
    CH = 32768
    for i in range(0, V, CH):
        logits[:, i:i + CH] = x @ out_w[i:i + CH].astype(np.float64).T
    return logits


def forward_llama(m, toks, opt):
    T = len(toks)
    pos = np.arange(T)
    x = m.W("token_embd.weight")[toks].astype(np.float64)
    hd = m.n_embd // m.n_head
    style = "norm" if opt.rope_style == "auto" else opt.rope_style
    scale = opt.attn_scale if opt.attn_scale else 1.0 / math.sqrt(hd)
    for il in range(m.n_layer):
        p = f"blk.{il}."
        h = rms_norm(x, m.W(p + "attn_norm.weight"), m.eps)
        q = m.mm(h, p + "attn_q.weight").reshape(T, m.n_head, hd)
        k = m.mm(h, p + "attn_k.weight").reshape(T, m.n_head_kv, hd)
        v = m.mm(h, p + "attn_v.weight").reshape(T, m.n_head_kv, hd)
        q = rope(q, pos, m.n_rot, m.rope_base, style)
        k = rope(k, pos, m.n_rot, m.rope_base, style)
        if opt.act_quant:  # f16 KV cache
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        a = attention_fa_f16(q, k, v, scale) if opt.act_quant else attention(q, k, v, scale)
        x = x + m.mm(a, p + "attn_output.weight")
        h = rms_norm(x, m.W(p + "ffn_norm.weight"), m.eps)
        f = silu(m.mm(h, p + "ffn_gate.weight")) * m.mm(h, p + "ffn_up.weight")
        x = x + m.mm(f, p + "ffn_down.weight")
    x = rms_norm(x, m.W("output_norm.weight"), m.eps)
    return head(m, x)


def forward_gemma3(m, toks, opt):
    T = len(toks)
    pos = np.arange(T)
    x = m.W("token_embd.weight")[toks].astype(np.float64)
    if not opt.no_embd_scale:
        x = x * float(np.float32(math.sqrt(m.n_embd)))
    hdk, hdv = m.head_dim_k, m.head_dim_v
    style = "neox" if opt.rope_style == "auto" else opt.rope_style
    scale = opt.attn_scale if opt.attn_scale else 1.0 / math.sqrt(hdk)
    gelu = gelu_tanh if opt.gelu == "tanh" else gelu_erf
    add1 = 1.0 if opt.norm_plus_one else 0.0
    nw = lambda name: m.W(name).astype(np.float64) + add1
    base_global, base_local = m.rope_base, opt.rope_base_local
    if opt.swap_rope_base:
        base_global, base_local = base_local, base_global
    for il in range(m.n_layer):
        p = f"blk.{il}."
        is_swa = ((il + 1) % 6 != 0) and not opt.all_global
        base = base_local if is_swa else base_global
        fscale = 1.0
        if (not is_swa) and m.rope_scale is not None and m.rope_scale[0] == "linear":
            fscale = 1.0 / m.rope_scale[1]
        window = int(m.sliding_window) if (is_swa and m.sliding_window) else None
        h = rms_norm(x, nw(p + "attn_norm.weight"), m.eps)
        q = m.mm(h, p + "attn_q.weight").reshape(T, m.n_head, hdk)
        k = m.mm(h, p + "attn_k.weight").reshape(T, m.n_head_kv, hdk)
        v = m.mm(h, p + "attn_v.weight").reshape(T, m.n_head_kv, hdv)
        if not opt.no_qk_norm:
            q = rms_norm(q, nw(p + "attn_q_norm.weight"), m.eps)
            k = rms_norm(k, nw(p + "attn_k_norm.weight"), m.eps)
        q = rope(q, pos, m.n_rot, base, style, fscale)
        k = rope(k, pos, m.n_rot, base, style, fscale)
        if opt.act_quant:  # f16 KV cache
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        a = attention_fa_f16(q, k, v, scale, window) if opt.act_quant else attention(q, k, v, scale, window)
        a = m.mm(a, p + "attn_output.weight")
        if not opt.no_post_norms:
            a = rms_norm(a, nw(p + "post_attention_norm.weight"), m.eps)
        x = x + a
        h = rms_norm(x, nw(p + "ffn_norm.weight"), m.eps)
        f = gelu(m.mm(h, p + "ffn_gate.weight")) * m.mm(h, p + "ffn_up.weight")
        f = m.mm(f, p + "ffn_down.weight")
        if not opt.no_post_norms:
            f = rms_norm(f, nw(p + "post_ffw_norm.weight"), m.eps)
        x = x + f
    x = rms_norm(x, nw("output_norm.weight"), m.eps)
    logits = head(m, x)
    if m.softcap:
        c = float(m.softcap)
        logits = c * np.tanh(logits / c)
    return logits


def parse_tokens_text(s):
    toks = []
    for line in s.splitlines():
        ls = line.strip()
        if ls.startswith("# greedy"):
            break
        if not ls or ls.startswith("#"):
            continue
        toks += [int(t) for t in ls.replace(",", " ").split()]
    return toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens")
    ap.add_argument("--prompt-file")
    ap.add_argument("--out")
    ap.add_argument("--rope-style", default="auto", choices=["auto", "norm", "neox"])
    ap.add_argument("--no-post-norms", action="store_true")
    ap.add_argument("--swap-rope-base", action="store_true")
    ap.add_argument("--rope-base-local", type=float, default=10000.0,
                    help="gemma3 sliding-window layers' rope base (llama.cpp: 10000)")
    ap.add_argument("--gelu", default="tanh", choices=["tanh", "erf"])
    ap.add_argument("--attn-scale", type=float, default=None)
    ap.add_argument("--no-qk-norm", action="store_true")
    ap.add_argument("--no-embd-scale", action="store_true")
    ap.add_argument("--all-global", action="store_true")
    ap.add_argument("--norm-plus-one", action="store_true")
    ap.add_argument("--act-quant", action="store_true",
                    help="emulate llama.cpp CPU numerics: Q8_0/Q8_K/f16 activations, f16 KV cache, CPU flash attention with f16 V accumulation")
    opt = ap.parse_args()
    if opt.tokens:
        toks = [int(t) for t in opt.tokens.replace(" ", ",").split(",") if t]
    elif opt.prompt_file:
        toks = parse_tokens_text(open(opt.prompt_file).read())
    else:
        ap.error("need --tokens or --prompt-file")
    m = Model(opt.model)
    m.act_quant = opt.act_quant
    if m.arch == "llama":
        logits = forward_llama(m, np.array(toks), opt)
    elif m.arch == "gemma3":
        logits = forward_gemma3(m, np.array(toks), opt)
    else:
        sys.exit(f"unsupported architecture {m.arch}")
    logits = logits.astype(np.float32)
    if opt.out:
        logits.tofile(opt.out)
    last = logits[-1]
    top = np.argsort(-last)[:5]
    print(f"arch={m.arch} n_tokens={len(toks)} n_vocab={logits.shape[1]}", file=sys.stderr)
    print("top5 last:", " ".join(f"{t}:{last[t]:.4f}" for t in top), file=sys.stderr)


if __name__ == "__main__":
    main()
