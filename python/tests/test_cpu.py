"""CPU tests of kda_torch (no GPU): the argument checks and refusals, the mapping of tensors and
options onto struct kda_c_forward_params, FLA's gate conversion against a NumPy formula, the int64
offsets, and the real libkda_c.so's host validation through ctypes. Run by run.py (CTest
kda_torch_cpu) against the pip-installed package."""

import ctypes
import math
import unittest

import numpy as np
import torch

import kda_torch
from kda_torch import InvalidArgument, Unsupported, _lib, ops

H, D = 2, 128


def qkv(B=1, T=70, heads=H, K=D, dtype=torch.bfloat16):
    q = torch.randn(B, T, heads, K).to(dtype)
    return q, torch.randn(B, T, heads, K).to(dtype), torch.randn(B, T, heads, D).to(dtype)


def aligned_workspace(nbytes):
    """A CPU uint8 tensor whose data is 256-byte aligned, as the library requires of the device
    workspace (CPU allocations are only 64-byte aligned)."""
    raw = torch.empty(nbytes + 256, dtype=torch.uint8)
    skip = (-raw.data_ptr()) % 256
    return raw[skip:skip + nbytes]


def fla_plan(q, k, v, g, beta, offsets=None, **kw):
    """plan_chunk_kda with an aligned workspace: the full mapping, no device needed."""
    B, T, heads = q.shape[:3]
    probe = ops.plan_chunk_kda(q, k, v, g, beta, offsets=offsets, allocate_workspace=False, **kw)
    ws = aligned_workspace(_lib.workspace_bytes(probe.params))
    return ops.plan_chunk_kda(q, k, v, g, beta, offsets=offsets, workspace=ws, **kw)


def offsets_of(cu):
    return ops.packed_offsets(torch.tensor(cu, dtype=torch.int64), None)


def numpy_chunk_log2(g, cu=None):
    """Reference: float64 sequential sums over each 64-token chunk of each sequence, times log2 e."""
    g = np.asarray(g, dtype=np.float64)
    out = np.zeros_like(g)
    B, T = g.shape[:2]
    bounds = [(0, T)] if cu is None else list(zip(cu[:-1], cu[1:]))
    for b in range(B):
        for start, end in bounds:
            for t in range(start, end):
                first = start + (t - start) // 64 * 64
                out[b, t] = g[b, first:t + 1].sum(axis=0)
    return out * (1.0 / math.log(2.0))


class GateConversion(unittest.TestCase):
    def test_dense_matches_numpy(self):
        g = -torch.rand(2, 200, H, D) * 5
        got = ops.chunk_log2_gate(g).numpy()
        np.testing.assert_allclose(got, numpy_chunk_log2(g.numpy()), rtol=1e-5, atol=1e-4)

    def test_packed_restarts_at_every_sequence(self):
        # An empty sequence, a sequence shorter than a chunk, ones crossing chunk boundaries, and a
        # tail of tokens after cu[N] (ignored by the kernel: compared only inside the sequences).
        cu = [0, 0, 10, 150, 151, 280]
        g = -torch.rand(1, 300, H, D) * 5
        got = ops.chunk_log2_gate(g, torch.tensor(cu, dtype=torch.int32)).numpy()
        want = numpy_chunk_log2(g.numpy(), cu)
        np.testing.assert_allclose(got[:, :280], want[:, :280], rtol=1e-5, atol=1e-4)
        # Chunks restart at sequence starts, not at multiples of 64 of the packed index.
        self.assertAlmostEqual(float(got[0, 10, 0, 0]), float(g[0, 10, 0, 0]) / math.log(2.0), places=5)

    def test_bf16_gate_converted_in_fp32(self):
        g = (-torch.rand(1, 65, 1, D) * 5).to(torch.bfloat16)
        got = ops.chunk_log2_gate(g)
        self.assertEqual(got.dtype, torch.float32)
        np.testing.assert_allclose(got.numpy(), numpy_chunk_log2(g.float().numpy()), rtol=1e-5,
                                   atol=1e-4)

    def test_positions_int64_and_int32_offsets_agree(self):
        cu = [0, 5, 5, 133]
        p32 = ops.chunk_positions(140, "cpu", torch.tensor(cu, dtype=torch.int32))
        p64 = ops.chunk_positions(140, "cpu", torch.tensor(cu, dtype=torch.int64))
        self.assertTrue(torch.equal(p32, p64))
        self.assertEqual(p32[:5].tolist(), [0, 1, 2, 3, 4])
        self.assertEqual(p32[5:8].tolist(), [0, 1, 2])
        self.assertEqual(int(p32[5 + 64]), 0)


class Offsets(unittest.TestCase):
    def test_int64_offsets_become_int32(self):
        cu = torch.tensor([0, 3, 70], dtype=torch.int64)
        off = ops.packed_offsets(cu, [0, 3, 70])
        self.assertEqual(off.device.dtype, torch.int32)
        self.assertEqual(off.device.tolist(), [0, 3, 70])
        self.assertEqual(off.host.dtype, torch.int32)
        self.assertEqual(off.num_seqs, 2)

    def test_int32_device_offsets_are_used_as_they_are(self):
        cu = torch.tensor([0, 3, 70], dtype=torch.int32)
        self.assertIs(ops.packed_offsets(cu, torch.tensor([0, 3, 70])).device, cu)

    def test_offsets_beyond_int32_refused(self):
        cu = torch.tensor([0, 2**31], dtype=torch.int64)
        with self.assertRaisesRegex(Unsupported, "beyond int32"):
            ops.packed_offsets(cu, cu)

    def test_bad_offsets(self):
        with self.assertRaisesRegex(InvalidArgument, "int32 or int64"):
            ops.packed_offsets(torch.tensor([0.0, 5.0]), None)
        with self.assertRaisesRegex(InvalidArgument, "num_seqs \\+ 1 >= 2"):
            ops.packed_offsets(torch.tensor([0]), None)
        with self.assertRaisesRegex(InvalidArgument, "same offsets"):
            ops.packed_offsets(torch.tensor([0, 5]), [0, 2, 5])
        with self.assertRaisesRegex(InvalidArgument, "cu_seqlens is not"):
            ops.packed_offsets(None, [0, 5])


class Refusals(unittest.TestCase):
    def setUp(self):
        self.q, self.k, self.v = qkv()
        self.g = -torch.rand(1, 70, H, D)
        self.beta = torch.rand(1, 70, H)

    def plan(self, **kw):
        args = dict(q=self.q, k=self.k, v=self.v, g=self.g, beta=self.beta)
        args.update(kw)
        return fla_plan(**args)

    def test_cpu_tensors_refused_by_the_public_ops(self):
        with self.assertRaisesRegex(InvalidArgument, "q is on cpu"):
            kda_torch.chunk_kda(self.q, self.k, self.v, self.g, self.beta)
        with self.assertRaisesRegex(InvalidArgument, "q is on cpu"):
            kda_torch.forward(self.q, self.k, self.v, torch.zeros(1, 70, H, D), self.beta)

    def test_backward_refused(self):
        q = self.q.clone().requires_grad_()
        with self.assertRaisesRegex(Unsupported, "q require grad.*no_grad"):
            kda_torch.chunk_kda(q, self.k, self.v, self.g, self.beta)
        with torch.no_grad():  # no grad mode: the device check is next
            with self.assertRaisesRegex(InvalidArgument, "on cpu"):
                kda_torch.chunk_kda(q, self.k, self.v, self.g, self.beta)

    def test_head_sizes_and_gva(self):
        q, k, v = qkv(K=64)
        with self.assertRaisesRegex(Unsupported, "K = 64, V = 128"):
            fla_plan(q, k, v, -torch.rand(1, 70, H, 64), self.beta)
        v4 = torch.randn(1, 70, 2 * H, D).bfloat16()
        with self.assertRaisesRegex(Unsupported, "GVA"):
            self.plan(v=v4)

    def test_scale(self):
        self.plan(scale=128 ** -0.5)
        with self.assertRaisesRegex(Unsupported, "scale = 0.1"):
            self.plan(scale=0.1)

    def test_fla_options_outside_the_kernels(self):
        for kw, text in [(dict(allow_neg_eigval=True), "allow_neg_eigval"),
                         (dict(return_intermediate_states=True), "intermediate"),
                         (dict(state_v_first=True), "state_v_first"),
                         (dict(transpose_state_layout=True), "state_v_first"),
                         (dict(use_graph=True), "use_graph"),
                         (dict(chunk_size=32), "chunk_size = 32"),
                         (dict(cp_context=object()), "cp_context")]:
            with self.subTest(kw=kw), self.assertRaisesRegex(Unsupported, text):
                self.plan(**kw)
        with self.assertRaisesRegex(Unsupported, "head_first"):
            kda_torch.chunk_kda(self.q, self.k, self.v, self.g, self.beta, head_first=True)

    def test_in_kernel_gate_needs_the_bounded_form(self):
        a_log, dt_bias = torch.zeros(H), torch.zeros(H * D)
        with self.assertRaisesRegex(Unsupported, "softplus"):
            self.plan(use_gate_in_kernel=True, A_log=a_log, dt_bias=dt_bias)
        with self.assertRaisesRegex(Unsupported, "softplus"):
            self.plan(use_gate_in_kernel=True, safe_gate=True, A_log=a_log, dt_bias=dt_bias)
        with self.assertRaisesRegex(InvalidArgument, "without A_log"):
            self.plan(use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0, dt_bias=dt_bias)
        with self.assertRaisesRegex(InvalidArgument, "without dt_bias"):
            self.plan(use_gate_in_kernel=True, safe_gate=True, lower_bound=-5.0, A_log=a_log)
        for lb in (-5.92, 0.5, float("nan")):
            with self.subTest(lb=lb), self.assertRaisesRegex(InvalidArgument, "lower_bound = "):
                self.plan(use_gate_in_kernel=True, safe_gate=True, lower_bound=lb, A_log=a_log,
                          dt_bias=dt_bias)
        with self.assertRaisesRegex(InvalidArgument, "use_gate_in_kernel=False"):
            self.plan(A_log=a_log, dt_bias=dt_bias)

    def test_dtypes(self):
        q32 = self.q.float()
        with self.assertRaisesRegex(Unsupported, "float32 with the q L2 norm fused"):
            self.plan(q=q32, use_qk_l2norm_in_kernel=True)
        with self.assertRaisesRegex(InvalidArgument, "q is float32, must be bfloat16"):
            self.plan(q=q32)
        with self.assertRaisesRegex(InvalidArgument, "beta is float64"):
            self.plan(beta=self.beta.double())
        with self.assertRaisesRegex(InvalidArgument, "initial_state is bfloat16"):
            self.plan(initial_state=torch.zeros(1, H, D, D, dtype=torch.bfloat16))

    def test_shapes(self):
        with self.assertRaisesRegex(InvalidArgument, "beta has shape \\[1, 70, 3\\]"):
            self.plan(beta=torch.rand(1, 70, 3))
        with self.assertRaisesRegex(InvalidArgument, "initial_state has shape \\[2, 2, 128, 128\\]"):
            self.plan(initial_state=torch.zeros(2, H, D, D))
        with self.assertRaisesRegex(InvalidArgument, "g has shape"):
            self.plan(g=self.g[:, :69])

    def test_layouts(self):
        qt = self.q.transpose(2, 3).contiguous().transpose(2, 3)  # channels strided
        with self.assertRaisesRegex(InvalidArgument, "heads and channels must be compact"):
            self.plan(q=qt)
        q2, k2, v2 = qkv(B=2, T=70)
        wide = torch.zeros(2, 80, H, D, dtype=torch.bfloat16)[:, :70]  # batch stride 80 tokens
        with self.assertRaisesRegex(InvalidArgument, "batch stride must be tokens"):
            fla_plan(wide, k2, v2, -torch.rand(2, 70, H, D), torch.rand(2, 70, H))
        with self.assertRaisesRegex(InvalidArgument, "beta .* is not contiguous"):
            self.plan(beta=torch.rand(1, H, 70).transpose(1, 2))

    def test_packed_needs_batch_one(self):
        q, k, v = qkv(B=2)
        with self.assertRaisesRegex(InvalidArgument, "packed sequences need B = 1"):
            fla_plan(q, k, v, -torch.rand(2, 70, H, D), torch.rand(2, 70, H),
                     offsets=offsets_of([0, 30, 70]))

    def test_workspace_too_small(self):
        with self.assertRaisesRegex(InvalidArgument, "at least"):
            ops.plan_chunk_kda(self.q, self.k, self.v, self.g, self.beta,
                               workspace=aligned_workspace(256))


class Mapping(unittest.TestCase):
    """What lands in struct kda_c_forward_params, and that the library accepts it."""

    def test_token_strided_slices_of_one_projection(self):
        B, T = 1, 70
        qkv_proj = torch.randn(B, T, 3 * H * D).bfloat16()  # one packed QKV projection
        q, k, v = (qkv_proj[..., i * H * D:(i + 1) * H * D].view(B, T, H, D) for i in range(3))
        out = torch.empty(B, T, 2 * H * D, dtype=torch.bfloat16)[..., :H * D].view(B, T, H, D)
        plan = fla_plan(q, k, v, -torch.rand(B, T, H, D), torch.rand(B, T, H), out=out)
        p = plan.params
        self.assertEqual((p.q_token_stride, p.k_token_stride, p.v_token_stride),
                         (3 * H * D,) * 3)
        self.assertEqual(p.out_token_stride, 2 * H * D)
        self.assertEqual((p.q, p.k, p.v, p.out), (q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                                  out.data_ptr()))
        self.assertIs(plan.out, out)
        _lib.validate(p)

    def test_compact_dense_call(self):
        q, k, v = qkv(B=2, T=130)
        h0 = torch.zeros(2, H, D, D)
        plan = fla_plan(q, k, v, -torch.rand(2, 130, H, D), torch.rand(2, 130, H).bfloat16(),
                        initial_state=h0, output_final_state=True)
        p = plan.params
        self.assertEqual((p.batch, p.tokens, p.heads, p.key_dim, p.value_dim), (2, 130, H, D, D))
        self.assertEqual(p.q_token_stride, H * D)
        self.assertEqual((p.gate_input, p.gate_dtype), (_lib.GATE_CHUNK_LOG2, _lib.F32))
        self.assertEqual((p.beta_input, p.beta_dtype), (_lib.BETA_PROBABILITY, _lib.BF16))
        self.assertEqual((p.fuse_q_l2norm, p.fuse_k_l2norm), (0, 0))
        self.assertEqual(p.initial_state, h0.data_ptr())
        self.assertEqual(list(plan.final_state.shape), [2, H, D, D])
        self.assertEqual(p.final_state, plan.final_state.data_ptr())
        self.assertEqual((p.cu_seqlens, p.cu_seqlens_host, p.num_seqs), (None, None, 0))
        self.assertEqual(list(plan.out.shape), [2, 130, H, D])
        self.assertEqual(plan.out.dtype, torch.bfloat16)
        _lib.validate(p)

    def test_all_raw_options(self):
        q, k, v = qkv(T=70)
        a_log, dt_bias = torch.zeros(H), torch.zeros(H * D)
        g = torch.randn(1, 70, H, D).bfloat16()
        plan = fla_plan(q, k, v, g, torch.randn(1, 70, H), use_qk_l2norm_in_kernel=True,
                        use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, safe_gate=True,
                        lower_bound=-5.9, A_log=a_log, dt_bias=dt_bias)
        p = plan.params
        self.assertEqual((p.gate_input, p.gate_dtype, p.gate), (_lib.GATE_RAW, _lib.BF16, g.data_ptr()))
        self.assertEqual((p.a_log, p.dt_bias), (a_log.data_ptr(), dt_bias.data_ptr()))
        self.assertAlmostEqual(p.lower_bound, -5.9, places=6)
        self.assertEqual((p.beta_input, p.fuse_q_l2norm, p.fuse_k_l2norm), (_lib.BETA_LOGITS, 1, 1))
        _lib.validate(p)

    def test_packed_call(self):
        q, k, v = qkv(T=300)
        off = offsets_of([0, 0, 10, 150, 280])
        plan = fla_plan(q, k, v, -torch.rand(1, 300, H, D), torch.rand(1, 300, H), offsets=off,
                        initial_state=torch.zeros(4, H, D, D), output_final_state=True)
        p = plan.params
        self.assertEqual((p.cu_seqlens, p.cu_seqlens_host, p.num_seqs),
                         (off.device.data_ptr(), off.host.data_ptr(), 4))
        self.assertEqual(list(plan.final_state.shape), [4, H, D, D])
        _lib.validate(p)

    def test_attention_gym_form(self):
        q, k, v = qkv(T=64)
        ws = aligned_workspace(kda_torch.workspace_bytes(1, 64, H))
        plan = ops.plan_forward(q, k, v, torch.zeros(1, 64, H, D), torch.rand(1, 64, H),
                                gate_input=_lib.GATE_CHUNK_LOG2, fuse_q_l2norm=True,
                                fuse_k_l2norm=False, beta_input=_lib.BETA_PROBABILITY,
                                workspace=ws)
        p = plan.params
        self.assertEqual((p.fuse_q_l2norm, p.workspace), (1, ws.data_ptr()))
        _lib.validate(p)


class Library(unittest.TestCase):
    """The real libkda_c.so: its host validation and its workspace sizes, through ctypes."""

    def good_params(self):
        q, k, v = qkv(T=64)
        self.plan = fla_plan(q, k, v, -torch.rand(1, 64, H, D), torch.rand(1, 64, H))
        return self.plan.params

    def test_abi_version_and_the_installed_copy(self):
        self.assertEqual(_lib.library().kda_c_abi_version(), _lib.ABI_VERSION)

    def test_key_dim_64_gives_the_library_message(self):
        p = self.good_params()
        p.key_dim = 64
        with self.assertRaisesRegex(Unsupported, "^chunk_forward: key_dim = 64"):
            _lib.validate(p)

    def test_lower_bound_checked_by_the_library_too(self):
        p = self.good_params()
        a_log, dt_bias = torch.zeros(H), torch.zeros(H, D)
        p.gate_input, p.a_log, p.dt_bias = _lib.GATE_RAW, a_log.data_ptr(), dt_bias.data_ptr()
        p.lower_bound = -5.9
        _lib.validate(p)
        p.lower_bound = -5.92  # just past kda::kMaxLowerBound: our constant equals the library's
        with self.assertRaisesRegex(InvalidArgument, "^chunk_forward: lower_bound = -5.92"):
            _lib.validate(p)

    def test_bad_enum_and_null(self):
        p = self.good_params()
        p.beta_input = 7
        with self.assertRaisesRegex(InvalidArgument, "^kda_c: beta_input = 7 is not a valid value"):
            _lib.validate(p)
        p = self.good_params()
        p.fuse_q_l2norm = 2
        with self.assertRaisesRegex(InvalidArgument, "fuse_q_l2norm = 2"):
            _lib.validate(p)
        p = self.good_params()
        p.beta = None
        with self.assertRaisesRegex(InvalidArgument, "beta is null"):
            _lib.validate(p)
        lib = _lib.library()
        self.assertEqual(lib.kda_c_validate(None), _lib.INVALID_ARGUMENT)
        self.assertIn(b"params is null", lib.kda_c_last_error())

    def test_last_error_cleared_by_a_good_call(self):
        p = self.good_params()
        p.heads = 0
        with self.assertRaises(InvalidArgument):
            _lib.validate(p)
        _lib.validate(self.good_params())
        self.assertEqual(_lib.library().kda_c_last_error(), b"")

    def test_workspace_bytes_equal_the_cpp_ones(self):
        # tests/kda/test_validate.cpp WorkspaceSizeIsExact pins these (one 74,752-byte record per
        # head and chunk slot).
        record = 74752
        p = _lib.ForwardParams()
        p.key_dim = p.value_dim = D
        p.batch, p.tokens, p.heads = 1, 64, 1
        self.assertEqual(_lib.workspace_bytes(p), 2 * record)
        p.batch, p.tokens, p.heads = 2, 130, 2
        self.assertEqual(_lib.workspace_bytes(p), 2 * (260 // 64 + 2) * record)
        cu = (ctypes.c_int32 * 7)(0, 1300, 1847, 3895, 4858, 5129, 8192)
        p.batch, p.tokens, p.heads, p.num_seqs = 1, 8192, 96, 6
        p.cu_seqlens, p.cu_seqlens_host = 0x700000, ctypes.addressof(cu)
        self.assertEqual(_lib.workspace_bytes(p), 96 * (128 + 6) * record)
        # The package's helper sizes by the same rule.
        self.assertEqual(kda_torch.workspace_bytes(1, 8192, 96, num_seqs=6), _lib.workspace_bytes(p))

    def test_forward_without_a_gpu_is_a_cuda_error(self):
        if torch.cuda.is_available():
            self.skipTest("a GPU is present: test_gpu.py runs the forward")
        p = self.good_params()
        with self.assertRaises(kda_torch.CudaError):
            _lib.forward(p, 0)


if __name__ == "__main__":
    unittest.main()
