"""Copies libkda_c.so into the package at build time, so the installed package finds it next to
its own files. The library is built by CMake (target kda_c), not here: building it means building
lib/kda's CUDA kernels (minutes, nvcc 13, sm_90a), which the project's CMake presets already do.

Which library: $KDA_C_LIBRARY if set, else ../build/release/lib/libkda_c.so (the release preset's
build next to this directory). Metadata lives in pyproject.toml.
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_LIBRARY = os.path.join(HERE, "..", "build", "release", "lib", "libkda_c.so")


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        library = os.environ.get("KDA_C_LIBRARY") or DEFAULT_LIBRARY
        if not os.path.isfile(library):
            raise SystemExit(
                f"kda-torch: {library} does not exist. Build it first (from the repository root: "
                f"cmake --preset release && cmake --build --preset release --target kda_c), or set "
                f"KDA_C_LIBRARY to a built libkda_c.so")
        target = os.path.join(self.build_lib, "kda_torch", "libkda_c.so")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(library, target)


class BinaryDistribution(Distribution):
    # The wheel carries a native library: tag it for this platform, not as pure Python.
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
