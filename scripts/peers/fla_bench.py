#!/usr/bin/env python3
"""Time FLA's chunk_kda (flash-linear-attention, Triton) on our shapes, for `kda-bench compare`.

    python3 scripts/peers/fla_bench.py                                  # shapes/contract.yaml
    python3 scripts/peers/fla_bench.py --csv results/fla.csv --md results/fla.md
    python3 scripts/peers/fla_bench.py --only h64-fixed --rows prenorm,l2norm-in-kernel,full
    python3 scripts/peers/fla_bench.py --load DUMPDIR                   # the inputs of a kda-check --dump
    python3 scripts/peers/fla_bench.py --list                           # the plan; no torch, no GPU
    kda-bench compare fla.csv ours.csv --a-path fla-prenorm --b-path fused --mode warm

For every shape of a shape file (schema: shapes/README.md) it builds inputs by the recipe of
kda-forward.md §9.3 on the GPU, converts our cumulative log2 gate to FLA's per-token natural-log
gate (peers_common.log2_cumulative_to_fla_gate, §1.3), checks the conversion against FLA's own
chunk cumsum, runs each selected FLA call once and checks it (finite, zeros after cu_seqlens[N],
and a float64 recurrence on a slice judged with the §9.4 budget), lists the kernels it launched
(all must be FLA Triton kernels), then times it with warm CUDA events like kda-bench's `warm`
mode and writes one CSV row per (shape, call) in kda-bench's column layout.

Rows (--rows): prenorm (FLA's core on pre-normalized q/k: `fla-prenorm`), l2norm-in-kernel
(raw q, use_qk_l2norm_in_kernel=True: `fla-l2norm-in-kernel`), prenorm-safegate, full (FLA from
raw inputs: in-kernel gate, norms and beta sigmoid; generated inputs only).

Exit codes: 0 every row verified and converged; 1 a check failed or FLA raised; 2 bad usage or
input (options, shape file, dump, output file exists without --force); 3 FLA is installed but does
not import; 4 verified, but a row did not converge; 77 skipped: torch, a CUDA GPU or FLA missing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers_common as pc  # noqa: E402

ROW_NAMES = ("prenorm", "l2norm-in-kernel", "prenorm-safegate", "full")
DEFAULT_ROWS = "prenorm,l2norm-in-kernel"
ROW_PATHS = {"prenorm": "fla-prenorm", "l2norm-in-kernel": "fla-l2norm-in-kernel",
             "prenorm-safegate": "fla-prenorm-safegate", "full": "fla-full"}

# kda-bench's CSV columns (apps/kda-bench/README.md), in its order, then ours appended.
OUR_COLUMNS = [
    "run_id", "utc_time", "git_commit", "device_name", "cc", "sm_count", "default_sm_clock_hz",
    "driver_version", "runtime_version", "shape_id", "batch", "tokens", "heads", "num_seqs",
    "token_heads", "path", "stage", "mode", "verdict", "verdict_detail", "samples", "warmup_runs",
    "converged", "timed_out", "stop_reason", "throttle_discards", "median_s", "mean_s", "min_s",
    "max_s", "p20_s", "p80_s", "q1_s", "q3_s", "noise", "iqr_rel", "cpu_mean_s", "cpu_median_s",
    "sm_clock_mean_hz", "clock_scaling", "bytes", "floor_bytes", "floor_s", "achieved_Bps",
    "floor_share", "bw_util", "workspace_bytes", "seed", "wall_s", "variant", "calls_per_sample"]
EXTRA_COLUMNS = [
    "impl", "fla_version", "torch_version", "triton_version", "python_version", "fla_call",
    "fla_dispatch", "kernels", "kernel_check", "inputs", "gate_recon_max_abs",
    "host_enqueue_median_s", "batch_calls"]
COLUMNS = OUR_COLUMNS + EXTRA_COLUMNS


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="fla_bench.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 ok, 1 a check failed, 2 bad usage/input, 3 FLA does not import, "
               "4 a row did not converge, 77 skipped (no torch / CUDA GPU / FLA).")
    here = os.path.dirname(os.path.abspath(__file__))
    default_shapes = os.path.normpath(os.path.join(here, "..", "..", "shapes", "contract.yaml"))
    p.add_argument("--shapes", default=default_shapes, help="shape file (default: shapes/contract.yaml)")
    p.add_argument("--load", metavar="DUMPDIR",
                   help="time on the inputs of a `kda-check --dump DUMPDIR` (bit-identical to ours) "
                        "instead of generating them; --shapes is then ignored")
    p.add_argument("--only", action="append", default=[], metavar="ID",
                   help="only these shape ids (repeatable, or comma-separated)")
    p.add_argument("--rows", default=DEFAULT_ROWS,
                   help=f"comma list of FLA calls: {', '.join(ROW_NAMES)} (default {DEFAULT_ROWS})")
    p.add_argument("--csv", help="write the rows as CSV (kda-bench's columns + FLA's)")
    p.add_argument("--json", help="write rows, raw samples and metadata as JSON")
    p.add_argument("--md", help="write the markdown report (also printed on stdout)")
    p.add_argument("--force", action="store_true", help="overwrite existing output files")
    p.add_argument("--seed", type=int, default=pc.DEFAULT_SEED,
                   help=f"input seed (a shape's own seed: wins; default {pc.DEFAULT_SEED})")
    p.add_argument("--warmup", type=int, default=10, help="untimed calls before each row (default 10)")
    p.add_argument("--min-samples", type=int, default=50, help="at least this many calls (default 50)")
    p.add_argument("--min-time", type=float, default=0.5,
                   help="and at least this much accumulated GPU time, s (default 0.5)")
    p.add_argument("--max-noise", type=float, default=0.005,
                   help="stop once the relative stdev is below this (default 0.005 = 0.5 %%)")
    p.add_argument("--timeout", type=float, default=15.0, help="wall time limit per row, s (default 15)")
    p.add_argument("--no-verify", action="store_true", help="skip the checks (rows say 'not verified')")
    p.add_argument("--no-kernel-list", action="store_true", help="skip the torch.profiler kernel listing")
    p.add_argument("--allow-backends", action="store_true",
                   help="let FLA dispatch to other backends (FlashKDA, TileLang) if installed; "
                        "default: FLA_DISABLE_BACKEND_DISPATCH=1, the Triton kernels only")
    p.add_argument("--list", action="store_true", help="print the shapes and FLA calls, run nothing")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    pc.add_testing_options(p)
    return pc.split_list_options(p.parse_args(argv))


def git_commit():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


class Problem:
    """A shape to run: from a shape file (generated inputs) or from a dump directory."""

    def __init__(self, shape: pc.Shape | None = None, dump: str | None = None, dump_id: str | None = None):
        self.shape, self.dump, self.id = shape, dump, shape.id if shape else dump_id


def plan(args):
    """Checks everything that needs no torch; returns the problems. Raises InputError."""
    bad = [r for r in args.row_list if r not in ROW_NAMES]
    if bad or not args.row_list:
        raise pc.InputError(f"--rows {args.rows}: expected a comma list of {', '.join(ROW_NAMES)}")
    for name in ("warmup", "min_samples"):
        if getattr(args, name) < 0:
            raise pc.InputError(f"--{name.replace('_', '-')} must be >= 0")
    if args.min_time < 0 or args.timeout <= 0 or not 0 < args.max_noise:
        raise pc.InputError("--min-time >= 0, --timeout > 0 and --max-noise > 0 are required")
    if args.load:
        dirs = pc.find_dump_problems(args.load)
        ids = [os.path.basename(os.path.normpath(d)) for d in dirs]
        if args.only:
            for ident in args.only:
                if ident not in ids:
                    raise pc.InputError(f"--only {ident}: no such problem in {args.load} (has: {', '.join(ids)})")
        problems = [Problem(dump=d, dump_id=i) for d, i in zip(dirs, ids) if not args.only or i in args.only]
        if "full" in args.row_list:
            raise pc.InputError("--rows full needs the raw gate and beta logits, which a dump does not hold")
    else:
        shapes = pc.select_shapes(pc.load_shape_file(args.shapes), args.only, args.shapes)
        problems = [Problem(shape=s) for s in shapes]
    pc.refuse_existing([args.csv, args.json, args.md], args.force)
    return problems


def print_plan(args, problems):
    print(f"# fla_bench plan ({len(problems)} shapes x {len(args.row_list)} rows)\n")
    for row in args.row_list:
        print(f"- {ROW_PATHS[row]}: {ROWS_TEXT[row]}")
    print()
    table = []
    for pr in problems:
        s = pr.shape
        if s is None:
            table.append([pr.id, "(from dump)", "", "", "", ""])
            continue
        table.append([s.id, str(s.heads), str(s.batch), str(s.tokens), str(s.num_seqs),
                      f"{pc.forward_bytes(s, s.initial_state, s.final_state) / 1e6:.1f} MB"])
    print(pc.to_markdown(["shape", "H", "B", "T", "N", "floor bytes"], table))


ROWS_TEXT = {
    "prenorm": "chunk_kda(l2norm(q), k, v, g, beta, cu_seqlens=..., cu_seqlens_cpu=...)",
    "l2norm-in-kernel": "chunk_kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, cu_seqlens=...)",
    "prenorm-safegate": "chunk_kda(l2norm(q), k, v, g, beta, safe_gate=True, lower_bound=-5, ...)",
    "full": "chunk_kda(q, k, v, raw_gate, beta_logits, use_gate_in_kernel, use_qk_l2norm_in_kernel, "
            "use_beta_sigmoid_in_kernel, safe_gate=True, lower_bound=-5, A_log, dt_bias, ...)",
}


def verify(rt, pt, inp, out, seq_ids, heads, token_limit=128):
    """Finite everywhere, zeros after cu_seqlens[N], and a float64/float32 recurrence on the first
    token_limit tokens of sequences seq_ids x heads, judged with the §9.4 budget."""
    torch = rt.torch
    problems = []
    finite = bool(torch.isfinite(out).all().item())
    if not finite:
        problems.append(f"{int((~torch.isfinite(out)).sum().item())} non-finite outputs")
    if inp.cu_list is not None and inp.cu_list[-1] < out.shape[1]:
        tail = out[:, inp.cu_list[-1]:]
        nonzero = int((tail != 0).sum().item())
        if nonzero:
            problems.append(f"{nonzero} non-zero outputs after cu_seqlens[N]")
    seqs = pc.sequences(inp.q.shape[0], inp.q.shape[1], inp.cu_list)
    golden_parts, low_parts, actual_parts = [], [], []
    for s in seq_ids:
        b, lo, hi = seqs[s]
        hi = min(hi, lo + token_limit)

        def host(x, *idx):
            return x[idx].float().cpu().numpy()
        h = list(heads)
        q = host(inp.q, b, slice(lo, hi))[:, h]
        k = host(inp.k, b, slice(lo, hi))[:, h]
        v = host(inp.v, b, slice(lo, hi))[:, h]
        g = host(inp.gate, b, slice(lo, hi))[:, h]
        be = host(inp.beta, b, slice(lo, hi))[:, h]
        h0 = inp.h0[s][h].float().cpu().numpy() if inp.h0 is not None else None
        golden, low = pc.prefix_references(q, k, v, g, be, h0)
        golden_parts.append(golden.ravel())
        low_parts.append(low.ravel())
        actual_parts.append(out[b, lo:hi][:, h].float().cpu().numpy().ravel())
    if golden_parts:
        j = pc.judge(np.concatenate(golden_parts), np.concatenate(low_parts), np.concatenate(actual_parts))
        slice_text = (f"slice check (seqs {','.join(map(str, seq_ids))} x heads {','.join(map(str, heads))} "
                      f"x first {token_limit} tokens vs float64 recurrence): max abs err "
                      f"{pc.sci(j.max_abs_err)}, budget {pc.sci(j.budget)}, rel RMS {pc.sci(j.rel_rms)}: "
                      f"{j.verdict()}")
        if not j.passed():
            problems.append(slice_text)
    else:
        slice_text = "slice check: no non-empty sequence"
    detail = ("output finite" if finite else "") + ("; " if finite else "") + slice_text
    if problems:
        return "failed", "failed: " + "; ".join(problems)
    return "passed", "passed: " + detail


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        problems = plan(args)
    except pc.InputError as e:
        print(f"fla_bench: {e}", file=sys.stderr)
        return pc.EXIT_USAGE
    if args.list:
        print_plan(args, problems)
        return pc.EXIT_OK
    import peers_torch as pt
    rt, code = pt.runtime_for("fla_bench", args)
    if rt is None:
        return code
    torch = rt.torch
    dev = pt.device_info(rt)
    clock = pt.SmClock(torch) if rt.device == "cuda" else None
    start = datetime.datetime.now(datetime.timezone.utc)
    commit = git_commit()
    run_id = start.strftime("%Y%m%dT%H%M%SZ") + f"-fla-{rt.fla_version}"
    cfg = pt.TimingConfig(warmup=args.warmup, min_samples=args.min_samples, min_time_s=args.min_time,
                          max_noise=args.max_noise, timeout_s=args.timeout)
    rows, raw = [], []
    failures = not_converged = 0
    base = {"run_id": run_id, "utc_time": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "git_commit": commit,
            "device_name": dev["device_name"], "cc": dev["cc"], "sm_count": dev["sm_count"],
            "default_sm_clock_hz": dev["default_sm_clock_hz"], "driver_version": dev["driver_version"],
            "runtime_version": dev["runtime_version"], "stage": "",
            "mode": "warm" if rt.device == "cuda" else "cpu-test", "impl": "fla",
            "fla_version": rt.fla_version, "torch_version": torch.__version__,
            "triton_version": rt.triton.__version__, "python_version": platform.python_version(),
            "fla_dispatch": rt.dispatch, "variant": f"fla-core-{rt.fla_version}",
            "workspace_bytes": None, "calls_per_sample": 1, "cpu_mean_s": None, "cpu_median_s": None}

    def flush():
        if args.csv:
            pc.write_atomic(args.csv, pc.to_csv(COLUMNS, rows), force=True)
        if args.json:
            doc = {"meta": {"run_id": run_id, "argv": sys.argv, "device": dev, "dispatch": rt.dispatch,
                            "timing": vars(cfg), "rows_requested": args.row_list,
                            "schema": "kda-bench CSV columns + " + ", ".join(EXTRA_COLUMNS)},
                   "rows": raw}
            pc.write_atomic(args.json, json.dumps(pc.json_safe(doc), indent=1) + "\n", force=True)

    with torch.inference_mode():
        for index, pr in enumerate(problems, start=1):
            t_shape = time.perf_counter()
            try:
                if pr.dump:
                    dumped = pc.load_dump_problem(pr.dump)
                    inp = pt.inputs_from_dump(rt, dumped, args.fla_dtype)
                    seed = dumped.meta.get("seed", "")
                    shape = _shape_of_dump(dumped)
                else:
                    shape = pr.shape
                    seed = shape.seed if shape.seed is not None else args.seed
                    inp = pt.generate_inputs(rt, shape, seed)
                    if args.fla_dtype == "fp32":
                        inp.q, inp.k, inp.v = inp.q.float(), inp.k.float(), inp.v.float()
                pt.prepare_fla_inputs(rt, inp)
                pt.check_conversion_twin(rt, inp)
                recon = pt.gate_reconstruction(rt, inp)
            except pc.InputError as e:
                print(f"fla_bench: {e}", file=sys.stderr)
                return pc.EXIT_USAGE
            pc.log(args, f"[{index}/{len(problems)}] {pr.id}: inputs ready ({time.perf_counter() - t_shape:.1f} s; "
                      f"FLA gate cumsum vs ours: max abs {recon:.3e})")
            seq_ids, heads = pc.slice_plan(inp.q.shape[0], inp.q.shape[1], inp.q.shape[2], inp.cu_list)
            floor = pc.forward_bytes(shape, inp.h0 is not None, inp.want_final_state)
            for row in args.row_list:
                path = ROW_PATHS[row]
                kw = pt.fla_kwargs(row, inp, inp.want_final_state)
                record = dict(base, shape_id=pr.id, batch=shape.batch, tokens=shape.tokens,
                              heads=shape.heads, num_seqs=shape.num_seqs, token_heads=shape.token_heads,
                              path=path, seed=seed, fla_call=pt.call_text(kw), inputs=inp.source,
                              gate_recon_max_abs=recon, floor_bytes=floor,
                              floor_s=floor / pc.FLOOR_BANDWIDTH_BPS)
                extra = 0 if row in ("prenorm", "prenorm-safegate") else 2 * pc.l2norm_bytes(
                    shape.token_heads, shape.key_dim)
                record["bytes"] = floor + extra

                def fn(kw=kw):
                    return rt.chunk_kda(**kw)
                try:
                    t_first = time.perf_counter()
                    out, _ = fn()
                    if rt.device == "cuda":
                        torch.cuda.synchronize()
                    first_s = time.perf_counter() - t_first
                    if args.no_verify:
                        verdict, detail = "not verified", "not verified (--no-verify)"
                    else:
                        verdict, detail = verify(rt, pt, inp, out, seq_ids, heads)
                    del out
                    kernels, kcheck = ([], "not listed")
                    if not args.no_kernel_list and rt.device == "cuda":
                        kernels, kcheck = pt.list_kernels(rt, fn)
                    record.update(verdict=verdict, verdict_detail=detail,
                                  kernels=";".join(kernels), kernel_check=kcheck)
                    if rt.device == "cuda":
                        result = pt.time_warm(rt, fn, cfg, dev["default_sm_clock_hz"], clock)
                    else:
                        result = _time_host(fn, cfg)
                except Exception as e:  # noqa: BLE001 (FLA raised: report the row and go on)
                    failures += 1
                    record.update(verdict="failed", verdict_detail=f"failed: FLA raised {type(e).__name__}: {e}")
                    rows.append(record)
                    raw.append(dict(record))
                    pc.log(args, f"  {path}: FLA raised {type(e).__name__}: {e}")
                    flush()
                    continue
                stats = pc.summarize(result.samples)
                clocks = [c for c in result.sm_clock_hz if math.isfinite(c)]
                clock_mean = sum(clocks) / len(clocks) if clocks else math.nan
                converged = result.stop_reason in ("noise", "stable", "budget")
                record.update(
                    samples=stats["n"], warmup_runs=result.warmup_runs, converged=int(converged),
                    timed_out=int(result.stop_reason == "timeout"), stop_reason=result.stop_reason,
                    throttle_discards=result.throttle_discards, median_s=stats["median"],
                    mean_s=stats["mean"], min_s=stats["min"], max_s=stats["max"], p20_s=stats["p20"],
                    p80_s=stats["p80"], q1_s=stats["q1"], q3_s=stats["q3"], noise=stats["noise"],
                    iqr_rel=stats["iqr_rel"], sm_clock_mean_hz=clock_mean,
                    clock_scaling=(clock_mean / dev["default_sm_clock_hz"]
                                   if dev["default_sm_clock_hz"] and math.isfinite(clock_mean) else math.nan),
                    achieved_Bps=record["bytes"] / stats["median"] if stats["median"] > 0 else math.nan,
                    floor_share=record["floor_s"] / stats["median"] if stats["median"] > 0 else math.nan,
                    wall_s=result.wall_s,
                    host_enqueue_median_s=pc.summarize(result.host_enqueue_s)["median"],
                    batch_calls=result.batch)
                if dev["peak_Bps"] and math.isfinite(record["achieved_Bps"]):
                    record["bw_util"] = record["achieved_Bps"] / dev["peak_Bps"]
                failures += verdict == "failed"
                not_converged += not converged
                rows.append(record)
                raw.append(dict(record, samples_gpu_s=result.samples, host_enqueue_s=result.host_enqueue_s,
                                sm_clock_hz=result.sm_clock_hz, first_call_s=first_s))
                pc.log(args, f"  {path}: median {stats['median'] * 1e3:.4f} ms (p20 {stats['p20'] * 1e3:.4f}, "
                          f"p80 {stats['p80'] * 1e3:.4f}, noise {stats['noise'] * 100:.2f} %, "
                          f"{stats['n']} samples, {result.stop_reason}); {verdict}; {kcheck}")
                flush()
            del inp
            if rt.device == "cuda":
                torch.cuda.empty_cache()
    flush()
    report = markdown(args, rows, rt, dev, cfg)
    print(report, end="")
    if args.md:
        pc.write_atomic(args.md, report, force=True)
    if failures:
        return pc.EXIT_FAILED
    if not_converged:
        return pc.EXIT_NOT_CONVERGED
    return pc.EXIT_OK


def _shape_of_dump(d: pc.DumpedProblem) -> pc.Shape:
    lens = None if d.cu_seqlens is None else [int(b - a) for a, b in zip(d.cu_seqlens[:-1], d.cu_seqlens[1:])]
    return pc.Shape(id=d.id, heads=d.heads, batch=d.batch, tokens=d.tokens, seq_lens=lens,
                    key_dim=d.key_dim, value_dim=d.value_dim, initial_state=d.h0 is not None,
                    final_state=d.want_final_state)


def _time_host(fn, cfg):
    """--device cpu (tests under TRITON_INTERPRET=1 only): host wall time per call, no stopping rule."""
    from peers_torch import TimingResult
    for _ in range(cfg.warmup):
        fn()
    samples = []
    t0 = time.perf_counter()
    for _ in range(max(1, cfg.min_samples)):
        h = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - h)
    return TimingResult(samples=samples, host_enqueue_s=list(samples), stop_reason="budget",
                        wall_s=time.perf_counter() - t0, warmup_runs=cfg.warmup + 1, throttle_discards=0,
                        sm_clock_hz=[], batch=1)


def markdown(args, rows, rt, dev, cfg) -> str:
    out = ["# fla_bench: FLA chunk_kda (Triton) on our shapes\n",
           f"- device: {dev['device_name']} (cc {dev['cc']}, {dev['sm_count']} SMs), driver "
           f"{dev['driver_version']}, runtime {dev['runtime_version']}",
           f"- fla-core {rt.fla_version}, torch {rt.torch.__version__}, triton {rt.triton.__version__}, "
           f"python {platform.python_version()}",
           f"- kernels: {rt.dispatch}",
           f"- timing: {'warm CUDA events, one pair per call' if rt.device == 'cuda' else 'host timer (cpu test)'}; "
           f"{cfg.warmup} warm-up calls; >= {cfg.min_samples} samples and >= {cfg.min_time_s} s; stop at "
           f"noise < {cfg.max_noise * 100:g} % or stable; timeout {cfg.timeout_s} s",
           f"- inputs: {rows[0]['inputs'] if rows else '-'}; gate: our cumulative log2 gate converted "
           f"to FLA's per-token natural-log gate (scripts/peers/README.md)\n"]
    table = []
    for r in rows:
        ms = (lambda x: f"{x * 1e3:.4f}" if isinstance(x, float) and math.isfinite(x) else "-")
        noise = r.get("noise")
        table.append([r["shape_id"], r["path"], ms(r.get("median_s")), ms(r.get("p20_s")),
                      ms(r.get("p80_s")),
                      f"{noise * 100:.2f}" if isinstance(noise, float) and math.isfinite(noise) else "-",
                      str(r.get("samples", "-")), str(r.get("stop_reason", "-")),
                      f"{r['floor_share']:.3f}" if isinstance(r.get("floor_share"), float) and math.isfinite(r["floor_share"]) else "-",
                      r.get("verdict", "-")])
    out.append(pc.to_markdown(["shape", "path", "median ms", "p20 ms", "p80 ms", "noise %", "samples",
                               "stop", "floor share", "verdict"], table))
    paths = []
    for r in rows:
        if r["path"] not in paths:
            paths.append(r["path"])
    geo = []
    for path in paths:
        values = [r["median_s"] for r in rows if r["path"] == path and isinstance(r.get("median_s"), float)]
        g = pc.geomean(values)
        geo.append([path, str(len(values)), f"{g * 1e3:.4f}" if math.isfinite(g) else "-"])
    out.append("\nGeomean of the medians over the shapes:\n")
    out.append(pc.to_markdown(["path", "shapes", "geomean ms"], geo))
    fails = [r for r in rows if r.get("verdict") == "failed"]
    if fails:
        out.append("\nFailed rows:\n")
        out += [f"- {r['shape_id']} / {r['path']}: {r['verdict_detail']}" for r in fails]
    checks = sorted({r.get("kernel_check", "") for r in rows if r.get("kernel_check")})
    if checks:
        out.append("\nKernel listing (torch.profiler, one call per row): " + "; ".join(checks))
    out.append("\nRatios ours/FLA: `kda-bench compare FLA.csv OURS.csv --mode warm --a-path fla-prenorm "
               "--b-path fused` (and `--a-path fla-l2norm-in-kernel --b-path fused`); ratio < 1: ours faster.\n")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
