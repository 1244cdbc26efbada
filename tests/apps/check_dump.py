#!/usr/bin/env python3
"""Reads a kda-check --dump directory with NumPy and re-derives facts the dump must satisfy:
dtypes and shapes, q/k/v exactly bf16 values, k rows unit-norm, offsets valid, and the reference
output matching a NumPy float64 re-implementation of the per-token recurrence on one shape. The
raw inputs (issue 16), when the dump has them: bf16 values, shapes, the raw gate reproducing the
gate through a NumPy float64 gate producer, sigmoid(beta_logits) = beta and l2norm(k_raw) = k up
to bf16 rounding, and the raw path's reference output (GPU dumps) re-derived from them."""
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


RAW_FILES = ("k_raw", "gate_raw", "beta_logits", "a_log", "dt_bias")
BF16_U = 2.0 ** -8  # bf16's unit roundoff


def gate_cumsum(raw, a_log, dt_bias, lower_bound, cu, chunk=64):
    """The gate producer (kda-forward.md §3.1) in float64: gamma = lb sigmoid(exp(A_log) (raw +
    dt_bias)), inclusive sum within chunks counted from each sequence start, times log2 e."""
    B, T, H, K = raw.shape
    x = np.exp(a_log.astype(np.float64))[None, None, :, None] * (
        raw.astype(np.float64) + dt_bias.astype(np.float64)[None, None])
    gamma = lower_bound / (1.0 + np.exp(-x))
    seqs = [(b, 0, T) for b in range(B)] if cu is None else [
        (0, int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]
    g = np.zeros_like(gamma)
    for b, start, end in seqs:
        for c in range(start, end, chunk):
            stop = min(c + chunk, end)
            g[b, c:stop] = np.cumsum(gamma[b, c:stop], axis=0)
    return g * (1.0 / math.log(2.0))


def check_raw(d, meta, k, g, beta, cu):
    """The raw inputs' relations to the contract ones; returns (k_hat, beta_raw) as the raw
    path's reference takes them (float64 results rounded to float32)."""
    raw = {n: np.load(d / f"{n}.npy") for n in RAW_FILES}
    for n, a in raw.items():
        assert a.dtype == np.float32, f"{d}/{n}.npy: dtype {a.dtype}"
    B, T, H, K = k.shape
    assert raw["k_raw"].shape == k.shape and raw["gate_raw"].shape == k.shape, d
    assert raw["beta_logits"].shape == (B, T, H), d
    assert raw["a_log"].shape == (H,) and raw["dt_bias"].shape == (H, K), d
    for n in ("k_raw", "gate_raw", "beta_logits"):
        assert is_bf16(raw[n]), f"{d}/{n}.npy: not bf16 values"
    active = T if cu is None else int(cu[-1])
    # The gate is the producer's output on the raw gate (the dump's float32 bound).
    mine = gate_cumsum(raw["gate_raw"], raw["a_log"], raw["dt_bias"], meta["lower_bound"], cu)
    diff = np.abs(mine - g)[:, :active]
    assert np.all(diff <= 2.0 ** -20 * np.abs(g[:, :active]) + 1e-30), \
        f"{d}: gate_raw does not reproduce gate.npy (max diff {diff.max():.3e})"
    # beta = sigmoid of the logits' fp32 draw, the logits that draw rounded to bf16.
    logits = raw["beta_logits"].astype(np.float64)
    beta_raw = 1.0 / (1.0 + np.exp(-logits))
    err = np.abs(beta_raw - beta)[:, :active]
    assert np.all(err <= 0.25 * BF16_U * 1.01 * np.abs(logits[:, :active]) + 2.0 ** -24), \
        f"{d}: sigmoid(beta_logits) is not beta up to bf16 rounding (max diff {err.max():.3e})"
    # k = l2norm of k_raw's fp32 draw: within three bf16 roundings of l2norm(k_raw).
    kr = raw["k_raw"].astype(np.float64)
    k_hat = kr / np.sqrt(np.sum(kr * kr, axis=-1, keepdims=True) + 1e-6)
    err = np.abs(k_hat - k)[:, :active]
    assert np.all(err <= 3 * BF16_U * 1.01 * np.abs(k[:, :active]) + 1e-30), \
        f"{d}: l2norm(k_raw) is not k up to bf16 rounding (max diff {err.max():.3e})"
    return k_hat.astype(np.float32), beta_raw.astype(np.float32)


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
        # kda-check --backend raw computes only the raw path's reference.
        note = "no out_reference (raw path only)"
        if (d / "out_reference.npy").exists() or not (d / "out_reference_raw.npy").exists():
            ref = np.load(d / "out_reference.npy")
            assert ref.dtype == np.float64, d
            mine = recurrent(q, k, v, g, beta, cu, h0)
            err = np.max(np.abs(mine - ref)) / max(np.max(np.abs(ref)), 1e-300)
            assert err < 1e-9, f"{d}: NumPy recurrence differs from out_reference by {err:.3e}"
            note = f"numpy recurrence vs out_reference rel {err:.2e}"
        if "lower_bound" in meta:
            assert all(f"{n}.npy" in meta["inputs"] for n in RAW_FILES), d
            k_hat, beta_raw = check_raw(d, meta, k, g, beta, cu)
            note += ", raw inputs consistent"
            if (d / "out_reference_raw.npy").exists():  # written by the GPU backends
                raw_ref = np.load(d / "out_reference_raw.npy")
                mine = recurrent(q, k_hat, v, g, beta_raw, cu, h0)
                rel = np.max(np.abs(mine - raw_ref)) / max(np.max(np.abs(raw_ref)), 1e-300)
                assert rel < 1e-9, f"{d}: NumPy recurrence differs from out_reference_raw by {rel:.3e}"
                note += f", numpy raw recurrence vs out_reference_raw rel {rel:.2e}"
        else:
            assert not any((d / f"{n}.npy").exists() for n in RAW_FILES), \
                f"{d}: raw files without meta.json's lower_bound"
        print(f"{d.name}: ok ({note})")
    print(f"{len(dirs)} passed, 0 failed")


if __name__ == "__main__":
    main(sys.argv[1])
