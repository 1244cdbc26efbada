#!/usr/bin/env python3
"""Judge FLA's chunk_kda and our kernels on exactly the same inputs: a `kda-check --dump` directory.

    build/snapbin/kda-check --shapes shapes/smoke.yaml --dump /tmp/dump   # on the GPU machine
    python3 scripts/peers/fla_check.py /tmp/dump --md fla-check.md --csv fla-check.csv

For every problem of the dump (DIR/<id>/, written by apps/kda-check/dump.cpp) it loads the inputs
(bf16 q raw, k, v; the cumulative log2 gate; beta; cu_seqlens; h0), the float64 reference output
(out_reference.npy) and final state (ht_reference.npy), the float32 reference (out_reference_f32
.npy, the `low` of the budget; recomputed here when the dump lacks it) and our outputs (out_fused,
out_explicit[, _<variant>], ht_*), runs FLA's chunk_kda on the same values (Triton path; the gate
converted as scripts/peers/README.md says) and judges, with the §9.4 budget of
kda-forward.md (the rule of lib/harness/src/budget.cpp):

  * each of our paths and each FLA call against the float64 reference (output and final state);
  * our fused path against the explicit one, review point (c);
  * the direct difference of each of our paths with each FLA call: "agree" when the largest
    difference is within the same budget as the reference judgement of that tensor.

Every row gives the largest error and where it is (token, sequence and position, head, channel).

FLA calls (--rows): prenorm = chunk_kda(l2norm(q), k, v, g, beta, ...), q normalized here in
float64 and rounded to bf16 once; l2norm-in-kernel = raw q with use_qk_l2norm_in_kernel=True
(FLA normalizes q and, again, k); prenorm-safegate = prenorm with safe_gate=True, lower_bound=-5.

Rows whose q FLA normalizes itself in fp32 (l2norm-in-kernel) on a problem with q rows whose sum
of squares overflows fp32 (the row-scale suite's 1e20 / 3e38 rows, kda-forward.md §4.4): FLA
outputs 0 on those rows; the row is a "known limitation" when every other row passes (and the
same for ours vs FLA), else a failure naming both results (peers_common.judge_known_overflow).

Exit codes: 0 every row passed / agreed or is a known limitation; 1 a row failed or disagreed
(--fail-on ours: only our rows count); 2 bad usage or input (no such directory, a malformed dump, output exists without
--force); 3 FLA is installed but does not import; 77 skipped: torch, a CUDA GPU or FLA missing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_common as pc  # noqa: E402

ROW_NAMES = ("prenorm", "l2norm-in-kernel", "prenorm-safegate")
ROW_PATHS = {"prenorm": "fla-prenorm", "l2norm-in-kernel": "fla-l2norm-in-kernel",
             "prenorm-safegate": "fla-prenorm-safegate"}
# Rows whose q is normalized by FLA in fp32 (use_qk_l2norm_in_kernel): q rows that overflow that
# sum of squares come out as 0 there, a known limitation when every other row passes.
FP32_QNORM_ROWS = ("l2norm-in-kernel",)
FP32_QNORM_PATHS = tuple(ROW_PATHS[r] for r in FP32_QNORM_ROWS)
COLUMNS = ["shape", "impl", "path", "variant", "tensor", "elements", "max_abs_err", "budget", "rel_rms",
           "ref_err", "max_golden", "worst_index", "worst_location", "non_finite", "inactive_nonzero",
           "low_source", "verdict"]


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="fla_check.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 all passed, 1 a failure or disagreement, 2 bad usage/input, "
               "3 FLA does not import, 77 skipped (no torch / CUDA GPU / FLA).")
    p.add_argument("dump", metavar="DUMP_DIR", help="directory written by kda-check --dump (DIR/<id>/*.npy)")
    p.add_argument("--only", action="append", default=[], metavar="ID", help="only these problem ids")
    p.add_argument("--rows", default="prenorm,l2norm-in-kernel",
                   help=f"comma list of FLA calls: {', '.join(ROW_NAMES)} (default prenorm,l2norm-in-kernel)")
    p.add_argument("--csv", help="write the rows as CSV")
    p.add_argument("--md", help="write the markdown report (also printed on stdout)")
    p.add_argument("--json", help="write rows and metadata as JSON")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.add_argument("--fail-on", choices=("any", "ours"), default="any",
                   help="which rows decide exit code 1: any (default) or only our own paths")
    p.add_argument("--allow-backends", action="store_true",
                   help="let FLA dispatch to other backends if installed (default: Triton only)")
    p.add_argument("--retune", action="store_true",
                   help="let FLA autotune every new key (head count, varlen, state...): minutes per "
                        "new key on a fresh machine; by default each kernel keeps the config tuned "
                        "on the first problem (launch parameters only: the results do not depend on it)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    pc.add_testing_options(p)
    return pc.split_list_options(p.parse_args(argv))


def plan(args):
    bad = [r for r in args.row_list if r not in ROW_NAMES]
    if bad or not args.row_list:
        raise pc.InputError(f"--rows {args.rows}: expected a comma list of {', '.join(ROW_NAMES)}")
    dirs = pc.find_dump_problems(args.dump)
    ids = [os.path.basename(os.path.normpath(d)) for d in dirs]
    for ident in args.only:
        if ident not in ids:
            raise pc.InputError(f"--only {ident}: no such problem in {args.dump} (has: {', '.join(ids)})")
    pc.refuse_existing([args.csv, args.md, args.json], args.force)
    return [d for d, i in zip(dirs, ids) if not args.only or i in args.only]


def judged_row(shape, impl, path, variant, tensor, j: pc.Judgement, out_shape, kind, cu,
               low_source, verdict=None, inactive_nonzero=None):
    return {"shape": shape, "impl": impl, "path": path, "variant": variant, "tensor": tensor,
            "elements": j.elements, "max_abs_err": j.max_abs_err, "budget": j.budget,
            "rel_rms": j.rel_rms, "ref_err": j.ref_err, "max_golden": j.max_golden,
            "worst_index": j.worst_index,
            "worst_location": pc.describe_location(j.worst_index, out_shape, kind, cu),
            "non_finite": j.non_finite, "inactive_nonzero": inactive_nonzero,
            "low_source": low_source, "verdict": verdict if verdict is not None else j.verdict()}


def inactive_nonzero(out: np.ndarray, cu) -> int | None:
    """Output elements at or after cu_seqlens[N] that are not exactly zero (NaN counts)."""
    if cu is None or int(cu[-1]) >= out.shape[1]:
        return None
    tail = out[:, int(cu[-1]):]
    return int(np.count_nonzero((tail != 0) | np.isnan(tail)))


def check_problem(args, rt, pt, directory):
    """All rows of one dumped problem."""
    torch = rt.torch
    d = pc.load_dump_problem(directory)
    cu = d.cu_seqlens
    golden = d.load("out_reference")
    if golden is None:
        raise pc.InputError(f"{directory}: no out_reference.npy (write the dump with kda-check --dump)")
    golden = np.asarray(golden, dtype=np.float64)
    out_shape = golden.shape
    golden_ht = d.load("ht_reference")
    golden_ht = None if golden_ht is None else np.asarray(golden_ht, dtype=np.float64)
    # The fp32 parts the dump lacks (final state, or all of it for a reference-backend dump):
    # the NumPy recurrence, cached beside the dump for the other checks of the same run.
    lows = pc.contract_low_references(d, log=lambda t: pc.log(args, t))
    low, low_source, low_ht, low_ht_source = lows["low"], lows["low_source"], lows["low_ht"], lows["low_ht_source"]
    low = np.asarray(low, dtype=np.float64)
    # q rows whose fp32 sum of squares overflows: FLA's in-kernel l2norm gives 0 there (§4.4).
    overflow_rows = pc.fp32_norm_overflow_rows(d.q)
    rows = []

    # Our paths, as dumped by kda-check (GPU backends only).
    ours = {(p, v): np.asarray(d.load(key), dtype=np.float64) for p, v, key in pc.our_outputs(d, "out")}
    ours_ht = {(p, v): np.asarray(d.load(key), dtype=np.float64) for p, v, key in pc.our_outputs(d, "ht")}
    budgets = {}
    for (path, variant), actual in sorted(ours.items()):
        j = pc.judge(golden, low, actual)
        budgets["out"] = j.budget
        rows.append(judged_row(d.id, "ours", path, variant, "out", j, out_shape, "out", cu, low_source,
                               inactive_nonzero=inactive_nonzero(actual, cu)))
        if golden_ht is not None and (path, variant) in ours_ht:
            jh = pc.judge(golden_ht, low_ht, ours_ht[(path, variant)])
            budgets["final_state"] = jh.budget
            rows.append(judged_row(d.id, "ours", path, variant, "final_state", jh, golden_ht.shape,
                                   "state", cu, low_ht_source))
    for (path, variant), fused in sorted(ours.items()):
        if path == "fused" and ("explicit", variant) in ours:
            j = pc.judge(golden, ours[("explicit", variant)], fused)
            ok = j.non_finite == 0 and j.within_budget  # §9.4 (c): the budget part only
            verdict = "passed" if ok else (f"failed: max |fused - golden| {pc.sci(j.max_abs_err)} > 2 (max "
                                           f"|explicit - golden| + 2^-7 max |golden|) = {pc.sci(j.budget)}")
            rows.append(judged_row(d.id, "ours", "fused", variant, "out vs explicit (c)", j, out_shape,
                                   "out", cu, "our explicit output", verdict))

    # FLA on the same values.
    inp = pt.inputs_from_dump(rt, d, args.fla_dtype)
    pt.prepare_fla_inputs(rt, inp)
    pt.check_conversion_twin(rt, inp)
    recon = pt.gate_reconstruction(rt, inp)
    fla, fla_ht = {}, {}
    for row in args.row_list:
        path = ROW_PATHS[row]
        kw = pt.fla_kwargs(row, inp, golden_ht is not None)
        try:
            with torch.inference_mode():
                o, ht = rt.chunk_kda(**kw)
                if rt.device == "cuda":
                    torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 (FLA refused or broke on this problem: a failed row)
            rows.append({"shape": d.id, "impl": "fla", "path": path, "variant": "-", "tensor": "out",
                         "low_source": low_source, "worst_location": "-",
                         "verdict": f"failed: FLA raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})
            pc.log(args, f"  {path}: FLA raised {type(e).__name__}: {e}")
            continue
        actual = o.float().cpu().numpy().astype(np.float64)
        fla[path] = actual
        j = pc.judge(golden, low, actual)
        budgets.setdefault("out", j.budget)
        nz = inactive_nonzero(actual, cu)
        verdict = j.verdict()
        if row in FP32_QNORM_ROWS and overflow_rows.any() and not j.passed():
            verdict, _ = pc.judge_known_overflow(golden, low, actual, overflow_rows, j, cu)
        if nz and (verdict == "passed" or verdict.startswith("known")):
            verdict = f"failed: {nz} non-zero outputs after cu_seqlens[N]"
        rows.append(judged_row(d.id, "fla", path, "-", "out", j, out_shape, "out", cu, low_source,
                               verdict, nz))
        if golden_ht is not None:
            if ht is None:
                rows.append({"shape": d.id, "impl": "fla", "path": path, "variant": "-",
                             "tensor": "final_state", "verdict": "failed: FLA returned no final state"})
            else:
                actual_ht = ht.float().cpu().numpy().astype(np.float64)
                fla_ht[path] = actual_ht
                jh = pc.judge(golden_ht, low_ht, actual_ht)
                budgets.setdefault("final_state", jh.budget)
                rows.append(judged_row(d.id, "fla", path, "-", "final_state", jh, golden_ht.shape, "state",
                                       cu, low_ht_source))

    # Ours vs FLA, directly.
    for tensor, mine, theirs, ref, kind, shp in (("out", ours, fla, golden, "out", out_shape),
                                                 ("final_state", ours_ht, fla_ht, golden_ht, "state",
                                                  None if golden_ht is None else golden_ht.shape)):
        for (path, variant), a in sorted(mine.items()):
            for fpath, b in theirs.items():
                diff, index = pc.max_abs_difference(a, b)
                budget = budgets.get(tensor, math.nan)
                agree = math.isfinite(diff) and diff <= budget
                verdict = "agree" if agree else f"disagree: max |ours - FLA| {pc.sci(diff)} > budget {pc.sci(budget)}"
                if not agree and tensor == "out" and fpath in FP32_QNORM_PATHS and overflow_rows.any():
                    keep = ~overflow_rows
                    rest, _ = pc.max_abs_difference(a[keep], b[keep])
                    if math.isfinite(rest) and rest <= budget:
                        verdict = (f"known limitation: differ on the {int(overflow_rows.sum())} q rows that "
                                   f"overflow FLA's fp32 in-kernel l2norm; elsewhere max |ours - FLA| "
                                   f"{pc.sci(rest)} <= budget {pc.sci(budget)}")
                rows.append({"shape": d.id, "impl": "ours vs fla", "path": f"{path} vs {fpath}",
                             "variant": variant, "tensor": tensor, "elements": int(a.size),
                             "max_abs_err": diff, "budget": budget,
                             "rel_rms": pc.rel_rms_difference(a, b, ref),
                             "worst_index": index,
                             "worst_location": pc.describe_location(index, shp, kind, cu),
                             "low_source": "-", "verdict": verdict})
    info = {"id": d.id, "batch": d.batch, "tokens": d.tokens, "heads": d.heads, "num_seqs": d.num_seqs,
            "gate_recon_max_abs": recon, "max_abs_gate": float(np.max(np.abs(d.gate))) if d.gate.size else 0.0,
            "ours": sorted(f"{p}{'' if v == '-' else '_' + v}" for p, v in ours),
            "calls": {ROW_PATHS[r]: pt.call_text(pt.fla_kwargs(r, inp, golden_ht is not None))
                      for r in args.row_list}}
    return rows, info


def is_failure(row, fail_on):
    verdict = row.get("verdict", "")
    bad = verdict.startswith("failed") or verdict.startswith("disagree")
    if fail_on == "ours":
        return bad and row.get("impl") == "ours"
    return bad


def markdown(args, rows, infos, rt, dev, elapsed) -> str:
    out = ["# fla_check: FLA chunk_kda vs our kernels vs the float64 reference\n",
           f"- dump: {args.dump}",
           f"- device: {dev['device_name']} (cc {dev['cc']}); fla-core {rt.fla_version}, torch "
           f"{rt.torch.__version__}, triton {rt.triton.__version__}; kernels: {rt.dispatch}",
           "- FLA autotuning: " + ("every new key tuned (--retune)" if args.retune else
                                   "each kernel keeps the config tuned on the first problem "
                                   "(launch parameters only; --retune tunes every new key)"),
           "- rule (kda-forward.md §9.4): pass iff all finite, max|actual-golden| <= 2 (max|low-golden| + "
           "2^-7 max|golden|) and RMS(actual-golden)/RMS(golden) < 5e-3; golden = CPU fp64 reference; "
           "ours vs FLA: agree iff max|ours-FLA| <= that tensor's budget",
           f"- FLA inputs: the dumped values; gate converted to FLA's per-token natural-log gate; "
           f"q for prenorm normalized in float64, rounded to {args.fla_dtype} once",
           f"- {len(infos)} problems, {elapsed:.1f} s\n"]
    table = [[r["shape"], r.get("impl", ""), r["path"], r.get("variant", "-"), r["tensor"],
              pc.sci(r.get("max_abs_err")), pc.sci(r.get("budget")), pc.sci(r.get("rel_rms")),
              r.get("worst_location", "-"), r["verdict"]] for r in rows]
    out.append(pc.to_markdown(["shape", "impl", "path", "variant", "tensor", "max_abs_err", "budget",
                               "rel_rms", "largest error at", "verdict"], table))
    out.append("\nGate conversion, FLA's chunk_local_cumsum(g, 64, scale=RCP_LN2) vs our cumulative gate:\n")
    out.append(pc.to_markdown(["shape", "max abs diff", "max abs G"],
                              [[i["id"], pc.sci(i["gate_recon_max_abs"]), pc.sci(i["max_abs_gate"])] for i in infos]))
    bad = [r for r in rows if is_failure(r, "any")]
    out.append("\n## Disagreements\n")
    if not bad:
        out.append("None: every judged row passed and our outputs agree with FLA's within the budget.")
    for r in bad:
        out.append(f"- **{r['shape']}** {r['path']} ({r['tensor']}): {r['verdict']}; largest error at "
                   f"{r.get('worst_location', '-')}")
    known = [r for r in rows if r["verdict"].startswith("known")]
    if known:
        out.append("\n## Known limitations (not counted as failures: every other row of the tensor passes)\n")
        for r in known:
            out.append(f"- **{r['shape']}** {r['path']} ({r['tensor']}): {r['verdict']}")
    counts = {}
    for r in rows:
        key = r.get("impl", "?")
        c = counts.setdefault(key, [0, 0, 0])
        c[1 if is_failure(r, "any") else 2 if r["verdict"].startswith("known") else 0] += 1
    out.append("\n" + "; ".join(f"{k}: {v[0]} passed, {v[1]} failed, {v[2]} known" for k, v in counts.items()))
    total_bad = sum(v[1] for v in counts.values())
    out.append(f"\n{len(rows) - total_bad - len(known)} passed, {total_bad} failed, {len(known)} known limitations\n")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        dirs = plan(args)
    except pc.InputError as e:
        print(f"fla_check: {e}", file=sys.stderr)
        return pc.EXIT_USAGE
    import peers_torch as pt
    rt, code = pt.runtime_for("fla_check", args)
    if rt is None:
        return code
    if not args.retune and rt.device == "cuda":
        pc.log(args, f"autotuning: each of {pt.pin_first_tuning()} FLA autotuners keeps the config "
                     f"it tunes on the first problem (--retune: tune every new key)")
    dev = pt.device_info(rt)
    t0 = time.perf_counter()
    rows, infos = [], []
    for i, directory in enumerate(dirs, start=1):
        t1 = time.perf_counter()
        pc.log(args, f"[{i}/{len(dirs)}] {os.path.basename(os.path.normpath(directory))}")
        try:
            r, info = check_problem(args, rt, pt, directory)
        except pc.InputError as e:
            print(f"fla_check: {e}", file=sys.stderr)
            return pc.EXIT_USAGE
        rows += r
        infos.append(info)
        failed = sum(is_failure(x, "any") for x in r)
        pc.log(args, f"  {len(r)} rows, {failed} failed or disagreeing ({time.perf_counter() - t1:.1f} s)")
        if rt.device == "cuda":
            rt.torch.cuda.empty_cache()
    report = markdown(args, rows, infos, rt, dev, time.perf_counter() - t0)
    print(report, end="")
    if args.md:
        pc.write_atomic(args.md, report, force=True)
    if args.csv:
        pc.write_atomic(args.csv, pc.to_csv(COLUMNS, rows), force=True)
    if args.json:
        doc = {"meta": {"dump": args.dump, "argv": sys.argv, "device": dev, "dispatch": rt.dispatch,
                        "fla_version": rt.fla_version, "torch_version": rt.torch.__version__,
                        "triton_version": rt.triton.__version__, "python_version": platform.python_version(),
                        "utc_time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")},
               "problems": infos, "rows": rows}
        pc.write_atomic(args.json, json.dumps(pc.json_safe(doc), indent=1) + "\n", force=True)
    return pc.EXIT_FAILED if any(is_failure(r, args.fail_on) for r in rows) else pc.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
