#!/usr/bin/env python3
"""Count a kernel's SASS instructions by the source region they come from (no GPU needed).

  scripts/sass_lines.py OBJECT --kernel SUBSTRING --source FILE [--region NAME:FIRST-LAST ...]
                        [--dump NAME]

OBJECT is anything cuobjdump reads (a .o, libkda.a, an executable) built with -lineinfo (the
project's CUDA flags have it). Its cubins are disassembled with `nvdisasm -gi`, which names each
instruction's source line and the lines it was inlined at; an instruction belongs to the first
frame of that chain in FILE that lies in a region (the innermost such call site, so a helper,
from FILE or another header, counts where the region calls it). Regions are line ranges of FILE: by default one per marker comment
"// ---- NAME: ..." with a one-word NAME (lib/kda/src/onepass/build16.cuh's phases 2 .. 5), each
running to the line before the next marker (the last to the end of FILE), or the given
--region NAME:FIRST-LAST ranges (inclusive); the rest of FILE and other files are "outside".
Prints, per kernel whose mangled name contains
SUBSTRING, each region's instruction count and most frequent opcodes, and the shared-memory,
local-memory (spill), barrier, shuffle and MUFU counts; --dump NAME prints that region's
instructions with their lines. Counts are static (each instruction once, rare branches included);
the dynamic mix needs the profiler. Needs cuobjdump and nvdisasm (CUDA toolkit, or the
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels with their bin/ on PATH).
Exit status: 0, 1 when no kernel matches, 2 on bad usage or a missing tool.
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

FRAME = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
TEXT_SECTION = re.compile(r"^\.text\.(\S+):\s*$")
MARKER = re.compile(r"//\s*----\s*(\w+)\s*:")
WATCHED = ("LDS", "STS", "LDL", "STL", "BAR", "SHFL", "MUFU", "HGMMA", "HMMA")


def parse_disassembly(text):
    """[(kernel, [(file, line), ...] innermost first, instruction text)] from `nvdisasm -gi`."""
    out, kernel, frames, frames_done = [], None, [], False
    for line in text.splitlines():
        m = TEXT_SECTION.match(line)
        if m:
            kernel, frames, frames_done = m.group(1), [], False
            continue
        m = FRAME.search(line)
        if m:
            if frames_done:  # a new annotation block after instructions
                frames, frames_done = [], False
            frames.append((m.group(1), int(m.group(2))))
            if m.group(3):
                frames.append((m.group(3), int(m.group(4))))
            continue
        m = INSTRUCTION.match(line)
        if m and kernel is not None:
            frames_done = True
            out.append((kernel, list(frames), m.group(1)))
    return out


def opcode(instruction):
    """The opcode's base name: "@!P0 LDS.128 R4, [R2]" -> "LDS"."""
    words = instruction.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def marker_regions(source_text):
    """[(name, first, last)] from the "// ---- NAME:" markers, 1-based inclusive lines."""
    lines = source_text.splitlines()
    starts = [(i + 1, m.group(1)) for i, line in enumerate(lines) for m in [MARKER.search(line)] if m]
    regions = []
    for k, (first, name) in enumerate(starts):
        last = starts[k + 1][0] - 1 if k + 1 < len(starts) else len(lines)
        regions.append((name, first, last))
    return regions


def parse_region(spec):
    m = re.fullmatch(r"([^:]+):(\d+)-(\d+)", spec)
    if not m or int(m.group(2)) > int(m.group(3)):
        raise argparse.ArgumentTypeError(f"--region {spec!r}: expected NAME:FIRST-LAST, FIRST <= LAST")
    return m.group(1), int(m.group(2)), int(m.group(3))


def region_of(frames, source, regions):
    """The region of the innermost frame in `source` (by path suffix) that lies in a region (a
    helper of the same file counts at its call site), "outside" if none does."""
    first_line = None
    for path, line in frames:
        if path == source or path.endswith("/" + source.lstrip("./")):
            first_line = line if first_line is None else first_line
            for name, first, last in regions:
                if first <= line <= last:
                    return name, line
    return "outside", first_line


def tally(instructions, kernel_filter, source, regions):
    """{kernel: {region: Counter(opcode)}} and {kernel: {region: [(line, text)]}}."""
    counts = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
    listing = collections.defaultdict(lambda: collections.defaultdict(list))
    for kernel, frames, text in instructions:
        if kernel_filter not in kernel:
            continue
        name, line = region_of(frames, source, regions)
        counts[kernel][name][opcode(text)] += 1
        listing[kernel][name].append((line, text))
    return counts, listing


def report(counts, regions):
    order = [name for name, _, _ in regions] + ["outside"]
    lines = []
    for kernel, by_region in counts.items():
        lines.append(f"{kernel}: {sum(sum(c.values()) for c in by_region.values())} instructions")
        for name in order:
            c = by_region.get(name)
            if not c:
                continue
            watched = ", ".join(f"{op} {c[op]}" for op in WATCHED if c[op])
            top = ", ".join(f"{op} {n}" for op, n in c.most_common(6))
            lines.append(f"  {name:>12} {sum(c.values()):6d}  top: {top}" +
                         (f"  | {watched}" if watched else ""))
    return "\n".join(lines)


def disassemble(path):
    for tool in ("cuobjdump", "nvdisasm"):
        if shutil.which(tool) is None:
            sys.exit(f"sass_lines: {tool} not found: install the CUDA toolkit or the "
                     f"nvidia-cuda-{tool} wheel and put its bin/ on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            subprocess.run(["cuobjdump", "-xelf", "all", os.path.abspath(path)], cwd=tmp,
                           check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as e:
            sys.exit(f"sass_lines: cuobjdump could not read {path}: {e.stderr.strip()}")
        texts = []
        for name in sorted(os.listdir(tmp)):
            if name.endswith(".cubin"):
                texts.append(subprocess.run(["nvdisasm", "-gi", os.path.join(tmp, name)],
                                            check=True, capture_output=True, text=True).stdout)
    if not texts:
        sys.exit(f"sass_lines: {path} holds no cubin")
    return "\n".join(texts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("object")
    parser.add_argument("--kernel", required=True, help="a substring of the kernels' mangled names")
    parser.add_argument("--source", required=True, help="the source file whose regions count")
    parser.add_argument("--region", type=parse_region, action="append", default=[],
                        metavar="NAME:FIRST-LAST", help="a line range of SOURCE (repeatable)")
    parser.add_argument("--dump", metavar="NAME", help="print this region's instructions")
    args = parser.parse_args()
    if not os.path.isfile(args.object):
        parser.error(f"{args.object} is not a file")
    if not os.path.isfile(args.source):
        parser.error(f"--source {args.source} is not a file")
    regions = args.region
    if not regions:
        with open(args.source, encoding="utf-8") as f:
            regions = marker_regions(f.read())
        if not regions:
            parser.error(f"{args.source} has no '// ---- NAME:' markers: pass --region")
    counts, listing = tally(parse_disassembly(disassemble(args.object)), args.kernel,
                            args.source, regions)
    if not counts:
        print(f"sass_lines: no kernel of {args.object} has {args.kernel!r} in its name",
              file=sys.stderr)
        return 1
    print(report(counts, regions))
    if args.dump:
        for kernel, by_region in listing.items():
            print(f"--- {kernel}, region {args.dump}")
            for line, text in by_region.get(args.dump, []):
                print(f"{line if line is not None else '-':>6}: {text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
