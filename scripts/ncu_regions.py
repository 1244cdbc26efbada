#!/usr/bin/env python3
"""Per-barrier-region summary of an Nsight Compute SASS source page.

Input: the CSV that `ncu -i REPORT --page source --csv --print-source sass` writes
(scripts/h200-profile.sh saves it as <shape>-<kernel>-src-sass.csv, optionally gzipped).
The kernel's SASS is cut at every BAR.SYNC / BAR.RED / EXIT; for each region it prints the
executed warp instructions per CTA, their share, the share of stall samples, the top stall
reasons, shared-memory wavefronts (and excess ones) per CTA and the most executed opcodes.
Regions are static code ranges: a loop whose body holds a barrier splits across regions.

  scripts/ncu_regions.py FILE.csv[.gz] --ctas 12288
"""
import argparse
import collections
import csv
import gzip
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
