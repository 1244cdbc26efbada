#!/usr/bin/env python3
"""Compare the SASS of every kernel in two builds (object files or static libraries).

  scripts/sass_compare.py OLD NEW [--only SUBSTRING] [--rename OLD_NAME NEW_NAME ...]

OLD and NEW are anything cuobjdump reads: a .o, libkda.a, or an executable. Kernels are matched
by name: the demangled name (c++filt) without its anonymous namespaces, so a kernel that moved to
another file (whose anonymous-namespace hash and file name are part of the mangled name) is still
the same kernel; without c++filt, the mangled name with the anonymous namespace's hash removed.
--rename pairs an old kernel with a new one of another name (a renamed kernel, another namespace
or template argument), both spelled as this script prints them; the rename then counts as a match.
Instructions are compared without their addresses and encodings. Prints, per kernel, the
instruction counts and "identical" or the first differing lines, then a summary line, and exits 1
if any kernel present in both (or paired by --rename) differs, or a --rename names a kernel that
is not there (0 otherwise). This is the check behind claims such as "the contract kernels' code is
unchanged" (docs/perf-notes.md); it needs cuobjdump (CUDA toolkit, or the nvidia-cuda-cuobjdump
wheel).
"""
import argparse
import difflib
import re
import shutil
import subprocess
import sys

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")
# Anonymous namespaces: "_GLOBAL__N__<hash>_" (nvcc -c of one file) or
# "_GLOBAL__N_<len>_<file>_cu_<8 hex>" (CMake builds); the hash follows the file's contents.
ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_|(?<=_cu_)[0-9a-f]{8}")


def demangle(names):
    """Demangled names without "(anonymous namespace)::", or None without c++filt."""
    if shutil.which("c++filt") is None:
        return None
    text = subprocess.run(["c++filt"], input="\n".join(names), check=True, capture_output=True,
                          text=True).stdout
    return [line.replace("(anonymous namespace)::", "") for line in text.splitlines()]


def kernels(path):
    try:
        text = subprocess.run(["cuobjdump", "-sass", path], check=True, capture_output=True,
                              text=True).stdout
    except FileNotFoundError:
        sys.exit("sass_compare: cuobjdump not found: install the CUDA toolkit or "
                 "`pip download nvidia-cuda-cuobjdump` and put its bin/ on PATH")
    except subprocess.CalledProcessError as e:
        sys.exit(f"sass_compare: cuobjdump failed on {path}: {e.stderr.strip()}")
    mangled, code = [], []
    for line in text.splitlines():
        m = FUNCTION.search(line)
        if m:
            mangled.append(m.group(1))
            code.append([])
            continue
        m = INSTRUCTION.match(line)
        if code and m and m.group(1):
            code[-1].append(m.group(1))
    names = demangle(mangled)
    if names is None or len(names) != len(mangled):
        names = [ANON.sub(lambda a: "_GLOBAL__N_" if a.group(0).startswith("_") else "H", n)
                 for n in mangled]
    out = {}
    for name, raw, instructions in zip(names, mangled, code):
        if name in out:  # two kernels that differ only in their anonymous namespace
            name = f"{name} [{raw}]"
        out[name] = instructions
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--only", default="", help="compare kernels whose name contains this")
    parser.add_argument("--rename", nargs=2, action="append", default=[],
                        metavar=("OLD_NAME", "NEW_NAME"),
                        help="compare old kernel OLD_NAME with new kernel NEW_NAME")
    args = parser.parse_args()
    old, new = kernels(args.old), kernels(args.new)
    pairs, missing = {}, 0
    for old_name, new_name in args.rename:
        for name, side in ((old_name, old), (new_name, new)):
            if name not in side:
                print(f"--rename: no kernel {name!r} in {args.old if side is old else args.new}")
                missing += 1
        pairs[old_name] = new_name
    renamed_to = set(pairs.values())
    counts = {"identical": 0, "differ": 0, "only in old": 0, "only in new": 0}
    for name in sorted(set(old) | set(new)):
        if args.only not in name and args.only not in pairs.get(name, ""):
            continue
        if name in renamed_to and name not in old:
            continue  # reported with its old name
        new_name = pairs.get(name, name)
        label = name if new_name == name else f"{name} -> {new_name}"
        if name not in old or new_name not in new:
            side = "new" if name not in old else "old"
            counts[f"only in {side}"] += 1
            print(f"only in {side}: {label}")
            continue
        a, b = old[name], new[new_name]
        if a == b:
            counts["identical"] += 1
            print(f"identical ({len(a)} instructions): {label}")
            continue
        counts["differ"] += 1
        print(f"DIFFER ({len(a)} -> {len(b)} instructions): {label}")
        for line in list(difflib.unified_diff(a, b, lineterm="", n=0))[2:12]:
            print("    " + line)
    print(", ".join(f"{value} {key}" for key, value in counts.items()))
    return 1 if counts["differ"] or missing else 0


if __name__ == "__main__":
    sys.exit(main())
