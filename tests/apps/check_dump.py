#!/usr/bin/env python3
"""Reads a kda-check --dump directory with NumPy and re-derives facts the dump must satisfy:
dtypes and shapes, q/k/v exactly bf16 values, k rows unit-norm, offsets valid, and the reference
output matching a NumPy float64 re-implementation of the per-token recurrence on one shape."""
import json
import math
import pathlib
import sys

import numpy as np


def is_bf16(a):
    bits = a.astype(np.float32).view(np.uint32)
    return np.all((bits & 0xFFFF) == 0)


def recurrent(q, k, v, g, beta, cu, h0, chunk=64):
    """float64 per-token recurrence (kda-forward.md §2.1), packed or dense, on normalized q."""
    B, T, H, K = q.shape
    V = v.shape[3]
    out = np.zeros((B, T, H, V))
    if cu is None:
        seqs = [(b, 0, T) for b in range(B)]
    else:
        seqs = [(0, int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]
    for s, (b, start, end) in enumerate(seqs):
        for h in range(H):
            S = np.zeros((K, V)) if h0 is None else h0[s, h].astype(np.float64).copy()
            for t in range(start, end):
                local = t - start
                prev = g[b, t - 1, h] if local % chunk else np.zeros(K)
                gamma = g[b, t, h].astype(np.float64) - prev.astype(np.float64)
                S = (2.0 ** gamma)[:, None] * S
                kt = k[b, t, h].astype(np.float64)
                delta = beta[b, t, h] * (v[b, t, h] - S.T @ kt)
                S = S + np.outer(kt, delta)
                qt = q[b, t, h].astype(np.float64)
                qt = qt / math.sqrt(qt @ qt + 1e-6)
                out[b, t, h] = S.T @ (qt / math.sqrt(K))
    return out


def main(root):
    root = pathlib.Path(root)
    dirs = sorted(p for p in root.iterdir() if (p / "q.npy").exists())
    if not dirs:
        sys.exit(f"{root}: no dumped problem")
    for d in dirs:
        meta = json.loads((d / "meta.json").read_text())
        q, k, v = (np.load(d / f"{n}.npy") for n in ("q", "k", "v"))
        g, beta = np.load(d / "gate.npy"), np.load(d / "beta.npy")
        assert q.dtype == np.float32 and g.dtype == np.float32, d
        assert q.shape == (meta["batch"], meta["tokens"], meta["heads"], meta["key_dim"]), d
        assert is_bf16(q) and is_bf16(k) and is_bf16(v), f"{d}: q/k/v not bf16 values"
        cu = np.load(d / "cu_seqlens.npy") if (d / "cu_seqlens.npy").exists() else None
        if cu is not None:
            assert cu.dtype == np.int32 and cu[0] == 0 and np.all(np.diff(cu) >= 0), d
            active = int(cu[-1])
            norms = np.linalg.norm(k[0, :active].astype(np.float64), axis=-1)
        else:
            norms = np.linalg.norm(k.astype(np.float64), axis=-1)
        assert np.all(np.abs(norms - 1) < 2e-2), f"{d}: k rows not unit norm"
        h0 = np.load(d / "h0.npy") if (d / "h0.npy").exists() else None
        ref = np.load(d / "out_reference.npy")
        assert ref.dtype == np.float64, d
        mine = recurrent(q, k, v, g, beta, cu, h0)
        err = np.max(np.abs(mine - ref)) / max(np.max(np.abs(ref)), 1e-300)
        assert err < 1e-9, f"{d}: NumPy recurrence differs from out_reference by {err:.3e}"
        print(f"{d.name}: ok (numpy recurrence vs out_reference rel {err:.2e})")
    print(f"{len(dirs)} passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1])
