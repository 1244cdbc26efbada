#!/usr/bin/env python3
"""Makes corrupted copies of one problem of a kda-check --dump directory, one directory per case,
for the `kda-check --load` refusal tests (tests/apps/CMakeLists.txt).

    corrupt_dump.py DUMP_DIR/<id> OUT_DIR

OUT_DIR/<case>/ then holds the problem's files with one of them broken (or meta.json contradicting
them). Everything is written under OUT_DIR; fifo_q's q.npy is a FIFO (made with os.mkfifo)."""
import json
import os
import pathlib
import shutil
import sys

import numpy as np


def main():
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    if not (src / "q.npy").exists():
        sys.exit(f"{src}: no q.npy (run kda-check --dump first)")
    shutil.rmtree(out, ignore_errors=True)

    q = np.load(src / "q.npy")
    cu = np.load(src / "cu_seqlens.npy")
    gate = np.load(src / "gate.npy")
    meta = json.loads((src / "meta.json").read_text())
    count = 0

    def case(name):
        nonlocal count
        count += 1
        d = out / name
        shutil.copytree(src, d)
        return d

    def edit_meta(d, **changes):
        m = dict(meta)
        for key, value in changes.items():
            if value is None:
                del m[key]
            else:
                m[key] = value
        (d / "meta.json").write_text(json.dumps(m, indent=2))

    d = case("truncated_q")  # the last 100 bytes of data cut off
    data = (d / "q.npy").read_bytes()
    (d / "q.npy").write_bytes(data[:-100])

    d = case("header_q")  # the header dict garbled
    data = (d / "q.npy").read_bytes()
    (d / "q.npy").write_bytes(data.replace(b"'shape': (", b"'shape': ["))

    d = case("text_q")  # not a .npy file at all
    (d / "q.npy").write_text("q,k,v\n1,2,3\n")

    d = case("f64_q")  # float64 instead of float32
    np.save(d / "q.npy", q.astype(np.float64))

    d = case("shape_k")  # k with one head fewer than q
    np.save(d / "k.npy", np.load(src / "k.npy")[:, :, :-1, :])

    d = case("not_bf16_q")  # a float32 value that no bf16 number equals
    bad = q.copy()
    bad.flat[5] = np.float32(1.0) + np.float32(2.0**-20)
    np.save(d / "q.npy", bad)

    d = case("decreasing_cu")  # offsets that go backwards
    bad_cu = cu.copy()
    bad_cu[1], bad_cu[2] = cu[2], cu[1]
    np.save(d / "cu_seqlens.npy", bad_cu.astype(np.int32))

    d = case("cu_past_end")  # offsets ending after the last token
    bad_cu = cu.copy()
    bad_cu[-1] = q.shape[1] + 1
    np.save(d / "cu_seqlens.npy", bad_cu.astype(np.int32))
    # --- issue 18: the gate contract, the file set, meta.json against the arrays -------------
    d = case("gate_steep")  # a per-token log2 decay of -20 inside a chunk (token 1)
    bad = gate.copy()
    bad[0, 1, 0, 0] = bad[0, 0, 0, 0] - 20
    np.save(d / "gate.npy", bad)

    d = case("gate_positive")  # the cumulative gate grows: a positive decay
    bad = gate.copy()
    bad[0, 1, 0, 0] = bad[0, 0, 0, 0] + 0.5
    np.save(d / "gate.npy", bad)

    d = case("gate_chunk_start")  # G > 0 at token 64 of the first sequence (a chunk start)
    bad = gate.copy()
    bad[0, 64, 0, 0] = 0.25
    np.save(d / "gate.npy", bad)

    d = case("empty_cu")  # no offsets at all: would read as a dense problem
    np.save(d / "cu_seqlens.npy", np.zeros(0, np.int32))

    d = case("missing_cu")  # meta.json lists cu_seqlens.npy, the file is gone
    (d / "cu_seqlens.npy").unlink()

    d = case("extra_h0")  # an initial state meta.json does not list (another problem's?)
    np.save(d / "h0.npy", np.zeros((len(cu) - 1, q.shape[2], q.shape[3], meta["value_dim"]),
                                   np.float32))

    d = case("meta_heads")  # meta.json says 3 heads, the arrays have 2
    edit_meta(d, heads=3)

    d = case("shape_q")  # q with one head fewer than meta.json (and k, v, gate) say
    np.save(d / "q.npy", q[:, :, :-1, :])

    d = case("meta_id_path")  # an id that names a path outside a --dump directory
    edit_meta(d, id="../../x")

    d = case("meta_id_control")  # an id with a terminal escape sequence
    edit_meta(d, id="a\x1b[31mb")

    d = case("meta_no_inputs")  # meta.json of a dump before the file list was recorded
    edit_meta(d, inputs=None)

    d = case("meta_final_state_text")
    edit_meta(d, want_final_state="yes")

    d = case("no_meta")
    (d / "meta.json").unlink()

    # --- issue 16: the raw inputs ------------------------------------------------------------
    raw_gate = np.load(src / "gate_raw.npy")
    d = case("raw_gate_not_gate")  # one raw gate value one bf16 step off: gate.npy no longer fits
    bad = raw_gate.copy()
    bad.view(np.uint32)[0, 3, 1, 5] += 0x10000
    np.save(d / "gate_raw.npy", bad)

    d = case("raw_partial")  # meta.json lists only some of the raw inputs
    edit_meta(d, inputs=[n for n in meta["inputs"] if n != "dt_bias.npy"])

    d = case("raw_no_bound")  # the raw files without the raw gate's lower bound
    edit_meta(d, lower_bound=None)

    d = case("raw_bound_out")  # a bound outside the bounded-gate contract
    edit_meta(d, lower_bound=-6.0)

    d = case("a_log_nan")
    a_log = np.load(src / "a_log.npy")
    a_log[1] = np.nan
    np.save(d / "a_log.npy", a_log)

    d = case("k_raw_shape")  # raw k with one head fewer
    np.save(d / "k_raw.npy", np.load(src / "k_raw.npy")[:, :, :-1, :])

    d = case("no_raw")  # a dump written before the raw inputs existed: loads, raw rows skipped
    for n in ("k_raw", "gate_raw", "beta_logits", "a_log", "dt_bias"):
        (d / f"{n}.npy").unlink()
    edit_meta(d, lower_bound=None,
              inputs=[n for n in meta["inputs"] if n in ("q.npy", "k.npy", "v.npy", "gate.npy",
                                                          "beta.npy", "cu_seqlens.npy", "h0.npy")])

    d = case("fifo_q")  # q.npy is a FIFO: reading it must not block
    (d / "q.npy").unlink()
    os.mkfifo(d / "q.npy")
    print(f"corrupt_dump: {count} cases under {out}")


if __name__ == "__main__":
    main()
