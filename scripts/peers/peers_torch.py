"""torch/FLA side of the FLA peer scripts: importing FLA on its Triton path, device facts, input
generation on the GPU, the FLA calls, warm CUDA-event timing and kernel listing.

Imported only after load_runtime() found torch, a CUDA GPU and FLA (fla-core); everything that
needs no torch lives in peers_common.py.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import importlib.util
import math
import os
import sys
import time

import numpy as np

import peers_common as pc

# Environment that pins FLA 0.6.0 to its Triton kernels (fla/backends.py): with
# FLA_DISABLE_BACKEND_DISPATCH=1 (read once, when fla.backends is imported) every @dispatch'ed
# entry point is the plain Triton function: the FlashKDA CUTLASS backend (package flash_kda),
# the TileLang kernels (package tilelang), the intra-card context-parallel state kernel and the
# Ascend kernels are never consulted. The per-backend switches are set too, as a second lock.
TRITON_ONLY_ENV = {
    "FLA_DISABLE_BACKEND_DISPATCH": "1",
    "FLA_FLASH_KDA": "0",
    "FLA_TILELANG": "0",
    "FLA_INTRACARD_CP": "0",
}
EXPECTED_FLA_VERSION = "0.6.0"


@dataclasses.dataclass
class Runtime:
    torch: object
    triton: object
    fla_version: str
    chunk_kda: object
    chunk_local_cumsum: object
    rcp_ln2: float
    device: str
    dispatch: str              # how FLA picks its kernels, for the reports
    warnings: list


def load_runtime(allow_backends: bool = False, device: str = "cuda") -> Runtime:
    """Imports torch, checks for a CUDA GPU, imports FLA's chunk_kda on its Triton path.
    Raises pc.Skip (exit 77) when torch, the GPU or FLA is missing; RuntimeError when FLA is
    there but does not import. device='cpu' is for local testing under TRITON_INTERPRET=1 only."""
    warnings = []
    if not allow_backends:
        if "fla" in sys.modules and os.environ.get("FLA_DISABLE_BACKEND_DISPATCH") != "1":
            raise RuntimeError("fla was imported before its backend dispatch could be disabled")
        os.environ.update(TRITON_ONLY_ENV)
    try:
        import torch
    except ImportError as e:
        raise pc.Skip(f"torch is not installed for {sys.executable} ({e}); the FLA peer scripts need "
                      f"torch, triton and a CUDA GPU (the H200 image has them)") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise pc.Skip(f"no CUDA GPU is visible to torch {torch.__version__} "
                      f"(CUDA build {torch.version.cuda}); run this on the GPU machine")
    try:
        import triton
    except ImportError as e:
        raise pc.Skip(f"triton is not installed ({e}); FLA's kernels are Triton kernels") from None
    if importlib.util.find_spec("fla") is None:
        raise pc.Skip("FLA is not installed (module 'fla' not found); install the fla-core wheel "
                      "from .whl/ as scripts/peers/README.md says (pip install --no-index --no-deps "
                      "--target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site)")
    try:
        import fla
        from fla.ops.kda import chunk_kda
        from fla.ops.utils import chunk_local_cumsum
        from fla.ops.utils.constant import RCP_LN2
        import fla.backends as fla_backends
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] != "fla":
            raise pc.Skip(f"FLA needs the package '{e.name}', which is not installed ({e})") from None
        raise RuntimeError(f"FLA is installed but does not import: {e}") from e
    version = getattr(fla, "__version__", "?")
    if version != EXPECTED_FLA_VERSION:
        warnings.append(f"FLA {version} found; these scripts were written against fla-core "
                        f"{EXPECTED_FLA_VERSION} (chunk_kda's signature and backends may differ)")
    if float(np.float32(RCP_LN2)) != pc.RCP_LN2_F32:
        raise RuntimeError(f"FLA's RCP_LN2 is {RCP_LN2!r}, not the 1.4426950216 the gate conversion "
                           f"assumes; update peers_common.RCP_LN2_F32")
    dispatch_off = bool(getattr(fla_backends, "_DISPATCH_DISABLED", False))
    others = [name for name in ("flash_kda", "tilelang") if importlib.util.find_spec(name) is not None]
    if dispatch_off:
        dispatch = "triton (FLA_DISABLE_BACKEND_DISPATCH=1: backend dispatch bypassed"
        dispatch += f"; installed but unused: {', '.join(others)})" if others else "; no other backend installed)"
    else:
        dispatch = "FLA dispatch on (--allow-backends): " + (
            f"{', '.join(others)} installed and may be chosen" if others else "no other backend installed")
        if others:
            warnings.append("backend dispatch is on and " + ", ".join(others) +
                            " is installed: rows may not be FLA's Triton path")
    return Runtime(torch=torch, triton=triton, fla_version=version, chunk_kda=chunk_kda,
                   chunk_local_cumsum=chunk_local_cumsum, rcp_ln2=float(RCP_LN2), device=device,
                   dispatch=dispatch, warnings=warnings)


def load_torch_runtime(device: str = "cuda") -> Runtime:
    """torch and a CUDA GPU without FLA, for the other peers (peers_bench.py, peers_check.py):
    the same Runtime, its FLA fields empty. Raises pc.Skip (exit 77) when torch or the GPU is
    missing."""
    try:
        import torch
    except ImportError as e:
        raise pc.Skip(f"torch is not installed for {sys.executable} ({e}); the peer scripts need "
                      f"torch and a CUDA GPU (the H200 image has them)") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise pc.Skip(f"no CUDA GPU is visible to torch {torch.__version__} "
                      f"(CUDA build {torch.version.cuda}); run this on the GPU machine")
    return Runtime(torch=torch, triton=None, fla_version="", chunk_kda=None, chunk_local_cumsum=None,
                   rcp_ln2=pc.RCP_LN2_F32, device=device, dispatch="", warnings=[])


def runtime_for(prog: str, args) -> tuple[Runtime | None, int | None]:
    """load_runtime for a script's main (args.allow_backends, args.device): (runtime, None) with
    its warnings printed, or (None, exit code) once the reason is printed: 77 skipped (no torch,
    GPU or FLA), 3 FLA does not import."""
    try:
        rt = load_runtime(args.allow_backends, args.device)
    except pc.Skip as e:
        print(f"{prog}: skipped: {e}", file=sys.stderr)
        return None, pc.EXIT_SKIPPED
    except RuntimeError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None, pc.EXIT_RUNTIME
    for w in rt.warnings:
        print(f"{prog}: warning: {w}", file=sys.stderr)
    return rt, None


# ================================================================================================
# Device facts
# ================================================================================================

def device_info(rt: Runtime) -> dict:
    torch = rt.torch
    info = {"device_name": "cpu", "cc": "", "sm_count": None, "default_sm_clock_hz": None,
            "driver_version": None, "runtime_version": None, "l2_bytes": None, "peak_Bps": None}
    if rt.device != "cuda":
        return info
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    info["device_name"] = props.name
    info["cc"] = f"{props.major}.{props.minor}"
    info["sm_count"] = props.multi_processor_count
    info["l2_bytes"] = getattr(props, "L2_cache_size", None)
    if torch.version.cuda:
        major, minor = (int(x) for x in torch.version.cuda.split(".")[:2])
        info["runtime_version"] = major * 1000 + minor * 10
    try:  # the driver API for what torch does not expose (clock rates, bus width)
        cuda = ctypes.CDLL("libcuda.so.1")
        value = ctypes.c_int()
        if cuda.cuDriverGetVersion(ctypes.byref(value)) == 0:
            info["driver_version"] = value.value
        dev = ctypes.c_int()
        if cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(dev), index) == 0:
            def attr(code):
                out = ctypes.c_int()
                return out.value if cuda.cuDeviceGetAttribute(ctypes.byref(out), code, dev) == 0 else None
            clock_khz, mem_khz, bus_bits = attr(13), attr(36), attr(37)  # CLOCK_RATE, MEMORY_CLOCK_RATE, BUS_WIDTH
            if clock_khz:
                info["default_sm_clock_hz"] = clock_khz * 1000
            if mem_khz and bus_bits:
                info["peak_Bps"] = 2.0 * mem_khz * 1e3 * bus_bits / 8.0
    except OSError:
        pass
    return info


class SmClock:
    """Reads the current SM clock through NVML (package nvidia-ml-py, on the H200 image) while a
    batch runs. Optional: without NVML the clock columns stay empty."""

    def __init__(self, torch):
        self.handle = None
        try:
            import pynvml
            pynvml.nvmlInit()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            index = torch.cuda.current_device()
            if visible:
                first = visible.split(",")[index].strip()
                index = int(first) if first.isdigit() else index
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.nvml = pynvml
        except Exception:  # noqa: BLE001 (NVML is optional)
            self.handle = None

    def read_hz(self) -> float:
        if self.handle is None:
            return math.nan
        try:
            return 1e6 * self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
        except Exception:  # noqa: BLE001
            return math.nan


# ================================================================================================
# Inputs
# ================================================================================================

@dataclasses.dataclass
class TorchInputs:
    """One problem on the device, in our contract and in FLA's."""
    q: object            # [B,T,H,K] bf16, raw (not normalized)
    k: object            # [B,T,H,K] bf16, normalized
    v: object            # [B,T,H,V] bf16
    gate: object         # [B,T,H,K] fp32 cumulative log2 gate (ours)
    beta: object         # [B,T,H] fp32
    cu: object           # [N+1] int64 on the device, or None (dense)
    cu_cpu: object       # [N+1] int64 on the host, or None
    cu_list: list | None
    h0: object           # [N,H,K,V] fp32 or None
    want_final_state: bool
    starts: np.ndarray   # [T] bool, chunk starts (peers_common.chunk_starts)
    q_hat: object = None     # [B,T,H,K] bf16: l2norm(q) in float64, rounded once
    g_fla: object = None     # [B,T,H,K] fp32: FLA's per-token natural-log gate
    raw_gate: object = None  # generated inputs only: bf16 raw gate, A_log, dt_bias, beta logits
    a_log: object = None
    dt_bias: object = None
    beta_logits: object = None
    k_raw: object = None         # raw contract: k before normalization (generated), or k itself (dump)
    lower_bound: float = pc.LOWER_BOUND   # the recipe's lower bound (generated inputs)
    raw_lower_bound: float | None = None  # set by peer_adapters.ensure_raw
    raw_source: str = ""                  # 'generated', 'dump raw files' or 'conversion'
    gate_recipe: str = ""
    source: str = ""

    @property
    def shape(self):
        return tuple(self.q.shape)


def _generator(torch, device, seed: int, stream: int):
    """One torch generator per (seed, tensor stream): adding a tensor never moves another's
    values (the same idea as our portable generator, not the same numbers)."""
    gen = torch.Generator(device=device)
    gen.manual_seed((seed * 1000003 + stream * 7919 + 12345) % (2**63 - 1))
    return gen


def l2norm_f64(torch, x):
    """y = x / sqrt(sum x^2 + 1e-6) in float64, rounded to x's dtype once."""
    x64 = x.to(torch.float64)
    y = x64 / torch.sqrt((x64 * x64).sum(dim=-1, keepdim=True) + pc.L2NORM_EPS)
    return y.to(torch.float32).to(x.dtype)


def to_fla_gate(torch, gate, starts: np.ndarray):
    """Torch twin of peers_common.log2_cumulative_to_fla_gate (same float64 operations, so the
    same bits): gamma = G_t - G_{t-1} inside a chunk, G_t at a chunk start; g = fp32(gamma / c)."""
    g64 = gate.to(torch.float64)
    prev = torch.zeros_like(g64)
    prev[:, 1:] = g64[:, :-1]
    starts_t = torch.as_tensor(starts, device=gate.device)
    prev[:, starts_t] = 0.0
    return ((g64 - prev) / pc.RCP_LN2_F32).to(torch.float32)


def chunk_local_cumsum_f64(torch, x, starts: np.ndarray):
    """Inclusive cumsum along T that restarts at every chunk start (float64 in, float64 out)."""
    T = x.shape[1]
    starts_t = torch.as_tensor(starts, device=x.device)
    idx = torch.arange(T, device=x.device)
    seg_first = torch.cummax(torch.where(starts_t, idx, torch.zeros_like(idx)), dim=0).values
    c = torch.cumsum(x, dim=1)
    base = c[:, seg_first] - x[:, seg_first]
    return c - base


def generate_inputs(rt: Runtime, shape: pc.Shape, seed: int) -> TorchInputs:
    """kda-forward.md §9.3 recipe, drawn with torch's generator on the device (fast for the
    8192-token contract shapes; NOT bit-identical to kda-bench's portable generator):
    q = randn (raw); k = l2norm(randn) (float64, eps 1e-6) -> bf16 (k_raw = the draw in bf16, for
    the raw contract); v = randn; raw gate = raw_mean + raw_std * randn -> bf16, A_log ~ U(a_log),
    dt_bias ~ U(dt_bias) (the shape's gate recipe, shapes/README.md; contract: U(0,1) both),
    gate = chunk-local cumsum of lb*sigmoid(exp(A_log)(raw + dt_bias)) * log2 e -> fp32 (`zero`:
    exactly 0); beta = sigmoid(randn) -> fp32; h0 = 0.01 randn. Inactive suffix: gate and beta
    exactly 0. q_rows: the row-scale suite of shapes/README.md."""
    torch, dev = rt.torch, rt.device
    B, T, H, K, V = shape.batch, shape.tokens, shape.heads, shape.key_dim, shape.value_dim
    f32 = torch.float32
    recipe = shape.gate or pc.GATE_PRESETS["contract"]

    def randn(stream, *size):
        return torch.randn(*size, generator=_generator(torch, dev, seed, stream), device=dev, dtype=f32)

    def rand(stream, *size):
        return torch.rand(*size, generator=_generator(torch, dev, seed, stream), device=dev, dtype=f32)

    def uniform(stream, bounds, *size):
        lo, hi = bounds
        return lo + (hi - lo) * rand(stream, *size)

    cu_list = shape.cu_seqlens
    starts = pc.chunk_starts(T, cu_list)
    q32 = randn(1, B, T, H, K)
    if shape.q_rows:
        q32 = _row_scale_suite(torch, q32, shape, shape.q_rows, seed, dev, streams=(9, 10))
    q = q32.to(torch.bfloat16)
    k32 = randn(2, B, T, H, K)
    if shape.k_rows:
        k32 = _row_scale_suite(torch, k32, shape, shape.k_rows, seed, dev, streams=(11, 12))
    k = l2norm_f64(torch, k32).to(torch.bfloat16)
    v = randn(3, B, T, H, V).to(torch.bfloat16)
    raw = (recipe.raw_mean + recipe.raw_std * randn(4, B, T, H, K)).to(torch.bfloat16)
    a_log = uniform(5, recipe.a_log, H)
    dt_bias = uniform(6, recipe.dt_bias, H, K)
    if recipe.zero:
        gate = torch.zeros(B, T, H, K, dtype=f32, device=dev)
    else:
        x = torch.exp(a_log.double())[None, None, :, None] * (raw.double() + dt_bias.double()[None, None])
        gamma = recipe.lower_bound * torch.sigmoid(x)
        gate = (chunk_local_cumsum_f64(torch, gamma, starts) * (1.0 / math.log(2.0))).to(f32)
    # bf16 logits (widened): FlashKDA takes them in bf16, cuDNN-FE in fp32, and the slice
    # check's golden sigmoid(logits) then is what every raw peer was handed.
    beta_logits = randn(7, B, T, H).to(torch.bfloat16).to(f32)
    beta = torch.sigmoid(beta_logits.double()).to(f32)
    if cu_list is not None and cu_list[-1] < T:
        gate[:, cu_list[-1]:] = 0.0
        beta[:, cu_list[-1]:] = 0.0
    h0 = (0.01 * randn(8, shape.num_seqs, H, K, V)) if shape.initial_state else None
    cu = cu_cpu = None
    if cu_list is not None:
        cu_cpu = torch.tensor(cu_list, dtype=torch.int64)
        cu = cu_cpu.to(dev)
    inp = TorchInputs(q=q, k=k, v=v, gate=gate, beta=beta, cu=cu, cu_cpu=cu_cpu, cu_list=cu_list,
                      h0=h0, want_final_state=shape.final_state, starts=starts, raw_gate=raw,
                      a_log=a_log, dt_bias=dt_bias, beta_logits=beta_logits,
                      k_raw=k32.to(torch.bfloat16), lower_bound=recipe.lower_bound,
                      gate_recipe=recipe.name, source="generated (torch generator, §9.3 recipe)",
                      raw_source="generated")
    if recipe.zero:
        # No raw gate gives gamma = 0 exactly through lb * sigmoid(...); the raw contract then
        # takes the dump-style conversion (peer_adapters.ensure_raw) of the zero gate.
        inp.raw_gate = inp.a_log = inp.dt_bias = None
    return inp


def _row_scale_suite(torch, q32, shape: pc.Shape, cfg: dict, seed: int, dev, streams=(9, 10)):
    """shapes/README.md "q row-scale suite" (`q_rows`, or `k_rows` on k's draw), applied to the fp32
    draws before the bf16 rounding; `streams` seed the huge rows' signs and magnitudes."""
    B, T, H, K = q32.shape
    A = sum(shape.seq_lens) if shape.packed else T  # active tokens (dense: each batch row alike)
    if A == 0:
        return q32
    t = torch.arange(A, device=dev, dtype=torch.float64)
    lmin, lmax = math.log(cfg["min_scale"]), math.log(cfg["max_scale"])
    s = torch.exp(lmin + (lmax - lmin) * t / (A - 1)) if A > 1 else torch.full_like(t, cfg["min_scale"])
    out = q32.clone()
    out[:, :A] = (q32[:, :A].double() * s[None, :, None, None]).to(torch.float32)
    bf16_max = 3.3895313892515355e38
    huge = cfg["huge_values"]
    sign_u = torch.rand(B, A, H, K, generator=_generator(torch, dev, seed, streams[0]), device=dev, dtype=torch.float64)
    mag_u = torch.rand(B, A, H, K, generator=_generator(torch, dev, seed, streams[1]), device=dev, dtype=torch.float64)
    for j, value in enumerate(huge, start=1):
        tok = (A * j) // (len(huge) + 1)
        vmax = min(value, bf16_max)
        sign = torch.where(sign_u[:, tok] < 0.5, -1.0, 1.0)
        out[:, tok] = (sign * vmax * (0.5 + 0.5 * mag_u[:, tok])).to(torch.float32)
    for j in range(1, cfg["zero_rows"] + 1):
        out[:, (A * j) // (cfg["zero_rows"] + 1)] = 0.0
    return out


def inputs_from_dump(rt: Runtime, problem: pc.DumpedProblem, fla_dtype: str = "bf16") -> TorchInputs:
    """Exactly the dumped (already rounded) inputs on the device. fla_dtype 'fp32' gives FLA fp32
    copies of the bf16 values (only for local tests under TRITON_INTERPRET=1, whose bf16 support
    is broken); it changes FLA's arithmetic, never the values."""
    torch, dev = rt.torch, rt.device
    lowp = torch.bfloat16 if fla_dtype == "bf16" else torch.float32

    def dev_tensor(a, dtype):
        return torch.from_numpy(np.ascontiguousarray(a)).to(dev).to(dtype)

    cu_list = problem.cu_seqlens.tolist() if problem.cu_seqlens is not None else None
    cu = cu_cpu = None
    if cu_list is not None:
        cu_cpu = torch.tensor(cu_list, dtype=torch.int64)
        cu = cu_cpu.to(dev)
    inp = TorchInputs(q=dev_tensor(problem.q, lowp), k=dev_tensor(problem.k, lowp),
                      v=dev_tensor(problem.v, lowp), gate=dev_tensor(problem.gate, torch.float32),
                      beta=dev_tensor(problem.beta, torch.float32), cu=cu, cu_cpu=cu_cpu,
                      cu_list=cu_list,
                      h0=dev_tensor(problem.h0, torch.float32) if problem.h0 is not None else None,
                      want_final_state=problem.want_final_state,
                      starts=pc.chunk_starts(problem.tokens, cu_list),
                      source=f"kda-check dump {problem.directory}")
    raw = problem.raw
    if raw is not None:
        # The generator's draws, exactly (bf16 values: exact in bf16 and in fp32 alike); the
        # adapters hand them to the raw peers as they are (peer_adapters.ensure_raw).
        inp.k_raw = dev_tensor(raw.k_raw, lowp)
        inp.raw_gate = dev_tensor(raw.gate_raw, lowp)
        inp.beta_logits = dev_tensor(raw.beta_logits, torch.float32)
        inp.a_log = dev_tensor(raw.a_log, torch.float32)
        inp.dt_bias = dev_tensor(raw.dt_bias, torch.float32)
        inp.lower_bound = raw.lower_bound
        inp.raw_source = "dump raw files"
    return inp


def prepare_fla_inputs(rt: Runtime, inp: TorchInputs) -> None:
    """Fills q_hat (float64 l2norm of q, rounded once) and g_fla (the converted gate)."""
    inp.q_hat = l2norm_f64(rt.torch, inp.q)
    inp.g_fla = to_fla_gate(rt.torch, inp.gate, inp.starts)


def check_conversion_twin(rt: Runtime, inp: TorchInputs, tokens: int = 256) -> None:
    """The torch conversion must give the bits of the NumPy one (peers_common), on a slice."""
    n = min(tokens, inp.gate.shape[1])
    g_np = inp.gate[:1, :n, :2].cpu().numpy()
    want = pc.log2_cumulative_to_fla_gate(g_np, inp.starts[:n])
    got = inp.g_fla[:1, :n, :2].cpu().numpy()
    if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
        raise RuntimeError("the torch gate conversion differs from peers_common's NumPy one")


def gate_reconstruction(rt: Runtime, inp: TorchInputs) -> float:
    """FLA's own chunk_local_cumsum(g, 64, scale=RCP_LN2) against our cumulative gate, over the
    active tokens: max |G_FLA - G|. (FLA leaves the inactive suffix of its output unwritten.)"""
    torch = rt.torch
    G = rt.chunk_local_cumsum(inp.g_fla, chunk_size=pc.CHUNK, scale=rt.rcp_ln2, cu_seqlens=inp.cu,
                              output_dtype=torch.float32)
    if inp.cu_list is not None:
        end = inp.cu_list[-1]
        if end == 0:
            return 0.0
        diff = (G[:, :end] - inp.gate[:, :end]).abs()
    else:
        diff = (G - inp.gate).abs()
    return float(diff.max().item()) if diff.numel() else 0.0


# ================================================================================================
# The FLA calls
# ================================================================================================

ROWS = {
    # row name: (CSV path, needs generated raw inputs, description)
    "prenorm": ("fla-prenorm", False,
                "chunk_kda(q=l2norm(q), k, v, g, beta[, initial_state, output_final_state], "
                "cu_seqlens, cu_seqlens_cpu): FLA's Triton core on pre-normalized q/k and the "
                "converted per-token gate (as peers-h200.csv 'fla-core')"),
    "l2norm-in-kernel": ("fla-l2norm-in-kernel", False,
                         "as prenorm on raw q with use_qk_l2norm_in_kernel=True (FLA's l2norm "
                         "launches on q and on k inside the op; k is normalized again)"),
    "prenorm-safegate": ("fla-prenorm-safegate", False,
                         "as prenorm with safe_gate=True, lower_bound=-5 (tensor-core diagonal "
                         "blocks; peers-h200.csv 'fla-core-safegate')"),
    "full": ("fla-full", True,
             "chunk_kda from raw inputs: use_gate_in_kernel, use_qk_l2norm_in_kernel, "
             "use_beta_sigmoid_in_kernel, safe_gate=True, lower_bound=-5, A_log, dt_bias "
             "(peers-h200.csv 'fla-full'; generated inputs only)"),
}


def fla_kwargs(row: str, inp: TorchInputs, output_final_state: bool) -> dict:
    kw = dict(k=inp.k, v=inp.v, initial_state=inp.h0, output_final_state=output_final_state,
              cu_seqlens=inp.cu, cu_seqlens_cpu=inp.cu_cpu)
    if row == "prenorm":
        kw.update(q=inp.q_hat, g=inp.g_fla, beta=inp.beta)
    elif row == "l2norm-in-kernel":
        kw.update(q=inp.q, g=inp.g_fla, beta=inp.beta, use_qk_l2norm_in_kernel=True)
    elif row == "prenorm-safegate":
        kw.update(q=inp.q_hat, g=inp.g_fla, beta=inp.beta, safe_gate=True, lower_bound=pc.LOWER_BOUND)
    elif row == "full":
        if inp.raw_gate is None:
            raise ValueError("row 'full' needs the raw gate, A_log, dt_bias and beta logits, which "
                             "only generated inputs have")
        kw.update(q=inp.q, g=inp.raw_gate, beta=inp.beta_logits, use_qk_l2norm_in_kernel=True,
                  use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
                  lower_bound=pc.LOWER_BOUND, A_log=inp.a_log, dt_bias=inp.dt_bias.reshape(-1))
    else:
        raise ValueError(f"unknown row {row!r}")
    return kw


def call_text(kw: dict) -> str:
    """The call, argument by argument, for the reports."""
    parts = []
    for name, value in kw.items():
        if value is None or value is False:
            continue
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            parts.append(f"{name}={str(value.dtype).replace('torch.', '')}{list(value.shape)}")
        else:
            parts.append(f"{name}={value}")
    return "chunk_kda(" + ", ".join(parts) + ")"


def triton_kernel_names() -> set:
    """Names of every Triton JIT kernel that FLA's imported modules define (through autotune /
    heuristics wrappers), to show that what the profiler saw is FLA's Triton code."""
    from triton.runtime.jit import JITFunction
    names = set()
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("fla.") or mod is None:
            continue
        for value in list(vars(mod).values()):
            fn, depth = value, 0
            while fn is not None and depth < 6 and not isinstance(fn, JITFunction):
                fn, depth = getattr(fn, "fn", None), depth + 1
            if isinstance(fn, JITFunction):
                names.add(fn.__name__)
    return names


def fla_autotuners() -> list:
    """Every Triton Autotuner object that FLA's imported modules define (the @autotune /
    @fla_cache_autotune wrappers around FLA's JIT kernels), each once."""
    from triton.runtime.autotuner import Autotuner
    found, seen = [], set()
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("fla.") or mod is None:
            continue
        for value in list(vars(mod).values()):
            fn, depth = value, 0
            while fn is not None and depth < 6:
                if isinstance(fn, Autotuner) and id(fn) not in seen:
                    seen.add(id(fn))
                    found.append(fn)
                fn, depth = getattr(fn, "fn", None), depth + 1
    return found


def pin_first_tuning() -> int:
    """Makes each FLA autotuner reuse the config it picked on its first tuning for every later
    key (a new head count, varlen or not, with a state or not...), so only the first problem
    pays for autotuning and later problems pay one compile per new specialization.

    For a correctness check this changes nothing that matters: a config holds launch parameters
    only (block sizes, warps, stages), every one of them computes the same chunk_kda, and the
    tuned config is a working one. (Triton's Autotuner benchmarks only when it holds more than
    one config; after the first tuning it holds just the winner.) Not for timing: fla_bench.py
    never calls this. Returns how many autotuners were wrapped."""
    tuners = fla_autotuners()
    for tuner in tuners:
        tuned_run = tuner.run

        def run(*args, _tuner=tuner, _tuned_run=tuned_run, **kwargs):
            result = _tuned_run(*args, **kwargs)
            if len(_tuner.configs) > 1 and _tuner.cache:
                _tuner.configs = [next(iter(_tuner.cache.values()))]
            return result

        tuner.run = run  # KernelInterface.__getitem__ calls self.run: the instance attribute wins
    return len(tuners)


def list_kernels(rt: Runtime, fn) -> tuple[list, str]:
    """Runs fn once under torch.profiler and returns (GPU activity names, 'n/m Triton')."""
    torch = rt.torch
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events()
                 if str(getattr(e, "device_type", "")).endswith("CUDA")]
    except Exception as e:  # noqa: BLE001 (profiling is a diagnostic)
        return [], f"profiler unavailable: {e}"
    triton_names = triton_kernel_names()
    kernels = [n for n in names if not n.startswith(("Memset", "Memcpy", "[memory]"))]
    triton_count = sum(1 for n in kernels if n in triton_names)
    text = f"{triton_count}/{len(kernels)} kernels are FLA Triton kernels"
    others = sorted({n for n in kernels if n not in triton_names})
    if others:  # torch's own fills (zeros_like, ...) are expected; a CUTLASS/TileLang name is not
        text += " (others: " + ", ".join(n if len(n) <= 60 else n[:57] + "..." for n in others) + ")"
    return names, text


# ================================================================================================
# Timing: warm CUDA events, one event pair per call, nvbench's stopping rule
# ================================================================================================

@dataclasses.dataclass
class TimingConfig:
    warmup: int = 10
    min_samples: int = 50
    min_time_s: float = 0.5
    max_noise: float = 0.005
    timeout_s: float = 15.0
    batch_target_s: float = 0.025
    max_batch: int = 64
    hold_s: float = 0.002
    throttle_threshold: float = 0.75
    throttle_recovery_s: float = 0.05


@dataclasses.dataclass
class TimingResult:
    samples: list
    host_enqueue_s: list
    stop_reason: str
    wall_s: float
    warmup_runs: int
    throttle_discards: int
    sm_clock_hz: list
    batch: int


def time_warm(rt: Runtime, fn, cfg: TimingConfig, default_clock_hz=None, clock: SmClock | None = None) -> TimingResult:
    """Warm timing like kda-bench's `warm` mode: back-to-back calls on the current stream, each
    between its own CUDA-event pair, no flush. A batch (~25 ms of GPU time, <= 64 calls) is queued
    behind torch.cuda._sleep (a GPU spin of hold_s) so the first start event does not run before
    the host has queued the next calls; one SM-clock reading (NVML) per batch, taken while the
    batch runs; a batch whose clock is below throttle_threshold of the default clock is discarded.
    Stops by peers_common.StdrelCriterion (min samples, min time, noise, stable, timeout)."""
    torch = rt.torch
    for _ in range(cfg.warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    estimate = max(start.elapsed_time(end) * 1e-3, 1e-6)
    batch = int(min(cfg.max_batch, max(1, math.ceil(cfg.batch_target_s / estimate))))
    crit = pc.StdrelCriterion(cfg.min_samples, cfg.min_time_s, cfg.max_noise, cfg.timeout_s)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(batch)]
    hold_cycles = int(cfg.hold_s * (default_clock_hz or 1.98e9))
    samples, host, clocks = [], [], []
    discards, consecutive = 0, 0
    t0 = time.perf_counter()
    reason = None
    while reason is None:
        if hold_cycles > 0 and hasattr(torch.cuda, "_sleep"):
            torch.cuda._sleep(hold_cycles)
        enqueue = []
        for i in range(batch):
            starts[i].record()
            h = time.perf_counter()
            fn()
            enqueue.append(time.perf_counter() - h)
            ends[i].record()
        clock_hz = clock.read_hz() if clock else math.nan
        ends[-1].synchronize()
        if (default_clock_hz and math.isfinite(clock_hz)
                and clock_hz < cfg.throttle_threshold * default_clock_hz):
            discards += 1
            consecutive += 1
            sleep = cfg.throttle_recovery_s * (1.5 ** max(0, consecutive - 2))
            time.sleep(min(sleep, 0.5))
        else:
            consecutive = 0
            clocks.append(clock_hz)
            host.extend(enqueue)
            for i in range(batch):
                seconds = starts[i].elapsed_time(ends[i]) * 1e-3
                crit.add_sample(seconds)
                if math.isfinite(seconds) and seconds >= 0:
                    samples.append(seconds)
        reason = crit.check(time.perf_counter() - t0)
    return TimingResult(samples=samples, host_enqueue_s=host, stop_reason=reason,
                        wall_s=time.perf_counter() - t0, warmup_runs=cfg.warmup + 1,
                        throttle_discards=discards, sm_clock_hz=clocks, batch=batch)
