#!/usr/bin/env python3
"""Tests of scripts/sass_lines.py's parsing and attribution (no CUDA tools needed): a synthetic
`nvdisasm -gi` listing of two kernels, a source file with phase markers, and the counts each
region must get. Run: python3 scripts/test_sass_lines.py (ctest: sass_lines_script)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_lines  # noqa: E402

SOURCE = "\n".join([
    "// helpers",                                  # 1
    "float helper() { return 1; }",                # 2
    "void build() {",                              # 3
    "  // ---- 2: elementwise",                    # 4
    "  a = helper();",                             # 5
    "  // ---- Shared memory (bytes). not a marker: its first word is not followed by ':'",  # 6
    "  b = a * 2;",                                # 7
    "  // ---- 3: grams",                          # 8
    "  mma();",                                    # 9
    "}",                                           # 10
])

LISTING = """
	.section	.text._Z6kernelILi0EEvv,"ax",@progbits
.text._Z6kernelILi0EEvv:
	//## File "/src/kda/build.cuh", line 2 inlined at "/src/kda/build.cuh", line 5
	//## File "/src/kda/build.cuh", line 5 inlined at "/src/kda/kernel.cuh", line 40
	//## File "/src/kda/kernel.cuh", line 40
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   @!P0 LDS.128 R4, [R2] ;
	//## File "/src/kda/build.cuh", line 7 inlined at "/src/kda/kernel.cuh", line 40
	//## File "/src/kda/kernel.cuh", line 40
        /*0020*/                   FMUL R5, R4, 2 ;
	//## File "/src/kda/build.cuh", line 9 inlined at "/src/kda/kernel.cuh", line 40
        /*0030*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*10040*/                  STL [R1], R8 ;
	//## File "/src/kda/kernel.cuh", line 41
        /*10050*/                  EXIT ;
	.section	.text._Z5otherv,"ax",@progbits
.text._Z5otherv:
	//## File "/src/kda/build.cuh", line 7
        /*0000*/                   FADD R1, R2, R3 ;
"""


class SassLines(unittest.TestCase):
    def test_markers_need_a_one_word_name(self):
        self.assertEqual(sass_lines.marker_regions(SOURCE), [("2", 4, 7), ("3", 8, 10)])

    def test_parse_keeps_kernels_frames_and_five_digit_addresses(self):
        parsed = sass_lines.parse_disassembly(LISTING)
        self.assertEqual([k for k, _, _ in parsed], ["_Z6kernelILi0EEvv"] * 6 + ["_Z5otherv"])
        self.assertEqual(parsed[0][1][0], ("/src/kda/build.cuh", 2))
        self.assertEqual(parsed[4][2], "STL [R1], R8")  # address 0x10040: five hex digits
        # A new annotation block replaces the frames; instructions after one block share it.
        self.assertEqual(parsed[3][1], parsed[4][1])
        self.assertEqual(parsed[5][1], [("/src/kda/kernel.cuh", 41)])

    def test_opcode_drops_predicate_and_modifiers(self):
        self.assertEqual(sass_lines.opcode("@!P0 LDS.128 R4, [R2]"), "LDS")
        self.assertEqual(sass_lines.opcode("HMMA.16816.F32.BF16 R8, R12, R16, R8"), "HMMA")

    def test_a_same_file_helper_counts_at_its_call_site(self):
        regions = sass_lines.marker_regions(SOURCE)
        frames = [("/src/kda/build.cuh", 2), ("/src/kda/build.cuh", 5), ("/src/kda/kernel.cuh", 40)]
        self.assertEqual(sass_lines.region_of(frames, "kda/build.cuh", regions), ("2", 5))
        self.assertEqual(sass_lines.region_of([("/src/kda/kernel.cuh", 41)], "kda/build.cuh",
                                              regions), ("outside", None))

    def test_tally_by_kernel_and_region(self):
        regions = sass_lines.marker_regions(SOURCE)
        counts, listing = sass_lines.tally(sass_lines.parse_disassembly(LISTING), "kernel",
                                           "kda/build.cuh", regions)
        self.assertEqual(list(counts), ["_Z6kernelILi0EEvv"])
        by_region = counts["_Z6kernelILi0EEvv"]
        self.assertEqual(dict(by_region["2"]), {"MOV": 1, "LDS": 1, "FMUL": 1})
        self.assertEqual(dict(by_region["3"]), {"HMMA": 1, "STL": 1})
        self.assertEqual(dict(by_region["outside"]), {"EXIT": 1})
        self.assertEqual(listing["_Z6kernelILi0EEvv"]["3"][1], (9, "STL [R1], R8"))
        text = sass_lines.report(counts, regions)
        self.assertIn("_Z6kernelILi0EEvv: 6 instructions", text)
        self.assertRegex(text, r"\n\s+3\s+2  top: .*\| STL 1, HMMA 1")

    def test_region_argument(self):
        self.assertEqual(sass_lines.parse_region("inverse:543-584"), ("inverse", 543, 584))
        for bad in ("inverse", "inverse:9-3", "inverse:a-b"):
            with self.assertRaises(Exception):
                sass_lines.parse_region(bad)


if __name__ == "__main__":
    unittest.main()
