"""Shared, GPU-free helpers of the FLA peer scripts (fla_bench.py, fla_check.py).

Everything here needs only the Python standard library, NumPy and PyYAML, so it runs (and is
tested, test_peers.py) on the development machine without torch, Triton or a GPU:

* shape files (shapes/*.yaml, schema in shapes/README.md) -> Shape objects;
* the gate conversion from our contract (chunk-local cumulative log2 gate, kda-forward.md §1.1,
  §9.1) to FLA's (per-token natural-log gate, §1.2/§1.3), and FLA's own reconstruction emulated;
* the §9.4 error budget, ported from lib/harness/src/budget.cpp (same rule, same verdict text);
* the timing statistics and the nvbench "stdrel" stopping rule of lib/bench (statistics.cpp,
  stopping.cpp);
* a reader of `kda-check --dump` directories (apps/kda-check/dump.cpp);
* a NumPy per-token recurrence (kda-forward.md §2.1) in float64 or float32;
* CSV/markdown writing, atomic (temp file + rename) and refusing to overwrite without force.

No FLA code is copied here; FLA's conventions are described in ../../shared/spec/kda-forward.md.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import re
import tempfile
from typing import Iterable, Sequence

import numpy as np

# --- exit codes shared by both scripts ---------------------------------------------------------
EXIT_OK = 0
EXIT_FAILED = 1        # a verification / judgement failed
EXIT_USAGE = 2         # bad usage or input (options, shape file, dump, output path exists)
EXIT_RUNTIME = 3       # FLA present but failed to import or run (CUDA error, exception)
EXIT_NOT_CONVERGED = 4  # fla_bench: all verified, a timing row did not converge
EXIT_SKIPPED = 77      # torch, a CUDA GPU or FLA is missing: nothing was run (the automake "skip")

CHUNK = 64                     # chunk size of our contract and of FLA's default chunk_kda
DEFAULT_SEED = 20261130        # kda::harness::kDefaultSeed
LOWER_BOUND = -5.0             # gate lower bound of the generated inputs (§9.3)
L2NORM_EPS = 1e-6              # y = x / sqrt(sum x^2 + eps) (§4.1)
# FLA multiplies its chunk cumsum by fla.ops.utils.constant.RCP_LN2 = 1.4426950216, a Python float
# that Triton passes to the kernel as an fp32 scalar: this is the value the kernel uses.
RCP_LN2_F32 = float(np.float32(1.4426950216))
FLOOR_BANDWIDTH_BPS = 4.25e12  # kda-bench --floor-bandwidth default (performance.md)


class InputError(Exception):
    """Bad input: a shape file, a dump directory, an option. Exit code 2."""


class Skip(Exception):
    """A prerequisite (torch, CUDA GPU, FLA) is missing. Exit code 77."""


# ================================================================================================
# Shape files
# ================================================================================================

class _Text(str):
    """Already-worded 'got' text for shape-file messages (not a YAML value to describe)."""


def _make_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that also reads 1e-3 / 1e20 as floats (YAML 1.2 / yaml-cpp do; PyYAML's
        YAML 1.1 resolver wants a dot) and keeps only true/false spellings as booleans."""

    Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    for first, resolvers in list(Loader.yaml_implicit_resolvers.items()):
        Loader.yaml_implicit_resolvers[first] = [
            (tag, regexp) for tag, regexp in resolvers
            if tag not in ("tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")]
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
        list("tTfF"))
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."))
    return Loader


@dataclasses.dataclass
class Shape:
    """One problem of a shape file (the fields of kda::harness::ShapeSpec that matter here)."""
    id: str
    heads: int
    batch: int                       # B of the buffers (1 when packed)
    tokens: int                      # T of the buffers
    seq_lens: list[int] | None       # packed form; None for dense
    key_dim: int = 128
    value_dim: int = 128
    initial_state: bool = False
    final_state: bool = False
    seed: int | None = None
    q_rows: dict | None = None       # row-scale suite settings, or None
    k_rows: dict | None = None       # the same suite on k's draw (shapes/README.md `k_rows`)
    gate: "GateRecipe | None" = None  # the generated gate's recipe (None: the contract preset)

    @property
    def packed(self) -> bool:
        return self.seq_lens is not None

    @property
    def cu_seqlens(self) -> list[int] | None:
        if self.seq_lens is None:
            return None
        out = [0]
        for n in self.seq_lens:
            out.append(out[-1] + n)
        return out

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens) if self.packed else self.batch

    @property
    def active_tokens(self) -> int:
        """Tokens that belong to a sequence, over the whole buffer (B*T for dense)."""
        return sum(self.seq_lens) if self.packed else self.batch * self.tokens

    @property
    def token_heads(self) -> int:
        return self.batch * self.tokens * self.heads

    def gpu_supported(self) -> bool:
        return self.key_dim == 128 and self.value_dim == 128


_SHAPE_KEYS = ("id", "heads", "seq_lens", "batch", "seq_len", "total_tokens", "head_dim",
               "key_dim", "value_dim", "initial_state", "final_state", "seed", "q_rows", "k_rows", "gate")
_QROWS_KEYS = ("min_scale", "max_scale", "huge_values", "zero_rows")
_MAX_TOKENS = 2**31 - 1


def _describe(value) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, str):
        return f"the string \"{value}\""
    if isinstance(value, bool):
        return "'true'" if value else "'false'"
    if isinstance(value, (list, dict)):
        return "a list" if isinstance(value, list) else "a map"
    return f"'{value}'"


def load_shape_file(path: str) -> list[Shape]:
    """Parses a shape file with the schema of shapes/README.md. Raises InputError with messages of
    the form "<file>: shape '<id>': field '<field>': expected <what>, got <what>" (no line
    numbers, unlike the C++ parser)."""
    import yaml

    def fail(where: str, field: str | None, expected: str, got) -> None:
        parts = [path]
        if where:
            parts.append(f"shape '{where}'")
        if field:
            parts.append(f"field '{field}'")
        got_text = got if isinstance(got, _Text) else _describe(got)
        raise InputError(": ".join(parts) + f": expected {expected}, got {got_text}")

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read shape file: {e.strerror}") from None
    try:
        doc = yaml.load(text, Loader=_make_loader())  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML: {e}") from None
    if doc is None:
        raise InputError(f"{path}: empty shape file (expected a map with a 'shapes' list)")
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected a map with a 'shapes' list, got {_describe(doc)}")
    for key in doc:
        if key not in ("shapes", "description"):
            raise InputError(f"{path}: field '{key}': expected one of shapes, description, got an unknown key")
    if "description" in doc and not isinstance(doc["description"], str):
        raise InputError(f"{path}: field 'description': expected a string, got {_describe(doc['description'])}")
    entries = doc.get("shapes")
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{path}: field 'shapes': expected a non-empty list of shapes, got {_describe(entries)}")

    def as_int(where, field, value, lo, hi, what):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            fail(where, field, what, value)
        return value

    def as_bool(where, field, value):
        if not isinstance(value, bool):
            fail(where, field, "true or false", value)
        return value

    def as_float(where, field, value, what, ok):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(float(value)):
            fail(where, field, what, value)
        return float(value)

    shapes: list[Shape] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries, start=1):
        where = f"#{index}"
        if not isinstance(entry, dict):
            fail(where, "id", "a map (id, heads, seq_lens or batch + seq_len, ...)", entry)
        ident = entry.get("id")
        if isinstance(ident, str) and re.fullmatch(r"[A-Za-z0-9._-]+", ident):
            where = ident
        for key in entry:
            if key not in _SHAPE_KEYS:
                fail(where, str(key), "one of " + ", ".join(_SHAPE_KEYS), _Text("an unknown key"))
        if ident is None:
            fail(where, "id", "a shape id", None)
        if not isinstance(ident, str) or not re.fullmatch(r"[A-Za-z0-9._-]+", ident):
            fail(where, "id", "an id of letters, digits, '.', '_' or '-'", ident)
        if ident in seen:
            fail(where, "id", "a unique id", _Text("a duplicate of an earlier shape"))
        seen.add(ident)
        if "heads" not in entry:
            fail(where, "heads", "an integer >= 1", None)
        heads = as_int(where, "heads", entry["heads"], 1, 1 << 20, "an integer >= 1")
        packed = "seq_lens" in entry
        dense = "batch" in entry or "seq_len" in entry
        if packed and dense:
            fail(where, "batch" if "batch" in entry else "seq_len", "either seq_lens or batch + seq_len", _Text("both"))
        if not packed and not dense:
            fail(where, "seq_lens", "a list of sequence lengths (or batch + seq_len)", None)
        if packed:
            lens = entry["seq_lens"]
            if not isinstance(lens, list) or not lens:
                fail(where, "seq_lens", "a non-empty list of sequence lengths (integers >= 0)", lens)
            lens = [as_int(where, "seq_lens", n, 0, _MAX_TOKENS, "a sequence length >= 0") for n in lens]
            total = sum(lens)
            if total > _MAX_TOKENS:
                fail(where, "seq_lens", f"lengths summing to at most {_MAX_TOKENS}", total)
            if "total_tokens" in entry:
                tokens = as_int(where, "total_tokens", entry["total_tokens"], max(total, 1), _MAX_TOKENS,
                                f"an integer >= {max(total, 1)} (the sum of seq_lens)")
            else:
                if total == 0:
                    fail(where, "total_tokens",
                         "an integer >= 1 when every sequence is empty (the buffers need T >= 1)", None)
                tokens = total
            batch = 1
        else:
            for name in ("batch", "seq_len"):
                if name not in entry:
                    fail(where, name, "batch and seq_len together", None)
            if "total_tokens" in entry:
                fail(where, "total_tokens", "no total_tokens in a dense (batch + seq_len) shape", entry["total_tokens"])
            batch = as_int(where, "batch", entry["batch"], 1, _MAX_TOKENS, "an integer >= 1")
            tokens = as_int(where, "seq_len", entry["seq_len"], 1, _MAX_TOKENS, "an integer >= 1")
            if batch * tokens > _MAX_TOKENS:
                fail(where, "seq_len", f"batch * seq_len <= {_MAX_TOKENS}", batch * tokens)
            lens = None
        key_dim = value_dim = 128
        if "head_dim" in entry:
            for name in ("key_dim", "value_dim"):
                if name in entry:
                    fail(where, name, "head_dim or key_dim/value_dim", _Text("both"))
            key_dim = value_dim = as_int(where, "head_dim", entry["head_dim"], 1, 1 << 16, "an integer >= 1")
        if "key_dim" in entry:
            key_dim = as_int(where, "key_dim", entry["key_dim"], 1, 1 << 16, "an integer >= 1")
        if "value_dim" in entry:
            value_dim = as_int(where, "value_dim", entry["value_dim"], 1, 1 << 16, "an integer >= 1")
        initial_state = as_bool(where, "initial_state", entry["initial_state"]) if "initial_state" in entry else False
        final_state = as_bool(where, "final_state", entry["final_state"]) if "final_state" in entry else False
        seed = as_int(where, "seed", entry["seed"], 0, 2**64 - 1, "an unsigned 64-bit integer") if "seed" in entry else None
        def row_suite(name):  # q_rows / k_rows
            spec = entry[name]
            suite = {"min_scale": 1e-3, "max_scale": 1e3, "huge_values": [1e20, 3e38], "zero_rows": 1}
            if spec == "row-scale":
                pass
            elif isinstance(spec, dict):
                for key in spec:
                    if key not in _QROWS_KEYS:
                        fail(where, f"{name}.{key}", "one of " + ", ".join(_QROWS_KEYS), _Text("an unknown key"))
                if "min_scale" in spec:
                    suite["min_scale"] = as_float(where, f"{name}.min_scale", spec["min_scale"], "a number > 0",
                                                   lambda x: x > 0 and math.isfinite(x))
                if "max_scale" in spec:
                    suite["max_scale"] = as_float(where, f"{name}.max_scale", spec["max_scale"],
                                                   "a number >= min_scale",
                                                   lambda x: math.isfinite(x) and x >= suite["min_scale"])
                if "huge_values" in spec:
                    hv = spec["huge_values"]
                    if not isinstance(hv, list):
                        fail(where, f"{name}.huge_values", "a list of numbers > 0", hv)
                    suite["huge_values"] = [as_float(where, f"{name}.huge_values", x, "a number > 0",
                                                      lambda y: y > 0) for x in hv]
                if "zero_rows" in spec:
                    suite["zero_rows"] = as_int(where, f"{name}.zero_rows", spec["zero_rows"], 0, 1 << 30,
                                                 "an integer >= 0")
            else:
                fail(where, name, "row-scale or a map (min_scale, max_scale, huge_values, zero_rows)", spec)
            return suite
        q_rows = row_suite("q_rows") if "q_rows" in entry else None
        k_rows = row_suite("k_rows") if "k_rows" in entry else None
        gate = parse_gate_recipe(entry["gate"], lambda field, what, got: fail(where, field, what, got)) \
            if "gate" in entry else GATE_PRESETS["contract"]
        shapes.append(Shape(id=ident, heads=heads, batch=batch, tokens=tokens, seq_lens=lens,
                            key_dim=key_dim, value_dim=value_dim, initial_state=initial_state,
                            final_state=final_state, seed=seed, q_rows=q_rows, k_rows=k_rows, gate=gate))
    return shapes


# --- gate recipes (shapes/README.md "Gate recipes"; lib/harness GateRecipe) ---------------------

# The steepest lower bound the bounded-gate contract allows (kda-forward.md §3): shapes/README.md.
MAX_LOWER_BOUND_MAGNITUDE = 5.914855940778


@dataclasses.dataclass(frozen=True)
class GateRecipe:
    """gamma = lower_bound * sigmoid(exp(A_log[h]) * (raw + dt_bias[h, d])), raw = raw_mean +
    raw_std * randn rounded to bf16; A_log ~ U(a_log), dt_bias ~ U(dt_bias) (lo == hi: a constant).
    `zero`: no decay at all (gamma = 0 exactly). The peers' timing depends on it (cuDNN-FE's
    segment warm-up walks back until the decay has erased the state), so the generated inputs
    follow the shape's recipe."""
    name: str
    a_log: tuple = (0.0, 1.0)
    dt_bias: tuple = (0.0, 1.0)
    lower_bound: float = -5.0
    raw_mean: float = 0.0
    raw_std: float = 1.0
    zero: bool = False


GATE_PRESETS = {
    "contract": GateRecipe("contract"),
    "mixed": GateRecipe("mixed", dt_bias=(-12.0, 1.0)),
    "long": GateRecipe("long", dt_bias=(-12.0, -7.0)),
    "zero": GateRecipe("zero", lower_bound=0.0, zero=True),
}
_GATE_MAP_KEYS = ("preset", "a_log", "dt_bias", "lower_bound", "raw_mean", "raw_std")


def parse_gate_recipe(spec, fail) -> GateRecipe:
    """A shape's `gate:` value: a preset name or a map starting from `preset`. fail(field, what,
    got) raises. A .npy file for a_log / dt_bias (allowed by kda-check) is refused here: the
    peer scripts draw their own inputs and would silently ignore it."""
    if isinstance(spec, str):
        if spec not in GATE_PRESETS:
            fail("gate", "one of " + ", ".join(GATE_PRESETS) + " or a map", spec)
        return GATE_PRESETS[spec]
    if not isinstance(spec, dict):
        fail("gate", "a preset name (" + ", ".join(GATE_PRESETS) + ") or a map", spec)
    for key in spec:
        if key not in _GATE_MAP_KEYS:
            fail(f"gate.{key}", "one of " + ", ".join(_GATE_MAP_KEYS), _Text("an unknown key"))
    base = spec.get("preset", "contract")
    if base not in GATE_PRESETS:
        fail("gate.preset", "one of " + ", ".join(GATE_PRESETS), base)
    recipe = GATE_PRESETS[base]
    fields = {}

    def number(key, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            fail(f"gate.{key}", "a finite number", value)
        return float(value)

    for key in ("a_log", "dt_bias"):
        if key in spec:
            value = spec[key]
            if isinstance(value, str):
                fail(f"gate.{key}", "U(lo, hi) as [lo, hi] or a number (a .npy file is not supported "
                     "by the peer scripts, which draw their own inputs)", value)
            if isinstance(value, list):
                if len(value) != 2:
                    fail(f"gate.{key}", "[lo, hi]", value)
                lo, hi = number(key, value[0]), number(key, value[1])
                if lo > hi:
                    fail(f"gate.{key}", "[lo, hi] with lo <= hi", value)
                fields[key] = (lo, hi)
            else:
                x = number(key, value)
                fields[key] = (x, x)
    if "lower_bound" in spec:
        lb = number("lower_bound", spec["lower_bound"])
        if not -MAX_LOWER_BOUND_MAGNITUDE <= lb <= 0:
            fail("gate.lower_bound", f"a number in [-{MAX_LOWER_BOUND_MAGNITUDE}, 0]", spec["lower_bound"])
        fields["lower_bound"] = lb
    for key in ("raw_mean", "raw_std"):
        if key in spec:
            fields[key] = number(key, spec[key])
    if not fields and "preset" in spec:
        return recipe
    return dataclasses.replace(recipe, name=f"custom({recipe.name})", **fields)


def select_shapes(shapes: list[Shape], only: Sequence[str] | None, source: str) -> list[Shape]:
    if not only:
        return shapes
    known = {s.id for s in shapes}
    for ident in only:
        if ident not in known:
            raise InputError(f"--only {ident}: no such shape id in {source} "
                             f"(known: {', '.join(s.id for s in shapes)})")
    return [s for s in shapes if s.id in set(only)]


# ================================================================================================
# Sequences, chunk starts and the gate conversion
# ================================================================================================

def sequences(batch: int, tokens: int, cu_seqlens: Sequence[int] | None) -> list[tuple[int, int, int]]:
    """(batch row, first token, end token) of every sequence, empty ones included."""
    if cu_seqlens is None:
        return [(b, 0, tokens) for b in range(batch)]
    return [(0, int(cu_seqlens[i]), int(cu_seqlens[i + 1])) for i in range(len(cu_seqlens) - 1)]


def chunk_starts(tokens: int, cu_seqlens: Sequence[int] | None, chunk: int = CHUNK) -> np.ndarray:
    """Bool [T]: token t opens a chunk (its position inside its sequence is a multiple of `chunk`).
    Chunks are counted from each sequence's first token (kda-forward.md §5). Tokens outside every
    sequence (the inactive suffix after cu_seqlens[N]) are marked too, so the cumulative gate
    there (exactly 0) converts to a per-token gate of exactly 0. Dense buffers: every row alike."""
    t = np.arange(tokens, dtype=np.int64)
    if cu_seqlens is None:
        return (t % chunk) == 0
    starts = np.ones(tokens, dtype=bool)
    for i in range(len(cu_seqlens) - 1):
        lo, hi = int(cu_seqlens[i]), int(cu_seqlens[i + 1])
        if hi > lo:
            starts[lo:hi] = (np.arange(hi - lo) % chunk) == 0
    return starts


def log2_cumulative_to_fla_gate(gate: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Our contract gate -> FLA's `g`.

    gate:   [B, T, H, K] fp32, the inclusive chunk-local cumulative log2 gate G (§1.1, §9.1).
    starts: [T] bool from chunk_starts().
    Returns [B, T, H, K] fp32, FLA's per-token natural-log gate (§1.2, use_gate_in_kernel=False).

    Per token, the log2 decay is recovered exactly in float64 (the difference of two fp32 values
    is exact there):  gamma_t = G_t - G_{t-1}  inside a chunk,  gamma_t = G_t  at a chunk start.
    The natural-log gate is g_t = gamma_t * ln 2; we compute it as fp32(gamma_t / RCP_LN2_F32),
    dividing by the very fp32 constant FLA multiplies its chunk cumsum by (RCP_LN2 = 1.4426950216,
    which differs from 1/ln 2 by 1.3e-8 relative), so FLA's fp32 `cumsum(g) * RCP_LN2` gives back
    G up to the fp32 rounding of g and of FLA's own cumsum (emulated by fla_gate_to_log2_cumulative
    below; fla_bench/fla_check measure FLA's actual reconstruction on the GPU)."""
    g64 = gate.astype(np.float64)
    prev = np.zeros_like(g64)
    prev[:, 1:] = g64[:, :-1]
    prev[:, starts] = 0.0
    gamma = g64 - prev
    return (gamma / RCP_LN2_F32).astype(np.float32)


def fla_gate_to_log2_cumulative(g: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Emulates FLA's chunk_local_cumsum(g, chunk_size=64, scale=RCP_LN2) on the host: fp32
    inclusive sums restarting at each chunk start, times the fp32 constant, in fp32. (FLA's
    tl.cumsum is a parallel scan: its rounding differs from this sequential sum by a few ulp.)"""
    out = np.empty(g.shape, dtype=np.float32)
    acc = np.zeros(g.shape[:1] + g.shape[2:], dtype=np.float32)
    c = np.float32(RCP_LN2_F32)
    for t in range(g.shape[1]):
        if starts[t]:
            acc = g[:, t].astype(np.float32).copy()
        else:
            acc = (acc + g[:, t]).astype(np.float32)
        out[:, t] = acc * c
    return out


def gate_cumsum_reference(raw: np.ndarray, a_log: np.ndarray, dt_bias: np.ndarray, starts: np.ndarray,
                          lower_bound: float = LOWER_BOUND) -> np.ndarray:
    """§3.1 / §9.3 gate producer in float64 (raw [B,T,H,K], A_log [H], dt_bias [H,K]):
    gamma = lb * sigmoid(exp(A_log) * (raw + dt_bias)), chunk-local inclusive cumsum, * log2 e,
    rounded to fp32. Used by the tests; fla_bench computes the same on the GPU."""
    x = np.exp(a_log.astype(np.float64))[None, None, :, None] * (raw.astype(np.float64) + dt_bias[None, None])
    gamma = lower_bound / (1.0 + np.exp(-x))
    out = np.empty_like(gamma)
    acc = np.zeros(gamma.shape[:1] + gamma.shape[2:])
    for t in range(gamma.shape[1]):
        acc = gamma[:, t].copy() if starts[t] else acc + gamma[:, t]
        out[:, t] = acc
    return (out * (1.0 / math.log(2.0))).astype(np.float32)


# ================================================================================================
# bf16 helpers and l2norm
# ================================================================================================

def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even), returned widened to float32. NaN stays NaN."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, out)


def is_bf16(x: np.ndarray) -> bool:
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return bool(np.all((bits & 0xFFFF) == 0))


def l2norm_rows(x: np.ndarray, dtype=np.float64) -> np.ndarray:
    """y = x * 1/sqrt(sum x^2 + 1e-6) over the last axis, computed in `dtype` (§4.1), valid for
    every finite row: as reference/src/l2norm.cpp, each row is first scaled by the power of two
    2^-e that brings its largest entry into [0.5, 1) (exact), with eps scaled by 2^-2e, so fp32
    neither overflows for huge rows (1e20, 3e38 entries) nor underflows for tiny ones. Rows with
    NaN/inf use the plain formula (they propagate); zero rows give zeros."""
    x = np.asarray(x, dtype=dtype)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        largest = np.max(np.abs(x), axis=-1, keepdims=True) if x.shape[-1] else np.zeros(x.shape[:-1] + (1,), dtype)
        finite = np.all(np.isfinite(x), axis=-1, keepdims=True)
        _, e = np.frexp(np.where(finite & (largest > 0), largest, dtype(1)))
        eps_scaled = np.ldexp(dtype(L2NORM_EPS), -2 * e).astype(dtype)
        use_scaled = finite & (largest > 0) & np.isfinite(eps_scaled)
        e = np.where(use_scaled, e, 0)
        eps_used = np.where(use_scaled, eps_scaled, dtype(L2NORM_EPS)).astype(dtype)
        xs = np.ldexp(x, -e).astype(dtype)
        ssq = np.sum(xs * xs, axis=-1, keepdims=True, dtype=dtype)
        rstd = (dtype(1) / np.sqrt(ssq + eps_used)).astype(dtype)
        y = (xs * rstd).astype(dtype)
    return np.where(finite & (largest == 0), dtype(0), y).astype(dtype)


# ================================================================================================
# The per-token recurrence (kda-forward.md §2.1)
# ================================================================================================

def recurrent_forward(q, k, v, gate, beta, cu_seqlens=None, h0=None, dtype=np.float64,
                      normalize_q=True, heads=None, token_limit=None, seq_ids=None,
                      final_state=False, chunk=CHUNK):
    """NumPy per-token recurrence on our contract inputs (cumulative log2 gate), vectorized over
    heads, in `dtype` (float64 = the golden, float32 = the low of §9.4).

    q,k [B,T,H,K]; v [B,T,H,V]; gate [B,T,H,K] (cumulative log2, chunk-local); beta [B,T,H];
    h0 [N,H,K,V] or None. Optional restrictions (for cheap slice checks): `heads` (index list),
    `seq_ids` (which sequences), `token_limit` (only the first tokens of each sequence).
    Returns (out [B,T,H',V] with zeros where not computed, final_state [N,H',K,V] or None)."""
    B, T, H, K = q.shape
    V = v.shape[3]
    hsel = np.arange(H) if heads is None else np.asarray(heads)
    seqs = sequences(B, T, cu_seqlens)
    ids = range(len(seqs)) if seq_ids is None else seq_ids
    out = np.zeros((B, T, len(hsel), V), dtype=dtype)
    ht = np.zeros((len(seqs), len(hsel), K, V), dtype=dtype) if final_state else None
    scale = dtype(1.0 / math.sqrt(K))
    for s in ids:
        b, lo, hi = seqs[s]
        if token_limit is not None:
            hi = min(hi, lo + token_limit)
        S = np.zeros((len(hsel), K, V), dtype=dtype) if h0 is None else np.array(h0[s][hsel], dtype=dtype)
        prev = None
        for t in range(lo, hi):
            g_t = np.asarray(gate[b, t][hsel], dtype=dtype)
            gamma = g_t if (t - lo) % chunk == 0 else g_t - prev
            prev = g_t
            S = S * np.exp2(gamma)[:, :, None]
            kt = np.asarray(k[b, t][hsel], dtype=dtype)
            vt = np.asarray(v[b, t][hsel], dtype=dtype)
            bt = np.asarray(beta[b, t][hsel], dtype=dtype)
            delta = bt[:, None] * (vt - np.einsum("hk,hkv->hv", kt, S))
            S = S + kt[:, :, None] * delta[:, None, :]
            qt = np.asarray(q[b, t][hsel], dtype=dtype)
            if normalize_q:
                qt = l2norm_rows(qt, dtype)
            out[b, t] = np.einsum("hk,hkv->hv", qt * scale, S)
        if final_state:
            ht[s] = S
    return out, ht


def slice_plan(batch: int, tokens: int, heads: int, cu_seqlens=None) -> tuple[list[int], list[int]]:
    """Which sequences and heads fla_bench's cheap check recomputes: the first and the last
    non-empty sequence, heads 0 and H-1."""
    seqs = sequences(batch, tokens, cu_seqlens)
    nonempty = [i for i, (_, lo, hi) in enumerate(seqs) if hi > lo]
    chosen = sorted({nonempty[0], nonempty[-1]}) if nonempty else []
    return chosen, sorted({0, heads - 1})


def prefix_references(q, k, v, gate, beta, h0=None):
    """Golden (float64) and low (float32) outputs of one sequence prefix. Arrays hold one sequence
    from its first token: q,k [L,H',K], v [L,H',V], gate [L,H',K], beta [L,H'], h0 [H',K,V] or
    None. Returns (golden, low), each [L,H',V]."""
    def batch1(a):
        return None if a is None else np.asarray(a)[None]
    golden, _ = recurrent_forward(batch1(q), batch1(k), batch1(v), batch1(gate), batch1(beta),
                                  None, batch1(h0), dtype=np.float64)
    low, _ = recurrent_forward(batch1(q), batch1(k), batch1(v), batch1(gate), batch1(beta),
                               None, batch1(h0), dtype=np.float32)
    return golden[0], low[0]


# ================================================================================================
# The error budget of kda-forward.md §9.4 (port of lib/harness/src/budget.cpp)
# ================================================================================================

@dataclasses.dataclass
class BudgetRule:
    eps: float = 0.0078125    # 2^-7 (bf16)
    factor: float = 2.0
    rms_limit: float = 5e-3   # FLA's threshold on the relative RMS error


@dataclasses.dataclass
class Judgement:
    elements: int = 0
    non_finite: int = 0          # non-finite elements of actual
    golden_non_finite: int = 0   # non-finite elements of golden or low (a broken reference: fails)
    max_abs_err: float = 0.0     # max |actual - golden| (inf when a non-finite value exists)
    worst_index: int = -1        # flat index of the largest error (first non-finite if any)
    ref_err: float = 0.0         # max |low - golden|
    max_golden: float = 0.0      # max |golden|
    budget: float = 0.0          # factor * (ref_err + eps * max_golden)
    rel_rms: float = 0.0         # RMS(actual - golden) / RMS(golden)
    rms_limit: float = 5e-3
    within_budget: bool = False
    within_rms: bool = False

    def passed(self) -> bool:
        return self.non_finite == 0 and self.within_budget and self.within_rms

    def verdict(self) -> str:
        """Same text as kda::harness::Judgement::verdict()."""
        if self.passed():
            return "passed"
        if self.golden_non_finite > 0:
            n = self.golden_non_finite
            return f"failed: the reference has {n} non-finite value{'' if n == 1 else 's'}"
        if self.non_finite > 0:
            n = self.non_finite
            return f"failed: {n} non-finite value{'' if n == 1 else 's'}"
        reasons = []
        if not self.within_budget:
            err, limit = _distinct_pair(self.max_abs_err, self.budget)
            reasons.append(f"max abs err {err} > budget {limit}")
        if not self.within_rms:
            reasons.append(f"rel RMS {_scientific(self.rel_rms, 2)} >= {_scientific_trimmed(self.rms_limit)}")
        return "failed: " + "; ".join(reasons)


def _scientific(value: float, digits: int) -> str:
    """'1.2e-2': `digits` significant digits, exponent without '+' or leading zeros."""
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    text = f"{value:.{digits - 1}e}"
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def _scientific_trimmed(value: float) -> str:
    text = _scientific(value, 3)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{exponent}"


def _distinct_pair(a: float, b: float) -> tuple[str, str]:
    for digits in range(2, 18):
        x, y = _scientific(a, digits), _scientific(b, digits)
        if x != y or a == b:
            return x, y
    return _scientific(a, 17), _scientific(b, 17)


def judge(golden, low, actual, rule: BudgetRule | None = None) -> Judgement:
    """kda-forward.md §9.4 (AG's data-derived rule, §7.1), exactly as lib/harness/src/budget.cpp:

        pass  iff  every element of actual is finite
              and  max|actual - golden| <= factor * (max|low - golden| + eps * max|golden|)
              and  RMS(actual - golden) / RMS(golden) < rms_limit

    with factor 2, eps 2^-7, rms_limit 5e-3. ref_err and max|golden| are taken over the elements
    where actual is finite (as the C++ loop does); NaN in low is skipped by the max (std::max
    keeps its first argument). Vectorized: the RMS sums may differ from the C++ loop in the last
    bits (summation order)."""
    rule = rule or BudgetRule()
    golden = np.asarray(golden, dtype=np.float64).ravel()
    low = np.asarray(low, dtype=np.float64).ravel()
    actual = np.asarray(actual, dtype=np.float64).ravel()
    if not golden.size == low.size == actual.size:
        raise ValueError(f"judge: golden, low and actual differ in length "
                         f"({golden.size}, {low.size}, {actual.size})")
    j = Judgement(elements=int(golden.size), rms_limit=rule.rms_limit)
    if golden.size == 0:
        j.within_budget = j.within_rms = True
        return j
    j.golden_non_finite = int(np.count_nonzero(~np.isfinite(golden) | ~np.isfinite(low)))
    finite_actual = np.isfinite(actual)
    j.non_finite = int(golden.size - np.count_nonzero(finite_actual))
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(actual - golden)
        if j.non_finite:
            j.worst_index = int(np.argmin(finite_actual))  # first non-finite element
            j.max_abs_err = math.inf
        else:
            # std::abs(nan) comparisons are false in the C++ loop: treat NaN errors as smallest.
            usable = np.where(np.isnan(err), -np.inf, err)
            j.worst_index = int(np.argmax(usable))
            j.max_abs_err = float(err[j.worst_index])
        ref = np.abs(low - golden)[finite_actual]
        ref = ref[~np.isnan(ref)]
        j.ref_err = float(ref.max()) if ref.size else 0.0
        gabs = np.abs(golden)[finite_actual]
        gabs = gabs[~np.isnan(gabs)]
        j.max_golden = float(gabs.max()) if gabs.size else 0.0
    j.ref_err = max(j.ref_err, 0.0)
    j.max_golden = max(j.max_golden, 0.0)
    j.budget = rule.factor * (j.ref_err + rule.eps * j.max_golden)
    if j.golden_non_finite > 0 or j.non_finite > 0:
        j.rel_rms = math.inf
        j.within_budget = j.within_rms = False
        return j
    j.within_budget = j.max_abs_err <= j.budget
    scale = j.max_golden if j.max_golden > 0.0 else 1.0
    d = (actual - golden) / scale
    g = golden / scale
    err_sq = float(np.dot(d, d))
    golden_sq = float(np.dot(g, g))
    if err_sq == 0.0:
        j.rel_rms = 0.0
    elif golden_sq == 0.0:
        j.rel_rms = math.inf
    else:
        j.rel_rms = math.sqrt(err_sq / golden_sq)
    j.within_rms = j.rel_rms < rule.rms_limit
    return j


def max_abs_difference(a, b) -> tuple[float, int]:
    """(max |a - b|, flat index of the first maximum); inf and the first non-finite index when
    either side is non-finite there."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.size == 0:
        return 0.0, -1
    finite = np.isfinite(a) & np.isfinite(b)
    if not finite.all():
        return math.inf, int(np.argmin(finite))
    d = np.abs(a - b)
    i = int(np.argmax(d))
    return float(d[i]), i


def rel_rms_difference(a, b, reference) -> float:
    """RMS(a - b) / RMS(reference), scaled like budget.cpp so huge values cannot overflow."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    r = np.asarray(reference, dtype=np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf
    scale = float(np.max(np.abs(r))) if r.size else 0.0
    scale = scale if scale > 0 and math.isfinite(scale) else 1.0
    d = (a - b) / scale
    g = r / scale
    num, den = float(np.dot(d, d)), float(np.dot(g, g))
    if num == 0.0:
        return 0.0
    return math.inf if den == 0.0 else math.sqrt(num / den)


def describe_location(index: int, shape: Sequence[int], kind: str, cu_seqlens=None) -> str:
    """Flat index -> readable location. kind 'out': [B,T,H,V] (token, head, value channel, and
    the sequence / position inside it for packed buffers); 'state': [N,H,K,V]."""
    if index is None or index < 0:
        return "-"
    coords = np.unravel_index(int(index), tuple(int(s) for s in shape))
    if kind == "state":
        n, h, kk, vv = (int(c) for c in coords)
        return f"seq {n}, head {h}, key {kk}, value {vv}"
    b, t, h, c = (int(x) for x in coords)
    where = f"token {t}" if shape[0] == 1 else f"batch {b}, token {t}"
    if cu_seqlens is not None:
        cu = [int(x) for x in cu_seqlens]
        if t >= cu[-1]:
            where += " (inactive suffix)"
        else:
            for s in range(len(cu) - 1):
                if cu[s] <= t < cu[s + 1]:
                    where += f" (seq {s}, position {t - cu[s]})"
                    break
    return f"{where}, head {h}, channel {c}"


# ================================================================================================
# Timing statistics and the stopping rule (ports of lib/bench/src/statistics.cpp, stopping.cpp)
# ================================================================================================

MIN_SAMPLES_FOR_NOISE = 5


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs) if xs else math.nan


def _stdev(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return math.nan
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) * (x - m) for x in xs) / (len(xs) - 1))


def relative_stdev(xs: Sequence[float]) -> float:
    if len(xs) < MIN_SAMPLES_FOR_NOISE:
        return math.inf
    m = _mean(xs)
    if not math.isfinite(m) or m == 0.0:
        return math.nan
    return _stdev(xs) / m


def quantile_linear(sorted_xs: Sequence[float], p: float) -> float:
    if not sorted_xs:
        return math.nan
    pos = min(max(p, 0.0), 1.0) * (len(sorted_xs) - 1)
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (pos - lo) * (sorted_xs[hi] - sorted_xs[lo])


def quantile_rank(sorted_xs: Sequence[float], p: float) -> float:
    if not sorted_xs:
        return math.nan
    pos = min(max(p, 0.0), 1.0) * (len(sorted_xs) - 1)
    return sorted_xs[int(math.floor(pos + 0.5))]  # std::round: halves away from zero


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        return math.nan
    return math.exp(math.fsum(math.log(v) for v in values) / len(values))


def summarize(samples: Sequence[float]) -> dict:
    s = sorted(samples)
    if not s:
        return {k: math.nan for k in ("mean", "stdev", "noise", "min", "max", "median", "p20", "p80",
                                      "q1", "q3", "iqr_rel")} | {"n": 0}
    median = quantile_linear(s, 0.5)
    q1, q3 = quantile_rank(s, 0.25), quantile_rank(s, 0.75)
    return {"n": len(s), "mean": _mean(s), "stdev": _stdev(s), "noise": relative_stdev(s),
            "min": s[0], "max": s[-1], "median": median,
            "p20": quantile_linear(s, 0.2), "p80": quantile_linear(s, 0.8), "q1": q1, "q3": q3,
            "iqr_rel": (q3 - q1) / median if median != 0 else math.nan}


class StdrelCriterion:
    """nvbench's "stdrel" stopping rule as kda-bench applies it (lib/bench/src/stopping.cpp):
    not before min_samples accepted samples and min_time of accumulated GPU time; then stop when
    the relative stdev is below max_noise ("noise"), or when the noise has stabilised above it
    ("stable": > 64 noise estimates, checked every 16 samples, relative stdev of the last <= 512
    estimates < 5 %); 64 unusable samples in a row -> "non_finite"; wall time -> "timeout"."""

    STABLE_MIN_HISTORY = 64
    STABLE_CHECK_EVERY = 16
    STABLE_WINDOW = 512
    STABLE_TOLERANCE = 0.05
    MAX_NON_FINITE_STREAK = 64

    def __init__(self, min_samples=10, min_time_s=0.5, max_noise=0.005, timeout_s=15.0):
        self.min_samples, self.min_time_s = min_samples, min_time_s
        self.max_noise, self.timeout_s = max_noise, timeout_s
        self.count = self.rejected = self.nonfinite_streak = 0
        self.total = self.mean = self.m2 = 0.0
        self.history: list[float] = []
        self.stable = False

    def noise(self) -> float:
        if self.count < MIN_SAMPLES_FOR_NOISE:
            return math.inf
        if not math.isfinite(self.mean) or self.mean == 0.0:
            return math.nan
        return math.sqrt(max(self.m2 / (self.count - 1), 0.0)) / self.mean

    def add_sample(self, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0.0:
            self.rejected += 1
            self.nonfinite_streak += 1
            return
        self.count += 1
        self.total += seconds
        delta = seconds - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (seconds - self.mean)
        current = self.noise()
        if self.count < MIN_SAMPLES_FOR_NOISE:
            self.nonfinite_streak = 0
            return
        if not math.isfinite(current):
            self.nonfinite_streak += 1
            return
        self.nonfinite_streak = 0
        self.history.append(current)
        n = len(self.history)
        if n > self.STABLE_MIN_HISTORY and n % self.STABLE_CHECK_EVERY == 0:
            spread = relative_stdev(self.history[-min(n, self.STABLE_WINDOW):])
            self.stable = math.isfinite(spread) and spread < self.STABLE_TOLERANCE

    def check(self, wall_elapsed_s: float) -> str | None:
        """None while running, else the stop reason: noise, stable, non_finite, timeout."""
        if self.nonfinite_streak >= self.MAX_NON_FINITE_STREAK:
            return "non_finite"
        if self.count >= self.min_samples and self.total >= self.min_time_s:
            current = self.noise()
            if math.isfinite(current) and current < self.max_noise:
                return "noise"
            if self.stable:
                return "stable"
        if wall_elapsed_s >= self.timeout_s:
            return "timeout"
        return None


# ================================================================================================
# Bytes model (lib/bench/include/kda/bench/bytes_model.h, apps/kda-bench/README.md)
# ================================================================================================

def forward_bytes(shape_or_dims, initial_state=False, final_state=False) -> int:
    """q, k, v bf16 + cumulative gate fp32 + beta fp32 + out bf16 per token-head
    (8K + 4V + 4 bytes, 1540 B for K = V = 128), plus N*H*K*V*4 B per state read or written."""
    s = shape_or_dims
    per = 8 * s.key_dim + 4 * s.value_dim + 4
    state = s.num_seqs * s.heads * s.key_dim * s.value_dim * 4
    return s.token_heads * per + (state if initial_state else 0) + (state if final_state else 0)


def l2norm_bytes(rows: int, dim: int) -> int:
    """One l2norm pass: read x and write y in bf16."""
    return 2 * rows * dim * 2


# ================================================================================================
# kda-check --dump directories (apps/kda-check/dump.cpp)
# ================================================================================================

@dataclasses.dataclass
class DumpedProblem:
    id: str
    directory: str
    meta: dict
    q: np.ndarray           # [B,T,H,K] float32 holding bf16 values (raw, not normalized)
    k: np.ndarray           # [B,T,H,K] float32 holding bf16 values (normalized)
    v: np.ndarray           # [B,T,H,V] float32 holding bf16 values
    gate: np.ndarray        # [B,T,H,K] float32, cumulative log2, chunk-local
    beta: np.ndarray        # [B,T,H] float32
    cu_seqlens: np.ndarray | None  # [N+1] int32
    h0: np.ndarray | None   # [N,H,K,V] float32
    want_final_state: bool
    outputs: dict           # name -> path of every other .npy (out_reference, out_fused, ...)
    raw: "RawInputs | None" = None  # the generator's raw draws, when kda-check dumped them

    @property
    def batch(self):
        return self.q.shape[0]

    @property
    def tokens(self):
        return self.q.shape[1]

    @property
    def heads(self):
        return self.q.shape[2]

    @property
    def key_dim(self):
        return self.q.shape[3]

    @property
    def value_dim(self):
        return self.v.shape[3]

    @property
    def num_seqs(self):
        return len(self.cu_seqlens) - 1 if self.cu_seqlens is not None else self.batch

    def load(self, name: str, mmap: bool = True) -> np.ndarray | None:
        path = self.outputs.get(name)
        if path is None:
            return None
        return np.load(path, mmap_mode="r" if mmap else None)


_RAW_NAMES = ("k_raw", "gate_raw", "beta_logits", "a_log", "dt_bias")
_INPUT_NAMES = ("q", "k", "v", "gate", "beta", "cu_seqlens", "h0") + _RAW_NAMES


@dataclasses.dataclass
class RawInputs:
    """The raw draws behind a dumped problem (kda-check --dump, with the raw-input files): what a
    raw-input peer (FlashKDA, cuDNN-FE flags 7, ours raw) takes instead of k, gate and beta."""
    k_raw: np.ndarray        # [B,T,H,K] float32 holding bf16 values: k before l2norm
    gate_raw: np.ndarray     # [B,T,H,K] float32 holding bf16 values: the gate projection
    beta_logits: np.ndarray  # [B,T,H] float32 holding bf16 values: beta before the sigmoid
    a_log: np.ndarray        # [H] float32
    dt_bias: np.ndarray      # [H,K] float32
    lower_bound: float       # meta.json "lower_bound"
    checked_tokens: int = 0  # how many leading tokens were checked against k, gate and beta


RAW_CHECK_TOKENS = 1024  # the consistency check of the raw files covers this many leading tokens


def find_dump_problems(directory: str) -> list[str]:
    """Every sub-directory holding q.npy is one problem (or the directory itself), as
    kda::app::load_problems does."""
    if not os.path.isdir(directory):
        raise InputError(f"{directory}: not a directory (expected a kda-check --dump directory)")
    if os.path.exists(os.path.join(directory, "q.npy")):
        return [directory]
    subdirs = sorted(os.path.join(directory, d) for d in os.listdir(directory)
                     if os.path.exists(os.path.join(directory, d, "q.npy")))
    if not subdirs:
        raise InputError(f"{directory}: no problem found (expected DIR/q.npy or DIR/<id>/q.npy, "
                         f"written by kda-check --dump DIR)")
    return subdirs


def load_dump_problem(directory: str, check_bf16: bool = True) -> DumpedProblem:
    """Loads one problem directory written by `kda-check --dump`, with the checks of
    kda::app::load_problems (dtypes, shapes, q/k/v exactly bf16, offsets). Raises InputError."""
    def path(name):
        return os.path.join(directory, name + ".npy")

    def read(name, dtype, rank, required=True):
        p = path(name)
        if not os.path.exists(p):
            if required:
                raise InputError(f"{p}: missing (every problem needs q k v gate beta)")
            return None
        try:
            a = np.load(p, mmap_mode="r")
        except (OSError, ValueError) as e:
            raise InputError(f"{p}: not a readable .npy file: {e}") from None
        if a.dtype != np.dtype(dtype):
            raise InputError(f"{p}: wrong dtype {a.dtype} (expected {np.dtype(dtype).name})")
        if a.ndim != rank:
            raise InputError(f"{p}: expected a {rank}-d array, got {a.ndim}-d")
        return a

    def expect(name, got, want):
        if tuple(got) != tuple(want):
            raise InputError(f"{path(name)}: shape {list(got)}, expected {list(want)}")

    meta = {}
    meta_file = os.path.join(directory, "meta.json")
    if os.path.exists(meta_file):
        try:
            with open(meta_file, encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise InputError(f"{meta_file}: not valid JSON: {e}") from None
    q = read("q", np.float32, 4)
    B, T, H, K = q.shape
    k = read("k", np.float32, 4)
    expect("k", k.shape, q.shape)
    v = read("v", np.float32, 4)
    expect("v", v.shape[:3], (B, T, H))
    gate = read("gate", np.float32, 4)
    expect("gate", gate.shape, q.shape)
    beta = read("beta", np.float32, 3)
    expect("beta", beta.shape, (B, T, H))
    if check_bf16:
        for name, a in (("q", q), ("k", k), ("v", v)):
            if not is_bf16(a):
                raise InputError(f"{path(name)}: holds values that are not bf16 numbers "
                                 f"(q, k and v must hold bf16 numbers widened to float32)")
    cu = read("cu_seqlens", np.int32, 1, required=False)
    if cu is not None:
        cu = np.array(cu)
        if B != 1:
            raise InputError(f"{path('cu_seqlens')}: packed offsets need batch 1, q has batch {B}")
        if cu.size < 2 or cu[0] != 0 or np.any(np.diff(cu) < 0) or cu[-1] > T:
            raise InputError(f"{path('cu_seqlens')}: invalid offsets {cu.tolist()[:8]}... "
                             f"(need 0 = cu[0] <= ... <= cu[N] <= T = {T})")
    n_states = (cu.size - 1) if cu is not None else B
    h0 = read("h0", np.float32, 4, required=False)
    if h0 is not None:
        expect("h0", h0.shape, (n_states, H, K, v.shape[3]))
    outputs = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".npy") and name[:-4] not in _INPUT_NAMES:
            outputs[name[:-4]] = os.path.join(directory, name)
    raw = None
    present = [n for n in _RAW_NAMES if os.path.exists(path(n))]
    if present:
        missing = [n for n in _RAW_NAMES if n not in present]
        if missing:
            raise InputError(f"{directory}: has {', '.join(n + '.npy' for n in present)} but not "
                             f"{', '.join(n + '.npy' for n in missing)} (the raw inputs come as a set: "
                             f"{', '.join(n + '.npy' for n in _RAW_NAMES)} and meta.json's lower_bound)")
        k_raw = read("k_raw", np.float32, 4)
        expect("k_raw", k_raw.shape, q.shape)
        gate_raw = read("gate_raw", np.float32, 4)
        expect("gate_raw", gate_raw.shape, q.shape)
        beta_logits = read("beta_logits", np.float32, 3)
        expect("beta_logits", beta_logits.shape, (B, T, H))
        a_log = read("a_log", np.float32, 1)
        expect("a_log", a_log.shape, (H,))
        dt_bias = read("dt_bias", np.float32, 2)
        expect("dt_bias", dt_bias.shape, (H, K))
        if check_bf16:
            for name, a in (("k_raw", k_raw), ("gate_raw", gate_raw), ("beta_logits", beta_logits)):
                if not is_bf16(a):
                    raise InputError(f"{path(name)}: holds values that are not bf16 numbers (the raw "
                                     f"draws must be bf16 numbers widened to float32)")
        for name, a in (("a_log", a_log), ("dt_bias", dt_bias)):
            if not np.all(np.isfinite(a)):
                raise InputError(f"{path(name)}: holds non-finite values")
        lb = meta.get("lower_bound")
        if isinstance(lb, bool) or not isinstance(lb, (int, float)) or not math.isfinite(float(lb)) \
                or not -MAX_LOWER_BOUND_MAGNITUDE <= float(lb) <= 0:
            raise InputError(f"{meta_file}: 'lower_bound' must be a number in "
                             f"[-{MAX_LOWER_BOUND_MAGNITUDE}, 0] when the raw inputs are dumped, got "
                             f"{'nothing' if lb is None else repr(lb)}")
        raw = RawInputs(k_raw=k_raw, gate_raw=gate_raw, beta_logits=beta_logits, a_log=a_log,
                        dt_bias=dt_bias, lower_bound=float(lb))
        raw.checked_tokens = check_raw_consistency(directory, raw, k, gate, beta, cu)
    return DumpedProblem(id=str(meta.get("id", os.path.basename(os.path.normpath(directory)))),
                         directory=directory, meta=meta, q=q, k=k, v=v, gate=gate, beta=beta,
                         cu_seqlens=cu, h0=h0,
                         want_final_state=bool(meta.get("want_final_state", False)),
                         outputs=outputs, raw=raw)


def check_raw_consistency(directory, raw: RawInputs, k, gate, beta, cu, tokens: int = RAW_CHECK_TOKENS) -> int:
    """The raw files must describe the dumped problem: on the first `tokens` tokens (every batch
    row), gate.npy = the §3.1 producer of gate_raw, A_log, dt_bias and lower_bound (to fp32
    rounding), beta.npy = sigmoid(beta_logits) to the logits' bf16 rounding (kda-check draws the
    logit in fp32: beta.npy is the sigmoid of that draw, beta_logits.npy its bf16 rounding) and
    k.npy = bf16(l2norm(k_raw)) (to the bf16 roundings of both).
    A mismatch (a wrong seed, a transposed file, another shape's draws) is an InputError that says
    which file and where. Returns the number of tokens checked."""
    B, T, H, K = k.shape
    n = min(T, tokens)
    active = np.zeros(n, dtype=bool)
    active[:min(n, int(cu[-1]) if cu is not None else n)] = True
    starts = chunk_starts(T, None if cu is None else cu.tolist())[:n]
    want = gate_cumsum_reference(np.asarray(raw.gate_raw[:, :n]), raw.a_log, raw.dt_bias, starts,
                                 raw.lower_bound).astype(np.float64)
    got = np.asarray(gate[:, :n], dtype=np.float64)
    # gate_cumsum_reference rounds once to fp32; allow a few fp32 steps of |G| for the producer's
    # own summation order.
    tol = 8 * np.finfo(np.float32).eps * np.maximum(np.abs(want), 1.0)
    bad = (np.abs(want - got) > tol) & active[None, :, None, None]
    if bad.any():
        b, t, h, c = (int(x) for x in np.argwhere(bad)[0])
        raise InputError(f"{directory}: gate_raw.npy, a_log.npy, dt_bias.npy and lower_bound "
                         f"{raw.lower_bound:g} do not give gate.npy: at batch {b}, token {t}, head {h}, "
                         f"channel {c} the producer gives {want[b, t, h, c]:.9g}, gate.npy holds "
                         f"{got[b, t, h, c]:.9g} ({int(bad.sum())} such values in the first {n} tokens)")
    bl = np.asarray(raw.beta_logits[:, :n], dtype=np.float64)
    bwant = 1.0 / (1.0 + np.exp(-bl))
    bgot = np.asarray(beta[:, :n], dtype=np.float64)
    # |d sigmoid| <= sigmoid (1 - sigmoid) |d logit|, |d logit| <= 2^-9 |logit| (bf16 rounding).
    btol = bwant * (1.0 - bwant) * np.abs(bl) * 2.0 ** -8 + 4 * np.finfo(np.float32).eps
    bbad = (np.abs(bwant - bgot) > btol) & active[None, :, None]
    if bbad.any():
        b, t, h = (int(x) for x in np.argwhere(bbad)[0])
        raise InputError(f"{directory}: beta.npy is not sigmoid(beta_logits.npy) to the logits' bf16 "
                         f"rounding: at batch {b}, token {t}, "
                         f"head {h} sigmoid({bl[b, t, h]:.9g}) = {bwant[b, t, h]:.9g}, beta.npy holds "
                         f"{bgot[b, t, h]:.9g}")
    kwant = round_to_bf16(l2norm_rows(np.asarray(raw.k_raw[:, :n]), np.float64).astype(np.float32))
    kgot = np.asarray(k[:, :n], dtype=np.float32)
    # k.npy normalizes the fp32 draw, k_raw is its bf16 rounding: an element moves by up to its
    # own two bf16 roundings plus the raw rounding of the row's larger elements through the norm.
    row_max = np.max(np.abs(kwant), axis=-1, keepdims=True).astype(np.float32)
    step = (np.abs(kwant).astype(np.float32) * np.float32(2.0 ** -7) + row_max * np.float32(2.0 ** -8)
            + np.float32(1e-30))
    kbad = (np.abs(kwant - kgot) > step) & active[None, :, None, None]
    if kbad.any():
        b, t, h, c = (int(x) for x in np.argwhere(kbad)[0])
        raise InputError(f"{directory}: k.npy is not l2norm(k_raw.npy) rounded to bf16: at batch {b}, "
                         f"token {t}, head {h}, channel {c} l2norm gives {kwant[b, t, h, c]:.6g}, "
                         f"k.npy holds {kgot[b, t, h, c]:.6g}")
    return n


def our_outputs(problem: DumpedProblem, tensor: str = "out") -> list[tuple[str, str, str]]:
    """Our GPU paths' dumped results: (path, variant, file key) for out_fused[_<variant>] and
    out_explicit[_<variant>] (tensor 'out'), or ht_fused... (tensor 'ht')."""
    found = []
    for key in problem.outputs:
        for path in ("fused", "explicit"):
            prefix = f"{tensor}_{path}"
            if key == prefix:
                found.append((path, "-", key))
            elif key.startswith(prefix + "_"):
                found.append((path, key[len(prefix) + 1:], key))
    return sorted(found)


# ================================================================================================
# Output files
# ================================================================================================

def refuse_existing(paths: Iterable[str | None], force: bool) -> None:
    for p in paths:
        if p and os.path.exists(p) and not force:
            raise InputError(f"{p} exists; pass --force to overwrite it")


def write_atomic(path: str, text: str, force: bool) -> None:
    """Writes text to path through a temporary file in the same directory and a rename, so a
    reader never sees half a file. Refuses an existing path unless force."""
    refuse_existing([path], force)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def csv_cell(value) -> str:
    """Numbers as shortest round-trip text; NaN/None as an empty cell ("not defined")."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    return str(value)


def to_csv(columns: Sequence[str], rows: Iterable[dict]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([csv_cell(row.get(c)) for c in columns])
    return buf.getvalue()


def to_markdown(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(x):
        return str(x).replace("|", "\\|").replace("\n", " ")
    widths = [len(c) for c in columns]
    for r in rows:
        for i, x in enumerate(r):
            widths[i] = max(widths[i], len(cell(x)))
    out = ["| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(columns)) + " |",
           "| " + " | ".join("-" * w for w in widths) + " |"]
    for r in rows:
        out.append("| " + " | ".join(cell(x).ljust(widths[i]) for i, x in enumerate(r)) + " |")
    return "\n".join(out) + "\n"


def sci(value) -> str:
    """'%.3e' like kda-check's tables; '-' for None."""
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.3e}"


# ------------------------------------------------------------------------------------------------
# Shared by fla_bench.py and fla_check.py.

def add_testing_options(p) -> None:
    """Options for local CPU runs under TRITON_INTERPRET=1 only (hidden from --help)."""
    import argparse
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)
    p.add_argument("--fla-dtype", default="bf16", choices=("bf16", "fp32"), help=argparse.SUPPRESS)


def split_list_options(args):
    """--only may repeat and take comma lists; --rows is one comma list."""
    args.only = [x for item in args.only for x in item.split(",") if x]
    args.row_list = [r.strip() for r in args.rows.split(",") if r.strip()]
    return args


def log(args, text: str) -> None:
    """A progress line on stderr unless --quiet."""
    if not args.quiet:
        import sys
        print(text, file=sys.stderr, flush=True)


def json_safe(x):
    """Non-finite floats become null (JSON has no inf/NaN); NumPy scalars become Python ones."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    if isinstance(x, np.generic):
        return json_safe(x.item())
    return x


# ================================================================================================
# The raw contract on dumped inputs (FlashKDA, cuDNN-FE flags 7, FLA "full")
# ================================================================================================
#
# A dump holds our contract's inputs: normalized k, the cumulative log2 gate G, post-sigmoid beta.
# A raw-input kernel wants raw k (it normalizes), a raw gate with A_log, dt_bias and a lower bound
# (it computes gamma = lb * sigmoid(exp(A_log) * (g + dt_bias))) and beta logits. We hand it the
# SAME problem: k as dumped (a unit vector; normalizing it again moves it by rounding only),
# A_log = 0, dt_bias = 0 and g = logit(gamma / lb), beta logits = logit(beta). In exact arithmetic
# the kernel then sees our gamma and beta; the dtype a peer takes g and beta in (FlashKDA: bf16)
# rounds them, and raw_input_error() says by how much, so a judged row can tell that part of its
# error from the kernel's own.

RAW_LOGIT_LIMIT = 88.0  # |logit| clamp: sigmoid(-88) = 6e-39 ~ an exact 0 or 1 in fp32, and finite


def per_token_log_gate(gate: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Our cumulative log2 gate -> the per-token natural-log gate gamma in float64 (exact
    differences of fp32 numbers, times ln 2)."""
    g64 = np.asarray(gate, dtype=np.float64)
    prev = np.zeros_like(g64)
    prev[:, 1:] = g64[:, :-1]
    prev[:, np.asarray(starts, dtype=bool)] = 0.0
    return (g64 - prev) * math.log(2.0)


def _logit(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.log(p) - np.log1p(-p)
    return np.clip(np.nan_to_num(x, nan=0.0, posinf=RAW_LOGIT_LIMIT, neginf=-RAW_LOGIT_LIMIT),
                   -RAW_LOGIT_LIMIT, RAW_LOGIT_LIMIT)


def raw_gate_from_contract(gate: np.ndarray, starts: np.ndarray, lower_bound: float) -> np.ndarray:
    """float64 raw gate g with sigmoid(g) * lower_bound = gamma (A_log = 0, dt_bias = 0). Raises
    InputError when a per-token gate lies below lower_bound (not representable: the kernel clamps
    at its lower bound), e.g. a custom recipe with lb = -5.9 for a peer that takes -5 at most."""
    if not lower_bound < 0:
        raise InputError(f"lower bound {lower_bound}: the raw contract needs a negative lower bound")
    gamma = per_token_log_gate(gate, starts)
    lowest = float(gamma.min()) if gamma.size else 0.0
    # gamma = lb * sigmoid(x) < lb would need sigmoid > 1; allow the fp32 rounding of G.
    if lowest < lower_bound * (1 + 1e-6) - 1e-6:
        raise InputError(f"a per-token gate of {lowest:.6g} (natural log) is below the lower bound "
                         f"{lower_bound}: not representable as lb * sigmoid(g)")
    return _logit(np.clip(gamma / lower_bound, 0.0, 1.0))


def beta_logits_from_contract(beta: np.ndarray) -> np.ndarray:
    return _logit(np.asarray(beta, dtype=np.float64))


def effective_gate(raw: np.ndarray, starts: np.ndarray, lower_bound: float) -> np.ndarray:
    """What a raw-input kernel computes from the raw gate g (A_log = 0, dt_bias = 0), in float64:
    the cumulative log2 gate, chunk-local (64) like ours, for comparison with the dump's G."""
    gamma = lower_bound / (1.0 + np.exp(-np.asarray(raw, dtype=np.float64)))
    out = np.empty_like(gamma)
    acc = np.zeros(gamma.shape[:1] + gamma.shape[2:])
    st = np.asarray(starts, dtype=bool)
    for t in range(gamma.shape[1]):
        acc = gamma[:, t].copy() if st[t] else acc + gamma[:, t]
        out[:, t] = acc
    return out / math.log(2.0)


def raw_input_error(gate, beta, starts, lower_bound: float, dtype: str) -> dict:
    """How far the raw inputs, rounded to `dtype` ('bf16' or 'fp32'), move the problem: max |G' - G|
    (cumulative log2 gate, the decay exponent) and max |beta' - beta| over all elements. The
    kernel's own gate and sigmoid arithmetic comes on top."""
    def rnd(x):
        x32 = np.asarray(x, dtype=np.float32)
        return round_to_bf16(x32) if dtype == "bf16" else x32
    raw = rnd(raw_gate_from_contract(gate, starts, lower_bound))
    g_eff = effective_gate(raw, starts, lower_bound)
    b_eff = 1.0 / (1.0 + np.exp(-np.asarray(rnd(beta_logits_from_contract(beta)), dtype=np.float64)))
    g_err = float(np.max(np.abs(g_eff - np.asarray(gate, dtype=np.float64)))) if g_eff.size else 0.0
    b_err = float(np.max(np.abs(b_eff - np.asarray(beta, dtype=np.float64)))) if b_eff.size else 0.0
    return {"gate_max_abs_log2": g_err, "beta_max_abs": b_err, "dtype": dtype}


def choose_lower_bound(gate, starts, lower_bound: float = LOWER_BOUND) -> float:
    """The lower bound the conversion uses for a dumped gate: `lower_bound` (-5, FlashKDA's
    steepest) when every per-token gate lies above it, else the contract's steepest (-5.915)."""
    gamma = per_token_log_gate(gate, starts)
    lowest = float(gamma.min()) if gamma.size else 0.0
    return lower_bound if lowest >= lower_bound * (1 + 1e-6) - 1e-6 else -MAX_LOWER_BOUND_MAGNITUDE


# What each raw-input peer is handed, which fixes the problem it solves (RawSpec.key names it):
# the dtype of the raw gate and of the beta logits (FlashKDA and ours: bf16; cuDNN-FE flags 7:
# fp32), or beta already through its sigmoid ('sigmoid': post-sigmoid fp32, the dumped beta).
@dataclasses.dataclass(frozen=True)
class RawSpec:
    gate: str = "bf16"    # 'bf16' or 'fp32'
    beta: str = "bf16"    # 'bf16', 'fp32' (logits) or 'sigmoid' (post-sigmoid fp32, the dumped beta)

    @property
    def key(self) -> str:
        return f"gate-{self.gate}_beta-{self.beta}"


RAW_SPECS = {"cudnn": RawSpec("fp32", "fp32"), "flashkda": RawSpec(), "flash-flash-kda": RawSpec(),
             "vllm-flashkda": RawSpec(), "ours": RawSpec()}


@dataclasses.dataclass
class RawProblem:
    """The problem a raw-input peer solves, in our contract's terms: normalized k, the cumulative
    log2 gate and post-sigmoid beta, in float64 (for the golden) and float32 (for the low)."""
    k64: np.ndarray
    k32: np.ndarray
    gate64: np.ndarray
    gate32: np.ndarray
    beta64: np.ndarray
    beta32: np.ndarray
    source: str             # 'dump raw files' or 'conversion (...)'
    lower_bound: float


def raw_problem(d: "DumpedProblem", spec: RawSpec) -> RawProblem:
    """What a raw-input peer with `spec` computes from the inputs peer_adapters hands it.

    With the dump's raw files (kda-check --dump writes them): raw k, the gate projection and beta
    logits exactly as drawn, so the problem is the generator's: l2norm(k_raw) in fp64, the gate
    of gate.npy (the fp64 producer of those draws), sigmoid(beta_logits); no conversion at all.
    Without them: the conversion of the contract inputs (A_log = dt_bias = 0, g = logit(gamma /
    lb), beta logits = logit(beta), each rounded to the dtype the peer takes, and the dumped k,
    which the peer normalizes again); the problem is what that rounding leaves, so a peer is
    judged against the golden of exactly its inputs and not charged for the conversion."""
    starts = chunk_starts(d.tokens, None if d.cu_seqlens is None else d.cu_seqlens.tolist())

    def sigmoid32(x):
        x = np.asarray(x, dtype=np.float32)
        with np.errstate(over="ignore"):
            return (np.float32(1) / (np.float32(1) + np.exp(-x))).astype(np.float32)

    if d.raw is not None:
        # Every raw peer (ours too) gets these draws as they are (the bf16 values are exact in
        # fp32 too): beta = sigmoid(beta_logits), in fp64 for the golden and fp32 for the low.
        r = d.raw
        beta64 = 1.0 / (1.0 + np.exp(-np.asarray(r.beta_logits, dtype=np.float64)))
        beta32 = sigmoid32(r.beta_logits)
        return RawProblem(k64=l2norm_rows(r.k_raw, np.float64), k32=l2norm_rows(r.k_raw, np.float32),
                          gate64=np.asarray(d.gate, np.float64), gate32=np.asarray(d.gate, np.float32),
                          beta64=beta64, beta32=beta32, source="the dump's raw files (no conversion)",
                          lower_bound=r.lower_bound)

    def rnd(x, dtype):
        x32 = np.asarray(x, dtype=np.float32)
        return (round_to_bf16(x32) if dtype == "bf16" else x32).astype(np.float64)

    lb = choose_lower_bound(d.gate, starts)
    raw = rnd(raw_gate_from_contract(d.gate, starts, lb), spec.gate)
    gate64 = effective_gate(raw, starts, lb)
    if d.cu_seqlens is not None:
        gate64[:, int(d.cu_seqlens[-1]):] = 0.0
    if spec.beta == "sigmoid":
        beta64, beta32 = np.asarray(d.beta, np.float64), np.asarray(d.beta, np.float32)
    else:
        bl = rnd(beta_logits_from_contract(d.beta), spec.beta)
        beta64, beta32 = 1.0 / (1.0 + np.exp(-bl)), sigmoid32(bl)
    return RawProblem(k64=l2norm_rows(d.k, np.float64), k32=l2norm_rows(d.k, np.float32),
                      gate64=gate64, gate32=gate64.astype(np.float32), beta64=beta64, beta32=beta32,
                      source=f"conversion (A_log = dt_bias = 0, g = logit(gamma/lb) in {spec.gate}, "
                             f"lb = {lb:g}, beta {'as dumped' if spec.beta == 'sigmoid' else 'logits in ' + spec.beta})",
                      lower_bound=lb)


REF_CACHE_DIR = "peers-ref"  # inside a dumped problem's directory


def _stamp(d: "DumpedProblem") -> dict:
    """Sizes and modification times of the dumped input files: a cached reference is used only
    for the inputs it was computed from."""
    out = {}
    for name in _INPUT_NAMES:
        p = os.path.join(d.directory, name + ".npy")
        if os.path.exists(p):
            st = os.stat(p)
            out[name] = [st.st_size, st.st_mtime_ns]
    return out


def raw_references(d: "DumpedProblem", spec: RawSpec, log=None, cache: bool = True) -> dict:
    """Golden (float64) and low (float32) output and final state of the problem a raw-input peer
    with `spec` solves (raw_problem), and where they came from.

    With the raw files, kda-check's own raw golden is taken when the dump has it
    (out_reference_raw.npy, ht_reference_raw.npy, out_reference_raw_f32.npy); what is missing is
    computed here with the NumPy recurrence (long-memory problems: seconds; a 64-head contract
    shape: about a minute) and cached in DIR/peers-ref/<variant>/ beside the dump, so the raw
    peers of one run share one computation (variant 'raw-files': every raw peer gets the same
    draws; without the raw files one variant per RawSpec). Returns dict(golden, low, golden_ht,
    low_ht, source, low_source, problem_source, lower_bound)."""
    import time
    names = ("golden", "low", "golden_ht", "low_ht")
    want_ht = d.want_final_state
    variant = "raw-files" if d.raw is not None else spec.key
    if cache:
        hit = _cache_load(d, variant)
        if hit is not None:
            return hit
    t0 = time.perf_counter()
    prob = raw_problem(d, spec)
    out = {n: None for n in names}
    dumped = d.raw is not None and "out_reference_raw" in d.outputs
    if dumped:
        out["golden"] = np.asarray(d.load("out_reference_raw"), np.float64)
        out["source"] = "dump: out_reference_raw (kda-check's raw golden)"
        if want_ht and "ht_reference_raw" in d.outputs:
            out["golden_ht"] = np.asarray(d.load("ht_reference_raw"), np.float64)
        if "out_reference_raw_f32" in d.outputs:
            out["low"] = np.asarray(d.load("out_reference_raw_f32"), np.float64)
            out["low_source"] = "dump: out_reference_raw_f32"
    if out["golden"] is None or (want_ht and out["golden_ht"] is None):
        g, gh = recurrent_forward(d.q, prob.k64, d.v, prob.gate64, prob.beta64, d.cu_seqlens, d.h0,
                                  dtype=np.float64, final_state=want_ht)
        if out["golden"] is None:
            out["golden"] = g
            out["source"] = f"NumPy fp64 recurrence on the raw peer's problem: {prob.source}"
        out["golden_ht"] = gh if out["golden_ht"] is None else out["golden_ht"]
    if out["low"] is None or want_ht:
        lo, lh = recurrent_forward(d.q, prob.k32, d.v, prob.gate32, prob.beta32, d.cu_seqlens, d.h0,
                                   dtype=np.float32, final_state=want_ht)
        if out["low"] is None:
            out["low"], out["low_source"] = lo.astype(np.float64), "NumPy fp32 recurrence on the same problem"
        out["low_ht"] = None if lh is None else lh.astype(np.float64)
    out.update(problem_source=prob.source, lower_bound=prob.lower_bound)
    if log:
        log(f"  raw-contract references ({variant}) computed ({time.perf_counter() - t0:.1f} s)")
    if cache:
        _cache_store(d, variant, out, log)
    return out


_CACHE_ARRAYS = ("golden", "low", "golden_ht", "low_ht")


def _cache_load(d: "DumpedProblem", variant: str) -> dict | None:
    """A reference set cached by _cache_store for exactly these input files, or None."""
    where = os.path.join(d.directory, REF_CACHE_DIR, variant)
    try:
        with open(os.path.join(where, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return None
    files = meta.get("files", [])
    if meta.get("stamp") != _stamp(d) or not all(os.path.exists(os.path.join(where, n + ".npy")) for n in files):
        return None
    out = {n: (np.load(os.path.join(where, n + ".npy")) if n in files else None) for n in _CACHE_ARRAYS}
    out.update({k: v for k, v in meta.items() if k not in ("stamp", "files")})
    for k in ("source", "low_source"):
        if k in out:
            out[k] += " (cached)"
    return out


def _cache_store(d: "DumpedProblem", variant: str, out: dict, log=None) -> None:
    where = os.path.join(d.directory, REF_CACHE_DIR, variant)
    try:
        os.makedirs(where, exist_ok=True)
        files = [n for n in _CACHE_ARRAYS if out.get(n) is not None]
        for n in files:  # temp file + rename: a check running beside us never reads half a file
            tmp = os.path.join(where, f".{n}.{os.getpid()}.npy")
            np.save(tmp, out[n])
            os.replace(tmp, os.path.join(where, n + ".npy"))
        meta = {k: v for k, v in out.items() if k not in _CACHE_ARRAYS}
        meta.update(stamp=_stamp(d), files=files)
        write_atomic(os.path.join(where, "meta.json"), json.dumps(meta) + "\n", force=True)
    except OSError as e:
        if log:
            log(f"  (references not cached: {e})")


def contract_low_references(d: "DumpedProblem", log=None, cache: bool = True) -> dict:
    """The fp32 low of the dumped (contract) problem, output and final state: the dump's
    out_reference_f32 when there, and the NumPy fp32 recurrence for what is missing (dumps hold
    no fp32 final state), cached in DIR/peers-ref/contract/ like raw_references. Returns
    dict(low, low_ht, low_source, low_ht_source); low_ht None without a final state."""
    import time
    need_ht = d.want_final_state and "ht_reference" in d.outputs
    have_low = "out_reference_f32" in d.outputs
    if have_low and not need_ht:
        return {"low": np.asarray(d.load("out_reference_f32"), np.float64), "low_ht": None,
                "low_source": "dump: out_reference_f32 (CPU fp32 recurrence)", "low_ht_source": ""}
    if cache:
        hit = _cache_load(d, "contract")
        if hit is not None:
            return {"low": hit["low"], "low_ht": hit["low_ht"], "low_source": hit["low_source"],
                    "low_ht_source": hit["low_ht_source"] + " (cached)"}
    t0 = time.perf_counter()
    low, low_ht = recurrent_forward(d.q, d.k, d.v, d.gate, d.beta, d.cu_seqlens, d.h0, dtype=np.float32,
                                    final_state=need_ht)
    out = {"low": low.astype(np.float64), "low_ht": None if low_ht is None else low_ht.astype(np.float64),
           "low_source": "peers: NumPy fp32 recurrence (the dump has no out_reference_f32)",
           "low_ht_source": "peers: NumPy fp32 recurrence (dumps hold no fp32 final state)"}
    if have_low:
        out["low"] = np.asarray(d.load("out_reference_f32"), np.float64)
        out["low_source"] = "dump: out_reference_f32 (CPU fp32 recurrence)"
    if log:
        log(f"  fp32 reference recomputed with NumPy ({time.perf_counter() - t0:.1f} s)")
    if cache:
        _cache_store(d, "contract", out, log)
    return out


# ------------------------------------------------------------------------------------------------
# q rows an fp32 in-kernel l2norm cannot normalize (kda-forward.md §4.4)

def fp32_norm_overflow_rows(q) -> np.ndarray:
    """Bool [B,T,H]: finite q rows whose sum of squares overflows fp32 (|q| >~ 1.8e19: the row-scale
    suite's 1e20 and 3e38 rows). An in-kernel fp32 l2norm (FlashKDA, cuDNN-FE flags 7, FLA's
    use_qk_l2norm_in_kernel) gets rsqrt(inf) = 0 there: the row's output is 0, not the answer."""
    q32 = np.asarray(q, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        ssq = np.sum(q32 * q32, axis=-1, dtype=np.float32)
    return np.isinf(ssq) & np.all(np.isfinite(q32), axis=-1)


def judge_known_overflow(golden, low, actual, rows: np.ndarray, j: "Judgement", cu=None) -> tuple[str, "Judgement"]:
    """A failed judgement `j` of an output [B,T,H,V] from a path with an fp32 in-kernel q l2norm,
    on a problem with q rows that overflow it (`rows`, fp32_norm_overflow_rows). Judges the other
    rows again; returns (verdict, judgement of the other rows). The verdict starts 'known
    limitation:' (not a failure) only when the other rows pass and the overflow rows came out
    finite; otherwise 'failed: ...', with the other rows' result named."""
    rows = np.asarray(rows, dtype=bool)
    keep = ~rows
    g, lo, a = (np.asarray(x, dtype=np.float64) for x in (golden, low, actual))
    rest = judge(g[keep], lo[keep], a[keep])
    where = np.argwhere(rows)
    tokens = sorted({int(t) for _, t, _ in where})
    listed = ", ".join(map(str, tokens[:6])) + (", ..." if len(tokens) > 6 else "")
    out_rows = a[rows]
    state = ("0" if np.all(out_rows == 0) else "finite, not the answer") if np.all(np.isfinite(out_rows)) \
        else "non-finite"
    what = (f"{len(where)} q row{'s' if len(where) != 1 else ''} (token{'s' if len(tokens) != 1 else ''} "
            f"{listed}) overflow an fp32 sum of squares (in-kernel l2norm, kda-forward.md §4.4), output there "
            f"{state}")
    if rest.passed() and state != "non-finite":
        return (f"known limitation: {what}; the other rows pass (max abs err {sci(rest.max_abs_err)}, "
                f"rel RMS {sci(rest.rel_rms)})"), rest
    return f"{j.verdict()} ({what}; the other rows: {rest.verdict()})", rest


# ================================================================================================
# Reading result CSVs and comparing them (twin of kda-bench compare, lib/bench/src/compare.cpp)
# ================================================================================================

def read_csv_rows(path: str) -> list[dict]:
    """A CSV with a header row -> a list of dicts (cells as text). Raises InputError."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except csv.Error as e:
        raise InputError(f"{path}: not a CSV file: {e}") from None
    return rows


def _cell_number(row: dict, names: Sequence[str], scale: Sequence[float], path: str, line: int):
    for name, s in zip(names, scale):
        text = (row.get(name) or "").strip()
        if text:
            try:
                value = float(text) * s
            except ValueError:
                raise InputError(f"{path}: row {line}: column '{name}': not a number: {text!r}") from None
            return value
    return None


@dataclasses.dataclass
class Ratio:
    shape_id: str
    median_a: float | None
    median_b: float | None
    ratio: float | None       # median_B / median_A (< 1: B is faster)
    threshold: float
    verdict: str              # SAME, FASTER, SLOWER, INVALID


def compare_medians(rows_a: list[dict], rows_b: list[dict], path_a: str, path_b: str,
                    mode: str | None = "warm", same_within: float = 0.01, name_a: str = "A",
                    name_b: str = "B") -> tuple[list[Ratio], float]:
    """Per-shape ratios of path_b in rows_b against path_a in rows_a, with kda-bench compare's rule:
    ratio = median_B / median_A; threshold = max(noise_A, noise_B, same_within); SAME when
    |ratio - 1| <= threshold, FASTER below, SLOWER above, INVALID when a median is missing. Stage
    rows are left out. Returns (the ratios in A's shape order, the geomean of the valid ratios;
    NaN when none). Times in median_s (or median_ms); refuses a non-positive median or a negative
    noise, as compare does."""
    def index(rows, path, name):
        out = {}
        for line, r in enumerate(rows, start=2):
            if (r.get("path") or r.get("impl")) != path or (r.get("stage") or ""):
                continue
            if mode and (r.get("mode") or mode) != mode:
                continue
            median = _cell_number(r, ("median_s", "median_ms"), (1.0, 1e-3), name, line)
            noise = _cell_number(r, ("noise", "stdev_rel"), (1.0, 1.0), name, line)
            if median is not None and not (math.isfinite(median) and median > 0):
                raise InputError(f"{name}: row {line}: median must be a finite time > 0, got {median}")
            if noise is not None and not (math.isfinite(noise) and noise >= 0):
                raise InputError(f"{name}: row {line}: noise must be a finite fraction >= 0, got {noise}")
            out.setdefault(r.get("shape_id", ""), (median, noise or 0.0))
        return out
    a, b = index(rows_a, path_a, name_a), index(rows_b, path_b, name_b)
    ratios = []
    for shape_id, (ma, na) in a.items():
        if shape_id not in b:
            continue
        mb, nb = b[shape_id]
        threshold = max(na, nb, same_within)
        if ma is None or mb is None:
            ratios.append(Ratio(shape_id, ma, mb, None, threshold, "INVALID"))
            continue
        ratio = mb / ma
        verdict = "SAME" if abs(ratio - 1) <= threshold else ("FASTER" if ratio < 1 else "SLOWER")
        ratios.append(Ratio(shape_id, ma, mb, ratio, threshold, verdict))
    valid = [r.ratio for r in ratios if r.ratio is not None]
    return ratios, (geomean(valid) if valid else math.nan)
