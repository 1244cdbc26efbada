#!/usr/bin/env python3
"""Makes corrupted copies of one problem of a kda-check --dump directory, one directory per case,
for the `kda-check --load` refusal tests (tests/apps/CMakeLists.txt).

    corrupt_dump.py DUMP_DIR/<id> OUT_DIR

OUT_DIR/<case>/ then holds the problem's files with one of them broken."""
import pathlib
import shutil
import sys

import numpy as np


def main():
    src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    if not (src / "q.npy").exists():
        sys.exit(f"{src}: no q.npy (run kda-check --dump first)")
    shutil.rmtree(out, ignore_errors=True)

    def case(name):
        d = out / name
        shutil.copytree(src, d)
        return d

    q = np.load(src / "q.npy")
    cu = np.load(src / "cu_seqlens.npy")

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
    print(f"corrupt_dump: 8 cases under {out}")


if __name__ == "__main__":
    main()
