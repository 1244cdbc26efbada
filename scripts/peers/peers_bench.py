#!/usr/bin/env python3
"""Time one Hopper peer (cuDNN-FE, FlashKDA stock or a fork, or ours through kda_torch) on shape
files, in the plain and the raw contract, with the loop of fla_bench.py (kda-bench's `warm` mode):

    python3 scripts/peers/peers_bench.py --peer cudnn --build-dir /tmp/peers-build \\
        --shapes shapes/contract.yaml --shapes shapes/contract-mixed.yaml --out-dir OUT

For each shape file it writes OUT/<peer>-<file stem>.csv in kda-bench's CSV columns (then the
peer's own), one row per (shape, contract), path `<peer>-<contract>` (cudnn-plain, cudnn-raw,
flashkda-raw, ours-raw, ...), so `kda-bench compare` reads it. Inputs are drawn per shape with the
shape's gate recipe (peers_torch.generate_inputs), once, and every contract of the peer is timed on
them. Each row is checked before it is timed (the verdict sits beside the time): output finite and
a float64 recurrence on the first 128 tokens of the first and last sequence x heads 0 and H-1,
judged with the §9.4 budget, on the inputs the contract hands the peer (raw: k normalized, gate
and beta activated in float64 from the raw values). The full check on identical inputs is
peers_check.py's.

A peer that is not built or does not load still gets its rows, each with the exact error
(verdict "failed", verdict_detail "unavailable: ..."), and exit code 1; a contract the peer does
not take gets "refused: <why>" (not a failure).

Exit codes: 0 every row verified and converged (or refused); 1 a row failed or the peer is
unavailable; 2 bad usage or input; 4 a row did not converge; 77 no torch or CUDA GPU.
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
from fla_bench import OUR_COLUMNS, git_commit  # noqa: E402  (kda-bench's columns, in order)

EXTRA_COLUMNS = ["gate", "impl", "contract", "peer_version", "torch_version", "python_version",
                 "call", "inputs", "host_enqueue_median_s", "batch_calls", "first_call_s"]
COLUMNS = OUR_COLUMNS + EXTRA_COLUMNS


def parse_args(argv):
    import peer_adapters as pa
    p = argparse.ArgumentParser(prog="peers_bench.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer", required=True, choices=pa.PEER_NAMES, help="which peer")
    p.add_argument("--build-dir", required=True, help="build_peers.sh's BUILD_DIR")
    p.add_argument("--shapes", action="append", required=True, help="shape file (repeatable)")
    p.add_argument("--out-dir", required=True, help="where <peer>-<stem>.csv/.json go")
    p.add_argument("--contracts", default="plain,raw", help="comma list of plain, raw (default both)")
    p.add_argument("--only", action="append", default=[], metavar="ID", help="only these shape ids")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.add_argument("--seed", type=int, default=pc.DEFAULT_SEED)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--min-samples", type=int, default=50)
    p.add_argument("--min-time", type=float, default=0.5)
    p.add_argument("--max-noise", type=float, default=0.005)
    p.add_argument("--timeout", type=float, default=15.0)
    p.add_argument("--no-verify", action="store_true", help="skip the slice check")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args(argv)
    args.only = [x for item in args.only for x in item.split(",") if x]
    args.contract_list = [c.strip() for c in args.contracts.split(",") if c.strip()]
    return args


def plan(args):
    """Everything that needs no torch. Returns [(stem, path, shapes)]. Raises InputError."""
    import peer_adapters as pa
    bad = [c for c in args.contract_list if c not in pa.CONTRACTS]
    if bad or not args.contract_list:
        raise pc.InputError(f"--contracts {args.contracts}: expected a comma list of plain, raw")
    files = []
    for path in args.shapes:
        shapes = pc.load_shape_file(path)
        known = {s.id for s in shapes}
        chosen = [s for s in shapes if not args.only or s.id in args.only]
        stem = os.path.splitext(os.path.basename(path))[0]
        files.append((stem, path, chosen, known))
    for ident in args.only:
        if not any(ident in known for _, _, _, known in files):
            raise pc.InputError(f"--only {ident}: no such shape id in {', '.join(args.shapes)}")
    outs = [os.path.join(args.out_dir, f"{args.peer}-{stem}.{ext}") for stem, *_ in files
            for ext in ("csv", "json")]
    pc.refuse_existing(outs, args.force)
    return [(stem, path, chosen) for stem, path, chosen, _ in files]


def reference_inputs(inp, contract: str, b: int, lo: int, hi: int, heads: list[int]):
    """The exact problem the contract hands the peer, for one sequence prefix [lo, hi) of batch
    row b and some heads, as float64 NumPy: (q raw, k, v, cumulative log2 gate, beta, h0)."""
    def host(x):
        return x[b, lo:hi][:, heads].float().cpu().numpy().astype(np.float64)
    q, v = host(inp.q), host(inp.v)
    if contract == "plain":
        k, gate, beta = host(inp.k), host(inp.gate), inp.beta[b, lo:hi][:, heads].double().cpu().numpy()
    else:
        k = pc.l2norm_rows(host(inp.k_raw))
        starts = (np.arange(hi - lo) % pc.CHUNK) == 0
        raw = inp.raw_gate[b, lo:hi][:, heads].float().cpu().numpy()[None]
        gate = pc.gate_cumsum_reference(raw, inp.a_log[heads].double().cpu().numpy(),
                                        inp.dt_bias[heads].double().cpu().numpy(), starts,
                                        inp.raw_lower_bound)[0]
        beta = 1.0 / (1.0 + np.exp(-inp.beta_logits[b, lo:hi][:, heads].double().cpu().numpy()))
    return q, k, v, gate, beta


def slice_verify(inp, out, contract: str, token_limit: int = 128):
    """Finite everywhere, zeros after cu_seqlens[N], and the §9.4 budget on a float64/float32
    recurrence over the first token_limit tokens of the first and last sequence x heads 0, H-1."""
    torch_out = out
    problems = []
    finite = bool(torch_out.isfinite().all().item())
    if not finite:
        problems.append(f"{int((~torch_out.isfinite()).sum().item())} non-finite outputs")
    if inp.cu_list is not None and inp.cu_list[-1] < out.shape[1]:
        nonzero = int((out[:, inp.cu_list[-1]:] != 0).sum().item())
        if nonzero:
            problems.append(f"{nonzero} non-zero outputs after cu_seqlens[N]")
    seq_ids, heads = pc.slice_plan(inp.q.shape[0], inp.q.shape[1], inp.q.shape[2], inp.cu_list)
    seqs = pc.sequences(inp.q.shape[0], inp.q.shape[1], inp.cu_list)
    golden_parts, low_parts, actual_parts = [], [], []
    for s in seq_ids:
        b, lo, hi = seqs[s]
        hi = min(hi, lo + token_limit)
        q, k, v, gate, beta = reference_inputs(inp, contract, b, lo, hi, heads)
        h0 = inp.h0[s][heads].float().cpu().numpy() if inp.h0 is not None else None
        golden, low = pc.prefix_references(q, k, v, gate, beta, h0)
        golden_parts.append(golden.ravel())
        low_parts.append(low.ravel())
        actual_parts.append(out[b, lo:hi][:, heads].float().cpu().numpy().ravel())
    text = "slice check: no non-empty sequence"
    if golden_parts:
        j = pc.judge(np.concatenate(golden_parts), np.concatenate(low_parts), np.concatenate(actual_parts))
        text = (f"slice check (seqs {','.join(map(str, seq_ids))} x heads {','.join(map(str, heads))} x "
                f"first {token_limit} tokens vs float64 recurrence on the {contract} inputs): max abs err "
                f"{pc.sci(j.max_abs_err)}, budget {pc.sci(j.budget)}, rel RMS {pc.sci(j.rel_rms)}: {j.verdict()}")
        if not j.passed():
            problems.append(text)
    if problems:
        return "failed", "failed: " + "; ".join(problems)
    return "passed", "passed: output finite; " + text


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        files = plan(args)
    except pc.InputError as e:
        print(f"peers_bench: {e}", file=sys.stderr)
        return pc.EXIT_USAGE
    import peer_adapters as pa
    import peers_torch as pt
    try:
        rt = pt.load_torch_runtime()
    except pc.Skip as e:
        print(f"peers_bench: skipped: {e}", file=sys.stderr)
        return pc.EXIT_SKIPPED
    torch = rt.torch
    dev = pt.device_info(rt)
    clock = pt.SmClock(torch)
    start = datetime.datetime.now(datetime.timezone.utc)
    run_id = start.strftime("%Y%m%dT%H%M%SZ") + f"-{args.peer}"
    cfg = pt.TimingConfig(warmup=args.warmup, min_samples=args.min_samples, min_time_s=args.min_time,
                          max_noise=args.max_noise, timeout_s=args.timeout)
    unavailable = None
    try:
        peer = pa.load_peer(torch, args.peer, args.build_dir)
        version = peer.version
    except pa.Unavailable as e:
        unavailable, version = str(e), ""
        pc.log(args, f"peers_bench: {args.peer} unavailable: {e}")
    base = {"run_id": run_id, "utc_time": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "git_commit": git_commit(),
            "device_name": dev["device_name"], "cc": dev["cc"], "sm_count": dev["sm_count"],
            "default_sm_clock_hz": dev["default_sm_clock_hz"], "driver_version": dev["driver_version"],
            "runtime_version": dev["runtime_version"], "stage": "", "mode": "warm", "impl": args.peer,
            "peer_version": version, "torch_version": torch.__version__,
            "python_version": platform.python_version(), "variant": args.peer, "calls_per_sample": 1,
            "workspace_bytes": None}
    failures = not_converged = 0
    for stem, path, shapes in files:
        rows, raw = [], []
        csv_path = os.path.join(args.out_dir, f"{args.peer}-{stem}.csv")
        json_path = os.path.join(args.out_dir, f"{args.peer}-{stem}.json")

        def flush():
            pc.write_atomic(csv_path, pc.to_csv(COLUMNS, rows), force=True)
            doc = {"meta": {"run_id": run_id, "argv": sys.argv, "device": dev, "shapes": path,
                            "peer": args.peer, "peer_version": version, "unavailable": unavailable,
                            "timing": vars(cfg)}, "rows": raw}
            pc.write_atomic(json_path, json.dumps(pc.json_safe(doc), indent=1) + "\n", force=True)
        with torch.inference_mode():
            for index, shape in enumerate(shapes, start=1):
                seed = shape.seed if shape.seed is not None else args.seed
                floor = pc.forward_bytes(shape, shape.initial_state, shape.final_state)
                common = dict(base, shape_id=shape.id, batch=shape.batch, tokens=shape.tokens,
                              heads=shape.heads, num_seqs=shape.num_seqs, token_heads=shape.token_heads,
                              seed=seed, gate=(shape.gate.name if shape.gate else "contract"),
                              floor_bytes=floor, floor_s=floor / pc.FLOOR_BANDWIDTH_BPS)
                if unavailable is not None:
                    for contract in args.contract_list:
                        rows.append(dict(common, path=f"{args.peer}-{contract}", contract=contract,
                                         verdict="failed", verdict_detail=f"unavailable: {unavailable}"))
                    failures += 1
                    continue
                t0 = time.perf_counter()
                inp = pt.generate_inputs(rt, shape, seed)
                pt.prepare_fla_inputs(rt, inp)
                pc.log(args, f"[{stem} {index}/{len(shapes)}] {shape.id}: inputs ready "
                             f"({time.perf_counter() - t0:.1f} s)")
                for contract in args.contract_list:
                    record = dict(common, path=f"{args.peer}-{contract}", contract=contract,
                                  inputs=inp.source)
                    try:
                        call = peer.prepare(inp, contract)
                    except pa.Refused as e:
                        rows.append(dict(record, verdict="refused", verdict_detail=f"refused: {e}"))
                        pc.log(args, f"  {record['path']}: refused: {e}")
                        continue
                    except Exception as e:  # noqa: BLE001 (the peer's error, recorded as is)
                        failures += 1
                        rows.append(dict(record, verdict="failed",
                                         verdict_detail=f"failed: prepare raised {type(e).__name__}: {e}"))
                        continue
                    record.update(call=call.text, bytes=floor + call.extra_bytes)
                    try:
                        t_first = time.perf_counter()
                        call.fn()
                        torch.cuda.synchronize()
                        first_s = time.perf_counter() - t_first
                        if args.no_verify:
                            verdict, detail = "not verified", "not verified (--no-verify)"
                        else:
                            verdict, detail = slice_verify(inp, call.out, contract)
                        result = pt.time_warm(rt, call.fn, cfg, dev["default_sm_clock_hz"], clock)
                    except Exception as e:  # noqa: BLE001 (the peer raised: its row says how)
                        failures += 1
                        record.update(verdict="failed", verdict_detail=f"failed: {type(e).__name__}: {e}")
                        rows.append(record)
                        raw.append(dict(record))
                        pc.log(args, f"  {record['path']}: {type(e).__name__}: {e}")
                        flush()
                        continue
                    stats = pc.summarize(result.samples)
                    clocks = [c for c in result.sm_clock_hz if math.isfinite(c)]
                    clock_mean = sum(clocks) / len(clocks) if clocks else math.nan
                    converged = result.stop_reason in ("noise", "stable")
                    med = stats["median"]
                    record.update(
                        verdict=verdict, verdict_detail=detail, samples=stats["n"],
                        warmup_runs=result.warmup_runs, converged=int(converged),
                        timed_out=int(result.stop_reason == "timeout"), stop_reason=result.stop_reason,
                        throttle_discards=result.throttle_discards, median_s=med, mean_s=stats["mean"],
                        min_s=stats["min"], max_s=stats["max"], p20_s=stats["p20"], p80_s=stats["p80"],
                        q1_s=stats["q1"], q3_s=stats["q3"], noise=stats["noise"], iqr_rel=stats["iqr_rel"],
                        sm_clock_mean_hz=clock_mean,
                        clock_scaling=(clock_mean / dev["default_sm_clock_hz"]
                                       if dev["default_sm_clock_hz"] and math.isfinite(clock_mean) else math.nan),
                        achieved_Bps=record["bytes"] / med if med > 0 else math.nan,
                        floor_share=record["floor_s"] / med if med > 0 else math.nan,
                        wall_s=result.wall_s, host_enqueue_median_s=pc.summarize(result.host_enqueue_s)["median"],
                        batch_calls=result.batch, first_call_s=first_s)
                    if dev["peak_Bps"] and math.isfinite(record["achieved_Bps"]):
                        record["bw_util"] = record["achieved_Bps"] / dev["peak_Bps"]
                    failures += verdict == "failed"
                    not_converged += not converged
                    rows.append(record)
                    raw.append(dict(record, samples_gpu_s=result.samples))
                    pc.log(args, f"  {record['path']}: median {med * 1e3:.4f} ms, noise "
                                 f"{stats['noise'] * 100:.2f} %, {stats['n']} samples ({result.stop_reason}); {verdict}")
                    flush()
                    del call
                del inp
                torch.cuda.empty_cache()
        flush()
    if failures:
        return pc.EXIT_FAILED
    return pc.EXIT_NOT_CONVERGED if not_converged else pc.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
