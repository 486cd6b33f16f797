#!/usr/bin/env python3
"""Compare two float32 logits dumps (n_tokens x n_vocab): KL(a||b) per position, max abs diff, top-5."""
import sys
import numpy as np

def load(p, V):
    a = np.fromfile(p, dtype=np.float32)
    return a.reshape(-1, V).astype(np.float64)

def logsoftmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))

def main():
    a_p, b_p, V = sys.argv[1], sys.argv[2], int(sys.argv[3])
    a, b = load(a_p, V), load(b_p, V)
    assert a.shape == b.shape, (a.shape, b.shape)
    la, lb = logsoftmax(a), logsoftmax(b)
    kl = (np.exp(la) * (la - lb)).sum(axis=1)
    print("KL(a||b) per position:", " ".join(f"{k:.2e}" for k in kl))
    print(f"mean KL {kl.mean():.3e}  max KL {kl.max():.3e}")
    print(f"max abs logit diff {np.abs(a-b).max():.4f}  (per pos: {' '.join(f'{d:.3f}' for d in np.abs(a-b).max(axis=1))})")
    agree = (a.argmax(1) == b.argmax(1)).mean()
    print(f"argmax agreement {agree:.3f}")
    for name, x in (("a", a), ("b", b)):
        t = np.argsort(-x[-1])[:5]
        print(f"top5 last {name}:", " ".join(f"{i}:{x[-1][i]:.3f}" for i in t))

main()
