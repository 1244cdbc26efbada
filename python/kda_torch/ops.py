"""The two forms of the op: forward() (the attention-gym contract, lib/kda's own) and chunk_kda()
(FLA's signature, mapped onto the same kernel). Both check their arguments here, in Python, with
messages in torch's terms; build one kda_c_forward_params (plan_forward); and launch it on torch's
current stream. The library validates the struct again (kda::validate) before any kernel runs.

Hot path: no host synchronization and no allocation beyond the outputs and, when the caller passes
none, the workspace (torch's caching allocator, so both are capturable in a CUDA graph). The
exceptions: cu_seqlens without cu_seqlens_cpu (a device-to-host copy: a synchronization, and not
capturable); FLA's per-token gate (use_gate_in_kernel=False), converted by torch ops (an extra
pass and an fp32 [B, T, H, 128] temporary); int64 offsets (an int32 copy on the device).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from . import _lib
from ._lib import CHUNK, HEAD_DIM, MAX_LOWER_BOUND, InvalidArgument, Unsupported

LOG2_E = 1.4426950408889634  # log2(e): natural-log decays to the kernel's log2 decays
SCALE = 1.0 / math.sqrt(HEAD_DIM)  # the kernels' fixed scale (kda.h)
_INT32_MAX = 2**31 - 1


# ================================================================================================
# Argument checks (pure Python: no library, no device needed)
# ================================================================================================

def _shape(t) -> list:
    return list(t.shape)


def check_tensor(name: str, t, dtypes: tuple, shape: tuple, compact: bool = True) -> None:
    """t is a tensor of one of `dtypes` and shape `shape`; compact (contiguous) unless only the
    token dimension may be strided (compact=False: checked by token_stride)."""
    if not isinstance(t, torch.Tensor):
        raise InvalidArgument(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d).replace("torch.", "") for d in dtypes)
        raise InvalidArgument(f"{name} is {str(t.dtype).replace('torch.', '')}, must be {names}: "
                              f"convert it with .to(torch.{names.split(' ')[0]})")
    if tuple(t.shape) != tuple(shape):
        raise InvalidArgument(f"{name} has shape {_shape(t)}, expected {list(shape)}")
    if compact and not t.is_contiguous():
        raise InvalidArgument(f"{name} with shape {_shape(t)} and strides {list(t.stride())} is "
                              f"not contiguous: pass {name}.contiguous()")


def token_stride(name: str, t) -> int:
    """Elements between consecutive tokens of a [B, T, H, D] tensor whose heads are compact (the
    only layout the kernels read besides fully compact): strides (T * s, s, D, 1) for any s."""
    B, T, H, D = t.shape
    st_b, st_t, st_h, st_d = t.stride()
    # Strides of size-1 dimensions are arbitrary in torch: only the others constrain the layout.
    if (D > 1 and st_d != 1) or (H > 1 and st_h != D):
        raise InvalidArgument(
            f"{name} with shape {_shape(t)} has strides {list(t.stride())}: the heads and channels "
            f"must be compact (strides [..., ..., {D}, 1]); only the token dimension may be "
            f"strided. Pass {name}.contiguous()")
    stride = st_t if T > 1 else (st_b if B > 1 else H * D)
    if B > 1 and st_b != T * stride:
        raise InvalidArgument(
            f"{name} with shape {_shape(t)} has strides {list(t.stride())}: the batch stride must "
            f"be tokens * token stride = {T * stride} (the kernels index token b * T + t). Pass "
            f"{name}.contiguous()")
    return stride


def refuse_autograd(tensors: dict) -> None:
    if not torch.is_grad_enabled():
        return
    needing = [name for name, t in tensors.items() if isinstance(t, torch.Tensor) and t.requires_grad]
    if needing:
        raise Unsupported(
            f"{', '.join(needing)} require grad, but this op has no backward: call it under "
            f"torch.no_grad() or torch.inference_mode(), or pass detached tensors")


def cuda_device(tensors: dict) -> torch.device:
    """The one CUDA device every tensor lives on."""
    device = None
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            continue
        if t.device.type != "cuda":
            raise InvalidArgument(f"{name} is on {t.device}: every tensor must be on the CUDA device "
                                  f"(cu_seqlens_cpu excepted); move it with .cuda()")
        if device is None:
            device = t.device
        elif t.device != device:
            raise InvalidArgument(f"{name} is on {t.device}, the others on {device}: put every "
                                  f"tensor on the same device")
    return device


@dataclasses.dataclass
class Offsets:
    """Packed-sequence offsets as the kernels take them: int32 on the device, int32 on the host."""
    device: torch.Tensor
    host: torch.Tensor

    @property
    def num_seqs(self) -> int:
        return self.host.numel() - 1


def packed_offsets(cu_seqlens, cu_seqlens_cpu) -> Offsets | None:
    """Checks cu_seqlens (int32/int64, 1-D, N + 1 entries) and its host copy, converting both to
    int32. Without cu_seqlens_cpu the host copy is read from the device: a synchronization.
    The host copy is trusted to equal the device offsets (comparing them would synchronize)."""
    if cu_seqlens is None:
        if cu_seqlens_cpu is not None:
            raise InvalidArgument("cu_seqlens_cpu is set but cu_seqlens is not: pass the device "
                                  "offsets as cu_seqlens too")
        return None
    if not isinstance(cu_seqlens, torch.Tensor):
        raise InvalidArgument(f"cu_seqlens must be a torch.Tensor on the device, got "
                              f"{type(cu_seqlens).__name__}")
    if cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.dim() != 1:
        raise InvalidArgument(f"cu_seqlens is {cu_seqlens.dtype} with shape {_shape(cu_seqlens)}: it "
                              f"must be a 1-D int32 or int64 tensor of num_seqs + 1 offsets")
    if cu_seqlens.numel() < 2:
        raise InvalidArgument(f"cu_seqlens has {cu_seqlens.numel()} entries: it needs num_seqs + 1 "
                              f">= 2 (the offsets start at 0 and end at the last token)")
    if cu_seqlens_cpu is None:
        host = cu_seqlens.to("cpu")  # the one synchronizing, non-capturable path (docstrings)
    elif isinstance(cu_seqlens_cpu, torch.Tensor):
        if cu_seqlens_cpu.device.type != "cpu":
            raise InvalidArgument(f"cu_seqlens_cpu is on {cu_seqlens_cpu.device}: it is the host "
                                  f"copy of cu_seqlens, pass a CPU tensor (or a list)")
        if cu_seqlens_cpu.dtype not in (torch.int32, torch.int64):
            raise InvalidArgument(f"cu_seqlens_cpu is {cu_seqlens_cpu.dtype}: it must be int32 or "
                                  f"int64, like cu_seqlens")
        host = cu_seqlens_cpu
    elif isinstance(cu_seqlens_cpu, (list, tuple)):
        host = torch.tensor([int(x) for x in cu_seqlens_cpu], dtype=torch.int64)
    else:
        raise InvalidArgument(f"cu_seqlens_cpu must be a CPU tensor or a list of ints, got "
                              f"{type(cu_seqlens_cpu).__name__}")
    if host.dim() != 1 or host.numel() != cu_seqlens.numel():
        raise InvalidArgument(f"cu_seqlens_cpu has shape {_shape(host)}, cu_seqlens {_shape(cu_seqlens)}: "
                              f"the host copy must hold the same offsets")
    if host.dtype == torch.int64 and host.numel() and int(host.abs().max()) > _INT32_MAX:
        raise Unsupported(f"cu_seqlens holds offsets up to {int(host.abs().max())}, beyond int32: the "
                          f"kernels take int32 offsets; split the batch")
    device = cu_seqlens if cu_seqlens.dtype == torch.int32 else cu_seqlens.to(torch.int32)
    return Offsets(device=device, host=host.to(torch.int32).contiguous())


def check_lower_bound(lower_bound: float) -> float:
    lb = float(lower_bound)
    if not (-MAX_LOWER_BOUND <= lb <= 0.0):
        raise InvalidArgument(f"lower_bound = {lb!r} must lie in [-{MAX_LOWER_BOUND}, 0]: the kernels' "
                              f"bounded gate keeps every per-token log2 decay in range (kda.h)")
    return lb


# ================================================================================================
# The gate conversion for FLA's per-token natural-log gate
# ================================================================================================

def chunk_positions(tokens: int, device, cu_seqlens=None) -> torch.Tensor:
    """Each token's position inside its 64-token chunk, [tokens] int64: chunks restart at every
    sequence start (cu_seqlens, int32 or int64, on `device`). Torch ops only, no synchronization."""
    t = torch.arange(tokens, device=device, dtype=torch.int64)
    if cu_seqlens is None:
        return t % CHUNK
    cu = cu_seqlens.to(torch.int64)
    # The sequence of token t is the last s with cu[s] <= t (empty sequences are skipped over);
    # tokens at or after cu[N] get position (t - cu[N]) % 64, harmless: the kernel zeroes them.
    seq = torch.searchsorted(cu, t, right=True) - 1
    return (t - cu[seq.clamp(min=0)]) % CHUNK


def chunk_log2_gate(g: torch.Tensor, cu_seqlens=None) -> torch.Tensor:
    """FLA's per-token natural-log decay g [B, T, H, K] -> the kernels' gate: fp32 inclusive
    prefix sums inside each 64-token chunk (restarting at every sequence start), times log2(e).

    A segmented scan in six doubling steps (1, 2, ..., 32) of whole-tensor torch ops: no host
    synchronization, and, unlike the difference of a running cumsum over T, no cancellation error
    that grows with the sequence length."""
    x = g.to(torch.float32)
    T = x.shape[1]
    pos = chunk_positions(T, x.device, cu_seqlens).view(1, T, 1, 1)
    d = 1
    while d < min(CHUNK, T):
        y = x.clone()
        # Token t adds the partial sum that ends d tokens earlier when that token is in its chunk.
        y[:, d:] += x[:, :-d].masked_fill(pos[:, d:] < d, 0.0)
        x = y
        d *= 2
    return x.mul_(LOG2_E)


# ================================================================================================
# The plan: checked tensors -> struct kda_c_forward_params (+ the outputs it writes)
# ================================================================================================

@dataclasses.dataclass
class Plan:
    params: _lib.ForwardParams
    out: torch.Tensor
    final_state: torch.Tensor | None
    workspace: torch.Tensor | None
    keep: tuple  # tensors the struct points into, alive until the launch returns


def _ptr(t) -> int | None:
    return None if t is None else t.data_ptr()


def plan_forward(q, k, v, gate, beta, *, gate_input: int, fuse_q_l2norm: bool, fuse_k_l2norm: bool,
                 beta_input: int, a_log=None, dt_bias=None, lower_bound: float = -5.0,
                 initial_state=None, output_final_state: bool = False, offsets: Offsets | None = None,
                 out=None, final_state=None, workspace=None,
                 allocate_workspace: bool = True) -> Plan:
    """Checks every tensor against the others, allocates the missing outputs (and the workspace,
    unless allocate_workspace is False) on q's device and fills the struct. No CUDA call: runs on
    CPU tensors too, which is how the tests check the layout mapping without a GPU."""
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise InvalidArgument(f"q must be a 4-D tensor [B, T, H, K], got "
                              f"{_shape(q) if isinstance(q, torch.Tensor) else type(q).__name__}")
    B, T, H, K = q.shape
    if not isinstance(v, torch.Tensor) or v.dim() != 4:
        raise InvalidArgument("v must be a 4-D tensor [B, T, H, V]")
    V = v.shape[3]
    if K != HEAD_DIM or V != HEAD_DIM:
        raise Unsupported(f"K = {K}, V = {V}: the kernels support K = V = {HEAD_DIM} only")
    if tuple(v.shape[:2]) != (B, T):
        raise InvalidArgument(f"v has shape {_shape(v)}, q {_shape(q)}: B and T must match")
    if v.shape[2] != H:
        raise Unsupported(f"v has {v.shape[2]} heads, q {H}: grouped value attention (GVA, more "
                          f"value heads than query/key heads) is not supported; repeat q and k per "
                          f"value head")
    if q.dtype == torch.float32 and fuse_q_l2norm:
        raise Unsupported("q is float32 with the q L2 norm fused in the kernel, which reads bf16 q "
                          "only: pass q.to(torch.bfloat16)")
    bf16 = (torch.bfloat16,)
    check_tensor("q", q, bf16, (B, T, H, K), compact=False)
    check_tensor("k", k, bf16, (B, T, H, K), compact=False)
    check_tensor("v", v, bf16, (B, T, H, V), compact=False)
    q_stride, k_stride, v_stride = token_stride("q", q), token_stride("k", k), token_stride("v", v)
    if gate_input == _lib.GATE_CHUNK_LOG2:
        check_tensor("gate", gate, (torch.float32,), (B, T, H, K))
    else:
        check_tensor("g", gate, (torch.bfloat16, torch.float32), (B, T, H, K))
        check_tensor("A_log", a_log, (torch.float32,), (H,))
        if isinstance(dt_bias, torch.Tensor) and dt_bias.dim() == 1:
            check_tensor("dt_bias", dt_bias, (torch.float32,), (H * K,))
        else:
            check_tensor("dt_bias", dt_bias, (torch.float32,), (H, K))
        lower_bound = check_lower_bound(lower_bound)
    check_tensor("beta", beta, (torch.float32, torch.bfloat16), (B, T, H))

    if offsets is not None and B != 1:
        raise InvalidArgument(f"cu_seqlens is set with batch B = {B}: packed sequences need B = 1 "
                              f"(flatten the batch into [1, B*T, H, K])")
    N = offsets.num_seqs if offsets is not None else B
    state_shape = (N, H, K, V)
    if initial_state is not None:
        check_tensor("initial_state", initial_state, (torch.float32,), state_shape)
    if out is None:
        out = torch.empty((B, T, H, V), dtype=torch.bfloat16, device=q.device)
    else:
        check_tensor("out", out, bf16, (B, T, H, V), compact=False)
    out_stride = token_stride("out", out)
    if final_state is not None:
        check_tensor("final_state", final_state, (torch.float32,), state_shape)
    elif output_final_state:
        final_state = torch.empty(state_shape, dtype=torch.float32, device=q.device)

    p = _lib.ForwardParams()
    p.q, p.k, p.v, p.gate, p.beta = _ptr(q), _ptr(k), _ptr(v), _ptr(gate), _ptr(beta)
    p.a_log, p.dt_bias = _ptr(a_log), _ptr(dt_bias)
    p.initial_state, p.out, p.final_state = _ptr(initial_state), _ptr(out), _ptr(final_state)
    p.batch, p.tokens, p.heads, p.key_dim, p.value_dim = B, T, H, K, V
    p.q_token_stride, p.k_token_stride = q_stride, k_stride
    p.v_token_stride, p.out_token_stride = v_stride, out_stride
    if offsets is not None:
        p.cu_seqlens, p.cu_seqlens_host = _ptr(offsets.device), _ptr(offsets.host)
        p.num_seqs = offsets.num_seqs
    p.q_dtype = _lib.BF16
    p.gate_input = gate_input
    p.gate_dtype = _lib.BF16 if gate.dtype == torch.bfloat16 else _lib.F32
    p.beta_input = beta_input
    p.beta_dtype = _lib.BF16 if beta.dtype == torch.bfloat16 else _lib.F32
    p.fuse_q_l2norm, p.fuse_k_l2norm = int(fuse_q_l2norm), int(fuse_k_l2norm)
    p.lower_bound = lower_bound

    if workspace is not None or allocate_workspace:
        needed = _lib.workspace_bytes(p)
        if workspace is None:
            workspace = torch.empty(needed, dtype=torch.uint8, device=q.device)
        elif (not isinstance(workspace, torch.Tensor) or workspace.dtype != torch.uint8
              or not workspace.is_contiguous() or workspace.numel() < needed):
            raise InvalidArgument(f"workspace must be a contiguous uint8 tensor of at least {needed} "
                                  f"bytes for this call (kda_torch.workspace_bytes), got "
                                  f"{workspace.dtype if isinstance(workspace, torch.Tensor) else type(workspace).__name__}"
                                  f"{_shape(workspace) if isinstance(workspace, torch.Tensor) else ''}")
        p.workspace, p.workspace_bytes = _ptr(workspace), workspace.numel()
    keep = (q, k, v, gate, beta, a_log, dt_bias, initial_state, offsets)
    return Plan(params=p, out=out, final_state=final_state, workspace=workspace, keep=keep)


def launch(plan: Plan, device: torch.device) -> None:
    with torch.cuda.device(device):
        _lib.forward(plan.params, torch.cuda.current_stream(device).cuda_stream)


def workspace_bytes(batch: int, tokens: int, heads: int, num_seqs: int | None = None) -> int:
    """Bytes of device workspace one forward of these sizes needs (num_seqs: packed sequences,
    then batch = 1), for callers that pass `workspace=` to keep even that allocation off the hot
    path. Asks the library; no CUDA call."""
    p = _lib.ForwardParams()
    p.batch, p.tokens, p.heads, p.key_dim, p.value_dim = batch, tokens, heads, HEAD_DIM, HEAD_DIM
    if num_seqs is not None:
        p.num_seqs = num_seqs
    return _lib.workspace_bytes(p)


# ================================================================================================
# The attention-gym form
# ================================================================================================

def forward(q, k, v, gate, beta, *, initial_state=None, output_final_state: bool = False,
            cu_seqlens=None, cu_seqlens_cpu=None, fuse_q_l2norm: bool = False, out=None,
            final_state=None, workspace=None):
    """The KDA forward in lib/kda's own contract (attention-gym's):

    q, k, v bf16 [B, T, H, 128]; k L2-normalized; q normalized too unless fuse_q_l2norm (then the
    kernel normalizes raw q exactly as an L2 norm pass would); gate fp32 [B, T, H, 128], the
    cumulative log2 decay restarting at every 64-token chunk (and sequence start); beta fp32 or
    bf16 [B, T, H], post-sigmoid; initial_state fp32 [N, H, 128, 128] (row = key channel);
    cu_seqlens int32/int64 [N + 1] on the device for packed sequences (B = 1) with
    cu_seqlens_cpu, the same offsets on the host. Scale fixed at 1/sqrt(128).
    q, k, v and out may be strided in the token dimension (heads compact).

    Returns (out bf16 [B, T, H, 128], final_state fp32 [N, H, 128, 128] or None). Runs on torch's
    current stream without host synchronization, capturable in a CUDA graph -- except when
    cu_seqlens is given without cu_seqlens_cpu: then the offsets are copied to the host first, a
    synchronization that cannot be captured. Under capture the host offsets are validated once;
    replays must keep the device offsets equal to them.
    """
    refuse_autograd(dict(q=q, k=k, v=v, gate=gate, beta=beta, initial_state=initial_state))
    device = cuda_device(dict(q=q, k=k, v=v, gate=gate, beta=beta, initial_state=initial_state,
                              cu_seqlens=cu_seqlens, out=out, final_state=final_state,
                              workspace=workspace))
    offsets = packed_offsets(cu_seqlens, cu_seqlens_cpu)
    plan = plan_forward(q, k, v, gate, beta, gate_input=_lib.GATE_CHUNK_LOG2,
                        fuse_q_l2norm=bool(fuse_q_l2norm), fuse_k_l2norm=False,
                        beta_input=_lib.BETA_PROBABILITY, initial_state=initial_state,
                        output_final_state=output_final_state, offsets=offsets, out=out,
                        final_state=final_state, workspace=workspace)
    launch(plan, device)
    return plan.out, plan.final_state


# ================================================================================================
# FLA's chunk_kda signature
# ================================================================================================

def plan_chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                   use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
                   use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
                   lower_bound=None, disable_recompute=False, return_intermediate_states=False,
                   state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,
                   use_graph=False, max_num_seqs=None, *, A_log=None, dt_bias=None, chunk_size=64,
                   transpose_state_layout=False, out=None, final_state=None, workspace=None,
                   offsets: Offsets | None = None, allocate_workspace: bool = True) -> Plan:
    """chunk_kda's arguments -> a Plan (no CUDA call; `offsets` from packed_offsets). Refuses
    what the kernels do not compute, saying what instead."""
    if scale is not None and not math.isclose(float(scale), SCALE, rel_tol=1e-6):
        raise Unsupported(f"scale = {scale!r}: the kernels fix the scale at 1/sqrt(128) = {SCALE!r}; "
                          f"pass scale=None (or multiply q by scale * sqrt(128) first, without the "
                          f"in-kernel q norm)")
    if allow_neg_eigval:
        raise Unsupported("allow_neg_eigval=True (beta = 2 sigmoid(x)) is not supported: the kernels "
                          "take beta in [0, 1]")
    if return_intermediate_states:
        raise Unsupported("return_intermediate_states=True is not supported: the kernels return the "
                          "output and the final state only")
    if state_v_first or transpose_state_layout:
        raise Unsupported("state_v_first=True ([V, K] states) is not supported: the states are "
                          "[N, H, K, V] (row = key channel); pass state.transpose(-1, -2).contiguous()")
    if cp_context is not None:
        raise Unsupported("cp_context (context parallelism) is not supported")
    if use_graph:
        raise Unsupported("use_graph=True (replays with new cu_seqlens contents) is not supported: "
                          "the launch is planned from the host offsets. This op is capturable as is "
                          "(pass cu_seqlens_cpu); capture one graph per set of offsets")
    if chunk_size != CHUNK:
        raise Unsupported(f"chunk_size = {chunk_size}: the kernels use {CHUNK}-token chunks only")
    # Options of FLA's backward and of use_graph: no effect on this forward. The offsets arrive
    # checked and converted as `offsets` (packed_offsets), not as cu_seqlens / cu_seqlens_cpu.
    del disable_recompute, max_num_seqs, cu_seqlens, cu_seqlens_cpu

    if use_gate_in_kernel:
        # FLA's in-kernel gate is -exp(A_log) softplus(g + dt_bias) unless safe_gate with a lower
        # bound selects lower_bound * sigmoid(exp(A_log) (g + dt_bias)), the one ours computes.
        if not safe_gate or lower_bound is None:
            raise Unsupported(
                "use_gate_in_kernel=True needs safe_gate=True and lower_bound: the kernels compute "
                "the bounded gate lower_bound * sigmoid(exp(A_log) * (g + dt_bias)), not FLA's "
                "default -exp(A_log) * softplus(g + dt_bias)")
        if A_log is None:
            raise InvalidArgument("use_gate_in_kernel=True without A_log: pass A_log (fp32 [H]); "
                                  "for FLA's A_log=None form pass torch.zeros(H) (exp(0) = 1)")
        if dt_bias is None:
            raise InvalidArgument("use_gate_in_kernel=True without dt_bias: pass dt_bias (fp32 "
                                  "[H * K]); for none pass torch.zeros(H * K)")
        gate_input, gate, lb = _lib.GATE_RAW, g, float(lower_bound)
    else:
        if A_log is not None or dt_bias is not None:
            raise InvalidArgument("A_log / dt_bias are set but use_gate_in_kernel=False, where g is "
                                  "the decay itself: drop them, or set use_gate_in_kernel=True")
        if not isinstance(g, torch.Tensor) or g.dtype not in (torch.float32, torch.bfloat16,
                                                              torch.float16):
            raise InvalidArgument("g must be a floating-point tensor [B, T, H, K] (the per-token "
                                  "natural-log decay)")
        if isinstance(q, torch.Tensor) and tuple(g.shape) != tuple(q.shape):
            raise InvalidArgument(f"g has shape {_shape(g)}, q {_shape(q)}: g is [B, T, H, K]")
        # lower_bound / safe_gate only pick FLA's kernels for a precomputed g: not used here (no
        # clamp), so a g inside [lower_bound, 0] gives FLA's result.
        gate_input, lb = _lib.GATE_CHUNK_LOG2, -5.0
        gate = chunk_log2_gate(g, offsets.device if offsets is not None else None)
    return plan_forward(
        q, k, v, gate, beta, gate_input=gate_input,
        fuse_q_l2norm=bool(use_qk_l2norm_in_kernel), fuse_k_l2norm=bool(use_qk_l2norm_in_kernel),
        beta_input=_lib.BETA_LOGITS if use_beta_sigmoid_in_kernel else _lib.BETA_PROBABILITY,
        a_log=A_log, dt_bias=dt_bias, lower_bound=lb, initial_state=initial_state,
        output_final_state=bool(output_final_state), offsets=offsets, out=out,
        final_state=final_state, workspace=workspace, allocate_workspace=allocate_workspace)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
              use_qk_l2norm_in_kernel=False, use_gate_in_kernel=False,
              use_beta_sigmoid_in_kernel=False, allow_neg_eigval=False, safe_gate=False,
              lower_bound=None, disable_recompute=False, return_intermediate_states=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None, cp_context=None,
              use_graph=False, max_num_seqs=None, *, A_log=None, dt_bias=None, chunk_size=64,
              transpose_state_layout=False, out=None, final_state=None, workspace=None, **kwargs):
    """FLA's chunk_kda forward (fla.ops.kda.chunk_kda) on lib/kda's kernels, for what they
    support: K = V = 128, no GVA, scale 1/sqrt(128), inference (no backward).

    g: with use_gate_in_kernel=False the per-token natural-log decay (any float dtype), converted
    here to the kernels' chunk-local cumulative log2 gate by torch ops -- an extra pass and an fp32
    [B, T, H, 128] temporary; it must lie in [-5.9148, 0] per token (the bounded-gate contract the
    kernels' precision rests on; not checked: the values are on the device), else the result is
    unspecified; with use_gate_in_kernel=True (which needs safe_gate=True and
    lower_bound in [-5.9148, 0]) the raw projection, activated in the kernel as
    lower_bound * sigmoid(exp(A_log) * (g + dt_bias)), A_log fp32 [H], dt_bias fp32 [H * K].
    use_qk_l2norm_in_kernel: raw q and k, normalized in the kernel; otherwise both are normalized.
    beta post-sigmoid, or logits with use_beta_sigmoid_in_kernel. q, k, v bf16.
    initial_state / final state fp32 [N, H, K, V], FLA's layout. cu_seqlens int32 or int64 on the
    device (B = 1); cu_seqlens_cpu its host copy: without it the offsets are copied to the host,
    a synchronization that cannot be captured in a CUDA graph.
    Extras: out= (bf16 [B, T, H, V], token-strided allowed), final_state= and workspace= caller
    buffers. Returns (o, final_state or None) like FLA.
    """
    if kwargs:
        raise Unsupported(f"chunk_kda: {', '.join(sorted(kwargs))} not supported by this op")
    refuse_autograd(dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state, A_log=A_log,
                         dt_bias=dt_bias))
    device = cuda_device(dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=initial_state,
                              A_log=A_log, dt_bias=dt_bias, cu_seqlens=cu_seqlens, out=out,
                              final_state=final_state, workspace=workspace))
    offsets = packed_offsets(cu_seqlens, cu_seqlens_cpu)
    with torch.cuda.device(device):  # the gate conversion runs on this device's current stream
        plan = plan_chunk_kda(
            q, k, v, g, beta, scale, initial_state, output_final_state, use_qk_l2norm_in_kernel,
            use_gate_in_kernel, use_beta_sigmoid_in_kernel, allow_neg_eigval, safe_gate,
            lower_bound, disable_recompute, return_intermediate_states, state_v_first,
            cu_seqlens, cu_seqlens_cpu, cp_context, use_graph, max_num_seqs, A_log=A_log,
            dt_bias=dt_bias, chunk_size=chunk_size, transpose_state_layout=transpose_state_layout,
            out=out, final_state=final_state, workspace=workspace, offsets=offsets)
    launch(plan, device)
    return plan.out, plan.final_state
