#!/usr/bin/env python3
"""Per-barrier-region summary of an Nsight Compute SASS source page.

Input: the CSV that `ncu -i REPORT --page source --csv --print-source sass` writes
(scripts/h200-profile.sh saves it as <shape>-<kernel>-src-sass.csv, optionally gzipped).
The kernel's SASS is cut at every BAR.SYNC / BAR.RED / EXIT; for each region it prints the
executed warp instructions per CTA, their share, the share of stall samples, the top stall
reasons, shared-memory wavefronts (and excess ones) per CTA and the most executed opcodes.
Regions are static code ranges: a loop whose body holds a barrier splits across regions.

  scripts/ncu_regions.py FILE.csv[.gz] --ctas 12288

With --lines SASS --kernel NAME --file SOURCE it attributes instead by source line: SASS is
`nvdisasm -gi` of a cubin built from the profiled commit with the same flags (the line info of
-lineinfo), NAME a substring of the kernel's mangled name, and each instruction goes to the
outermost line of SOURCE (a file name, e.g. halves_chunk.cuh) in its inlining chain: with SOURCE
the file of the kernel's phase calls, one row per phase call (docs/perf-notes.md "Both
predictions measured" was read this way). The two must be the same code: the row counts are
checked against the SASS's instruction count.

  nvdisasm -gi prep.sm_90a.cubin > prep.sass
  scripts/ncu_regions.py FILE.csv.gz --ctas 12384 --lines prep.sass --kernel 11prep_kernel \
      --file halves_chunk.cuh
"""
import argparse
import collections
import csv
import gzip
import re
import sys


def number(text):
    try:
        return float(text)
    except ValueError:
        return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", help="ncu source page (SASS) as CSV, .gz allowed")
    parser.add_argument("--ctas", type=int, required=True,
                        help="CTAs of the profiled launch (per-CTA figures divide by it)")
    parser.add_argument("--lines", metavar="SASS",
                        help="nvdisasm -gi output of the profiled code: attribute by source line")
    parser.add_argument("--kernel", help="with --lines: a substring of the kernel's mangled name")
    parser.add_argument("--file", help="with --lines: the source file whose lines are the rows")
    args = parser.parse_args()
    if args.lines and not (args.kernel and args.file):
        sys.exit("ncu_regions.py: --lines needs --kernel NAME and --file SOURCE")
    opener = gzip.open if args.csv.endswith(".gz") else open
    with opener(args.csv, "rt", newline="") as f:
        rows = list(csv.reader(f))
    header = next((i for i, r in enumerate(rows) if r[:2] == ["Address", "Source"]), None)
    if header is None:
        sys.exit(f"{args.csv}: no 'Address,Source' header row: not an ncu SASS source page")
    names = rows[header]
    col = {name: i for i, name in enumerate(names)}
    for needed in ("Instructions Executed", "Warp Stall Sampling (All Samples)"):
        if needed not in col:
            sys.exit(f"{args.csv}: column '{needed}' missing (profile with --set full)")
    stalls = [n for n in names if n.startswith("stall_") and "Not Issued" not in n]
    if args.lines:
        by_line(args, rows[header + 1:], col, stalls)
        return

    def fresh(start):
        return {"start": start, "instr": 0.0, "samples": 0.0, "wf": 0.0, "excess": 0.0,
                "stall": collections.Counter(), "ops": collections.Counter()}

    regions, cur = [], fresh(0)
    for k, r in enumerate(rows[header + 1:]):
        if len(r) < len(names):
            continue
        src = r[col["Source"]].strip()
        executed = number(r[col["Instructions Executed"]])
        cur["instr"] += executed
        cur["samples"] += number(r[col["Warp Stall Sampling (All Samples)"]])
        if "L1 Wavefronts Shared" in col:
            cur["wf"] += number(r[col["L1 Wavefronts Shared"]])
        if "L1 Wavefronts Shared Excessive" in col:
            cur["excess"] += number(r[col["L1 Wavefronts Shared Excessive"]])
        words = src.split()
        if words:
            op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
            cur["ops"][op.split(".")[0]] += executed
        for s in stalls:
            cur["stall"][s] += number(r[col[s]])
        if "BAR.SYNC" in src or "BAR.RED" in src or src.startswith("EXIT"):
            cur["end"] = k
            regions.append(cur)
            cur = fresh(k + 1)
    regions.append(cur)
    total = sum(g["instr"] for g in regions) or 1.0
    samples = sum(g["samples"] for g in regions) or 1.0
    print(f"executed warp instructions: {total:.0f} ({total / args.ctas:.0f} per CTA); "
          f"stall samples: {samples:.0f}")
    for g in regions:
        if g["instr"] == 0:
            continue
        top = ", ".join(f"{k[6:]} {100 * v / max(g['samples'], 1):.0f}%"
                        for k, v in g["stall"].most_common(3))
        ops = ", ".join(f"{k} {v / args.ctas:.0f}" for k, v in g["ops"].most_common(5))
        print(f"sass {g['start']:5d}-{g.get('end', -1):5d}  instr/CTA {g['instr'] / args.ctas:7.0f} "
              f"({100 * g['instr'] / total:4.1f}%)  samples {100 * g['samples'] / samples:4.1f}%  "
              f"shared wavefronts/CTA {g['wf'] / args.ctas:6.0f} (excess {g['excess'] / args.ctas:5.0f})"
              f"  | {top} | {ops}")


def sass_lines(path, kernel, source):
    """Offset -> outermost line of `source` in the instruction's inlining chain (0: none)."""
    try:
        text = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        sys.exit(f"ncu_regions.py: cannot read {path}: {e.strerror}")
    lines, chain, inside, found, fresh = {}, [], False, False, True
    location = re.compile(r'//## File "([^"]+)", line (\d+)')
    offset = re.compile(r"\s*/\*([0-9a-f]{4,})\*/")
    for row in text:
        if ".section" in row and ".text." in row:
            inside = kernel in row
            found = found or inside
            continue
        if not inside:
            continue
        m = location.search(row)
        if m:
            if fresh:
                chain, fresh = [], False
            chain.append((m.group(1).rsplit("/", 1)[-1], int(m.group(2))))
            continue
        m = offset.match(row)
        if m:
            fresh = True
            mine = [line for name, line in chain if name == source]
            lines[int(m.group(1), 16)] = mine[-1] if mine else 0
    if not found:
        sys.exit(f"ncu_regions.py: no kernel matching '{kernel}' in {path}")
    return lines


def by_line(args, rows, col, stalls):
    lines = sass_lines(args.lines, args.kernel, args.file)
    rows = [r for r in rows if len(r) >= len(col)]
    if len(rows) != len(lines):
        sys.exit(f"ncu_regions.py: {len(rows)} profiled instructions but {len(lines)} in the "
                 f"SASS of '{args.kernel}': not the profiled code (rebuild at its commit)")
    base = int(rows[0][col["Address"]], 16)
    groups = collections.defaultdict(lambda: {"instr": 0.0, "samples": 0.0,
                                              "stall": collections.Counter()})
    for r in rows:
        line = lines.get(int(r[col["Address"]], 16) - base, 0)
        g = groups[line]
        g["instr"] += number(r[col["Instructions Executed"]])
        g["samples"] += number(r[col["Warp Stall Sampling (All Samples)"]])
        for s in stalls:
            g["stall"][s] += number(r[col[s]])
    total = sum(g["instr"] for g in groups.values()) or 1.0
    samples = sum(g["samples"] for g in groups.values()) or 1.0
    print(f"executed warp instructions: {total:.0f} ({total / args.ctas:.0f} per CTA) by line of "
          f"{args.file} (0: code outside it)")
    for line in sorted(groups):
        g = groups[line]
        top = ", ".join(f"{k[6:]} {100 * v / max(g['samples'], 1):.0f}%"
                        for k, v in g["stall"].most_common(3))
        print(f"{args.file}:{line:<5d} instr/CTA {g['instr'] / args.ctas:7.0f} "
              f"({100 * g['instr'] / total:4.1f}%)  samples {100 * g['samples'] / samples:4.1f}%"
              f"  | {top}")


if __name__ == "__main__":
    main()
