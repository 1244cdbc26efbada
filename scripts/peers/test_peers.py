#!/usr/bin/env python3
"""Tests of the GPU-free parts of the FLA peer scripts (peers_common.py) and of their command
lines' usage/skip behaviour. Needs only NumPy and PyYAML:

    python3 -m pytest scripts/peers/test_peers.py        # or, without pytest:
    python3 scripts/peers/test_peers.py

Tests that need our binaries (build/snapbin/kda-check or build/*/bin/kda-check, kda-bench) make a
small CPU dump with `kda-check --backend reference` and are skipped when no binary is found.
PEERS_FLA_INTERPRET=1 adds an end-to-end run of fla_check and fla_bench with FLA's real Triton
kernels under TRITON_INTERPRET=1 on the CPU (needs torch, triton and fla-core importable; slow:
minutes), see README.md.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import peers_common as pc  # noqa: E402


class SkipTest(Exception):
    pass


def skip(reason):
    try:
        import pytest
        pytest.skip(reason)
    except ImportError:
        raise SkipTest(reason) from None


def find_binary(name):
    for pattern in (f"build/snapbin/{name}", f"build/release/bin/{name}", f"build/*/bin/{name}"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            if os.access(path, os.X_OK):
                return path
    return None


_DUMP_CACHE = {}


def reference_dump(shape_file):
    """A `kda-check --backend reference --dump` of a shape file (CPU only), made once per run."""
    if shape_file in _DUMP_CACHE:
        return _DUMP_CACHE[shape_file]
    exe = find_binary("kda-check")
    if exe is None:
        skip("no kda-check binary under build/ (build the project first)")
    out = tempfile.mkdtemp(prefix="peers-dump-")
    csv_file = os.path.join(out, "report.csv")
    dump = os.path.join(out, "dump")
    run = subprocess.run([exe, "--backend", "reference", "--shapes", os.path.join(ROOT, shape_file),
                          "--dump", dump, "--csv", csv_file], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    _DUMP_CACHE[shape_file] = (dump, csv_file)
    return dump, csv_file


# --- the §9.4 budget (cases of tests/harness/test_budget.cpp) -----------------------------------

GOLDEN = [1.0, -2.0, 4.0, 0.5]
LOW = [1.0, -2.0, 4.0625, 0.5]
MAX_ONLY = pc.BudgetRule(rms_limit=math.inf)


def test_budget_boundary_passes():
    j = pc.judge(GOLDEN, LOW, [1.0, -2.0 - 0.1875, 4.0, 0.5], MAX_ONLY)
    assert (j.elements, j.ref_err, j.max_golden, j.budget, j.max_abs_err, j.worst_index) == \
        (4, 0.0625, 4.0, 0.1875, 0.1875, 1)
    assert j.passed() and j.verdict() == "passed"


def test_budget_just_over_fails_with_distinct_digits():
    j = pc.judge(GOLDEN, LOW, [1.0, -2.0, 4.0, 0.5 + 0.1875 + 2.0**-40], MAX_ONLY)
    assert not j.within_budget and j.worst_index == 3
    assert j.verdict() == "failed: max abs err 1.87500000001e-1 > budget 1.87500000000e-1"
    far = pc.judge(GOLDEN, LOW, [1.0, -2.0, 4.0, 1.25], MAX_ONLY)
    assert far.verdict() == "failed: max abs err 7.5e-1 > budget 1.9e-1"


def test_budget_non_finite():
    nan, inf = math.nan, math.inf
    j = pc.judge(GOLDEN, LOW, [1.0, nan, 4.0, 0.5], MAX_ONLY)
    assert j.non_finite == 1 and math.isinf(j.max_abs_err) and j.worst_index == 1
    assert j.verdict() == "failed: 1 non-finite value"
    j = pc.judge(GOLDEN, LOW, [inf, nan, -inf, 0.5])
    assert j.non_finite == 3 and j.worst_index == 0 and j.verdict() == "failed: 3 non-finite values"
    j = pc.judge([nan, 1.0], [nan, 1.0], [nan, 1.0])
    assert not j.passed() and j.verdict() == "failed: the reference has 1 non-finite value"


def test_budget_relative_rms():
    golden = [1.0] * 100
    j = pc.judge(golden, golden, [1.0049] * 100)
    assert j.within_budget and abs(j.rel_rms - 0.0049) < 1e-12 and j.passed()
    j = pc.judge(golden, golden, [1.0061] * 100)
    assert j.within_budget and not j.within_rms
    assert j.verdict() == "failed: rel RMS 6.1e-3 >= 5e-3"
    j = pc.judge(golden, golden, [1.25] * 100, pc.BudgetRule(rms_limit=0.25))
    assert j.rel_rms == 0.25
    assert j.verdict() == "failed: max abs err 2.5e-1 > budget 1.6e-2; rel RMS 2.5e-1 >= 2.5e-1"


def test_budget_zero_golden_empty_huge_mismatch():
    zeros = [0.0] * 8
    assert pc.judge(zeros, zeros, zeros).passed()
    actual = list(zeros)
    actual[3] = 1e-30
    j = pc.judge(zeros, zeros, actual)
    assert math.isinf(j.rel_rms) and not j.passed()
    j = pc.judge([], [], [])
    assert j.elements == 0 and j.passed() and j.verdict() == "passed"
    j = pc.judge([1e300, -1e300], [1e300, -1e300], [1.001e300, -1e300])
    assert math.isfinite(j.rel_rms) and abs(j.rel_rms - 0.001 / math.sqrt(2)) < 1e-9
    try:
        pc.judge([1.0], [1.0, 2.0], [1.0])
    except ValueError:
        pass
    else:
        raise AssertionError("length mismatch accepted")


def test_budget_fused_against_explicit():
    golden, explicit_out = [1.0, 2.0], [1.0, 2.125]  # budget 2 (0.125 + 2/128) = 0.28125
    assert pc.judge(golden, explicit_out, [1.0, 2.28125], MAX_ONLY).passed()
    assert not pc.judge(golden, explicit_out, [1.0, 2.3], MAX_ONLY).passed()


def test_max_abs_difference_and_location():
    d, i = pc.max_abs_difference([0.0, 1.0, -3.0], [0.0, 1.5, -1.0])
    assert (d, i) == (2.0, 2)
    d, i = pc.max_abs_difference([0.0, math.nan], [0.0, 1.0])
    assert math.isinf(d) and i == 1
    assert pc.rel_rms_difference([1.0, 1.0], [1.0, 1.0], [1.0, 1.0]) == 0.0
    # [B=1, T=10, H=2, V=4]: index of (t=7, h=1, c=3); packed cu = [0, 5, 5, 8] (T = 10 > 8).
    index = ((0 * 10 + 7) * 2 + 1) * 4 + 3
    text = pc.describe_location(index, (1, 10, 2, 4), "out", [0, 5, 5, 8])
    assert text == "token 7 (seq 2, position 2), head 1, channel 3", text
    index = ((0 * 10 + 9) * 2 + 0) * 4 + 0
    assert "inactive suffix" in pc.describe_location(index, (1, 10, 2, 4), "out", [0, 5, 5, 8])
    assert pc.describe_location(5, (2, 3, 1, 4), "out") == "batch 0, token 1, head 0, channel 1"
    assert pc.describe_location(13, (2, 3, 1, 4), "out") == "batch 1, token 0, head 0, channel 1"
    assert pc.describe_location(1 * 4 + 2, (2, 1, 2, 2), "state") == "seq 1, head 0, key 1, value 0"


# --- timing statistics and the stopping rule ------------------------------------------------------

def test_quantiles_and_summary():
    xs = sorted([5.0, 1.0, 4.0, 2.0, 3.0])
    assert pc.quantile_linear(xs, 0.5) == 3.0
    assert abs(pc.quantile_linear(xs, 0.2) - 1.8) < 1e-15   # 0.8 between 1 and 2
    assert pc.quantile_rank(xs, 0.25) == 2.0                 # round(1.0)
    assert pc.quantile_rank([1.0, 2.0, 3.0, 4.0], 0.5) == 3.0  # round(1.5) = 2: halves away from 0
    s = pc.summarize([1.0, 2.0, 3.0, 4.0])
    assert s["median"] == 2.5 and s["n"] == 4 and math.isinf(s["noise"])  # < 5 samples
    s = pc.summarize([1.0, 1.0, 1.0, 1.0, 2.0])
    assert abs(s["noise"] - math.sqrt(0.2) / 1.2) < 1e-12
    assert pc.geomean([1.0, 4.0]) == 2.0 and math.isnan(pc.geomean([1.0, 0.0]))


def test_stopping_rule():
    c = pc.StdrelCriterion(min_samples=10, min_time_s=0.0, max_noise=0.005, timeout_s=100)
    for _ in range(9):
        c.add_sample(1e-3)
    assert c.check(0.0) is None            # fewer than min_samples
    c.add_sample(1e-3)
    assert c.check(0.0) == "noise"
    c = pc.StdrelCriterion(min_samples=10, min_time_s=1.0, max_noise=0.005, timeout_s=100)
    for _ in range(20):
        c.add_sample(1e-3)
    assert c.check(0.0) is None            # accumulated time 0.02 s < 1 s
    assert c.check(100.0) == "timeout"
    noisy = pc.StdrelCriterion(min_samples=10, min_time_s=0.0, max_noise=1e-6, timeout_s=1e9)
    rng = np.random.default_rng(0)
    reason = None
    for x in 1e-3 * (1 + 0.05 * rng.standard_normal(5000)):
        noisy.add_sample(float(x))
        reason = noisy.check(0.0)
        if reason:
            break
    assert reason == "stable", reason
    bad = pc.StdrelCriterion()
    for _ in range(64):
        bad.add_sample(math.nan)
    assert bad.check(0.0) == "non_finite"


# --- shape files --------------------------------------------------------------------------------

def test_shape_files_of_the_repo():
    contract = pc.load_shape_file(os.path.join(ROOT, "shapes/contract.yaml"))
    assert [s.id for s in contract] == ["h96-fixed", "h96-ragged6", "h96-uniform8", "h64-fixed",
                                        "h64-ragged6", "h64-uniform8"]
    ragged = contract[1]
    assert ragged.seq_lens == [1300, 547, 2048, 963, 271, 3063] and ragged.tokens == 8192
    assert ragged.cu_seqlens[-1] == 8192 and ragged.num_seqs == 6 and ragged.heads == 96
    assert pc.forward_bytes(ragged) == 1211105280  # kda-bench's bytes model, README example
    assert pc.forward_bytes(contract[3]) == 807403520
    smoke = {s.id: s for s in pc.load_shape_file(os.path.join(ROOT, "shapes/smoke.yaml"))}
    assert smoke["smoke-dense"].batch == 2 and smoke["smoke-dense"].cu_seqlens is None
    assert smoke["smoke-state"].initial_state and smoke["smoke-state"].final_state
    assert smoke["smoke-rowscale"].q_rows["huge_values"] == [1e20, 3e38]
    edge = {s.id: s for s in pc.load_shape_file(os.path.join(ROOT, "shapes/edge.yaml"))}
    assert edge["edge-offsets-end-early"].tokens == 200 and edge["edge-all-empty"].tokens == 64
    assert pc.select_shapes(list(edge.values()), ["edge-single-token"], "edge")[0].tokens == 1


def _shape_error(text):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        pc.load_shape_file(f.name)
    except pc.InputError as e:
        return str(e).replace(f.name, "F")
    finally:
        os.unlink(f.name)
    raise AssertionError("accepted: " + text)


def test_shape_file_errors():
    assert _shape_error("shapes:\n  - id: a\n    heads: 0\n    seq_lens: [1]\n") == \
        "F: shape 'a': field 'heads': expected an integer >= 1, got '0'"
    assert "field 'sequence_lens'" in _shape_error("shapes:\n  - id: a\n    heads: 1\n    sequence_lens: [1]\n")
    assert "got both" in _shape_error("shapes:\n  - id: a\n    heads: 1\n    seq_lens: [1]\n    batch: 1\n    seq_len: 2\n")
    assert "a unique id" in _shape_error("shapes:\n  - {id: a, heads: 1, seq_lens: [1]}\n  - {id: a, heads: 1, seq_lens: [1]}\n")
    assert "expected an integer >= 130" in _shape_error(
        "shapes:\n  - id: b\n    heads: 1\n    seq_lens: [65, 65]\n    total_tokens: 129\n")
    assert "the string \"4\"" in _shape_error("shapes:\n  - id: a\n    heads: \"4\"\n    seq_lens: [1]\n")
    assert "every sequence is empty" in _shape_error("shapes:\n  - id: a\n    heads: 1\n    seq_lens: [0, 0]\n")
    assert "empty shape file" in _shape_error("")
    assert "not valid YAML" in _shape_error("shapes: [\n")
    # 1e-3 is a number (as for yaml-cpp), not a string.
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("shapes:\n  - id: a\n    heads: 1\n    seq_lens: [3]\n    q_rows: {min_scale: 1e-3, huge_values: [1e20]}\n")
    try:
        s = pc.load_shape_file(f.name)[0]
        assert s.q_rows["min_scale"] == 1e-3 and s.q_rows["huge_values"] == [1e20]
    finally:
        os.unlink(f.name)


# --- chunks and the gate conversion -------------------------------------------------------------

def test_chunk_starts():
    s = pc.chunk_starts(200, [0, 70, 70, 140])
    assert s[0] and s[64] and not s[63] and s[70] and s[134] and not s[135]
    assert s[140:].all()  # inactive suffix
    d = pc.chunk_starts(130, None)
    assert list(np.flatnonzero(d)) == [0, 64, 128]


def _random_problem(seed, B, T, H, K, cu):
    rng = np.random.default_rng(seed)
    starts = pc.chunk_starts(T, cu)
    raw = pc.round_to_bf16(rng.standard_normal((B, T, H, K)).astype(np.float32))
    gate = pc.gate_cumsum_reference(raw, rng.uniform(size=H), rng.uniform(size=(H, K)), starts)
    if cu is not None:
        gate[:, cu[-1]:] = 0.0
    return gate, starts


def test_gate_conversion_is_the_per_token_natural_log_gate():
    for B, T, cu in ((1, 300, [0, 100, 0 + 100, 237]), (2, 130, None)):
        gate, starts = _random_problem(1, B, T, 3, 16, cu)
        g = pc.log2_cumulative_to_fla_gate(gate, starts)
        assert g.dtype == np.float32 and g.shape == gate.shape
        assert (g <= 0).all() and (g >= pc.LOWER_BOUND - 1e-6).all()   # natural log, in [lb, 0]
        # exp(g_t) is the per-token decay factor 2^gamma_t.
        g64 = gate.astype(np.float64)
        for t in (0, 1, 63, 64, 65, 99, 100, 101, 129):
            if t >= T:
                continue
            gamma = g64[:, t] if starts[t] else g64[:, t] - g64[:, t - 1]
            assert np.allclose(np.exp(g[:, t].astype(np.float64)), np.exp2(gamma), rtol=5e-7, atol=0)
        # FLA's reconstruction (fp32 chunk cumsum times its fp32 RCP_LN2) gives G back to fp32 rounding.
        back = pc.fla_gate_to_log2_cumulative(g, starts)
        err = np.abs(back.astype(np.float64) - g64)
        assert err.max() <= 64 * 2.0**-24 * max(1.0, np.abs(g64).max()), err.max()
        if cu is not None:
            assert (g[:, cu[-1]:] == 0).all() and (back[:, cu[-1]:] == 0).all()


def test_gate_conversion_at_chunk_starts_uses_fla_constant():
    gate = np.full((1, 2, 1, 1), -1.0, dtype=np.float32)  # t = 0 opens a chunk, t = 1 does not
    starts = np.array([True, False])
    g = pc.log2_cumulative_to_fla_gate(gate, starts)
    assert g[0, 0, 0, 0] == np.float32(-1.0 / pc.RCP_LN2_F32) and g[0, 1, 0, 0] == 0.0
    assert abs(float(g[0, 0, 0, 0]) - (-math.log(2.0))) < 1e-7
    assert pc.RCP_LN2_F32 == 1.4426950216293335  # fp32(1.4426950216), as Triton sees FLA's constant


def test_round_to_bf16():
    x = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, np.nan, -2.5, 3.4e38], dtype=np.float32)
    y = pc.round_to_bf16(x)
    assert y[0] == 1.0 and y[1] == 1.0 and y[2] == 1.0 + 2.0**-6  # ties to even
    assert np.isnan(y[3]) and y[4] == -2.5 and pc.is_bf16(y[np.isfinite(y)])


def test_l2norm_rows_huge_tiny_zero():
    rows = np.array([[3e38, -3e38, 1.0, 0.0], [1e20, 1e20, 0.0, 0.0], [1e-30, 0.0, 0.0, 0.0],
                     [0.0, 0.0, 0.0, 0.0], [3.0, 4.0, 0.0, 0.0], [np.nan, 1.0, 0.0, 0.0]], dtype=np.float32)
    for dtype in (np.float32, np.float64):
        y = pc.l2norm_rows(rows, dtype)
        assert y.dtype == dtype
        assert np.allclose(y[0], [2**-0.5, -2**-0.5, 0, 0], rtol=1e-6) and np.allclose(y[1], [2**-0.5] * 2 + [0, 0])
        assert abs(y[2, 0] - 1e-30 / math.sqrt(1e-60 + 1e-6)) <= 1e-6 * abs(y[2, 0])
        assert (y[3] == 0).all() and np.allclose(y[4], [0.6, 0.8, 0, 0], rtol=1e-6) and np.isnan(y[5, 0])


def test_recurrence_matches_chunk_free_definition_on_a_toy():
    rng = np.random.default_rng(3)
    B, T, H, K, V = 1, 5, 1, 3, 2
    q = rng.standard_normal((B, T, H, K))
    k = pc.l2norm_rows(rng.standard_normal((B, T, H, K)))
    v = rng.standard_normal((B, T, H, V))
    gamma = -rng.uniform(size=(B, T, H, K))
    gate = np.cumsum(gamma, axis=1)
    beta = rng.uniform(size=(B, T, H))
    out, ht = pc.recurrent_forward(q, k, v, gate, beta, final_state=True)
    S = np.zeros((K, V))
    for t in range(T):
        S = np.diag(2.0 ** gamma[0, t, 0]) @ S
        kt = k[0, t, 0]
        S = S + np.outer(kt, beta[0, t, 0] * (v[0, t, 0] - S.T @ kt))
        qn = q[0, t, 0] / math.sqrt(q[0, t, 0] @ q[0, t, 0] + 1e-6)
        assert np.allclose(out[0, t, 0], S.T @ qn / math.sqrt(K), rtol=1e-13, atol=1e-15)
    assert np.allclose(ht[0, 0], S, rtol=1e-13, atol=1e-15)


# --- output files ---------------------------------------------------------------------------------

def test_csv_and_atomic_write():
    text = pc.to_csv(["a", "b", "c", "d"], [{"a": 1.5, "b": math.nan, "c": "x,y", "d": math.inf}])
    assert text == 'a,b,c,d\n1.5,,"x,y",inf\n'
    d = tempfile.mkdtemp()
    try:
        path = os.path.join(d, "sub", "out.csv")
        pc.write_atomic(path, "one\n", force=False)
        try:
            pc.write_atomic(path, "two\n", force=False)
        except pc.InputError as e:
            assert "pass --force" in str(e)
        else:
            raise AssertionError("overwrote without force")
        pc.write_atomic(path, "two\n", force=True)
        assert open(path).read() == "two\n"
        assert os.listdir(os.path.dirname(path)) == ["out.csv"]  # no temp file left behind
    finally:
        shutil.rmtree(d)


def test_bench_csv_is_read_by_kda_bench_compare():
    """A CSV in fla_bench's layout is accepted by `kda-bench compare` against our own results."""
    exe = find_binary("kda-bench")
    ours = sorted(glob.glob(os.path.join(ROOT, "results/h200/*/bench-contract.csv")))
    if exe is None or not ours:
        skip("no kda-bench binary or no results/h200/*/bench-contract.csv")
    import fla_bench
    rows = []
    with open(ours[-1], newline="") as f:
        for r in csv.DictReader(f):
            if r["path"] == "fused" and r["stage"] == "" and r["mode"] == "warm":
                rows.append({"shape_id": r["shape_id"], "path": "fla-prenorm", "stage": "", "mode": "warm",
                             "median_s": 2 * float(r["median_s"]), "noise": 0.001, "verdict": "passed",
                             "fla_call": "chunk_kda(q=bfloat16[1, 8192, 96, 128], g=float32[...])"})
    assert rows
    d = tempfile.mkdtemp()
    try:
        fla_csv = os.path.join(d, "fla.csv")
        pc.write_atomic(fla_csv, pc.to_csv(fla_bench.COLUMNS, rows), force=False)
        run = subprocess.run([exe, "compare", fla_csv, ours[-1], "--a-path", "fla-prenorm", "--b-path", "fused",
                              "--mode", "warm"], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr + run.stdout
        assert "0.5" in run.stdout and "geomean" in run.stdout.lower(), run.stdout
    finally:
        shutil.rmtree(d)


# --- dumps -----------------------------------------------------------------------------------------

def test_dump_loader_and_recurrence_on_a_reference_dump():
    dump, report = reference_dump("shapes/smoke.yaml")
    dirs = pc.find_dump_problems(dump)
    assert [os.path.basename(d) for d in dirs] == ["smoke-dense", "smoke-packed", "smoke-rowscale", "smoke-state"]
    ours = {}
    with open(report, newline="") as f:
        for r in csv.DictReader(f):
            ours[(r["shape"], r["path"], r["tensor"])] = r
    for directory in dirs:
        p = pc.load_dump_problem(directory)
        golden = p.load("out_reference")
        assert golden.dtype == np.float64
        out, ht = pc.recurrent_forward(p.q, p.k, p.v, p.gate, p.beta, p.cu_seqlens, p.h0,
                                       final_state=p.load("ht_reference") is not None)
        assert np.max(np.abs(out - golden)) <= 1e-12 * max(1.0, np.max(np.abs(golden)))
        if ht is not None:
            assert np.max(np.abs(ht - p.load("ht_reference"))) <= 1e-12 * np.max(np.abs(ht))
        # The port of the budget gives kda-check's numbers for the fp32 chunked reference.
        low, _ = pc.recurrent_forward(p.q, p.k, p.v, p.gate, p.beta, p.cu_seqlens, p.h0, dtype=np.float32)
        j = pc.judge(golden, low, p.load("out_reference_chunked_f32"))
        row = ours[(p.id, "ref-chunked-f32", "out")]
        assert pc.sci(j.max_abs_err) == row["max_abs_err"] and pc.sci(j.rel_rms) == row["rel_rms"], (j, row)
        assert abs(j.budget - float(row["budget"])) <= 2e-3 * float(row["budget"])
        assert j.verdict() == row["verdict"] == "passed"
        assert pc.our_outputs(p) == []  # a reference dump holds no GPU outputs


def test_dump_loader_errors():
    dump, _ = reference_dump("shapes/smoke.yaml")
    d = tempfile.mkdtemp()
    try:
        bad = os.path.join(d, "bad")
        shutil.copytree(os.path.join(dump, "smoke-packed"), bad)
        np.save(os.path.join(bad, "q.npy"), np.load(os.path.join(bad, "q.npy")) + np.float32(1e-3))
        for call, needle in ((lambda: pc.load_dump_problem(bad), "not bf16"),
                             (lambda: pc.find_dump_problems(os.path.join(d, "nope")), "not a directory"),
                             (lambda: pc.find_dump_problems(d + "/bad/..//bad/../../"), "no problem found")):
            try:
                call()
            except pc.InputError as e:
                assert needle in str(e), str(e)
            else:
                raise AssertionError(needle)
        os.remove(os.path.join(bad, "beta.npy"))
        try:
            pc.load_dump_problem(bad, check_bf16=False)
        except pc.InputError as e:
            assert "beta.npy: missing" in str(e)
        # Our outputs with a variant suffix are found.
        for name in ("out_fused_v2_mma", "out_explicit_v2_mma", "out_fused", "ht_fused"):
            np.save(os.path.join(bad, name + ".npy"), np.zeros(1, np.float32))
        np.save(os.path.join(bad, "beta.npy"), np.zeros((1, 201, 2), np.float32))
        for name in ("k_raw", "gate_raw", "beta_logits", "a_log", "dt_bias"):  # no longer its beta's
            os.remove(os.path.join(bad, name + ".npy"))
        p = pc.load_dump_problem(bad, check_bf16=False)
        assert pc.our_outputs(p) == [("explicit", "v2_mma", "out_explicit_v2_mma"), ("fused", "-", "out_fused"),
                                     ("fused", "v2_mma", "out_fused_v2_mma")]
        assert pc.our_outputs(p, "ht") == [("fused", "-", "ht_fused")]
    finally:
        shutil.rmtree(d)


# --- the command lines without torch / GPU ----------------------------------------------------------

def _run(script, *args, env=None):
    return subprocess.run([sys.executable, os.path.join(HERE, script), *args], capture_output=True, text=True,
                          cwd=ROOT, env=env)


def _has_cuda_torch():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def test_usage_errors_exit_2():
    assert _run("fla_bench.py", "--rows", "nope").returncode == 2
    assert _run("fla_bench.py", "--only", "no-such-shape").returncode == 2
    assert _run("fla_check.py", "/no/such/dir").returncode == 2
    d = tempfile.mkdtemp()
    try:
        existing = os.path.join(d, "x.csv")
        open(existing, "w").close()
        r = _run("fla_bench.py", "--csv", existing)
        assert r.returncode == 2 and "--force" in r.stderr
    finally:
        shutil.rmtree(d)
    r = _run("fla_bench.py", "--list", "--shapes", "shapes/edge.yaml", "--rows", "prenorm,full")
    assert r.returncode == 0 and "edge-state-empties" in r.stdout and "fla-full" in r.stdout


def test_skip_without_torch_or_gpu_exits_77():
    if _has_cuda_torch():
        skip("torch sees a GPU here: the skip path cannot be shown")
    dump_dir = tempfile.mkdtemp()
    try:
        os.makedirs(os.path.join(dump_dir, "p"))
        np.save(os.path.join(dump_dir, "p", "q.npy"), np.zeros((1, 1, 1, 1), np.float32))
        for script, args in (("fla_bench.py", ["--only", "h64-fixed"]), ("fla_check.py", [dump_dir])):
            r = _run(script, *args)
            assert r.returncode == 77, (script, r.returncode, r.stderr)
            assert "skipped:" in r.stderr and ("torch" in r.stderr or "GPU" in r.stderr), r.stderr
    finally:
        shutil.rmtree(dump_dir)


# --- torch on the CPU (runs where torch is importable, e.g. a venv; skipped otherwise) -------------

def _cpu_runtime():
    try:
        import torch
    except ImportError:
        skip("torch is not importable here")
    import peers_torch as pt
    return pt, pt.Runtime(torch=torch, triton=None, fla_version="-", chunk_kda=None, chunk_local_cumsum=None,
                          rcp_ln2=pc.RCP_LN2_F32, device="cpu", dispatch="-", warnings=[])


def test_torch_inputs_follow_the_recipe_and_the_conversion_twin_is_bitwise():
    pt, rt = _cpu_runtime()
    torch = rt.torch
    shapes = {s.id: s for s in pc.load_shape_file(os.path.join(ROOT, "shapes/edge.yaml"))}
    shapes.update({s.id: s for s in pc.load_shape_file(os.path.join(ROOT, "shapes/smoke.yaml"))})
    for ident in ("edge-state-empties", "edge-offsets-end-early", "edge-dense-b3-t70", "smoke-rowscale"):
        shape = shapes[ident]
        inp = pt.generate_inputs(rt, shape, 7)
        B, T, H, K = inp.q.shape
        assert (B, T, H, K) == (shape.batch, shape.tokens, shape.heads, 128) and inp.q.dtype == torch.bfloat16
        norms = inp.k.double().norm(dim=-1)
        assert ((norms - 1).abs() < 1e-2).all()
        G = inp.gate.double().numpy()
        gamma = np.where(inp.starts[None, :, None, None], G, G - np.concatenate([np.zeros_like(G[:, :1]), G[:, :-1]], 1))
        active = np.ones(T, bool) if shape.cu_seqlens is None else np.arange(T) < shape.cu_seqlens[-1]
        assert (gamma[:, active] <= 0).all() and (gamma[:, active] >= -5 / math.log(2) - 1e-4).all()
        # The generated cumulative gate is the §3.1 producer on the same raw gate (float64).
        want = pc.gate_cumsum_reference(inp.raw_gate.float().numpy(), inp.a_log.numpy(), inp.dt_bias.numpy(), inp.starts)
        want[:, ~active] = 0
        assert np.max(np.abs(want - inp.gate.numpy())) <= 1e-4
        beta = inp.beta.numpy()
        assert (beta[:, active] > 0).all() and (beta[:, active] < 1).all() and (beta[:, ~active] == 0).all()
        assert (inp.h0 is not None) == shape.initial_state
        pt.prepare_fla_inputs(rt, inp)
        pt.check_conversion_twin(rt, inp, tokens=T)
        full = pc.log2_cumulative_to_fla_gate(inp.gate.numpy(), inp.starts)
        assert np.array_equal(full.view(np.uint32), inp.g_fla.numpy().view(np.uint32))
        qn = inp.q_hat.double().norm(dim=-1)
        assert ((qn - 1).abs() < 1e-2)[inp.q.float().abs().amax(-1) > 1e-2].all()
        if shape.q_rows:
            rows = inp.q.float().abs().amax(dim=(-1, -2))[0]
            A = sum(shape.seq_lens)
            assert rows[A // 3] > 1e19 and rows[2 * A // 3] > 1e37 and rows[A // 2] == 0


def test_fla_kwargs_and_call_text():
    pt, rt = _cpu_runtime()
    shape = pc.load_shape_file(os.path.join(ROOT, "shapes/smoke.yaml"))[2]  # smoke-state
    inp = pt.generate_inputs(rt, shape, 1)
    pt.prepare_fla_inputs(rt, inp)
    kw = pt.fla_kwargs("prenorm", inp, True)
    assert kw["q"] is inp.q_hat and kw["g"] is inp.g_fla and kw["initial_state"] is inp.h0
    assert kw["cu_seqlens"].dtype == rt.torch.int64 and kw["cu_seqlens_cpu"].device.type == "cpu"
    assert pt.fla_kwargs("l2norm-in-kernel", inp, False)["use_qk_l2norm_in_kernel"] is True
    full = pt.fla_kwargs("full", inp, False)
    assert full["use_gate_in_kernel"] and full["lower_bound"] == -5.0 and full["dt_bias"].shape == (3 * 128,)
    text = pt.call_text(pt.fla_kwargs("prenorm-safegate", inp, False))
    assert text.startswith("chunk_kda(k=bfloat16[1, 120, 3, 128]") and "safe_gate=True" in text, text


# --- optional: FLA's Triton kernels in the Triton interpreter (PEERS_FLA_INTERPRET=1) --------------

INTERPRET_DRIVER = r'''
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
os.environ["FLA_CACHE_RESULTS"] = "0"
sys.path.insert(0, {here!r})
import warnings; warnings.simplefilter("ignore")
import builtins
import numpy as np
import peers_torch as pt
pt.load_runtime(device="cpu")
import triton.language as tl
import triton.runtime.autotuner as at
import triton.runtime.interpreter as itp
# 1. no benchmarking driver on a CPU: every autotune picks the first config;
at.Autotuner._bench = lambda self, *a, config, **k: [float(self.configs.index(config))] * 3
# 2. loop bounds that are 1-element arrays;
_orig = itp._patch_lang_tensor
def _patch(tensor, scope):
    _orig(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))
itp._patch_lang_tensor = _patch
# 3. FLA's module-level aliases of tl builtins and `range` loop variables used as tensors.
def _range(*args):
    ints = [int(np.asarray(a.handle.data).reshape(-1)[0]) if hasattr(a, "handle") else int(a) for a in args]
    try:
        tl.full((), 0, tl.int32); inside = True
    except ValueError:
        inside = False
    for i in builtins.range(*ints):
        yield tl.full((), i, tl.int32) if inside else i
for name, mod in list(sys.modules.items()):
    if not name.startswith("fla.") or mod is None:
        continue
    for attr, val in list(vars(mod).items()):
        if getattr(val, "__triton_builtin__", False) and hasattr(tl, getattr(val, "__name__", "")):
            setattr(mod, attr, (lambda n: lambda *a, **k: getattr(tl, n)(*a, **{{x: y for x, y in k.items() if x not in ("_builder", "_semantic")}}))(val.__name__))
    if name.startswith("fla.ops") and hasattr(mod, "__file__"):
        mod.range = _range
mod = __import__(sys.argv[1])
sys.exit(mod.main(sys.argv[2:]))
'''


# --- ours through kda_torch (peer_adapters.OursPeer), without a GPU ---------------------------

class _FakeKdaTorch:
    """Stands in for kda_torch: records every call, returns what kda_torch returns."""
    __version__ = "fake"

    def __init__(self):
        self.calls = []

    def workspace_bytes(self, batch, tokens, heads, num_seqs=None):
        self.calls.append(("workspace_bytes", (batch, tokens, heads, num_seqs), {}))
        return 4096

    def forward(self, *args, **kw):
        self.calls.append(("forward", args, kw))
        return kw["out"], kw["final_state"]

    def chunk_kda(self, *args, **kw):
        self.calls.append(("chunk_kda", args, kw))
        return kw["out"], kw["final_state"]


# A packed problem with empty sequences and both states, and a dense batch without states.
OURS_SHAPES = ("edge-state-empties", "edge-dense-b3-t70")


def _ours_inputs(ident, seed=3):
    pt, rt = _cpu_runtime()
    shapes = {s.id: s for s in pc.load_shape_file(os.path.join(ROOT, "shapes/edge.yaml"))}
    inp = pt.generate_inputs(rt, shapes[ident], seed)
    pt.prepare_fla_inputs(rt, inp)
    return rt.torch, inp


def _check_ours_buffers(torch, inp, kw, call):
    """The caller buffers and offsets both contracts hand kda_torch: made once in prepare()."""
    B, T, H, K = inp.q.shape
    packed = inp.cu_list is not None
    N = len(inp.cu_list) - 1 if packed else B
    assert kw["out"] is call.out and call.out.shape == (B, T, H, 128) and call.out.dtype == torch.bfloat16
    ws = kw["workspace"]
    assert ws.dtype == torch.uint8 and ws.numel() == 4096 and any(x is ws for x in call.keep)
    assert kw["initial_state"] is inp.h0
    if packed:  # int32 on both sides, so kda_torch converts nothing per call
        assert kw["cu_seqlens"].dtype == torch.int32 and kw["cu_seqlens"].tolist() == inp.cu_list
        cpu = kw["cu_seqlens_cpu"]
        assert cpu.device.type == "cpu" and cpu.dtype == torch.int32 and cpu.tolist() == inp.cu_list
    else:
        assert kw["cu_seqlens"] is None and kw["cu_seqlens_cpu"] is None
    assert kw["output_final_state"] is inp.want_final_state
    if inp.want_final_state:  # [N, H, K, V], kda_torch's layout and ours: handed back as is
        assert call.final_state() is kw["final_state"]
        assert kw["final_state"].shape == (N, H, K, 128) and kw["final_state"].dtype == torch.float32
    else:
        assert call.final_state is None and kw["final_state"] is None


def test_ours_peer_maps_both_contracts_onto_kda_torch():
    """OursPeer with a stand-in kda_torch: plain = forward(raw q, fuse_q_l2norm, normalized k, the
    cumulative log2 gate, fp32 beta); raw = chunk_kda with raw k, the bf16 raw gate + A_log /
    dt_bias / lower bound and bf16 beta logits, every in-kernel option on; buffers from prepare()."""
    import peer_adapters as pa
    for ident in OURS_SHAPES:
        torch, inp = _ours_inputs(ident)
        B, T, H, K = inp.q.shape
        packed = inp.cu_list is not None
        fake = _FakeKdaTorch()
        peer = pa.OursPeer(torch, kda=fake)
        assert peer.contracts == ("plain", "raw") and "kda_torch fake" in peer.version

        plain = peer.prepare(inp, "plain")
        assert fake.calls == [("workspace_bytes", (B, T, H, len(inp.cu_list) - 1 if packed else None), {})]
        plain.fn()
        plain.fn()
        assert [c[0] for c in fake.calls] == ["workspace_bytes", "forward", "forward"]
        _, args, kw = fake.calls[-1]
        assert len(args) == 5 and all(a is b for a, b in zip(args, (inp.q, inp.k, inp.v, inp.gate, inp.beta)))
        assert kw["fuse_q_l2norm"] is True
        assert set(kw) == {"fuse_q_l2norm", "initial_state", "output_final_state", "cu_seqlens",
                           "cu_seqlens_cpu", "out", "final_state", "workspace"}, sorted(kw)
        _check_ours_buffers(torch, inp, kw, plain)
        assert "kda_torch.forward" in plain.text and "kda-bench fused" in plain.text and not plain.q_norm_fp32

        raw = peer.prepare(inp, "raw")
        raw.fn()
        name, args, kw = fake.calls[-1]
        assert name == "chunk_kda" and len(args) == 5
        q, k, v, g, beta = args
        bf16 = torch.bfloat16
        assert q is inp.q and v is inp.v
        assert k.dtype == bf16 and torch.equal(k, inp.k_raw.to(bf16))
        assert g.dtype == bf16 and torch.equal(g, inp.raw_gate.to(bf16))
        assert beta.dtype == bf16 and torch.equal(beta, inp.beta_logits.to(bf16))
        assert all(kw[o] is True for o in ("use_qk_l2norm_in_kernel", "use_gate_in_kernel",
                                           "use_beta_sigmoid_in_kernel", "safe_gate"))
        assert kw["lower_bound"] == inp.raw_lower_bound == pc.LOWER_BOUND
        assert kw["A_log"].dtype == torch.float32 and torch.equal(kw["A_log"], inp.a_log)
        assert kw["dt_bias"].shape == (H * K,) and torch.equal(kw["dt_bias"], inp.dt_bias.reshape(-1))
        assert "scale" not in kw  # kda_torch's default: the kernels' fixed 1/sqrt(128)
        _check_ours_buffers(torch, inp, kw, raw)
        assert "kda_torch.chunk_kda" in raw.text and "kda-bench raw" in raw.text and not raw.q_norm_fp32
        try:
            peer.prepare(inp, "fast")
        except ValueError:
            pass
        else:
            raise AssertionError("an unknown contract was accepted")


def _kda_c_library():
    """The libkda_c.so kda_torch loads in these tests: KDA_C_LIBRARY, else a build's; None if none."""
    if os.environ.get("KDA_C_LIBRARY"):
        return os.environ["KDA_C_LIBRARY"]
    found = sorted(glob.glob(os.path.join(ROOT, "build/*/lib/libkda_c.so")))
    return found[0] if found else None


def test_ours_peer_calls_pass_kda_torch_and_the_library_checks():
    """The real kda_torch (python/ of this checkout) on CPU tensors, its launch replaced by a
    capture: both contracts' calls pass kda_torch's checks, fill struct kda_c_forward_params with
    the options of the former C shim (kda-bench fused / raw), write into the caller's buffers, and
    pass the library's own validation (kda::validate, no CUDA)."""
    _cpu_runtime()
    library = _kda_c_library()
    if library is None:
        skip("no libkda_c.so (build target kda_c, or set KDA_C_LIBRARY)")
    os.environ["KDA_C_LIBRARY"] = library
    import peer_adapters as pa
    kda, loaded = pa.import_kda_torch()
    assert os.path.dirname(kda.__file__) == os.path.join(ROOT, "python", "kda_torch"), kda.__file__
    from kda_torch import _lib, ops
    torch = ops.torch
    captured = []
    real = ops.cuda_device, ops.launch, torch.cuda.device
    # No CUDA device here: the device check passes CPU tensors, the device context (chunk_kda's,
    # around its gate conversion) does nothing, and the launch keeps the plan instead of running it.
    ops.cuda_device = lambda tensors: None
    ops.launch = lambda plan, device: captured.append(plan)
    torch.cuda.device = lambda device: contextlib.nullcontext()
    try:
        for ident in OURS_SHAPES:
            torch, inp = _ours_inputs(ident)
            B, T, H, K = inp.q.shape
            packed = inp.cu_list is not None
            peer = pa.OursPeer(torch)
            assert loaded in peer.version
            for contract in ("plain", "raw"):
                call = peer.prepare(inp, contract)
                call.fn()
                plan = captured[-1]
                p = plan.params
                assert plan.out is call.out and p.out == call.out.data_ptr()
                ws = next(x for x in call.keep if x is plan.workspace)
                assert p.workspace == ws.data_ptr() and p.workspace_bytes == ws.numel() == kda.workspace_bytes(
                    B, T, H, len(inp.cu_list) - 1 if packed else None)
                if inp.want_final_state:
                    assert plan.final_state is call.final_state() and p.final_state == plan.final_state.data_ptr()
                else:
                    assert p.final_state is None
                assert p.initial_state == (inp.h0.data_ptr() if inp.h0 is not None else None)
                assert (p.batch, p.tokens, p.heads) == (B, T, H)
                assert p.num_seqs == (len(inp.cu_list) - 1 if packed else 0)
                assert p.q == inp.q.data_ptr()
                if contract == "plain":
                    assert (p.gate_input, p.gate_dtype, p.beta_input, p.beta_dtype) == (
                        _lib.GATE_CHUNK_LOG2, _lib.F32, _lib.BETA_PROBABILITY, _lib.F32)
                    assert (p.fuse_q_l2norm, p.fuse_k_l2norm) == (1, 0)
                    assert p.k == inp.k.data_ptr() and p.gate == inp.gate.data_ptr() and p.beta == inp.beta.data_ptr()
                else:
                    assert (p.gate_input, p.gate_dtype, p.beta_input, p.beta_dtype) == (
                        _lib.GATE_RAW, _lib.BF16, _lib.BETA_LOGITS, _lib.BF16)
                    assert (p.fuse_q_l2norm, p.fuse_k_l2norm) == (1, 1)
                    assert p.lower_bound == np.float32(inp.raw_lower_bound) and p.a_log and p.dt_bias
                # The library's validation wants a 256-byte aligned workspace, which a CPU tensor
                # need not be; the struct is otherwise the one the device call gets.
                spare = torch.empty(p.workspace_bytes + 256, dtype=torch.uint8)
                p.workspace = spare.data_ptr() + (-spare.data_ptr()) % 256
                _lib.validate(p)
    finally:
        ops.cuda_device, ops.launch, torch.cuda.device = real


def test_ours_load_check_of_build_peers():
    """build_peers.sh ours builds nothing: it says whether kda_torch loads KDA_C_LIBRARY, and why not."""
    d = tempfile.mkdtemp()
    try:
        script = os.path.join(HERE, "build_peers.sh")
        # The python3 the script runs is this one (torch and NumPy importable, as on the device).
        env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        env.pop("KDA_C_LIBRARY", None)
        status = lambda: open(os.path.join(d, "ours.status")).read().strip()  # noqa: E731
        run = subprocess.run(["bash", script, "ours", d], env=env, capture_output=True, text=True)
        assert run.returncode != 0 and status().startswith("failed: KDA_C_LIBRARY is not set"), status()
        env["KDA_C_LIBRARY"] = os.path.join(d, "missing.so")
        run = subprocess.run(["bash", script, "ours", d], env=env, capture_output=True, text=True)
        assert run.returncode != 0 and "missing.so does not exist" in status(), status()
        try:
            import torch  # noqa: F401
        except ImportError:
            skip("torch is not importable here: the load itself is not checked")
        env["KDA_C_LIBRARY"] = os.path.join(d, "ours.log")  # a file that is no shared library
        run = subprocess.run(["bash", script, "ours", d], env=env, capture_output=True, text=True)
        assert run.returncode != 0 and status().startswith("failed: load-kda-torch") and "does not load" in status(), status()
        library = _kda_c_library()
        if library is None:
            skip("no libkda_c.so: the successful load is not checked")
        env["KDA_C_LIBRARY"] = library
        run = subprocess.run(["bash", script, "ours", d], env=env, capture_output=True, text=True)
        assert run.returncode == 0 and status() == "ok", open(os.path.join(d, "ours.log")).read()
        assert f"loads {library}" in open(os.path.join(d, "ours.log")).read()
    finally:
        shutil.rmtree(d)


def test_pin_first_tuning_keeps_the_first_winner():
    """fla_check's default: after an autotuner's first tuning, later keys reuse its winner
    without benchmarking. Runs against a stand-in for Triton's Autotuner contract (benchmark
    only when holding more than one config, winners cached per key) when triton is absent."""
    import types
    if importlib.util.find_spec("triton") is not None:
        skip("triton is installed: the stand-in Autotuner would not be triton's class")
    import peers_torch as pt

    class Autotuner:  # Triton's contract, reduced to what pin_first_tuning relies on
        def __init__(self, configs):
            self.configs, self.cache, self.benchmarked = list(configs), {}, []

        def run(self, key):
            if len(self.configs) > 1:
                if key not in self.cache:
                    self.benchmarked.append(key)
                    self.cache[key] = min(self.configs, key=lambda c: abs(c - 3))
                return self.cache[key]
            return self.configs[0]

    names = ["triton", "triton.runtime", "triton.runtime.autotuner", "fla", "fla.fake_kernels"]
    saved = {n: sys.modules.get(n) for n in names}
    try:
        for n in names:
            sys.modules[n] = types.ModuleType(n)
        sys.modules["triton.runtime.autotuner"].Autotuner = Autotuner
        tuner, wrapped = Autotuner([1, 2, 3, 4]), types.SimpleNamespace()
        wrapped.fn = tuner  # an autotuner found through a wrapper's .fn, as FLA's heuristics do
        sys.modules["fla.fake_kernels"].kernel = wrapped
        sys.modules["fla.fake_kernels"].same_kernel = tuner
        assert pt.pin_first_tuning() == 1
        assert tuner.run("H=4") == 3 and tuner.benchmarked == ["H=4"]
        assert tuner.configs == [3]
        assert tuner.run("H=96, varlen") == 3 and tuner.run("H=4") == 3
        assert tuner.benchmarked == ["H=4"], tuner.benchmarked
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def test_fla_end_to_end_in_the_triton_interpreter():
    if os.environ.get("PEERS_FLA_INTERPRET") != "1":
        skip("set PEERS_FLA_INTERPRET=1 to run FLA's kernels in the Triton interpreter (minutes)")
    try:
        import fla  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        skip(f"needs torch and fla-core: {e}")
    dump, _ = reference_dump("shapes/edge.yaml")
    d = tempfile.mkdtemp()
    try:
        driver = os.path.join(d, "driver.py")
        with open(driver, "w") as f:
            f.write(INTERPRET_DRIVER.format(here=HERE))
        md = os.path.join(d, "check.md")
        r = subprocess.run([sys.executable, driver, "fla_check", dump, "--only", "edge-state-empties",
                            "--only", "edge-dense-b3-t70", "--device", "cpu", "--fla-dtype", "fp32",
                            "--md", md], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        report = open(md).read()
        assert "0 failed" in report and "final_state" in report, report
        shapes = os.path.join(d, "tiny.yaml")
        with open(shapes, "w") as f:
            f.write("shapes:\n  - {id: tiny, heads: 2, seq_lens: [20, 0, 9], total_tokens: 32,"
                    " initial_state: true, final_state: true}\n")
        out = os.path.join(d, "bench.csv")
        r = subprocess.run([sys.executable, driver, "fla_bench", "--shapes", shapes, "--device", "cpu",
                            "--fla-dtype", "fp32", "--warmup", "0", "--min-samples", "1", "--csv", out,
                            "--rows", "prenorm,l2norm-in-kernel"], capture_output=True, text=True, cwd=ROOT)
        assert r.returncode == 0, r.stdout + r.stderr
        rows = list(csv.DictReader(open(out)))
        assert [x["path"] for x in rows] == ["fla-prenorm", "fla-l2norm-in-kernel"]
        assert all(x["verdict"] == "passed" for x in rows), rows
    finally:
        shutil.rmtree(d)


# --- issue 17: the other peers side by side ------------------------------------------------------

def test_gate_recipes_of_the_shape_files():
    mixed = pc.load_shape_file(os.path.join(ROOT, "shapes/contract-mixed.yaml"))
    assert [s.gate.name for s in mixed] == ["mixed"] * 6 and mixed[0].gate.dt_bias == (-12.0, 1.0)
    lm = {s.id: s for s in pc.load_shape_file(os.path.join(ROOT, "shapes/long-memory.yaml"))}
    assert lm["lm-zero-state"].gate.zero and lm["lm-zero-state"].gate.lower_bound == 0.0
    custom = lm["lm-custom"].gate
    assert custom.name == "custom(contract)" and custom.lower_bound == -5.9
    assert custom.a_log == (0.0, 3.0) and custom.dt_bias == (-10.0, -2.0) and custom.raw_std == 2.0
    assert pc.load_shape_file(os.path.join(ROOT, "shapes/contract.yaml"))[0].gate.name == "contract"
    assert "one of contract, mixed, long, zero" in _shape_error(
        "shapes:\n  - {id: a, heads: 1, seq_lens: [3], gate: weird}\n")
    assert "a .npy file is not supported" in _shape_error(
        "shapes:\n  - {id: a, heads: 1, seq_lens: [3], gate: {dt_bias: x.npy}}\n")
    assert "[-5.914855940778, 0]" in _shape_error(
        "shapes:\n  - {id: a, heads: 1, seq_lens: [3], gate: {lower_bound: -6}}\n")
    assert "lo <= hi" in _shape_error("shapes:\n  - {id: a, heads: 1, seq_lens: [3], gate: {a_log: [2, 1]}}\n")


def _random_contract_gate(rng, lengths, heads=2, dim=8, lower_bound=-5.0, dt=(-12.0, 1.0)):
    T = sum(lengths)
    cu = np.cumsum([0] + lengths)
    starts = pc.chunk_starts(T, list(cu))
    raw = pc.round_to_bf16(rng.standard_normal((1, T, heads, dim)).astype(np.float32))
    a_log = rng.uniform(0, 1, heads)
    dt_bias = rng.uniform(dt[0], dt[1], (heads, dim))
    gate = pc.gate_cumsum_reference(raw, a_log, dt_bias, starts, lower_bound)
    return gate, starts


def test_raw_contract_conversion_reproduces_the_gate_and_beta():
    """logit(gamma / lb) through lb * sigmoid(.) gives our gate back: exactly up to the float64
    arithmetic when kept in fp32 (cuDNN-FE), within bf16 rounding when a peer takes bf16."""
    rng = np.random.default_rng(7)
    gate, starts = _random_contract_gate(rng, [70, 1, 130])
    beta = (1 / (1 + np.exp(-rng.standard_normal((1, 201, 2))))).astype(np.float32)
    raw = pc.raw_gate_from_contract(gate, starts, -5.0)
    back = pc.effective_gate(raw, starts, -5.0)
    assert np.max(np.abs(back - gate)) < 1e-4 * max(1.0, np.max(np.abs(gate)))
    e32 = pc.raw_input_error(gate, beta, starts, -5.0, "fp32")
    e16 = pc.raw_input_error(gate, beta, starts, -5.0, "bf16")
    assert e32["beta_max_abs"] < 1e-6 and e16["beta_max_abs"] > 1e-4 > e32["beta_max_abs"]
    assert e16["gate_max_abs_log2"] > e32["gate_max_abs_log2"]
    # The zero gate (no decay) converts to clamped logits whose sigmoid is an exact-enough 0.
    zero = np.zeros_like(gate)
    assert np.max(np.abs(pc.effective_gate(pc.raw_gate_from_contract(zero, starts, -5.0), starts, -5.0))) < 1e-30
    # A gate below the lower bound (lm-custom: lb = -5.9) is refused for lb = -5, not clamped.
    steep, st = _random_contract_gate(rng, [64], lower_bound=-5.9, dt=(5.0, 6.0))
    try:
        pc.raw_gate_from_contract(steep, st, -5.0)
    except pc.InputError as err:
        assert "below the lower bound -5.0" in str(err)
    else:
        raise AssertionError("a gate below the lower bound was accepted")
    pc.raw_gate_from_contract(steep, st, -pc.MAX_LOWER_BOUND_MAGNITUDE)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


def _write_synthetic_dump(directory, lengths=(70, 0, 33), total=110, heads=2, dim=8, recipe="mixed",
                          raw=True, seed=11, h0=True, final_state=True, huge_q_tokens=()):
    """A kda-check-like dump made here (no binary needed): q, k, v, gate, beta, cu_seqlens, h0,
    meta.json, out_reference(_f32), ht_reference, and, with raw=True, the raw draws (k_raw,
    gate_raw, beta_logits, a_log, dt_bias, meta.json lower_bound) the contract inputs came from,
    with the generator's own steps: k = bf16(l2norm(k_raw)), gate = §3.1 producer -> fp32,
    beta = fp32(sigmoid(logits)); gate and beta 0 after cu_seqlens[N]."""
    rng = np.random.default_rng(seed)
    rec = pc.GATE_PRESETS[recipe]
    cu = np.cumsum([0, *lengths]).astype(np.int32)
    T, B, H, K = total, 1, heads, dim
    starts = pc.chunk_starts(T, cu.tolist())
    bf = lambda x: pc.round_to_bf16(np.asarray(x, np.float32))  # noqa: E731
    q = bf(rng.standard_normal((B, T, H, K)))
    for t in huge_q_tokens:
        q[0, t] = bf(np.sign(rng.standard_normal((H, K))) * 1e20)
    # As kda-check draws them: k and beta from fp32 draws, their raw twins the bf16 roundings of
    # those draws (so beta is not exactly sigmoid(beta_logits), nor k exactly l2norm(k_raw)).
    k_draw = rng.standard_normal((B, T, H, K)).astype(np.float32)
    k_raw = bf(k_draw)
    k = bf(pc.l2norm_rows(k_draw, np.float64))
    v = bf(rng.standard_normal((B, T, H, K)))
    gate_raw = bf(rec.raw_mean + rec.raw_std * rng.standard_normal((B, T, H, K)))
    a_log = rng.uniform(*rec.a_log, H).astype(np.float32)
    dt_bias = rng.uniform(*rec.dt_bias, (H, K)).astype(np.float32)
    gate = pc.gate_cumsum_reference(gate_raw, a_log, dt_bias, starts, rec.lower_bound)
    logit_draw = rng.standard_normal((B, T, H)).astype(np.float32)
    logits = bf(logit_draw)
    beta = _sigmoid(logit_draw.astype(np.float64)).astype(np.float32)
    gate[:, cu[-1]:] = 0.0
    beta[:, cu[-1]:] = 0.0
    state = (0.01 * rng.standard_normal((len(lengths), H, K, K))).astype(np.float32) if h0 else None
    os.makedirs(directory, exist_ok=True)
    arrays = {"q": q, "k": k, "v": v, "gate": gate, "beta": beta, "cu_seqlens": cu}
    if h0:
        arrays["h0"] = state
    golden, ht = pc.recurrent_forward(q, k, v, gate, beta, cu, state, final_state=final_state)
    low, _ = pc.recurrent_forward(q, k, v, gate, beta, cu, state, dtype=np.float32)
    arrays.update(out_reference=golden, out_reference_f32=low.astype(np.float32))
    if final_state:
        arrays["ht_reference"] = ht
    meta = {"id": os.path.basename(directory), "want_final_state": final_state}
    if raw:
        arrays.update(k_raw=k_raw, gate_raw=gate_raw, beta_logits=logits, a_log=a_log, dt_bias=dt_bias)
        meta["lower_bound"] = rec.lower_bound
    for name, a in arrays.items():
        np.save(os.path.join(directory, name + ".npy"), a)
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f)
    return arrays


def test_raw_contract_conversion_error_is_measured_not_charged():
    """The fallback conversion (no raw files): exact in fp64, and raw_problem is the problem a
    peer handed the rounded inputs solves, so a peer that computes exactly that passes against
    raw_references (rel RMS ~1e-16) while the contract golden would charge it the rounding."""
    d = tempfile.mkdtemp()
    try:
        _write_synthetic_dump(os.path.join(d, "p"), raw=False, lengths=(130,), total=130)
        prob = pc.load_dump_problem(os.path.join(d, "p"))
        assert prob.raw is None
        starts = pc.chunk_starts(prob.tokens, prob.cu_seqlens.tolist())
        # fp64 round trip G -> logit(gamma/lb) -> lb*sigmoid -> cumsum -> G: exact to rounding.
        lb = pc.choose_lower_bound(prob.gate, starts)
        back = pc.effective_gate(pc.raw_gate_from_contract(prob.gate, starts, lb), starts, lb)
        assert lb == -5.0 and np.max(np.abs(back - prob.gate)) < 1e-9
        spec = pc.RAW_SPECS["flashkda"]
        rp = pc.raw_problem(prob, spec)
        raw = pc.round_to_bf16(pc.raw_gate_from_contract(prob.gate, starts, lb).astype(np.float32))
        assert np.array_equal(rp.gate64, pc.effective_gate(raw, starts, lb))
        moved = np.max(np.abs(rp.gate64 - prob.gate))
        assert 1e-4 < moved < 0.2, moved   # bf16 rounding of the logit moves G, not by much
        refs = pc.raw_references(prob, spec, cache=False)
        golden = np.asarray(prob.load("out_reference"), np.float64)
        # A "peer" that solves exactly its inputs (the fp64 recurrence on the rounded ones):
        peer, _ = pc.recurrent_forward(prob.q, pc.l2norm_rows(prob.k), prob.v, rp.gate64, rp.beta64,
                                       prob.cu_seqlens, prob.h0)
        assert pc.judge(refs["golden"], refs["low"], peer).rel_rms < 1e-12
        charged = pc.rel_rms_difference(peer, golden, golden)
        assert charged > 1e-5, charged     # what judging against the contract golden would add
        # cuDNN-FE takes fp32: its conversion is exact to fp32 rounding.
        r32 = pc.raw_problem(prob, pc.RAW_SPECS["cudnn"])
        assert np.max(np.abs(r32.gate64 - prob.gate)) < 1e-4 and np.max(np.abs(r32.beta64 - prob.beta)) < 1e-6
        # A post-sigmoid spec keeps beta as dumped.
        assert np.array_equal(pc.raw_problem(prob, pc.RawSpec("bf16", "sigmoid")).beta32, prob.beta)
    finally:
        shutil.rmtree(d)


def test_raw_files_of_a_dump_are_used_as_they_are_and_cached():
    d = tempfile.mkdtemp()
    try:
        arrays = _write_synthetic_dump(os.path.join(d, "p"))
        prob = pc.load_dump_problem(os.path.join(d, "p"))
        assert prob.raw is not None and prob.raw.lower_bound == -5.0 and prob.raw.checked_tokens == 110
        assert "k_raw" not in prob.outputs and "out_reference" in prob.outputs
        rp = pc.raw_problem(prob, pc.RAW_SPECS["flashkda"])
        assert "raw files" in rp.source
        assert np.array_equal(rp.k64, pc.l2norm_rows(arrays["k_raw"], np.float64))
        assert np.array_equal(rp.beta64, _sigmoid(arrays["beta_logits"])) and np.array_equal(rp.gate64, arrays["gate"])
        logs = []
        refs = pc.raw_references(prob, pc.RAW_SPECS["cudnn"], log=logs.append)
        want, want_ht = pc.recurrent_forward(prob.q, rp.k64, prob.v, rp.gate64, rp.beta64, prob.cu_seqlens,
                                             prob.h0, final_state=True)
        assert np.array_equal(refs["golden"], want) and np.array_equal(refs["golden_ht"], want_ht)
        assert refs["low_ht"] is not None and "NumPy fp64" in refs["source"] and logs
        # The raw problem is not the contract's (k is rounded to bf16 there): the golden differs.
        golden = np.asarray(prob.load("out_reference"), np.float64)
        assert pc.rel_rms_difference(refs["golden"], golden, golden) > 1e-4
        # Cached for the next raw peer (every raw peer shares the raw files' problem) ...
        again = pc.raw_references(prob, pc.RAW_SPECS["flashkda"])
        assert again["source"].endswith("(cached)") and np.array_equal(again["golden"], refs["golden"])
        # ... but not for other inputs: an input rewritten makes it compute again.
        np.save(os.path.join(d, "p", "v.npy"), np.load(os.path.join(d, "p", "v.npy")))
        os.utime(os.path.join(d, "p", "v.npy"), ns=(1, 1))
        fresh = pc.raw_references(pc.load_dump_problem(os.path.join(d, "p")), pc.RAW_SPECS["flashkda"])
        assert not fresh["source"].endswith("(cached)")
        # kda-check's own raw golden wins when dumped.
        np.save(os.path.join(d, "p", "out_reference_raw.npy"), refs["golden"] * 2)
        np.save(os.path.join(d, "p", "ht_reference_raw.npy"), refs["golden_ht"])
        shutil.rmtree(os.path.join(d, "p", pc.REF_CACHE_DIR))
        own = pc.raw_references(pc.load_dump_problem(os.path.join(d, "p")), pc.RAW_SPECS["flashkda"])
        assert own["source"].startswith("dump: out_reference_raw") and np.array_equal(own["golden"], refs["golden"] * 2)
    finally:
        shutil.rmtree(d)


def test_bad_raw_files_are_refused_with_a_clear_message():
    d = tempfile.mkdtemp()
    try:
        base = os.path.join(d, "good")
        _write_synthetic_dump(base)
        cases = [
            ("k_raw", lambda a: a[:, :, :, :4].copy(), "k_raw.npy: shape [1, 110, 2, 4], expected [1, 110, 2, 8]"),
            ("dt_bias", lambda a: a.T.copy(), "dt_bias.npy: shape [8, 2], expected [2, 8]"),
            ("beta_logits", lambda a: a[..., None].copy(), "beta_logits.npy: expected a 3-d array, got 4-d"),
            ("gate_raw", lambda a: a + np.float32(1e-3), "gate_raw.npy: holds values that are not bf16 numbers"),
            ("gate_raw", lambda a: a[:, ::-1].copy(), "do not give gate.npy"),
            ("beta_logits", lambda a: -a, "beta.npy is not sigmoid(beta_logits.npy)"),
            ("k_raw", lambda a: a[:, :, ::-1].copy(), "k.npy is not l2norm(k_raw.npy) rounded to bf16"),
            ("a_log", lambda a: a.astype(np.float64), "a_log.npy: wrong dtype float64 (expected float32)"),
            ("a_log", None, "but not a_log.npy"),
            ("meta", None, "'lower_bound' must be a number in [-5.914855940778, 0]"),
        ]
        for i, (name, change, message) in enumerate(cases):
            bad = os.path.join(d, f"bad{i}")
            shutil.copytree(base, bad)
            if name == "meta":
                json.dump({"id": "x", "want_final_state": True}, open(os.path.join(bad, "meta.json"), "w"))
            elif change is None:
                os.unlink(os.path.join(bad, name + ".npy"))
            else:
                np.save(os.path.join(bad, name + ".npy"), change(np.load(os.path.join(bad, name + ".npy"))))
            try:
                pc.load_dump_problem(bad)
            except pc.InputError as err:
                assert message in str(err), (name, message, str(err))
            else:
                raise AssertionError(f"{name}: accepted ({message})")
            if i == 0:
                # peers_check refuses it before any GPU work: exit 2 and the message, here without torch.
                run = subprocess.run([sys.executable, os.path.join(HERE, "peers_check.py"), bad, "--peer",
                                      "flashkda", "--build-dir", d], capture_output=True, text=True, cwd=ROOT)
                assert run.returncode == 2 and message in run.stderr, (run.returncode, run.stderr)
            shutil.rmtree(bad)
    finally:
        shutil.rmtree(d)


def test_prepare_refs_caches_what_every_check_shares():
    """peers_check --prepare-refs (no torch): the contract's fp32 final state and each raw peer's
    references, cached per dump; the checks then load them instead of computing them again."""
    d = tempfile.mkdtemp()
    try:
        _write_synthetic_dump(os.path.join(d, "a"))
        _write_synthetic_dump(os.path.join(d, "b"), raw=False)
        run = subprocess.run([sys.executable, os.path.join(HERE, "peers_check.py"), d, "--prepare-refs",
                              "contract,cudnn,flashkda", "--prepare-refs", "ours"], capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 0, run.stderr
        assert sorted(os.listdir(os.path.join(d, "a", pc.REF_CACHE_DIR))) == ["contract", "raw-files"]
        # ours takes what FlashKDA takes (bf16 raw gate and logits): one shared set
        assert sorted(os.listdir(os.path.join(d, "b", pc.REF_CACHE_DIR))) == [
            "contract", "gate-bf16_beta-bf16", "gate-fp32_beta-fp32"]
        prob = pc.load_dump_problem(os.path.join(d, "b"))
        lows = pc.contract_low_references(prob)
        assert lows["low_ht_source"].endswith("(cached)") and lows["low_source"].startswith("dump: out_reference_f32")
        _, want = pc.recurrent_forward(prob.q, prob.k, prob.v, prob.gate, prob.beta, prob.cu_seqlens, prob.h0,
                                       dtype=np.float32, final_state=True)
        assert np.array_equal(lows["low_ht"], want.astype(np.float64))
        assert pc.raw_references(prob, pc.RAW_SPECS["vllm-flashkda"])["source"].endswith("(cached)")
        run = subprocess.run([sys.executable, os.path.join(HERE, "peers_check.py"), d, "--prepare-refs", "nobody"],
                             capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 2 and "--prepare-refs nobody: expected 'contract' or peer names" in run.stderr
    finally:
        shutil.rmtree(d)


def test_q_rows_that_overflow_an_fp32_l2norm_are_a_known_limitation_only_when_the_rest_passes():
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 50, 2, 8)).astype(np.float32)
    q[0, 10, 1] = 1e20       # sum of squares 8e40: inf in fp32
    q[0, 20, 0] = 3e38
    q[0, 30, 0] = 1e18       # 8e36: fine
    q[0, 40, 1, 0] = np.inf  # not finite: propagates, not an overflow row
    rows = pc.fp32_norm_overflow_rows(q)
    assert sorted(map(tuple, np.argwhere(rows).tolist())) == [(0, 10, 1), (0, 20, 0)]
    golden = rng.standard_normal((1, 50, 2, 8))
    low = golden + 1e-4 * rng.standard_normal(golden.shape)
    peer = golden + 1e-5 * rng.standard_normal(golden.shape)
    peer[rows] = 0.0
    j = pc.judge(golden, low, peer)
    assert not j.passed()
    verdict, rest = pc.judge_known_overflow(golden, low, peer, rows, j)
    assert verdict.startswith("known limitation: 2 q rows (tokens 10, 20)") and "output there 0" in verdict
    assert rest.passed() and rest.elements == golden.size - 16
    worse = peer.copy()
    worse[0, 3, 0, 0] += 1.0  # a real error elsewhere: a failure, both results named
    verdict, rest = pc.judge_known_overflow(golden, low, worse, rows, pc.judge(golden, low, worse))
    assert verdict.startswith("failed: max abs err") and "the other rows: failed" in verdict and not rest.passed()
    nan = peer.copy()
    nan[0, 10, 1, 2] = np.nan  # the overflow rows must at least be finite
    verdict, _ = pc.judge_known_overflow(golden, low, nan, rows, pc.judge(golden, low, nan))
    assert verdict.startswith("failed") and "non-finite" in verdict
    import fla_check
    assert not fla_check.is_failure({"verdict": "known limitation: x"}, "any")
    assert fla_check.is_failure({"verdict": "failed: y"}, "any")


def _bench_rows(path, medians, noise=0.002, extra=None):
    return [dict({"shape_id": s, "path": path, "stage": "", "mode": "warm", "median_s": m,
                  "noise": noise, "verdict": "passed"}, **(extra or {})) for s, m in medians.items()]


def test_compare_twin_ratio_rule_and_geomean():
    ours = _bench_rows("fused", {"a": 1e-3, "b": 2e-3, "c": 4e-3})
    peer = _bench_rows("cudnn-plain", {"a": 0.5e-3, "b": 2.01e-3, "c": 8e-3}, noise=0.004)
    txt = lambda rows: [{k: pc.csv_cell(v) for k, v in r.items()} for r in rows]  # noqa: E731 (as read)
    ratios, g = pc.compare_medians(txt(ours), txt(peer), "fused", "cudnn-plain")
    by = {r.shape_id: r for r in ratios}
    assert by["a"].verdict == "FASTER" and abs(by["a"].ratio - 0.5) < 1e-12
    assert by["b"].verdict == "SAME" and by["b"].threshold == 0.01  # |1.005 - 1| <= max(noise, 1 %)
    assert by["c"].verdict == "SLOWER" and abs(by["c"].ratio - 2.0) < 1e-12
    assert abs(g - (0.5 * 1.005 * 2.0) ** (1 / 3)) < 1e-12
    # A missing median (a peer that failed) is INVALID and left out of the geomean.
    peer[0]["median_s"] = None
    ratios, g = pc.compare_medians(txt(ours), txt(peer), "fused", "cudnn-plain")
    assert [r.verdict for r in ratios] == ["INVALID", "SAME", "SLOWER"] and abs(g - math.sqrt(1.005 * 2)) < 1e-12
    for bad, what in (({"median_s": -1.0}, "median must be"), ({"noise": "nan"}, "noise must be")):
        rows = txt(_bench_rows("cudnn-plain", {"a": 1e-3}))
        rows[0].update({k: str(v) for k, v in bad.items()})
        try:
            pc.compare_medians(txt(ours), rows, "fused", "cudnn-plain", name_b="peer.csv")
        except pc.InputError as err:
            assert what in str(err) and "peer.csv: row 2" in str(err)
        else:
            raise AssertionError(f"accepted {bad}")


def test_compare_twin_agrees_with_kda_bench_compare():
    exe = find_binary("kda-bench")
    if exe is None:
        skip("no kda-bench binary")
    import peers_bench
    d = tempfile.mkdtemp()
    try:
        ours, peer = os.path.join(d, "ours.csv"), os.path.join(d, "peer.csv")
        pc.write_atomic(ours, pc.to_csv(peers_bench.COLUMNS, _bench_rows("fused", {"a": 1e-3, "b": 3e-3})), False)
        pc.write_atomic(peer, pc.to_csv(peers_bench.COLUMNS, _bench_rows("flashkda-raw", {"a": 1.25e-3, "b": 1.5e-3})), False)
        run = subprocess.run([exe, "compare", ours, peer, "--a-path", "fused", "--b-path", "flashkda-raw",
                              "--mode", "warm", "--csv", os.path.join(d, "c.csv")], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr + run.stdout
        cpp = {r["shape_id"]: r for r in csv.DictReader(open(os.path.join(d, "c.csv")))}
        ratios, g = pc.compare_medians(pc.read_csv_rows(ours), pc.read_csv_rows(peer), "fused", "flashkda-raw")
        for r in ratios:
            assert abs(float(cpp[r.shape_id]["ratio"]) - r.ratio) < 1e-9, (cpp, r)
        assert abs(g - math.sqrt(1.25 * 0.5)) < 1e-12 and "geomean" in run.stdout.lower()
    finally:
        shutil.rmtree(d)


def test_peers_bench_csv_has_kda_bench_columns_in_order():
    import fla_bench
    import peers_bench
    assert peers_bench.COLUMNS[:len(fla_bench.OUR_COLUMNS)] == fla_bench.OUR_COLUMNS
    readme = open(os.path.join(ROOT, "apps/kda-bench/README.md"), encoding="utf-8").read()
    documented = re.findall(r"^\| `([a-z_0-9]+)`", readme.split("### CSV columns")[1].split("## compare")[0], re.M)
    multi = re.findall(r"^\| `([a-z_0-9]+)`(?:, `([a-z_0-9]+)`)+", readme, re.M)
    assert "shape_id" in peers_bench.COLUMNS and "gate" in peers_bench.COLUMNS
    # Every single-name column kda-bench documents before `gate` is in ours, in the same order.
    ours_order = [c for c in peers_bench.COLUMNS if c in documented]
    assert ours_order == [c for c in documented if c in ours_order] and len(ours_order) >= 30, (ours_order, multi)


def _judged_dump_rows():
    """A synthetic check: golden, a low at 1e-3, a good peer, a bad one, through fla_check's row."""
    from fla_check import judged_row
    rng = np.random.default_rng(3)
    golden = rng.standard_normal((1, 64, 2, 8))
    low = golden + 1e-3 * rng.standard_normal(golden.shape)
    good = golden + 1e-4 * rng.standard_normal(golden.shape)
    bad = golden.copy()
    bad[0, 10, 1, 3] += 1.0
    rows = []
    for impl, path, actual in (("ours", "fused", good), ("cudnn", "cudnn-plain", good), ("flashkda", "flashkda-raw", bad)):
        j = pc.judge(golden, low, actual)
        rows.append(dict(judged_row("s", impl, path, "-", "out", j, golden.shape, "out", None, "test"),
                         contract="plain"))
    return rows


def test_judging_against_the_budget_on_synthetic_arrays():
    rows = _judged_dump_rows()
    assert rows[0]["verdict"] == "passed" and rows[1]["verdict"] == "passed"
    assert rows[2]["verdict"].startswith("failed") and "token 10" in rows[2]["worst_location"]
    assert rows[2]["max_abs_err"] > rows[2]["budget"] > 0


def test_report_of_a_run_with_a_failed_peer():
    """peers_report: ratios and geomeans per shape file, the accuracy table, and a peer that did
    not build shows its exact error instead of a time."""
    import peers_bench
    import peers_check
    import peers_report
    d = tempfile.mkdtemp()
    try:
        b = os.path.join(d, "build")
        os.makedirs(b)
        open(os.path.join(b, "fk.status"), "w").write("failed: setup.py (rc 1; nvcc fatal: boom)\n")
        open(os.path.join(b, "cudnn.status"), "w").write("ok\n")
        w = lambda name, cols, rows: pc.write_atomic(os.path.join(d, name), pc.to_csv(cols, rows), False)  # noqa: E731
        w("ours-bench-contract.csv", peers_bench.COLUMNS, _bench_rows("fused", {"h96-fixed": 1e-3, "h64-fixed": 2e-3}))
        w("ours-contract.csv", peers_bench.COLUMNS,
          _bench_rows("ours-raw", {"h96-fixed": 1.2e-3, "h64-fixed": 2.4e-3}) +
          _bench_rows("ours-plain", {"h96-fixed": 1e-3, "h64-fixed": 2e-3}))
        w("cudnn-contract.csv", peers_bench.COLUMNS,
          _bench_rows("cudnn-plain", {"h96-fixed": 0.5e-3, "h64-fixed": 0.5e-3}) +
          _bench_rows("cudnn-raw", {"h96-fixed": 0.6e-3, "h64-fixed": 1.2e-3}))
        w("flashkda-contract.csv", peers_bench.COLUMNS,
          [dict(shape_id=s, path="flashkda-raw", stage="", mode="warm", verdict="failed",
                verdict_detail="unavailable: build failed: setup.py (rc 1; nvcc fatal: boom)")
           for s in ("h96-fixed", "h64-fixed")])
        w("check-cudnn-long-memory.csv", peers_check.COLUMNS, _judged_dump_rows())
        # kda-check's own CSV of a dump (run-all-h200.sh's ours-check-<dump>.csv) is accuracy, not
        # a timed shape file: no timing section for it.
        w("ours-check-long-memory.csv", ["shape", "path", "verdict"], [dict(shape="lm", path="fused", verdict="passed")])
        assert peers_report.stems_of(d) == ["contract"]
        text, summary = peers_report.report(d, b)
        assert "## Timing: shapes/check-long-memory.yaml" not in text and "check-long-memory:" not in summary
        assert "| fk " in text and "nvcc fatal: boom" in text
        assert "cuDNN-FE plain / fused" in text and "0.500 FASTER" in text and "0.250 FASTER" in text
        assert "contract: cuDNN-FE plain / fused geomean 0.354 over 2 shapes" in summary  # sqrt(0.5 * 0.25)
        assert "contract: cuDNN-FE raw / ours-raw geomean 0.500 over 2 shapes" in summary
        assert "contract: FlashKDA: no valid ratio" in summary
        assert "flashkda-contract.csv: h96-fixed flashkda-raw: unavailable: build failed" in text
        assert "accuracy flashkda-raw: 0 passed, 1 failed" in summary and "accuracy cudnn-plain: 1 passed" in summary
        rc = peers_report.main([os.path.join(d, "nope")])
        assert rc == 2
    finally:
        shutil.rmtree(d)


def test_report_compares_ours_in_pytorch_with_kda_bench():
    """peers_report's wrapper table: kda_torch (peers_bench ours-plain / ours-raw) over kda-bench
    (fused / raw) per shape, the geomean, and issue 20's verdict against 2 %; stage rows and failed
    rows are left out; a shape file without kda_torch rows says so."""
    import fla_bench
    import peers_bench
    import peers_report
    d = tempfile.mkdtemp()
    try:
        w = lambda name, cols, rows: pc.write_atomic(os.path.join(d, name), pc.to_csv(cols, rows), False)  # noqa: E731
        cpp = (_bench_rows("fused", {"a": 1e-3, "b": 2e-3, "c": 4e-3}, extra={"verdict": "not verified"})
               + _bench_rows("raw", {"a": 1.2e-3, "b": 2.4e-3, "c": 4.8e-3}, extra={"verdict": "not verified"})
               + [dict(shape_id="a", path="fused", stage="scan", mode="warm", median_s=5e-4, noise=0.01)])
        w("ours-bench-contract.csv", fla_bench.OUR_COLUMNS, cpp)
        host = {"host_enqueue_median_s": 4.2e-5}
        w("ours-contract.csv", peers_bench.COLUMNS,
          _bench_rows("ours-plain", {"a": 1.005e-3, "b": 1.99e-3, "c": 4.04e-3}, extra=host)
          + _bench_rows("ours-raw", {"a": 1.21e-3, "b": 2.5e-3}, extra=host)
          + [dict(shape_id="c", path="ours-raw", stage="", mode="warm", verdict="failed",
                  verdict_detail="failed: RuntimeError: boom")])
        w("ours-bench-contract-mixed.csv", fla_bench.OUR_COLUMNS,
          _bench_rows("fused", {"a": 1e-3}) + _bench_rows("raw", {"a": 1e-3}))
        text, summary = peers_report.report(d, None)
        assert "### Ours in PyTorch (kda_torch) vs kda-bench (C++), same call: shapes/contract.yaml" in text
        table = text[text.index("### Ours in PyTorch"):]
        row = lambda i: next(line for line in table.splitlines() if line.startswith(f"| {i} "))  # noqa: E731
        cells = lambda i: [c.strip() for c in row(i).strip("|").split("|")]  # noqa: E731
        assert cells("a") == ["a", "1.000 ?", "1.005", "1.005", "1.200 ?", "1.210", "1.008", "42 / 42"], cells("a")
        assert cells("b")[3] == "0.995" and cells("b")[6] == "1.042 ✗"
        assert cells("c")[5] == "error" and cells("c")[6] == "–"
        g_plain = (1.005 * 0.995 * 1.01) ** (1 / 3)
        g_raw = (1.21 / 1.2 * 2.5 / 2.4) ** 0.5
        assert cells("geomean")[3] == f"{g_plain:.3f}" and cells("geomean")[6] == f"{g_raw:.3f}"
        assert ("contract: ours in PyTorch ours-plain / kda-bench fused geomean "
                f"{g_plain:.3f} over 3 shapes, largest |ratio - 1| 1.0% (c): within 2% on every shape") in summary, summary
        assert ("contract: ours in PyTorch ours-raw / kda-bench raw geomean "
                f"{g_raw:.3f} over 2 shapes, largest |ratio - 1| 4.2% (b): outside 2% on 1 of 2 shapes (b 1.042); no pair for c") in summary
        assert "**within 2% on every shape**" in table and "**outside 2% on 1 of 2 shapes (b 1.042); no pair for c**" in table
        assert "contract-mixed: ours in PyTorch ours-plain / kda-bench fused: no shape timed by both" in summary
        # Ours against ours is this table's, not a peer ratio.
        assert "ours plain (kda_torch) / fused" not in text and "ours raw (kda-bench) /" not in text
        assert "ours raw (kda-bench)" in text and "ours raw (kda_torch)" in text
        # Within 2 % on the shapes timed by both, but one shape lacks a kda_torch time.
        txt = lambda rows: [{k: pc.csv_cell(v) for k, v in r.items()} for r in rows]  # noqa: E731 (as read)
        ratios, _ = pc.compare_medians(txt(cpp), txt(_bench_rows("ours-plain", {"a": 1.01e-3, "b": 2e-3})),
                                       "fused", "ours-plain")
        assert peers_report.wrapper_verdict(ratios, ["a", "b", "c"]) == \
            "within 2% on the 2 shapes timed by both; no pair for c"
    finally:
        shutil.rmtree(d)


def test_side_by_side_scripts_refuse_bad_usage():
    for script, argv in (("peers_bench.py", ["--peer", "cudnn", "--build-dir", "/tmp", "--shapes",
                                             "shapes/contract.yaml", "--out-dir", "/tmp", "--contracts", "fast"]),
                         ("peers_bench.py", ["--peer", "nobody", "--build-dir", "/tmp", "--shapes", "x", "--out-dir", "/tmp"]),
                         ("peers_check.py", ["/nonexistent-dump", "--peer", "cudnn", "--build-dir", "/tmp"])):
        run = subprocess.run([sys.executable, os.path.join(HERE, script), *argv], capture_output=True, text=True, cwd=ROOT)
        assert run.returncode == 2, (script, argv, run.returncode, run.stderr)
        assert run.stderr.strip(), run


def test_build_script_reports_an_unknown_target_and_a_missing_wheel():
    d = tempfile.mkdtemp()
    try:
        run = subprocess.run(["bash", os.path.join(HERE, "build_peers.sh"), "nope", d], capture_output=True, text=True)
        assert run.returncode == 2 and "unknown target 'nope'" in run.stderr
        env = dict(os.environ, WHEEL_DIR=os.path.join(d, "no-wheels"))
        run = subprocess.run(["bash", os.path.join(HERE, "build_peers.sh"), "cudnn", d], capture_output=True,
                             text=True, env=env)
        status = open(os.path.join(d, "cudnn.status")).read()
        assert run.returncode != 0 and status.startswith("failed: no nvidia_cudnn_frontend-1.32.0 wheel"), status
    finally:
        shutil.rmtree(d)


def test_build_script_caches_a_flashkda_build_and_reuses_it():
    """build_peers.sh fk with a stand-in source tarball (its setup.py writes a fake extension):
    the first call builds and leaves fk-build.tar.gz in PEERS_CACHE_OUT; a second call with that
    cache unpacks it instead of running setup.py; another tarball (another key) builds again."""
    d = tempfile.mkdtemp()
    try:
        src = os.path.join(d, "srcs")
        os.makedirs(os.path.join(src, "fk", "flash_kda"))
        os.makedirs(os.path.join(src, "fk", "cutlass"))
        open(os.path.join(src, "fk", "flash_kda", "__init__.py"), "w").write("")
        open(os.path.join(src, "fk", "setup.py"), "w").write(
            "import os\nopen('flash_kda_C.cpython-test.so', 'w').write('ext')\n"
            "open(os.path.join(os.environ['MARK_DIR'], 'built'), 'a').write('x')\n")
        tarball = os.path.join(d, "peers", "flashkda-src.tar.gz")
        os.makedirs(os.path.dirname(tarball))
        subprocess.run(["tar", "-C", src, "-czf", tarball, "fk"], check=True)
        cache = os.path.join(d, "cache")
        os.makedirs(cache)
        env = dict(os.environ, PEERS_SRC=os.path.dirname(tarball), PEERS_CACHE_OUT=cache, MARK_DIR=d,
                   PEERS_BUILD_CACHE=cache, NVCC="false")
        script = os.path.join(HERE, "build_peers.sh")
        build = lambda b: subprocess.run(["bash", script, "fk", os.path.join(d, b)], env=env,  # noqa: E731
                                         capture_output=True, text=True)
        run = build("b1")
        assert run.returncode == 0, open(os.path.join(d, "b1", "fk.log")).read()
        assert open(os.path.join(d, "b1", "fk.cache")).read().startswith("built; cached as")
        assert os.path.exists(os.path.join(cache, "fk-build.tar.gz")) and open(os.path.join(d, "built")).read() == "x"
        env["PEERS_CACHE_OUT"] = ""
        # A relative cache path is the checkout's, as run-all-h200.sh passes it (.peers-cache):
        # the build must still find it after changing into its source directory.
        env["PEERS_BUILD_CACHE"] = os.path.relpath(cache, ROOT)
        run = build("b2")
        assert run.returncode == 0 and open(os.path.join(d, "b2", "fk.status")).read().strip() == "ok"
        assert open(os.path.join(d, "b2", "fk.cache")).read().startswith("hit ")
        assert open(os.path.join(d, "built")).read() == "x", "setup.py ran despite the cache"
        assert open(os.path.join(d, "b2", "fk", "src", "flash_kda_C.cpython-test.so")).read() == "ext"
        # Another source tarball is another key: the cache is stale and the build runs.
        open(os.path.join(src, "fk", "flash_kda", "__init__.py"), "w").write("# changed\n")
        subprocess.run(["tar", "-C", src, "-czf", tarball, "fk"], check=True)
        run = build("b3")
        assert run.returncode == 0 and open(os.path.join(d, "b3", "fk.cache")).read().startswith("stale:")
        assert open(os.path.join(d, "built")).read() == "xx"
    finally:
        shutil.rmtree(d)


# --- peers_bench: several peers in one process on the same tensors ------------------------------

def test_peers_bench_peer_list_parsing_and_the_one_flashkda_rule():
    import peers_bench as pb
    assert pb.parse_peers("ours") == ["ours"]
    assert pb.parse_peers("ours,cudnn,vllm-flashkda") == ["ours", "cudnn", "vllm-flashkda"]
    assert pb.parse_peers(" cudnn , ours ") == ["cudnn", "ours"]  # the order given, spaces dropped
    for text, needle in (("ours,,cudnn", "empty name"), ("ours,nobody", "unknown peer nobody"),
                         ("ours,cudnn,ours", "ours listed twice"), ("", "empty name")):
        try:
            pb.parse_peers(text)
        except pc.InputError as e:
            assert needle in str(e), (text, str(e))
        else:
            raise AssertionError(f"--peer {text!r} accepted")
    try:
        pb.parse_peers("ours,flashkda,cudnn,vllm-flashkda")
    except pc.InputError as e:
        text = str(e)
        assert "flashkda and vllm-flashkda cannot share a process" in text, text
        assert "Python package flash_kda" in text and "one process holds at most one" in text, text
        assert "--peer ours,cudnn,flashkda, then --peer vllm-flashkda" in text, text
    else:
        raise AssertionError("two FlashKDA builds accepted in one process")
    # On the command line: exit 2 before torch is imported, the rule and the way out on stderr.
    d = tempfile.mkdtemp()
    try:
        base = ["--build-dir", d, "--shapes", "shapes/contract.yaml", "--out-dir", d]
        run = _run("peers_bench.py", "--peer", "cudnn,flash-flash-kda,flashkda", *base)
        assert run.returncode == 2, (run.returncode, run.stderr)
        assert "flash-flash-kda and flashkda cannot share a process" in run.stderr, run.stderr
        assert "in a process of its own" in run.stderr and "usage:" in run.stderr, run.stderr
        for bad in ("ours,nobody", "ours,ours"):
            run = _run("peers_bench.py", "--peer", bad, *base)
            assert run.returncode == 2 and "--peer" in run.stderr, (bad, run.returncode, run.stderr)
        # Every listed peer's files are refused without --force, the second peer's too.
        open(os.path.join(d, "cudnn-contract.csv"), "w").close()
        run = _run("peers_bench.py", "--peer", "ours,cudnn", *base)
        assert run.returncode == 2 and "cudnn-contract.csv exists" in run.stderr, run.stderr
    finally:
        shutil.rmtree(d)


class _StandInPeer:
    """A peer that records what it is handed and writes zeros (no kernel): prepare() keeps the
    TorchInputs object and the tensors its contract reads; fn() counts its calls."""

    def __init__(self, torch, name, log, contracts=("plain", "raw"), raise_on=None):
        self.torch, self.name, self.log, self.contracts, self.raise_on = torch, name, log, contracts, raise_on
        self.version = f"stand-in {name}"
        self.calls = 0

    def prepare(self, inp, contract):
        import peer_adapters as pa
        if contract not in self.contracts:
            raise pa.Refused(f"{self.name} has no {contract} contract")
        if contract == "raw":
            pa.ensure_raw(self.torch, inp)
            tensors = (inp.q, inp.k_raw, inp.v, inp.raw_gate, inp.beta_logits, inp.a_log, inp.dt_bias)
        else:
            tensors = (inp.q, inp.k, inp.v, inp.gate, inp.beta)
        self.log.append((self.name, contract, inp.shape, inp, tensors))
        out = self.torch.zeros(inp.v.shape, dtype=self.torch.bfloat16)

        def fn():
            self.calls += 1
            if self.raise_on == contract:
                raise RuntimeError(f"CUDA error: an illegal memory access was encountered ({self.name})")
        fn.peer = self.name
        return pa.Call(fn=fn, out=out, final_state=None, text=f"{self.name}.fwd({contract})")


def _stand_in_timer(medians):
    """peers_torch.time_warm's stand-in: the warm-up calls, then a fixed median per peer."""
    import peers_torch as pt

    def timer(rt, fn, cfg, default_clock_hz=None, clock=None):
        for _ in range(cfg.warmup + 1):
            fn()
        peer = getattr(fn, "peer", "ours")
        return pt.TimingResult(samples=[medians[peer]] * cfg.min_samples, host_enqueue_s=[1e-5],
                               stop_reason="noise", wall_s=0.01, warmup_runs=cfg.warmup + 1,
                               throttle_discards=0, sm_clock_hz=[math.nan], batch=1)
    return timer


_TINY_SHAPES = """description: tiny
shapes:
  - id: tiny-ragged
    heads: 2
    seq_lens: [40, 0, 90]
    initial_state: true
    final_state: true
  - id: tiny-dense
    heads: 1
    batch: 2
    seq_len: 70
"""


def _bench_in_one_process(d, peers, load, medians, extra=()):
    import peers_bench as pb
    pt, rt = _cpu_runtime()
    a, b = os.path.join(d, "a.yaml"), os.path.join(d, "b.yaml")
    open(a, "w").write(_TINY_SHAPES)
    open(b, "w").write(_TINY_SHAPES.replace("tiny-ragged", "tiny-other").split("  - id: tiny-dense")[0])
    argv = ["--peer", peers, "--build-dir", os.path.join(d, "no-build"), "--shapes", a, "--shapes", b,
            "--out-dir", os.path.join(d, "out"), "--warmup", "3", "--min-samples", "8", "-q", *extra]
    return pb.main(argv, runtime=rt, load=load, timer=_stand_in_timer(medians))


def _bench_rows_of(d, name):
    return pc.read_csv_rows(os.path.join(d, "out", name))


def test_peers_bench_times_every_listed_peer_on_the_same_tensors():
    """--peer ours,cudnn,vllm-flashkda with stand-ins (ours = the real OursPeer over a stand-in
    kda_torch): per shape one TorchInputs, handed to every peer and contract (the same objects);
    rows per shape contract by contract, peers in the given order; each peer its own CSV/JSON
    per shape file, with process_peers; a refused contract stays refused."""
    import peer_adapters as pa
    torch = _cpu_runtime()[1].torch
    log, order, fakes, loaded = [], [], {}, []

    class Ours(pa.OursPeer):  # the real adapter, its prepare() calls logged in order
        def prepare(self, inp, contract):
            order.append(("ours", contract, id(inp)))
            return super().prepare(inp, contract)

    class StandIn(_StandInPeer):
        def prepare(self, inp, contract):
            order.append((self.name, contract, id(inp)))
            return super().prepare(inp, contract)

    def load(torch_, name, build_dir):
        loaded.append(name)
        if name == "ours":
            fakes["ours"] = _FakeKdaTorch()
            return Ours(torch_, kda=fakes["ours"])
        return StandIn(torch_, name, log, contracts=("raw",) if name in pa.FLASHKDA_VARIANTS else pa.CONTRACTS)
    d = tempfile.mkdtemp()
    try:
        medians = {"ours": 1e-3, "cudnn": 2e-3, "vllm-flashkda": 3e-3}
        rc = _bench_in_one_process(d, "ours,cudnn,vllm-flashkda", load, medians, ["--no-verify"])
        assert rc == 0, rc
        assert loaded == ["ours", "cudnn", "vllm-flashkda"]
        # Per shape (3 over the 2 files): one inputs object, contract by contract, peers as given.
        shapes = list(dict.fromkeys(i for _, _, i in order))
        assert len(shapes) == 3
        for i in shapes:
            assert [(n, c) for n, c, j in order if j == i] == [
                (n, c) for c in ("plain", "raw") for n in ("ours", "cudnn", "vllm-flashkda")]
        assert [i for _, _, i in order] == [i for i in shapes for _ in range(6)]  # no shape revisited
        # What each peer was handed is the same tensors: the stand-ins' and ours' (kda_torch calls).
        ours_calls = [c for c in fakes["ours"].calls if c[0] in ("forward", "chunk_kda")]
        for i in shapes:
            entries = [(name, contract, inp, tensors) for name, contract, _, inp, tensors in log if id(inp) == i]
            inp = entries[0][2]
            assert [(n, c) for n, c, *_ in entries] == [("cudnn", "plain"), ("cudnn", "raw"), ("vllm-flashkda", "raw")]
            plain = (inp.q, inp.k, inp.v, inp.gate, inp.beta)
            raw = (inp.q, inp.k_raw, inp.v, inp.raw_gate, inp.beta_logits, inp.a_log, inp.dt_bias)
            for name, contract, _, tensors in entries:
                assert all(x is y for x, y in zip(tensors, plain if contract == "plain" else raw)), (name, contract)
            assert any(c[0] == "forward" and all(x is y for x, y in zip(c[1], plain)) for c in ours_calls)
            assert any(c[0] == "chunk_kda" and c[1][0] is inp.q and c[1][2] is inp.v
                       and torch.equal(c[1][1], inp.k_raw.to(torch.bfloat16))
                       and torch.equal(c[1][3], inp.raw_gate.to(torch.bfloat16)) for c in ours_calls)
        # Each peer its own files per shape file, rows in shape order, paths <peer>-<contract>.
        out = sorted(os.listdir(os.path.join(d, "out")))
        assert out == sorted(f"{p}-{s}.{e}" for p in medians for s in ("a", "b") for e in ("csv", "json")), out
        for peer, median in medians.items():
            rows = _bench_rows_of(d, f"{peer}-a.csv")
            assert [(r["shape_id"], r["path"]) for r in rows] == [
                (s, f"{peer}-{c}") for s in ("tiny-ragged", "tiny-dense") for c in ("plain", "raw")], rows
            for r in rows:
                assert r["process_peers"] == "ours+cudnn+vllm-flashkda" and r["impl"] == peer == r["variant"]
                assert r["run_id"].endswith("-" + peer)
                if peer == "vllm-flashkda" and r["contract"] == "plain":
                    assert r["verdict"] == "refused" and not r["median_s"], r
                else:
                    assert r["verdict"] == "not verified" and float(r["median_s"]) == median, r
                    assert r["inputs"] and r["warmup_runs"] == "4"
            doc = json.load(open(os.path.join(d, "out", f"{peer}-b.json")))
            assert doc["meta"]["peer"] == peer and doc["meta"]["process_peers"] == ["ours", "cudnn", "vllm-flashkda"]
            assert [r["shape_id"] for r in doc["rows"]] == ["tiny-other"] * (1 if peer == "vllm-flashkda" else 2)
        # The report reads them as before (file names and paths unchanged).
        import peers_report
        assert peers_report.stems_of(os.path.join(d, "out")) == ["a", "b"]
        lines, _ = peers_report.timing_section(os.path.join(d, "out"), "a")
        assert any("peers_bench processes" in x and "`ours+cudnn+vllm-flashkda`" in x for x in lines), lines
    finally:
        shutil.rmtree(d)


def test_peers_bench_one_process_keeps_going_past_an_unavailable_or_failing_peer():
    """An unavailable peer gets its 'unavailable' rows and the others are timed (exit 1); the
    slice check runs for each peer on the shared inputs (a stand-in's zeros fail it); a call
    that raises is that row's failure only while the device survives; once the device is gone
    (peers_bench.context_lost) every later row says 'not run' and the exit code is 5."""
    import peer_adapters as pa
    import peers_bench as pb

    def load(torch_, name, build_dir):
        if name == "flashkda":
            raise pa.Unavailable("build failed: setup.py (rc 1; nvcc fatal: boom)")
        return _StandInPeer(torch_, name, [], raise_on="raw" if name == "cudnn" else None)
    d = tempfile.mkdtemp()
    try:
        medians = {"ours": 1e-3, "cudnn": 2e-3}
        rc = _bench_in_one_process(d, "flashkda,cudnn,ours", load, medians, ["--contracts", "plain,raw"])
        assert rc == 1, rc
        fk = _bench_rows_of(d, "flashkda-a.csv")
        assert len(fk) == 4 and all(r["verdict"] == "failed" and r["verdict_detail"] ==
                                    "unavailable: build failed: setup.py (rc 1; nvcc fatal: boom)" for r in fk), fk
        assert all(r["process_peers"] == "flashkda+cudnn+ours" for r in fk)
        for peer in ("cudnn", "ours"):
            rows = _bench_rows_of(d, f"{peer}-a.csv")
            assert len(rows) == 4
            for r in rows:
                if peer == "cudnn" and r["contract"] == "raw":
                    assert r["verdict_detail"] == ("failed: RuntimeError: CUDA error: an illegal memory access "
                                                   "was encountered (cudnn)"), r
                else:  # checked on the shared inputs: zeros are not the answer
                    assert r["verdict"] == "failed" and "slice check" in r["verdict_detail"], r
                    assert float(r["median_s"]) == medians[peer]
        # The same failure with the device gone: the rows after it are not run, exit 5.
        real = pb.context_lost
        pb.context_lost = lambda rt: "RuntimeError: CUDA error: an illegal memory access was encountered"
        try:
            rc = _bench_in_one_process(d, "cudnn,ours", load, medians, ["--no-verify", "--force"])
        finally:
            pb.context_lost = real
        assert rc == pb.EXIT_CONTEXT_LOST == 5, rc
        cudnn, ours = _bench_rows_of(d, "cudnn-a.csv"), _bench_rows_of(d, "ours-a.csv")
        assert [r["verdict"] for r in cudnn] == ["not verified", "failed", "failed", "failed"]
        assert [r["verdict"] for r in ours] == ["not verified", "failed", "failed", "failed"]
        lost = ours[1]["verdict_detail"]
        assert lost.startswith("not run: the CUDA context was lost after cudnn-raw on tiny-ragged raised "
                               "RuntimeError") and "processes of their own" in lost, lost
        assert cudnn[2]["verdict_detail"] == lost and _bench_rows_of(d, "ours-b.csv")[0]["verdict_detail"] == lost
    finally:
        shutil.rmtree(d)


def test_run_all_times_the_shared_group_again_one_per_process_after_a_crash():
    """run-all-h200.sh phase C's peers_bench steps, cut out of the script (step() and the groups
    loop) and run with a stand-in python3: ours,cudnn,vllm-flashkda in one process, flashkda and
    flash-flash-kda alone; a shared process that dies of a signal (or exits 5, the CUDA context
    lost) is followed by its peers one per process, said in steps.txt; rc 1 is not rerun."""
    script = open(os.path.join(HERE, "run-all-h200.sh"), encoding="utf-8").read()
    step_fn = re.search(r"^step\(\) \{.*?^\}$", script, re.S | re.M).group(0)
    loop = re.search(r"^groups=\(.*?^done$", script, re.S | re.M).group(0)
    d = tempfile.mkdtemp()
    try:
        fake = os.path.join(d, "bin", "python3")
        os.makedirs(os.path.dirname(fake))
        open(fake, "w").write('#!/bin/bash\necho "$@" >> "$CALLS"\ncase "$MODE:$3" in\n'
                              '  segv:*,*) kill -SEGV $$ ;;\n  lost:*,*) exit 5 ;;\n  fail:*,*) exit 1 ;;\nesac\n')
        os.chmod(fake, 0o755)
        sim = os.path.join(d, "sim.sh")
        wanted = re.search(r"^peers_wanted=.*?^peer_wanted\(\).*?$", script, re.S | re.M).group(0)
        open(sim, "w").write(f'r={d}/r; mkdir -p "$r"; steps=$r/steps.txt; : > "$steps"; DEADLINE=560; B=/tmp/b\n'
                             f'files=(a.yaml b.yaml)\n{wanted}\n{step_fn}\n{loop}\n')
        for mode in ("ok", "segv", "lost", "fail"):
            calls = os.path.join(d, f"calls-{mode}")
            env = dict(os.environ, PATH=os.path.dirname(fake) + os.pathsep + os.environ["PATH"], MODE=mode, CALLS=calls)
            run = subprocess.run(["bash", sim], env=env, capture_output=True, text=True)
            assert run.returncode == 0, run.stderr
            peers = [line.split()[2] for line in open(calls)]
            steps = open(os.path.join(d, "r", "steps.txt")).read()
            assert all(line.split()[3:] == ["--build-dir", "/tmp/b", "--shapes", "a.yaml", "--shapes", "b.yaml",
                                            "--out-dir", f"{d}/r", "--force", "--warmup", "5", "--min-samples", "30",
                                            "--min-time", "0.25", "--timeout", "5"] for line in open(calls))
            if mode in ("segv", "lost"):
                assert peers == ["ours,cudnn,vllm-flashkda", "ours", "cudnn", "vllm-flashkda", "flashkda",
                                 "flash-flash-kda"], peers
                why = "died of signal 11 (rc=139" if mode == "segv" else "lost the CUDA context (rc=5"
                assert (f"bench-ours+cudnn+vllm-flashkda {why}, log bench-ours+cudnn+vllm-flashkda.log): its peers "
                        f"again, one process each: ours cudnn vllm-flashkda") in steps, steps
                assert "bench-ours rc=0" in steps and "bench-vllm-flashkda rc=0" in steps, steps
            else:
                assert peers == ["ours,cudnn,vllm-flashkda", "flashkda", "flash-flash-kda"], peers
                assert "one process each" not in steps, steps
                assert f"bench-ours+cudnn+vllm-flashkda rc={0 if mode == 'ok' else 1} " in steps, steps
    finally:
        shutil.rmtree(d)


def main():
    tests = [(name, fn) for name, fn in sorted(globals().items()) if name.startswith("test_") and callable(fn)]
    passed = failed = skipped = 0
    for name, fn in tests:
        try:
            fn()
        except SkipTest as e:
            skipped += 1
            print(f"SKIP {name}: {e}")
        except Exception as e:  # noqa: BLE001
            failed += 1
            import traceback
            where = traceback.extract_tb(e.__traceback__)[-1]
            print(f"FAIL {name}: {type(e).__name__}: {e} (line {where.lineno}: {where.line})")
        else:
            passed += 1
            print(f"ok   {name}")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
