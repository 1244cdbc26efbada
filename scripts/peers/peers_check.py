#!/usr/bin/env python3
"""Judge one Hopper peer on exactly our inputs: a `kda-check --dump` directory, by our budget.

    build/snapbin/kda-check --shapes shapes/long-memory.yaml --dump /tmp/dump-lm   # on the GPU machine
    python3 scripts/peers/peers_check.py /tmp/dump-lm --peer cudnn --build-dir /tmp/peers-build \\
        --with-ours --csv OUT.csv --md OUT.md

fla_check.py generalised to the other peers (peer_adapters.py): for every dumped problem it
runs the peer on the dumped values in each contract it takes and judges its output and final
state against the dumped float64 reference with the §9.4 budget of kda-forward.md (the fp32
reference sets the `low`; the rule of lib/harness/src/budget.cpp), next to our own dumped outputs
judged the same way (--with-ours), plus the direct difference of our fused output and the peer's
("agree" when within that tensor's budget). The rows have fla_check's columns, so one report
(peers_report.py) holds every peer.

Plain contract: q normalized in float64 and rounded to bf16 once, the dumped k, the gate as the
per-token natural-log gate (as for FLA), beta; judged against the dump's golden.

Raw contract: when the dump has the raw files (k_raw, gate_raw, beta_logits, a_log, dt_bias,
meta.json lower_bound), the peer gets exactly those draws and is judged against the golden of
that problem: kda-check's out_reference_raw.npy when dumped, else the NumPy fp64 recurrence on
l2norm(k_raw), gate.npy and sigmoid(beta_logits) (and its fp32 twin as the low), computed once per
dump and cached in DIR/peers-ref/. Without them, the same problem by conversion (A_log = dt_bias =
0, g = logit(gamma / lb), beta logits, each in the dtype the peer takes), judged against the golden
of the converted problem, so the conversion's rounding is not charged to the peer; `input_error`
says how far that rounding moves the gate, beta and the golden output. A raw peer normalizes q
itself in fp32: q rows whose sum of squares overflows fp32 (the row-scale suite's 1e20 / 3e38
rows) come out as zeros; such a row is a "known limitation" when every other row passes
(peers_common.judge_known_overflow), a failure otherwise.

Exit codes: 0 every row passed / agreed; 1 a row failed or disagreed, or the peer is unavailable
(its rows carry the exact error); 2 bad usage or input; 77 no torch or CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_common as pc  # noqa: E402
from fla_check import COLUMNS as FLA_COLUMNS, inactive_nonzero, is_failure, judged_row  # noqa: E402

COLUMNS = FLA_COLUMNS + ["contract", "input_error", "golden_source", "call"]
INPUT_ERROR_TOKENS = 2048


def parse_args(argv):
    import peer_adapters as pa
    p = argparse.ArgumentParser(prog="peers_check.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dump", metavar="DUMP_DIR", help="directory written by kda-check --dump")
    p.add_argument("--peer", choices=pa.PEER_NAMES)
    p.add_argument("--build-dir", help="build_peers.sh's BUILD_DIR")
    p.add_argument("--prepare-refs", action="append", default=[], metavar="PEER,...",
                   help="only compute and cache the references these peers' checks need (no torch, no GPU)")
    p.add_argument("--contracts", default="plain,raw")
    p.add_argument("--only", action="append", default=[], metavar="ID")
    p.add_argument("--with-ours", action="store_true", help="also judge our dumped outputs")
    p.add_argument("--csv")
    p.add_argument("--md")
    p.add_argument("--json")
    p.add_argument("--force", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    args.only = [x for item in args.only for x in item.split(",") if x]
    args.contract_list = [c.strip() for c in args.contracts.split(",") if c.strip()]
    if not args.prepare_refs and (not args.peer or not args.build_dir):
        p.error("--peer and --build-dir are required (unless --prepare-refs)")
    return args


def plan(args):
    import peer_adapters as pa
    if not args.contract_list or any(c not in pa.CONTRACTS for c in args.contract_list):
        raise pc.InputError(f"--contracts {args.contracts}: expected a comma list of plain, raw")
    dirs = pc.find_dump_problems(args.dump)
    ids = [os.path.basename(os.path.normpath(d)) for d in dirs]
    for ident in args.only:
        if ident not in ids:
            raise pc.InputError(f"--only {ident}: no such problem in {args.dump} (has: {', '.join(ids)})")
    pc.refuse_existing([args.csv, args.md, args.json], args.force)
    chosen = [d for d, i in zip(dirs, ids) if not args.only or i in args.only]
    for d in chosen:  # every problem's files (raw ones too) are checked before any GPU work
        pc.load_dump_problem(d)
    return chosen


def references(args, d):
    """(golden, low, low_source, golden_ht, low_ht, low_ht_source) of a dumped problem; the fp32
    parts the dump lacks come from peers_common.contract_low_references (cached beside the dump)."""
    golden = d.load("out_reference")
    if golden is None:
        raise pc.InputError(f"{d.directory}: no out_reference.npy (write the dump with kda-check --dump)")
    golden = np.asarray(golden, dtype=np.float64)
    golden_ht = d.load("ht_reference")
    golden_ht = None if golden_ht is None else np.asarray(golden_ht, dtype=np.float64)
    lows = pc.contract_low_references(d, log=lambda t: pc.log(args, t))
    return golden, lows["low"], lows["low_source"], golden_ht, lows["low_ht"], lows["low_ht_source"]


def prepare_references(args, dirs) -> int:
    """--prepare-refs: compute and cache, without torch or a GPU, the references the checks of the
    named peers will need ('contract': the contract problem's fp32 low; a peer name: that raw
    peer's golden and low), so that a device run can do it on the CPU while the builds run, in
    parallel processes, and the peers' checks share it."""
    peers = [p for item in args.prepare_refs for p in item.split(",") if p]
    for p in peers:
        if p not in pc.RAW_SPECS and p != "contract":
            raise pc.InputError(f"--prepare-refs {p}: expected 'contract' or peer names among "
                                f"{', '.join(pc.RAW_SPECS)}")
    for directory in dirs:
        t0 = time.perf_counter()
        d = pc.load_dump_problem(directory)
        done = set()
        if "contract" in peers:
            pc.contract_low_references(d)
            done.add("contract")
        for p in (p for p in peers if p != "contract"):
            key = "raw-files" if d.raw is not None else pc.RAW_SPECS[p].key
            if key not in done:
                pc.raw_references(d, pc.RAW_SPECS[p])
                done.add(key)
        pc.log(args, f"{d.id}: references for {', '.join(sorted(done))} ready ({time.perf_counter() - t0:.1f} s)")
    return pc.EXIT_OK


def failed_row(shape, impl, path, contract, text, tensor="out"):
    return {"shape": shape, "impl": impl, "path": path, "variant": "-", "tensor": tensor,
            "worst_location": "-", "contract": contract, "verdict": f"failed: {text}"}


def raw_input_text(d, spec: pc.RawSpec, refs: dict, golden) -> str:
    """The `input_error` cell of a raw-contract row: where the peer's inputs came from and, for a
    conversion, how far its rounding moves the gate, beta and the golden output."""
    if d.raw is not None:
        return (f"raw files of the dump, no conversion (lb {d.raw.lower_bound:g}; checked against k, gate, "
                f"beta on the first {d.raw.checked_tokens} tokens)")
    n = min(d.tokens, INPUT_ERROR_TOKENS)
    starts = pc.chunk_starts(d.tokens, None if d.cu_seqlens is None else d.cu_seqlens.tolist())
    e = pc.raw_input_error(d.gate[:, :n], d.beta[:, :n], starts[:n], refs["lower_bound"], spec.gate)
    moved = pc.rel_rms_difference(refs["golden"], golden, golden)
    beta = ("beta as dumped" if spec.beta == "sigmoid" else
            f"max |d beta| {pc.sci(e['beta_max_abs'] if spec.beta == spec.gate else math.nan)}")
    return (f"conversion, raw gate in {spec.gate}: max |dG| {pc.sci(e['gate_max_abs_log2'])} (log2), {beta}"
            + (f" (first {n} tokens)" if n < d.tokens else "")
            + f"; moves the golden output by rel RMS {pc.sci(moved)} (judged against the converted problem)")


def check_problem(args, rt, peer, unavailable, directory):
    import peer_adapters as pa
    import peers_torch as pt
    torch = rt.torch
    d = pc.load_dump_problem(directory)
    cu = d.cu_seqlens
    golden, low, low_source, golden_ht, low_ht, low_ht_source = references(args, d)
    overflow_rows = pc.fp32_norm_overflow_rows(d.q)
    spec = pc.RAW_SPECS.get(args.peer, pc.RawSpec())
    raw_refs = None
    rows, budgets = [], {}
    ours = {(p, v): np.asarray(d.load(key), dtype=np.float64) for p, v, key in pc.our_outputs(d, "out")}
    ours_ht = {(p, v): np.asarray(d.load(key), dtype=np.float64) for p, v, key in pc.our_outputs(d, "ht")}
    for (path, variant), actual in sorted(ours.items()):
        j = pc.judge(golden, low, actual)
        budgets["out"] = j.budget
        if args.with_ours:
            rows.append(dict(judged_row(d.id, "ours", path, variant, "out", j, golden.shape, "out", cu,
                                        low_source, inactive_nonzero=inactive_nonzero(actual, cu)),
                             contract="plain" if path == "fused" else "explicit"))
        if golden_ht is not None and (path, variant) in ours_ht:
            jh = pc.judge(golden_ht, low_ht, ours_ht[(path, variant)])
            budgets["final_state"] = jh.budget
            if args.with_ours:
                rows.append(dict(judged_row(d.id, "ours", path, variant, "final_state", jh, golden_ht.shape,
                                            "state", cu, low_ht_source), contract="plain"))
    for contract in args.contract_list:
        path = f"{args.peer}-{contract}"
        if unavailable is not None:
            rows.append(failed_row(d.id, args.peer, path, contract, f"unavailable: {unavailable}"))
            continue
        inp = pt.inputs_from_dump(rt, d)
        pt.prepare_fla_inputs(rt, inp)
        input_error, g_ref, l_ref, gh_ref, lh_ref = "", golden, low, golden_ht, low_ht
        g_source, l_source, lh_source = "dump: out_reference", low_source, low_ht_source
        if contract == "raw":  # outside the try below: an error here is ours, not the peer's
            if raw_refs is None:
                raw_refs = pc.raw_references(d, spec, log=lambda t: pc.log(args, t))
            g_ref, l_ref, gh_ref, lh_ref = (raw_refs[n] for n in ("golden", "low", "golden_ht", "low_ht"))
            g_source, l_source, lh_source = raw_refs["source"], raw_refs["low_source"], raw_refs["low_source"]
            input_error = raw_input_text(d, spec, raw_refs, golden)
        try:
            call = peer.prepare(inp, contract)
            with torch.inference_mode():
                call.fn()
                torch.cuda.synchronize()
        except pa.Refused as e:
            rows.append({"shape": d.id, "impl": args.peer, "path": path, "variant": "-", "tensor": "out",
                         "worst_location": "-", "contract": contract, "verdict": f"refused: {e}"})
            continue
        except Exception as e:  # noqa: BLE001 (the peer's own error, recorded as is)
            text = str(e).strip().splitlines()
            rows.append(failed_row(d.id, args.peer, path, contract,
                                   f"raised {type(e).__name__}: {text[0] if text else ''}"))
            pc.log(args, f"  {path}: {type(e).__name__}: {e}")
            continue
        actual = call.out.float().cpu().numpy().astype(np.float64)
        j = pc.judge(g_ref, l_ref, actual)
        nz = inactive_nonzero(actual, cu)
        verdict = j.verdict()
        known = call.q_norm_fp32 and overflow_rows.any()
        if known and not j.passed():
            verdict, _ = pc.judge_known_overflow(g_ref, l_ref, actual, overflow_rows, j, cu)
        if nz and (verdict == "passed" or verdict.startswith("known")):
            verdict = f"failed: {nz} non-zero outputs after cu_seqlens[N]"
        rows.append(dict(judged_row(d.id, args.peer, path, "-", "out", j, golden.shape, "out", cu, l_source,
                                    verdict, nz), contract=contract, input_error=input_error,
                         golden_source=g_source, call=call.text))
        if golden_ht is not None:
            if call.final_state is None:
                rows.append(failed_row(d.id, args.peer, path, contract, "no final state", "final_state"))
            else:
                actual_ht = call.final_state().float().cpu().numpy().astype(np.float64)
                jh = pc.judge(gh_ref, lh_ref, actual_ht)
                rows.append(dict(judged_row(d.id, args.peer, path, "-", "final_state", jh, golden_ht.shape,
                                            "state", cu, lh_source), contract=contract,
                                 input_error=input_error, golden_source=g_source))
        fused = ours.get(("fused", "-")) if ("fused", "-") in ours else next(
            (a for (p, _), a in sorted(ours.items()) if p == "fused"), None)
        if fused is not None:
            # Ours solved the contract problem; a raw peer its own (raw files or conversion), which
            # differ by the rounding of k (raw files) or of the converted inputs: `input_error`.
            diff, index = pc.max_abs_difference(fused, actual)
            budget = budgets.get("out", math.nan)
            agree = math.isfinite(diff) and diff <= budget
            verdict = "agree" if agree else \
                f"disagree: max |ours - {args.peer}| {pc.sci(diff)} > budget {pc.sci(budget)}"
            if not agree and known:
                keep = ~overflow_rows
                rest, _ = pc.max_abs_difference(fused[keep], actual[keep])
                if math.isfinite(rest) and rest <= budget:
                    verdict = (f"known limitation: differ on the {int(overflow_rows.sum())} q rows that overflow "
                               f"an fp32 sum of squares (the peer's in-kernel l2norm); elsewhere max "
                               f"|ours - {args.peer}| {pc.sci(rest)} <= budget {pc.sci(budget)}")
            rows.append({"shape": d.id, "impl": f"ours vs {args.peer}", "path": f"fused vs {path}",
                         "variant": "-", "tensor": "out", "elements": int(actual.size), "max_abs_err": diff,
                         "budget": budget, "rel_rms": pc.rel_rms_difference(fused, actual, golden),
                         "worst_index": index,
                         "worst_location": pc.describe_location(index, golden.shape, "out", cu),
                         "low_source": "-", "contract": contract, "verdict": verdict})
        del call, inp
        torch.cuda.empty_cache()
    return rows


def markdown(args, rows, version, unavailable, elapsed) -> str:
    out = [f"# peers_check: {args.peer} vs the float64 reference on {args.dump}\n",
           f"- peer: {version or 'unavailable: ' + str(unavailable)}",
           "- rule (kda-forward.md §9.4): pass iff all finite, max|actual-golden| <= 2 (max|low-golden| + "
           "2^-7 max|golden|) and RMS(actual-golden)/RMS(golden) < 5e-3; golden = CPU fp64 reference",
           f"- {elapsed:.1f} s\n"]
    table = [[r["shape"], r.get("impl", ""), r["path"], r["tensor"], pc.sci(r.get("max_abs_err")),
              pc.sci(r.get("budget")), pc.sci(r.get("rel_rms")), r.get("worst_location", "-"),
              r.get("input_error", ""), r["verdict"]] for r in rows]
    out.append(pc.to_markdown(["shape", "impl", "path", "tensor", "max_abs_err", "budget", "rel_rms",
                               "largest error at", "input conversion", "verdict"], table))
    bad = sum(is_failure(r, "any") for r in rows)
    known = sum(r["verdict"].startswith("known") for r in rows)
    out.append(f"\n{len(rows) - bad - known} passed, {bad} failed or disagreeing, {known} known limitations\n")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        dirs = plan(args)
        if args.prepare_refs:
            return prepare_references(args, dirs)
    except pc.InputError as e:
        print(f"peers_check: {e}", file=sys.stderr)
        return pc.EXIT_USAGE
    import peer_adapters as pa
    import peers_torch as pt
    try:
        rt = pt.load_torch_runtime()
    except pc.Skip as e:
        print(f"peers_check: skipped: {e}", file=sys.stderr)
        return pc.EXIT_SKIPPED
    peer, unavailable, version = None, None, ""
    try:
        peer = pa.load_peer(rt.torch, args.peer, args.build_dir)
        version = peer.version
    except pa.Unavailable as e:
        unavailable = str(e)
        pc.log(args, f"peers_check: {args.peer} unavailable: {e}")
    t0 = time.perf_counter()
    rows = []
    for i, directory in enumerate(dirs, start=1):
        pc.log(args, f"[{i}/{len(dirs)}] {os.path.basename(os.path.normpath(directory))}")
        try:
            rows += check_problem(args, rt, peer, unavailable, directory)
        except pc.InputError as e:
            print(f"peers_check: {e}", file=sys.stderr)
            return pc.EXIT_USAGE
        # Written after every problem: a step cut by its time limit keeps what it judged.
        if args.csv:
            pc.write_atomic(args.csv, pc.to_csv(COLUMNS, rows), force=True)
    report = markdown(args, rows, version, unavailable, time.perf_counter() - t0)
    print(report, end="")
    if args.md:
        pc.write_atomic(args.md, report, force=True)
    if args.csv:
        pc.write_atomic(args.csv, pc.to_csv(COLUMNS, rows), force=True)
    if args.json:
        doc = {"meta": {"dump": args.dump, "peer": args.peer, "version": version, "unavailable": unavailable,
                        "argv": sys.argv}, "rows": rows}
        pc.write_atomic(args.json, json.dumps(pc.json_safe(doc), indent=1) + "\n", force=True)
    return pc.EXIT_FAILED if unavailable or any(is_failure(r, "any") for r in rows) else pc.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
