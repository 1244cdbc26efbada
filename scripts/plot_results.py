#!/usr/bin/env python3
"""Plot a kda-bench results CSV: per-shape median time of each path (bars, p20-p80 whiskers)
and the fused/explicit time ratio per shape with its geomean.

    scripts/plot_results.py results/run.csv                 # writes results/run.png
    scripts/plot_results.py run.csv -o fig.png --mode cold --force

Reads the columns shape_id, path, median_s and, when present, mode, stage, p20_s, p80_s,
verdict, device_name, git_commit (kda-bench's CSV; see apps/kda-bench/README.md). Stage rows
(--stages) are left out. Exit codes: 0 written, 2 bad input or output path.
Needs numpy and matplotlib (Debian: python3-numpy python3-matplotlib, /usr/bin/python3).
"""

import argparse
import csv
import math
import os
import re
import sys

PATH_ORDER = ["fused", "explicit", "l2norm"]
PATH_COLOURS = {"fused": "#1f77b4", "explicit": "#ff7f0e", "l2norm": "#2ca02c"}


class InputError(Exception):
    pass


def printable(text):
    """Control characters of a message (file names and cells come from the user) as \\xNN."""
    return re.sub(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def read_rows(path):
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None:
                raise InputError(f"{path}: empty file (expected a kda-bench CSV header)")
            missing = [c for c in ("shape_id", "path", "median_s") if c not in reader.fieldnames]
            if missing:
                raise InputError(
                    f"{path}: missing column(s) {', '.join(missing)}; the file has: "
                    f"{', '.join(reader.fieldnames)} (expected a kda-bench results CSV)")
            rows = []
            for number, row in enumerate(reader, start=2):
                if None in row or any(v is None for v in row.values()):
                    raise InputError(f"{path}:{number}: the row's field count differs from the header's")
                rows.append((number, row))
            return reader.fieldnames, rows
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                         f"{e.start}); expected a kda-bench results CSV") from None
    except csv.Error as e:
        raise InputError(f"{path}: not a valid CSV: {e}") from None


def number(text, path, line, column):
    if text in ("", None):
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{path}:{line}: column {column}: {text!r} is not a number") from None


def collect(path, mode):
    fields, rows = read_rows(path)
    modes = []
    for _, row in rows:
        m = row.get("mode", "")
        if m not in modes:
            modes.append(m)
    if not rows:
        raise InputError(f"{path}: no data rows")
    if mode is None:
        mode = modes[0]
        if len(modes) > 1:
            print(f"plot_results.py: {path} has modes {', '.join(modes)}; plotting '{mode}' "
                  f"(choose with --mode)", file=sys.stderr)
    elif mode not in modes:
        raise InputError(f"{path}: no rows of mode {mode!r} (the file has: {', '.join(modes)})")

    shapes, data, meta = [], {}, {}
    for line, row in rows:
        if row.get("mode", "") != mode or row.get("stage", ""):
            continue
        shape, p = row["shape_id"], row["path"]
        median = number(row["median_s"], path, line, "median_s")
        if not (median > 0):
            raise InputError(f"{path}:{line}: median_s must be a positive number of seconds")
        p20 = number(row.get("p20_s", ""), path, line, "p20_s")
        p80 = number(row.get("p80_s", ""), path, line, "p80_s")
        if (shape, p) in data:
            raise InputError(f"{path}:{line}: a second row for shape {shape}, path {p}, mode {mode}")
        if shape not in shapes:
            shapes.append(shape)
        data[(shape, p)] = (median, p20, p80, row.get("verdict", ""))
        for key in ("device_name", "git_commit"):
            if row.get(key):
                meta.setdefault(key, row[key])
    if not data:
        raise InputError(f"{path}: no whole-path rows of mode {mode!r}")
    return mode, shapes, data, meta


def plot(path, out, mode, title):
    # The CSV first: a bad file is refused the same way with or without matplotlib.
    mode, shapes, data, meta = collect(path, mode)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError as e:
        raise InputError(f"needs numpy and matplotlib ({e}); on Debian run it with /usr/bin/python3 "
                         f"(python3-numpy, python3-matplotlib)") from None

    paths = [p for p in PATH_ORDER if any((s, p) in data for s in shapes)]
    paths += sorted({p for (_, p) in data} - set(paths))

    fig, (ax_t, ax_r) = plt.subplots(2, 1, figsize=(max(8.0, 1.6 * len(shapes) + 3), 8.5),
                                     gridspec_kw={"height_ratios": [3, 2]})
    x = np.arange(len(shapes))
    width = 0.8 / max(len(paths), 1)
    for i, p in enumerate(paths):
        med, lo, hi = [], [], []
        for s in shapes:
            m, p20, p80, _ = data.get((s, p), (math.nan, math.nan, math.nan, ""))
            med.append(m * 1e6)
            lo.append(max(m - p20, 0.0) * 1e6 if not math.isnan(p20) else 0.0)
            hi.append(max(p80 - m, 0.0) * 1e6 if not math.isnan(p80) else 0.0)
        offs = x + (i - (len(paths) - 1) / 2) * width
        ax_t.bar(offs, med, width, yerr=[lo, hi], capsize=2, label=p,
                 color=PATH_COLOURS.get(p), edgecolor="black", linewidth=0.4)
        for xo, s in zip(offs, shapes):
            verdict = data.get((s, p), (0, 0, 0, ""))[3]
            if verdict.startswith("failed"):
                ax_t.annotate("failed", (xo, 0), ha="center", va="bottom", color="red",
                              fontsize=7, rotation=90)
    ax_t.set_xticks(x, shapes)
    ax_t.set_ylabel("median GPU time (us)")
    ax_t.legend(title="path")
    ax_t.grid(axis="y", alpha=0.3)
    subtitle = ", ".join(v for v in (meta.get("device_name"), meta.get("git_commit", "")[:12]) if v)
    ax_t.set_title(title or f"kda-bench ({mode}){': ' + subtitle if subtitle else ''}")

    ratios = []
    for s in shapes:
        f = data.get((s, "fused"), (math.nan,))[0]
        e = data.get((s, "explicit"), (math.nan,))[0]
        ratios.append(f / e if f > 0 and e > 0 else math.nan)
    finite = [r for r in ratios if not math.isnan(r)]
    if finite:
        # Bars grow from 1.0 (no change) so the axis need not start at zero.
        ax_r.bar(x, [r - 1.0 for r in ratios], 0.5, bottom=1.0, color="#7f7f7f",
                 edgecolor="black", linewidth=0.4)
        geo = math.exp(sum(math.log(r) for r in finite) / len(finite))
        ax_r.axhline(1.0, color="black", linewidth=0.8)
        ax_r.axhline(geo, color="#d62728", linestyle="--", linewidth=1.0,
                     label=f"geomean {geo:.3f} ({len(finite)} shapes)")
        for xi, r in zip(x, ratios):
            if not math.isnan(r):
                ax_r.annotate(f"{r:.3f}", (xi, r), ha="center",
                              va="bottom" if r >= 1.0 else "top", fontsize=8)
        lo_r, hi_r = min(finite + [1.0]), max(finite + [1.0])
        pad = max(0.02, 0.15 * (hi_r - lo_r))
        ax_r.set_ylim(lo_r - pad, hi_r + pad)
        ax_r.legend()
    else:
        ax_r.text(0.5, 0.5, "no shape has both fused and explicit rows", ha="center",
                  va="center", transform=ax_r.transAxes)
    ax_r.set_xticks(x, shapes)
    ax_r.set_ylabel("fused / explicit time")
    ax_r.grid(axis="y", alpha=0.3)

    fig.tight_layout()
    tmp = f"{out}.tmp.{os.getpid()}.png"
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, out)
    except OSError as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise InputError(f"{out}: cannot write: {e.strerror}") from None
    finally:
        plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="kda-bench results CSV (--csv)")
    ap.add_argument("-o", "--output", help="PNG to write (default: the CSV's name with .png)")
    ap.add_argument("--mode", help="which timing mode to plot (default: the first in the file)")
    ap.add_argument("--title", help="figure title")
    ap.add_argument("--force", action="store_true", help="overwrite an existing PNG")
    args = ap.parse_args(argv)
    out = args.output or os.path.splitext(args.csv)[0] + ".png"
    try:
        if os.path.exists(out) and not args.force:
            raise InputError(f"{out} exists; pass --force to overwrite it")
        plot(args.csv, out, args.mode, args.title)
    except InputError as e:
        print(f"plot_results.py: {printable(str(e))}", file=sys.stderr)
        return 2
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
