"""kda_torch: lib/kda's chunked KDA forward (Kimi Delta Attention, NVIDIA Hopper sm_90a) as a
PyTorch op, through the C ABI of libkda_c.so (ctypes; works with any torch version).

    forward(q, k, v, gate, beta, ...)   the attention-gym contract (lib/kda's own)
    chunk_kda(q, k, v, g, beta, ...)    FLA's fla.ops.kda.chunk_kda signature, forward only
    chunk_log2_gate(g, cu_seqlens)      FLA's per-token natural-log gate -> the kernels' gate
    workspace_bytes(batch, tokens, heads, num_seqs)   for a caller-held workspace=

See python/README.md for what is refused and the CUDA-graph rules.
"""

from ._lib import CudaError, InvalidArgument, KdaError, LibraryNotFound, Unsupported
from .ops import chunk_kda, chunk_log2_gate, forward, workspace_bytes

__all__ = ["forward", "chunk_kda", "chunk_log2_gate", "workspace_bytes", "KdaError",
           "InvalidArgument", "Unsupported", "CudaError", "LibraryNotFound"]
__version__ = "0.1.0"
