"""CTest kda_torch_pip_install: `pip install --no-build-isolation --no-deps --target SITE PKG` with
KDA_C_LIBRARY naming the freshly built libkda_c.so, the install a user runs (into a target
directory: pip skips Debian's externally-managed check there, and nothing outside the build tree
changes). Exit 77 (skipped) when pip, setuptools or wheel is missing for this Python."""

import importlib.util
import os
import subprocess
import sys


def main() -> int:
    site, package, library = sys.argv[1:4]
    missing = [m for m in ("pip", "setuptools", "wheel") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"skipped: {', '.join(missing)} not installed for {sys.executable}; on Debian 12 "
              f"install python3-pip python3-setuptools python3-wheel (scripts/install-deps.sh)")
        return 77
    command = [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
               "--no-index", "--upgrade", "--target", site, package]
    print(" ".join(command), f"(KDA_C_LIBRARY={library})", flush=True)
    env = dict(os.environ, KDA_C_LIBRARY=library, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_ROOT_USER_ACTION="ignore")
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
