"""libkda_c.so through ctypes: the struct of kda/kda_c.h, the status codes as exceptions, and the
four calls. Loaded on first use, so the package imports (and its pure-Python checks run) without
the library."""

from __future__ import annotations

import ctypes
import os

ABI_VERSION = 2  # KDA_C_ABI_VERSION of the header this file mirrors

# Status codes (kda_c.h), the enum constants and the kernels' fixed sizes (kda.h).
OK, INVALID_ARGUMENT, UNSUPPORTED, CUDA, INTERNAL = 0, 1, 2, 3, 4
BF16, F32 = 0, 1
GATE_CHUNK_LOG2, GATE_RAW = 0, 1
BETA_PROBABILITY, BETA_LOGITS = 0, 1
HEAD_DIM = 128
CHUNK = 64
MAX_LOWER_BOUND = 5.914855940778  # kda::kMaxLowerBound: lower bounds lie in [-this, 0]


class KdaError(RuntimeError):
    """Base of every error this package raises for a call it will not or could not run."""


class InvalidArgument(KdaError, ValueError):
    """The call broke the contract (wrong dtype, shape, layout, device, offsets ...)."""


class Unsupported(KdaError, NotImplementedError):
    """Valid for the math, not supported by these kernels (K != 128, GVA, backward ...)."""


class CudaError(KdaError):
    """A CUDA call inside the library failed (no device, launch failure ...)."""


class LibraryNotFound(KdaError):
    """libkda_c.so is neither in the package nor where KDA_C_LIBRARY points."""


_ERRORS = {INVALID_ARGUMENT: InvalidArgument, UNSUPPORTED: Unsupported, CUDA: CudaError}


class ForwardParams(ctypes.Structure):
    """struct kda_c_forward_params, field for field (kda_c.h; meanings in kda.h)."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("gate", ctypes.c_void_p),
        ("a_log", ctypes.c_void_p),
        ("dt_bias", ctypes.c_void_p),
        ("beta", ctypes.c_void_p),
        ("initial_state", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("final_state", ctypes.c_void_p),
        ("cu_seqlens", ctypes.c_void_p),
        ("cu_seqlens_host", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("batch", ctypes.c_int64),
        ("tokens", ctypes.c_int64),
        ("q_token_stride", ctypes.c_int64),
        ("k_token_stride", ctypes.c_int64),
        ("v_token_stride", ctypes.c_int64),
        ("out_token_stride", ctypes.c_int64),
        ("workspace_bytes", ctypes.c_int64),
        ("heads", ctypes.c_int32),
        ("key_dim", ctypes.c_int32),
        ("value_dim", ctypes.c_int32),
        ("num_seqs", ctypes.c_int32),
        ("q_dtype", ctypes.c_int32),
        ("gate_input", ctypes.c_int32),
        ("gate_dtype", ctypes.c_int32),
        ("beta_input", ctypes.c_int32),
        ("beta_dtype", ctypes.c_int32),
        ("fuse_q_l2norm", ctypes.c_int32),
        ("fuse_k_l2norm", ctypes.c_int32),
        ("lower_bound", ctypes.c_float),
    ]


_LIB = None


def library_path() -> str:
    """KDA_C_LIBRARY if set (a build tree's lib/libkda_c.so, for development), else the copy
    that `pip install` put next to this file."""
    return os.environ.get("KDA_C_LIBRARY") or os.path.join(os.path.dirname(__file__), "libkda_c.so")


def library() -> ctypes.CDLL:
    global _LIB
    if _LIB is not None:
        return _LIB
    path = library_path()
    if not os.path.isfile(path):
        raise LibraryNotFound(
            f"{path} does not exist: build it (cmake --preset release && cmake --build --preset "
            f"release --target kda_c) and reinstall the package with KDA_C_LIBRARY="
            f"build/release/lib/libkda_c.so, or point KDA_C_LIBRARY at it")
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryNotFound(f"{path} does not load: {e}") from e
    lib.kda_c_abi_version.restype = ctypes.c_int32
    lib.kda_c_abi_version.argtypes = []
    lib.kda_c_last_error.restype = ctypes.c_char_p
    lib.kda_c_last_error.argtypes = []
    params_p = ctypes.POINTER(ForwardParams)
    lib.kda_c_validate.restype = ctypes.c_int32
    lib.kda_c_validate.argtypes = [params_p]
    lib.kda_c_workspace_bytes.restype = ctypes.c_int32
    lib.kda_c_workspace_bytes.argtypes = [params_p, ctypes.POINTER(ctypes.c_int64)]
    lib.kda_c_forward.restype = ctypes.c_int32
    lib.kda_c_forward.argtypes = [params_p, ctypes.c_void_p]
    version = lib.kda_c_abi_version()
    if version != ABI_VERSION:
        raise LibraryNotFound(f"{path} has C ABI version {version}, this package needs "
                              f"{ABI_VERSION}: rebuild the library from the same commit as the package")
    _LIB = lib
    return lib


def _check(lib: ctypes.CDLL, status: int) -> None:
    if status == OK:
        return
    message = lib.kda_c_last_error().decode(errors="replace")
    raise _ERRORS.get(status, KdaError)(message)


def validate(params: ForwardParams) -> None:
    """The library's host validation (kda::validate): no CUDA call, no memory read."""
    lib = library()
    _check(lib, lib.kda_c_validate(ctypes.byref(params)))


def workspace_bytes(params: ForwardParams) -> int:
    lib = library()
    size = ctypes.c_int64(0)
    _check(lib, lib.kda_c_workspace_bytes(ctypes.byref(params), ctypes.byref(size)))
    return size.value


def forward(params: ForwardParams, stream: int) -> None:
    """kda::chunk_forward on the CUDA stream whose handle is `stream` (torch's .cuda_stream)."""
    lib = library()
    _check(lib, lib.kda_c_forward(ctypes.byref(params), ctypes.c_void_p(stream)))
