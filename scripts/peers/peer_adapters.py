"""The Hopper peers behind one interface, for peers_bench.py (timing) and peers_check.py (judging):
cuDNN-FE 1.32.0's sm90 kda_fused (our launcher, native/cudnn_kda_launch.cu, through ctypes),
FlashKDA stock and its two forks (their own `flash_kda.fwd`, one build per process: all three are
the package `flash_kda`), and our own forward through kda_torch (python/, the PyTorch op over
libkda_c.so), so that ours runs in the same process, on the same tensors and with the same loop as
the peers.

Each peer takes our inputs (peers_torch.TorchInputs) in one of two contracts:

* plain: normalized q and k, a per-token or cumulative gate, post-sigmoid beta (the attention-gym
  style contract; FlashKDA has none: it always normalizes and activates inside);
* raw: raw q and k, a raw gate with A_log, dt_bias and a lower bound, beta logits (FlashKDA's).

prepare(inputs, contract) returns a Call whose fn() runs the peer once into preallocated outputs
(so the timing loop times the kernels, not our conversions); a peer that does not accept a problem
raises Refused with the reason, one that is missing raises Unavailable with the exact error.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import math
import os
import sys

import numpy as np

import peers_common as pc

CONTRACTS = ("plain", "raw")
Q_SCALE = 1.0 / math.sqrt(128.0)
FLASHKDA_LOWER_BOUND = -5.0   # FlashKDA: "lower_bound expected in [-5.0, 0]"

FLASHKDA_VARIANTS = {
    # name: (build target of build_peers.sh, what it is)
    "flashkda": ("fk", "FlashKDA stock (MoonshotAI 1ce47ea)"),
    "flash-flash-kda": ("ffk", "Flash-Flash-KDA (Itssshikhar/FlashKDA c2626fb)"),
    "vllm-flashkda": ("vfk", "vLLM's FlashKDA fork (vllm-project/FlashKDA 6121c37)"),
}
PEER_NAMES = ("cudnn", *FLASHKDA_VARIANTS, "ours")


class Unavailable(Exception):
    """The peer is not there: not built, does not import or load. The text is the exact error."""


class Refused(Exception):
    """The peer does not take this problem in this contract (e.g. a lower bound it rejects)."""


@dataclasses.dataclass
class Call:
    fn: object            # () -> None: one call into the preallocated outputs
    out: object           # [B,T,H,V] bf16, written by fn
    final_state: object   # () -> [N,H,K,V] fp32 in OUR layout, or None when not asked for
    text: str             # the call, for the reports
    extra_bytes: int = 0  # bytes moved beyond our forward's model (raw inputs, separate passes)
    keep: tuple = ()      # device buffers fn uses (alive as long as the Call)
    # The peer normalizes raw q itself with an fp32 sum of squares (rsqrt(sum q^2 + 1e-6)): q rows
    # of |q| >~ 1.8e19 overflow it and come out as zeros (kda-forward.md §4.4; peers_common.
    # judge_known_overflow). Ours (both contracts) and every plain contract (q normalized by us in
    # float64) do not.
    q_norm_fp32: bool = False


# ================================================================================================
# Raw inputs from our contract (generated inputs carry their own raw draws)
# ================================================================================================

def ensure_raw(torch, inp, lower_bound: float = pc.LOWER_BOUND) -> None:
    """Makes sure inp has the raw contract's inputs: k_raw, raw_gate, a_log, dt_bias, beta_logits
    and raw_lower_bound. Generated inputs and dumps with the raw files (kda-check --dump writes
    k_raw, gate_raw, beta_logits, a_log, dt_bias and meta.json's lower_bound) carry the
    generator's own draws: they are used as they are, nothing is converted. A dump without them
    gets the same problem in the raw contract by conversion (peers_common.raw_gate_from_contract:
    A_log = 0, dt_bias = 0, g = logit(gamma / lb), beta logits = logit(beta), the dumped k, which
    the peer normalizes again); peers_common.raw_problem says what that leaves of the problem."""
    if getattr(inp, "raw_lower_bound", None) is not None:
        return
    if inp.raw_gate is not None and inp.a_log is not None:  # generated or dumped draws
        inp.raw_lower_bound = inp.lower_bound
        return
    gate = inp.gate.cpu().numpy()
    lb = pc.choose_lower_bound(gate, inp.starts, lower_bound)
    raw = pc.raw_gate_from_contract(gate, inp.starts, lb)
    dev = inp.q.device
    H, K = inp.q.shape[2], inp.q.shape[3]
    inp.k_raw = inp.k
    inp.raw_gate = torch.from_numpy(raw.astype(np.float32)).to(dev)
    inp.a_log = torch.zeros(H, dtype=torch.float32, device=dev)
    inp.dt_bias = torch.zeros(H, K, dtype=torch.float32, device=dev)
    inp.beta_logits = torch.from_numpy(pc.beta_logits_from_contract(inp.beta.cpu().numpy())
                                       .astype(np.float32)).to(dev)
    inp.raw_lower_bound = lb
    inp.raw_source = "conversion"


def _state_vk(torch, h0_kv):
    """Our [N,H,K,V] state -> the [N,H,V,K] (V-first) layout cuDNN-FE and FlashKDA use."""
    return h0_kv.transpose(-1, -2).contiguous()


def _cu_int32(torch, inp):
    """cu_seqlens as int32 on the device; dense batches as [0, T, 2T, ...] over the flat tokens."""
    B, T = inp.q.shape[0], inp.q.shape[1]
    if inp.cu is not None:
        return inp.cu.to(torch.int32)
    return torch.arange(B + 1, dtype=torch.int32, device=inp.q.device) * T


# ================================================================================================
# cuDNN-FE sm90 kda_fused through our launcher
# ================================================================================================

class CudnnPeer:
    name = "cudnn"
    contracts = CONTRACTS

    def __init__(self, torch, library: str):
        self.torch = torch
        if not os.path.exists(library):
            raise Unavailable(f"{library}: not built (scripts/peers/build_peers.sh cudnn)")
        try:
            self.lib = ctypes.CDLL(library)
        except OSError as e:
            raise Unavailable(f"{library}: does not load: {e}") from None
        vp, f32p, i32p = ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
        self.lib.kdapeer_cudnn_launch.restype = ctypes.c_int
        self.lib.kdapeer_cudnn_launch.argtypes = [
            ctypes.c_int, vp, vp, vp, f32p, f32p, i32p, f32p, vp, f32p, ctypes.c_int, ctypes.c_int,
            ctypes.c_longlong, f32p, f32p, ctypes.c_float, ctypes.c_float, vp]
        self.lib.kdapeer_cudnn_pieces.restype = ctypes.c_int
        self.lib.kdapeer_cudnn_pieces.argtypes = [ctypes.c_longlong, ctypes.c_int, ctypes.c_int]
        self.lib.kdapeer_error_string.restype = ctypes.c_char_p
        self.lib.kdapeer_error_string.argtypes = [ctypes.c_int]
        self.version = "cudnn-frontend 1.32.0 sm90 kda_fused (wheel's kernel body, our launcher)"

    def prepare(self, inp, contract: str) -> Call:
        torch = self.torch
        B, T, H, K = inp.q.shape
        V = inp.v.shape[3]
        N = len(inp.cu_list) - 1 if inp.cu_list is not None else B
        cu = _cu_int32(torch, inp)
        h0 = (_state_vk(torch, inp.h0) if inp.h0 is not None
              else torch.zeros(N, H, V, K, dtype=torch.float32, device=inp.q.device))
        ht = torch.empty(N, H, V, K, dtype=torch.float32, device=inp.q.device)
        out = torch.empty(B, T, H, V, dtype=torch.bfloat16, device=inp.q.device)
        if contract == "plain":
            if inp.q_hat is None or inp.g_fla is None:
                raise RuntimeError("prepare_fla_inputs() first: the plain contract needs q_hat")
            flags, q, k = 0, inp.q_hat, inp.k
            # The plain kernel wants the per-token natural-log gate: FLA's g (our G converted).
            g, beta, a_log, dt_bias, lb = inp.g_fla, inp.beta, None, None, pc.LOWER_BOUND
            text = ("kda_fused<flags 0>(q=l2norm(q), k, v, g=per-token ln gate fp32, beta fp32, "
                    "cu int32, h0/ht fp32 [N,H,V,K])")
            extra = 0
        elif contract == "raw":
            ensure_raw(torch, inp)
            flags, q, k = 7, inp.q, inp.k_raw
            g, beta = inp.raw_gate.float().contiguous(), inp.beta_logits.float().contiguous()
            a_log, dt_bias, lb = inp.a_log, inp.dt_bias, inp.raw_lower_bound
            text = (f"kda_fused<flags 7>(raw q, raw k, raw g fp32, beta logits fp32, A_log, dt_bias, "
                    f"lb={lb:g}, cu int32, h0/ht fp32 [N,H,V,K])")
            extra = 0
        else:
            raise ValueError(contract)
        if lb < -pc.MAX_LOWER_BOUND_MAGNITUDE:
            raise Refused(f"lower bound {lb} below -{pc.MAX_LOWER_BOUND_MAGNITUDE}")
        stream = torch.cuda.current_stream().cuda_stream
        lib = self.lib

        def ptr(t):
            return None if t is None else ctypes.c_void_p(t.data_ptr())
        args = (flags, ptr(q), ptr(k), ptr(inp.v), ptr(g), ptr(beta), ptr(cu), ptr(h0), ptr(out),
                ptr(ht), N, H, B * T, ptr(a_log), ptr(dt_bias), lb, Q_SCALE, ctypes.c_void_p(stream))

        def fn():
            status = lib.kdapeer_cudnn_launch(*args)
            if status != 0:
                raise RuntimeError(f"kdapeer_cudnn_launch: {lib.kdapeer_error_string(status).decode()}")
        pieces = lib.kdapeer_cudnn_pieces(B * T, N, H)
        want = inp.want_final_state
        return Call(fn=fn, out=out, text=f"{text}; grid ({H}, {N}x{pieces}) x 128 threads",
                    keep=(q, k, g, beta, cu, h0, ht, a_log, dt_bias),
                    final_state=(lambda: ht.transpose(-1, -2).contiguous()) if want else None,
                    extra_bytes=extra, q_norm_fp32=contract == "raw")


# ================================================================================================
# FlashKDA (stock and forks): their Python entry point
# ================================================================================================

class FlashKdaPeer:
    contracts = ("raw",)

    def __init__(self, torch, name: str, source_dir: str):
        self.torch, self.name = torch, name
        self.describe = FLASHKDA_VARIANTS[name][1]
        if not os.path.isdir(source_dir):
            raise Unavailable(f"{source_dir}: not built (scripts/peers/build_peers.sh "
                              f"{FLASHKDA_VARIANTS[name][0]})")
        if "flash_kda" in sys.modules:
            raise Unavailable("another flash_kda is already imported in this process: one FlashKDA "
                              "build per process")
        sys.path.insert(0, source_dir)
        try:
            self.module = importlib.import_module("flash_kda")
        except Exception as e:  # noqa: BLE001 (any import failure is the peer's exact error)
            raise Unavailable(f"import flash_kda from {source_dir}: {type(e).__name__}: {e}") from None
        where = os.path.dirname(os.path.abspath(getattr(self.module, "__file__", "") or ""))
        if not where.startswith(os.path.abspath(source_dir)):
            raise Unavailable(f"flash_kda imported from {where}, not from {source_dir}")
        self.version = f"{self.describe}, built here (torch {torch.__version__})"

    def prepare(self, inp, contract: str) -> Call:
        if contract != "raw":
            raise Refused("FlashKDA has no plain contract: it always normalizes q/k, activates the "
                          "gate and applies the beta sigmoid itself")
        torch = self.torch
        ensure_raw(torch, inp)
        lb = inp.raw_lower_bound
        if lb < FLASHKDA_LOWER_BOUND:
            raise Refused(f"needs a lower bound of {lb:.6g} to represent this gate; FlashKDA takes "
                          f"lower_bound in [{FLASHKDA_LOWER_BOUND:g}, 0]")
        B, T, H, K = inp.q.shape
        V = inp.v.shape[3]
        N = len(inp.cu_list) - 1 if inp.cu_list is not None else B
        g = inp.raw_gate.to(torch.bfloat16).contiguous()
        beta = inp.beta_logits.to(torch.bfloat16).contiguous()
        out = torch.empty(B, T, H, V, dtype=torch.bfloat16, device=inp.q.device)
        h0 = _state_vk(torch, inp.h0) if inp.h0 is not None else None
        want = inp.want_final_state
        ht = torch.empty(N, H, V, K, dtype=torch.float32, device=inp.q.device) if want else None
        kw = dict(initial_state=h0, final_state=ht)
        if inp.cu is not None:
            kw["cu_seqlens"] = inp.cu.to(torch.int64)
        fwd, q, k, v = self.module.fwd, inp.q, inp.k_raw, inp.v
        a_log, dt_bias = inp.a_log.float().contiguous(), inp.dt_bias.float().contiguous()

        def fn():
            fwd(q, k, v, g, beta, Q_SCALE, out, A_log=a_log, dt_bias=dt_bias, lower_bound=float(lb), **kw)
        text = (f"flash_kda.fwd(raw q, raw k, v, raw g bf16, beta logits bf16, scale=1/sqrt(128), out, "
                f"A_log, dt_bias, lower_bound={lb:g}"
                + (", initial_state fp32 [N,H,V,K]" if h0 is not None else "")
                + (", final_state fp32 [N,H,V,K]" if want else "")
                + (", cu_seqlens int64" if inp.cu is not None else "") + ")")
        return Call(fn=fn, out=out, text=text, keep=(g, beta, h0, ht, a_log, dt_bias),
                    final_state=(lambda: ht.transpose(-1, -2).contiguous()) if want else None,
                    q_norm_fp32=True)


# ================================================================================================
# Ours: kda_torch (python/), the PyTorch op users call, over libkda_c.so
# ================================================================================================

PYTHON_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def import_kda_torch():
    """kda_torch from this checkout's python/ (first on sys.path: the package these scripts were
    written against, not an older installed copy), with the library kda_torch itself resolves:
    $KDA_C_LIBRARY if set, else the libkda_c.so pip installed next to the package. The checkout's
    package has no copy of its own, so here KDA_C_LIBRARY names the lead's build (run-all-h200.sh
    sets it to $BIN/../lib/libkda_c.so). Loads the library now, so that a missing or stale one is
    Unavailable with kda_torch's own message instead of an error inside the first timed call."""
    if PYTHON_DIR not in sys.path:
        sys.path.insert(0, PYTHON_DIR)
    try:
        kda = importlib.import_module("kda_torch")
        lib = importlib.import_module("kda_torch._lib")
    except Exception as e:  # noqa: BLE001 (any import failure is the exact error to report)
        raise Unavailable(f"import kda_torch from {PYTHON_DIR}: {type(e).__name__}: {e}") from None
    try:
        lib.library()
    except lib.KdaError as e:
        raise Unavailable(f"kda_torch ({os.path.dirname(kda.__file__)}): {e}") from None
    return kda, lib.library_path()


def ours_load_check() -> str:
    """build_peers.sh ours: what loads from where, or SystemExit with the reason (one line)."""
    try:
        kda, library = import_kda_torch()
    except Unavailable as e:
        raise SystemExit(f"ours unavailable: {e}") from None
    return f"kda_torch {getattr(kda, '__version__', '?')} from {os.path.dirname(kda.__file__)} loads {library}"


class OursPeer:
    """lib/kda's forward through kda_torch, exactly as a PyTorch user calls it, so that ours runs
    in the same process, on the same tensors and in the same loop as the peers, and its time
    against kda-bench's (the same kernels from C++) is the wrapper's cost (peers_report).

    plain = kda_torch.forward(raw q, fuse_q_l2norm=True, normalized k, the cumulative log2 gate,
    fp32 beta): kda-bench's `fused`. raw = kda_torch.chunk_kda with every in-kernel option (q and
    k normalized, the bf16 raw gate activated with A_log / dt_bias / lower bound, bf16 beta
    logits): one chunk_forward, kda-bench's `raw`. prepare() allocates out, the final state and
    the workspace and converts the offsets to int32 on both sides, so fn() allocates nothing on
    the device and never synchronizes (kda_torch's hot-path rules, python/README.md)."""

    name = "ours"
    contracts = CONTRACTS

    def __init__(self, torch, kda=None):
        self.torch = torch
        if kda is None:
            kda, library = import_kda_torch()
        else:  # a stand-in module (test_peers.py checks the argument mapping without a GPU)
            library = "(given)"
        self.kda = kda
        self.version = f"kda_torch {getattr(kda, '__version__', '?')} (lib/kda chunk_forward) with {library}"

    def prepare(self, inp, contract: str) -> Call:
        if contract not in CONTRACTS:
            raise ValueError(f"contract {contract!r}: expected one of {', '.join(CONTRACTS)}")
        torch, kda = self.torch, self.kda
        B, T, H, K = inp.q.shape
        V = inp.v.shape[3]
        packed = inp.cu_list is not None
        N = len(inp.cu_list) - 1 if packed else B
        dev = inp.q.device
        # int32 offsets on both sides: kda_torch would otherwise copy int64 ones on every call.
        cu = inp.cu.to(torch.int32) if packed else None
        cu_cpu = torch.tensor(inp.cu_list, dtype=torch.int32) if packed else None
        want = inp.want_final_state
        out = torch.empty(B, T, H, V, dtype=torch.bfloat16, device=dev)
        ht = torch.empty(N, H, K, V, dtype=torch.float32, device=dev) if want else None
        workspace = torch.empty(kda.workspace_bytes(B, T, H, N if packed else None), dtype=torch.uint8,
                                device=dev)
        # States: inp.h0 and ht are [N, H, K, V] (row = key channel), kda_torch's layout for both
        # forms: no transpose either way.
        common = dict(initial_state=inp.h0, output_final_state=want, cu_seqlens=cu, cu_seqlens_cpu=cu_cpu,
                      out=out, final_state=ht, workspace=workspace)
        if contract == "plain":
            q, k, v, gate, beta = inp.q, inp.k, inp.v, inp.gate, inp.beta
            forward = kda.forward

            def fn():
                forward(q, k, v, gate, beta, fuse_q_l2norm=True, **common)
            text = ("kda_torch.forward(raw q, k, v, gate=cumulative log2 fp32, beta fp32, fuse_q_l2norm=True, "
                    "out=, final_state=, workspace=) = kda-bench fused")
            keep = (q, k, v, gate, beta)
        else:  # raw
            ensure_raw(torch, inp)
            q, v = inp.q, inp.v
            k = inp.k_raw.to(torch.bfloat16).contiguous()
            g = inp.raw_gate.to(torch.bfloat16).contiguous()
            beta = inp.beta_logits.to(torch.bfloat16).contiguous()
            a_log = inp.a_log.float().contiguous()
            dt_bias = inp.dt_bias.float().reshape(-1).contiguous()  # FLA's [H * K]
            lb = float(inp.raw_lower_bound)
            chunk_kda = kda.chunk_kda

            def fn():
                chunk_kda(q, k, v, g, beta, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                          use_beta_sigmoid_in_kernel=True, safe_gate=True, lower_bound=lb, A_log=a_log,
                          dt_bias=dt_bias, **common)
            text = (f"kda_torch.chunk_kda(raw q, raw k, v, raw g bf16, beta logits bf16, "
                    f"use_qk_l2norm_in_kernel, use_gate_in_kernel, use_beta_sigmoid_in_kernel, safe_gate, "
                    f"lower_bound={lb:g}, A_log, dt_bias, out=, final_state=, workspace=) = kda-bench raw")
            keep = (q, k, v, g, beta, a_log, dt_bias)
        return Call(fn=fn, out=out, text=text, final_state=(lambda: ht) if want else None,
                    keep=keep + (inp.h0, cu, cu_cpu, ht, workspace))


def load_peer(torch, name: str, build_dir: str):
    """The peer called `name` from build_peers.sh's BUILD_DIR. Raises Unavailable."""
    if name == "cudnn":
        return CudnnPeer(torch, os.path.join(build_dir, "cudnn", "libkdapeer_cudnn.so"))
    if name == "ours":  # no build: kda_torch from python/ (build_dir unused)
        return OursPeer(torch)
    if name in FLASHKDA_VARIANTS:
        target = FLASHKDA_VARIANTS[name][0]
        status = os.path.join(build_dir, f"{target}.status")
        if os.path.exists(status):
            text = open(status, encoding="utf-8").read().strip()
            if text != "ok":
                raise Unavailable(f"build {text}")
        return FlashKdaPeer(torch, name, os.path.join(build_dir, target, "src"))
    raise ValueError(f"unknown peer {name!r} (known: {', '.join(PEER_NAMES)})")


def build_status(build_dir: str, name: str) -> str | None:
    """build_peers.sh's status line for the peer's target ('ok', 'failed: ...'), or None."""
    target = {"cudnn": "cudnn", "ours": "ours"}.get(name) or FLASHKDA_VARIANTS.get(name, (None,))[0]
    path = os.path.join(build_dir, f"{target}.status") if target else None
    if path and os.path.exists(path):
        return open(path, encoding="utf-8").read().strip()
    return None
