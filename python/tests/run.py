"""Runs one of kda_torch's test files for CTest: `run.py cpu` (test_cpu.py) or `run.py gpu`
(test_gpu.py). Exit codes: 0 passed, 1 failed, 77 skipped (CTest SKIP_RETURN_CODE) when torch is
not installed for this Python, or, for gpu, when torch sees no CUDA device."""

import os
import sys
import unittest

SKIP = 77


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in ("cpu", "gpu"):
        print("usage: run.py cpu|gpu", file=sys.stderr)
        return 2
    kind = sys.argv[1]
    try:
        import torch
    except ImportError as e:
        print(f"skipped: torch is not installed for {sys.executable} ({e}); on Debian 12 install "
              f"python3-torch (scripts/install-deps.sh)")
        return SKIP
    if kind == "gpu" and not torch.cuda.is_available():
        print(f"skipped: torch {torch.__version__} sees no CUDA device: the GPU tests need an "
              f"H100/H200 and a CUDA build of torch")
        return SKIP
    try:
        import kda_torch
    except ImportError as e:
        # Reached only when the install fixture was skipped (no pip): had it failed, CTest would
        # not run this test.
        print(f"skipped: kda_torch is not installed ({e}); see the kda_torch_pip_install test")
        return SKIP
    print(f"kda_torch from {os.path.dirname(kda_torch.__file__)}, torch {torch.__version__}")
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    suite = unittest.defaultTestLoader.loadTestsFromName(f"test_{kind}")
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
