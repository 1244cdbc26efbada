#!/usr/bin/env python3
"""Compare the SASS of every kernel in two builds (object files or static libraries).

  scripts/sass_compare.py OLD NEW [--only SUBSTRING]

OLD and NEW are anything cuobjdump reads: a .o, libkda.a, or an executable. Kernels are matched
by mangled name with the anonymous-namespace hash removed (it changes with the file's path);
instructions are compared without their addresses and encodings. Prints, per kernel, the
instruction counts and "identical" or the first differing lines, and exits 1 if any kernel present
in both differs (0 otherwise). This is the check behind claims such as "the contract kernels'
code is unchanged" (docs/perf-notes.md); it needs cuobjdump (CUDA toolkit, or the
nvidia-cuda-cuobjdump wheel).
"""
import argparse
import difflib
import re
import subprocess
import sys

FUNCTION = re.compile(r"Function : (\S+)")
INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*;")
# Anonymous namespaces: "_GLOBAL__N__<hash>_" (nvcc -c of one file) or
# "_GLOBAL__N_<len>_<file>_cu_<8 hex>" (CMake builds); the hash follows the file's contents.
ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_|(?<=_cu_)[0-9a-f]{8}")


def kernels(path):
    try:
        text = subprocess.run(["cuobjdump", "-sass", path], check=True, capture_output=True,
                              text=True).stdout
    except FileNotFoundError:
        sys.exit("sass_compare: cuobjdump not found: install the CUDA toolkit or "
                 "`pip download nvidia-cuda-cuobjdump` and put its bin/ on PATH")
    except subprocess.CalledProcessError as e:
        sys.exit(f"sass_compare: cuobjdump failed on {path}: {e.stderr.strip()}")
    out, name = {}, None
    for line in text.splitlines():
        m = FUNCTION.search(line)
        if m:
            name = ANON.sub(lambda a: "_GLOBAL__N_" if a.group(0).startswith("_") else "H",
                            m.group(1))
            out[name] = []
            continue
        m = INSTRUCTION.match(line)
        if name is not None and m and m.group(1):
            out[name].append(m.group(1))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--only", default="", help="compare kernels whose name contains this")
    args = parser.parse_args()
    old, new = kernels(args.old), kernels(args.new)
    differ = 0
    for name in sorted(set(old) | set(new)):
        if args.only not in name:
            continue
        if name not in old or name not in new:
            print(f"only in {'new' if name in new else 'old'}: {name}")
            continue
        a, b = old[name], new[name]
        if a == b:
            print(f"identical ({len(a)} instructions): {name}")
            continue
        differ += 1
        print(f"DIFFER ({len(a)} -> {len(b)} instructions): {name}")
        for line in list(difflib.unified_diff(a, b, lineterm="", n=0))[2:12]:
            print("    " + line)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
