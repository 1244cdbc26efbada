#!/usr/bin/env python3
"""Time Hopper peers (cuDNN-FE, FlashKDA stock or a fork, ours through kda_torch) on shape files,
in the plain and the raw contract, in one process on the same tensors, with the loop of
fla_bench.py (kda-bench's `warm` mode):

    python3 scripts/peers/peers_bench.py --peer ours,cudnn,vllm-flashkda --build-dir /tmp/peers-build \\
        --shapes shapes/contract.yaml --shapes shapes/contract-mixed.yaml --out-dir OUT

--peer is one peer or a comma list. Per shape the inputs are drawn once, with the shape's gate
recipe (peers_torch.generate_inputs), and every listed peer is checked and timed on those same
tensors: per shape, contract by contract (plain, then raw), the peers in the order given, each
call with its own first call and warm-up as when it runs alone. At most one FlashKDA build per
list: stock FlashKDA and both forks are the Python package `flash_kda` with the same extension,
so a process can hold only one of them (a second is a usage error, exit 2).

For each peer and shape file it writes OUT/<peer>-<file stem>.csv (and .json) in kda-bench's CSV
columns (then the peer's own), one row per (shape, contract), path `<peer>-<contract>`
(cudnn-plain, cudnn-raw, flashkda-raw, ours-raw, ...), so `kda-bench compare` reads it; the
column `process_peers` (JSON meta `process_peers`) names the peers timed in the same process
(e.g. ours+cudnn+vllm-flashkda). Each row is checked before it is timed (the verdict sits beside
the time): output finite and a float64 recurrence on the first 128 tokens of the first and last
sequence x heads 0 and H-1, judged with the §9.4 budget, on the inputs the contract hands the peer
(raw: k normalized, gate and beta activated in float64 from the raw values). The full check on
identical inputs is peers_check.py's.

A peer that is not built or does not load still gets its rows, each with the exact error
(verdict "failed", verdict_detail "unavailable: ..."), and exit code 1; the other peers run as
usual. A contract the peer does not take gets "refused: <why>" (not a failure). When a peer's
call raises and the device no longer works afterwards (a sticky CUDA error: every later call in
the process would fail with it), the rows not yet run say so, "not run: ...", and the exit code
is 5: run those peers in processes of their own.

Exit codes: 0 every row verified and converged (or refused); 1 a row failed or a peer is
unavailable; 2 bad usage or input; 4 a row did not converge; 5 the CUDA context was lost (rows
not run); 77 no torch or CUDA GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
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
                 "call", "inputs", "host_enqueue_median_s", "batch_calls", "first_call_s", "process_peers"]
COLUMNS = OUR_COLUMNS + EXTRA_COLUMNS
EXIT_CONTEXT_LOST = 5  # a peer left the CUDA context unusable: the rows after it were not run


def parse_peers(text: str) -> list[str]:
    """--peer's comma list -> peer names in the order given. Raises pc.InputError: an empty or
    unknown name, a name twice, or two FlashKDA builds (one `flash_kda` per process)."""
    import peer_adapters as pa
    names = [x.strip() for x in text.split(",")]
    if not all(names):
        raise pc.InputError(f"--peer {text!r}: an empty name in the comma list")
    unknown = [n for n in names if n not in pa.PEER_NAMES]
    if unknown:
        raise pc.InputError(f"--peer {text}: unknown peer {', '.join(unknown)} (known: {', '.join(pa.PEER_NAMES)})")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise pc.InputError(f"--peer {text}: {', '.join(twice)} listed twice")
    flashkda = [n for n in names if n in pa.FLASHKDA_VARIANTS]
    if len(flashkda) > 1:
        others = [n for n in names if n not in pa.FLASHKDA_VARIANTS]
        first = ",".join(others + flashkda[:1])
        raise pc.InputError(
            f"--peer {text}: {' and '.join(flashkda)} cannot share a process: every FlashKDA build "
            f"(stock and both forks) is the Python package flash_kda with the same extension, so one "
            f"process holds at most one of them; time each FlashKDA build in a process of its own, "
            f"e.g. --peer {first}, then " + ", then ".join(f"--peer {n}" for n in flashkda[1:]))
    return names


def parse_args(argv):
    p = argparse.ArgumentParser(prog="peers_bench.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer", required=True, metavar="PEER[,PEER...]",
                   help="the peers timed in this process, in this order: cudnn, flashkda, flash-flash-kda, "
                        "vllm-flashkda, ours (at most one FlashKDA build)")
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
    try:
        args.peers = parse_peers(args.peer)
    except pc.InputError as e:
        p.error(str(e))  # exit 2, with the usage line
    args.process_peers = "+".join(args.peers)
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
    outs = [os.path.join(args.out_dir, f"{peer}-{stem}.{ext}") for peer in args.peers
            for stem, *_ in files for ext in ("csv", "json")]
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


def context_lost(rt) -> str | None:
    """After a peer raised: None while the device still works, else the error a synchronize and
    a one-element kernel now give (a sticky CUDA error such as an illegal address: every later
    call in this process would fail with it, so the later rows would blame the wrong peer)."""
    if rt.device != "cuda":
        return None
    torch = rt.torch
    try:
        torch.cuda.synchronize()
        probe = torch.ones(1, device="cuda")
        probe.add_(1)
        torch.cuda.synchronize()
        return None
    except Exception as e:  # noqa: BLE001 (whatever the device says is the reason)
        return f"{type(e).__name__}: {e}"


def _synchronize(rt) -> None:
    if rt.device == "cuda":
        rt.torch.cuda.synchronize()


@dataclasses.dataclass
class Lane:
    """One peer of this process: its adapter (or why it is unavailable), its rows of the current
    shape file and its files."""
    name: str
    run_id: str
    peer: object = None
    version: str = ""
    unavailable: str | None = None
    failures: int = 0
    not_converged: int = 0
    rows: list = dataclasses.field(default_factory=list)
    raw: list = dataclasses.field(default_factory=list)
    csv_path: str = ""
    json_path: str = ""
    shapes_path: str = ""

    def start_file(self, out_dir: str, stem: str, path: str) -> None:
        self.rows, self.raw, self.shapes_path = [], [], path
        self.csv_path = os.path.join(out_dir, f"{self.name}-{stem}.csv")
        self.json_path = os.path.join(out_dir, f"{self.name}-{stem}.json")

    def flush(self, meta: dict) -> None:
        pc.write_atomic(self.csv_path, pc.to_csv(COLUMNS, self.rows), force=True)
        doc = {"meta": dict(meta, run_id=self.run_id, shapes=self.shapes_path, peer=self.name,
                            peer_version=self.version, unavailable=self.unavailable),
               "rows": self.raw}
        pc.write_atomic(self.json_path, json.dumps(pc.json_safe(doc), indent=1) + "\n", force=True)


def time_row(args, rt, lane: Lane, inp, contract: str, record: dict, cfg, dev, clock, timer):
    """One (peer, contract) row on the shared inputs: prepare, first call, slice check, warm
    timing. Appends the row to the lane. Returns the peer's exception when its call raised (the
    caller then asks whether the device survived), else None."""
    import peer_adapters as pa
    try:
        call = lane.peer.prepare(inp, contract)
    except pa.Refused as e:
        lane.rows.append(dict(record, verdict="refused", verdict_detail=f"refused: {e}"))
        pc.log(args, f"  {record['path']}: refused: {e}")
        return None
    except Exception as e:  # noqa: BLE001 (the peer's error, recorded as is)
        lane.failures += 1
        lane.rows.append(dict(record, verdict="failed",
                              verdict_detail=f"failed: prepare raised {type(e).__name__}: {e}"))
        pc.log(args, f"  {record['path']}: prepare raised {type(e).__name__}: {e}")
        return e
    floor = record["floor_bytes"]
    record.update(call=call.text, bytes=floor + call.extra_bytes)
    try:
        t_first = time.perf_counter()
        call.fn()
        _synchronize(rt)
        first_s = time.perf_counter() - t_first
        if args.no_verify:
            verdict, detail = "not verified", "not verified (--no-verify)"
        else:
            verdict, detail = slice_verify(inp, call.out, contract)
        result = timer(rt, call.fn, cfg, dev["default_sm_clock_hz"], clock)
    except Exception as e:  # noqa: BLE001 (the peer raised: its row says how)
        lane.failures += 1
        record.update(verdict="failed", verdict_detail=f"failed: {type(e).__name__}: {e}")
        lane.rows.append(record)
        lane.raw.append(dict(record))
        pc.log(args, f"  {record['path']}: {type(e).__name__}: {e}")
        return e
    finally:
        del call
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
    lane.failures += verdict == "failed"
    lane.not_converged += not converged
    lane.rows.append(record)
    lane.raw.append(dict(record, samples_gpu_s=result.samples))
    pc.log(args, f"  {record['path']}: median {med * 1e3:.4f} ms, noise "
                 f"{stats['noise'] * 100:.2f} %, {stats['n']} samples ({result.stop_reason}); {verdict}")
    return None


def main(argv=None, *, runtime=None, load=None, timer=None) -> int:
    """runtime, load(torch, name, build_dir) and timer(rt, fn, cfg, clock_hz, clock) default to
    the GPU's (peers_torch.load_torch_runtime, peer_adapters.load_peer, peers_torch.time_warm);
    test_peers.py passes a CPU runtime and stand-in peers."""
    args = parse_args(argv)
    try:
        files = plan(args)
    except pc.InputError as e:
        print(f"peers_bench: {e}", file=sys.stderr)
        return pc.EXIT_USAGE
    import peer_adapters as pa
    import peers_torch as pt
    rt = runtime
    if rt is None:
        try:
            rt = pt.load_torch_runtime()
        except pc.Skip as e:
            print(f"peers_bench: skipped: {e}", file=sys.stderr)
            return pc.EXIT_SKIPPED
    load = load or pa.load_peer
    timer = timer or pt.time_warm
    torch = rt.torch
    dev = pt.device_info(rt)
    clock = pt.SmClock(torch) if rt.device == "cuda" else None
    start = datetime.datetime.now(datetime.timezone.utc)
    stamp = start.strftime("%Y%m%dT%H%M%SZ")
    cfg = pt.TimingConfig(warmup=args.warmup, min_samples=args.min_samples, min_time_s=args.min_time,
                          max_noise=args.max_noise, timeout_s=args.timeout)
    lanes = []
    for name in args.peers:  # every peer loads before anything is timed
        lane = Lane(name=name, run_id=f"{stamp}-{name}")
        try:
            lane.peer = load(torch, name, args.build_dir)
            lane.version = lane.peer.version
        except pa.Unavailable as e:
            lane.unavailable = str(e)
            pc.log(args, f"peers_bench: {name} unavailable: {e}")
        lanes.append(lane)
    if len(lanes) > 1:
        pc.log(args, f"peers_bench: one process, the same inputs per shape: {args.process_peers}")
    base = {"utc_time": start.strftime("%Y-%m-%dT%H:%M:%SZ"), "git_commit": git_commit(),
            "device_name": dev["device_name"], "cc": dev["cc"], "sm_count": dev["sm_count"],
            "default_sm_clock_hz": dev["default_sm_clock_hz"], "driver_version": dev["driver_version"],
            "runtime_version": dev["runtime_version"], "stage": "", "mode": "warm",
            "torch_version": torch.__version__, "python_version": platform.python_version(),
            "calls_per_sample": 1, "workspace_bytes": None, "process_peers": args.process_peers}
    meta = {"argv": sys.argv, "device": dev, "timing": vars(cfg), "process_peers": args.peers,
            "order": "per shape: inputs drawn once; contracts " + ", ".join(args.contract_list)
                     + " in turn, within each the peers in this order: " + ", ".join(args.peers)}
    lost = None  # why the rows still to come cannot run (the CUDA context is gone)
    for stem, path, shapes in files:
        for lane in lanes:
            lane.start_file(args.out_dir, stem, path)
        with torch.inference_mode():
            for index, shape in enumerate(shapes, start=1):
                seed = shape.seed if shape.seed is not None else args.seed
                floor = pc.forward_bytes(shape, shape.initial_state, shape.final_state)
                common = dict(base, shape_id=shape.id, batch=shape.batch, tokens=shape.tokens,
                              heads=shape.heads, num_seqs=shape.num_seqs, token_heads=shape.token_heads,
                              seed=seed, gate=(shape.gate.name if shape.gate else "contract"),
                              floor_bytes=floor, floor_s=floor / pc.FLOOR_BANDWIDTH_BPS)
                inp = None
                if lost is None and any(lane.unavailable is None for lane in lanes):
                    t0 = time.perf_counter()
                    inp = pt.generate_inputs(rt, shape, seed)
                    pt.prepare_fla_inputs(rt, inp)
                    pc.log(args, f"[{stem} {index}/{len(shapes)}] {shape.id}: inputs ready "
                                 f"({time.perf_counter() - t0:.1f} s)")
                for lane in lanes:  # an unavailable peer: one failure per shape, as alone
                    lane.failures += lane.unavailable is not None
                for contract in args.contract_list:
                    for lane in lanes:
                        record = dict(common, run_id=lane.run_id, impl=lane.name, variant=lane.name,
                                      peer_version=lane.version, path=f"{lane.name}-{contract}",
                                      contract=contract)
                        if lane.unavailable is not None:
                            lane.rows.append(dict(record, verdict="failed",
                                                  verdict_detail=f"unavailable: {lane.unavailable}"))
                            continue
                        if lost is not None:
                            lane.failures += 1
                            lane.rows.append(dict(record, verdict="failed", verdict_detail=f"not run: {lost}"))
                            continue
                        record["inputs"] = inp.source
                        error = time_row(args, rt, lane, inp, contract, record, cfg, dev, clock, timer)
                        if error is not None:
                            why = context_lost(rt)
                            if why is not None:
                                lost = (f"the CUDA context was lost after {lane.name}-{contract} on {shape.id} "
                                        f"raised {type(error).__name__}: {error} (the device now says {why}); "
                                        f"time the peers in processes of their own")
                                pc.log(args, f"peers_bench: {lost}")
                        lane.flush(meta)
                del inp
                if rt.device == "cuda" and lost is None:
                    torch.cuda.empty_cache()
        for lane in lanes:
            lane.flush(meta)
    for lane in lanes:
        if len(lanes) > 1:
            state = f"unavailable: {lane.unavailable}" if lane.unavailable is not None else (
                f"{lane.failures} failed, {lane.not_converged} not converged")
            pc.log(args, f"peers_bench: {lane.name}: {state}")
    if lost is not None:
        return EXIT_CONTEXT_LOST
    if any(lane.failures for lane in lanes):
        return pc.EXIT_FAILED
    return pc.EXIT_NOT_CONVERGED if any(lane.not_converged for lane in lanes) else pc.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
