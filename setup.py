"""Builds pyepp's native module with CMake, for ``pip install --no-build-isolation .``.

The metadata is in pyproject.toml. This file only adds the extension: build_ext configures the
whole project with the CLI, tests and benchmarks off, builds the ``_pyepp`` target for the
interpreter running the build, and copies the module into the package as
``pyepp/_pyepp<EXT_SUFFIX>``. Extra CMake arguments can be passed in the ``CMAKE_ARGS``
environment variable; ``CMAKE_BUILD_PARALLEL_LEVEL`` sets the build's parallelism.
"""

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SOURCE_DIR = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    """An extension CMake builds; setuptools compiles nothing itself."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        if not isinstance(ext, CMakeExtension):
            super().build_extension(ext)
            return
        build_dir = Path(self.build_temp).resolve() / "cmake"
        config = "Debug" if self.debug else "Release"
        configure = [
            "cmake",
            "-S", str(SOURCE_DIR),
            "-B", str(build_dir),
            f"-DCMAKE_BUILD_TYPE={config}",
            f"-DPython_EXECUTABLE={sys.executable}",
            "-DEPP_BUILD_PYTHON=ON",
            "-DEPP_BUILD_TESTS=OFF",
            "-DEPP_BUILD_CLI=OFF",
            "-DEPP_BUILD_BENCH=OFF",
            *shlex.split(os.environ.get("CMAKE_ARGS", "")),
        ]
        subprocess.run(configure, check=True)
        build = ["cmake", "--build", str(build_dir), "--target", ext.target]
        if self.parallel:
            build += ["--parallel", str(self.parallel)]
        subprocess.run(build, check=True)

        # python/CMakeLists.txt writes the module to <build>/python/, named for this interpreter.
        built = build_dir / "python" / (ext.target + sysconfig.get_config_var("EXT_SUFFIX"))
        destination = Path(self.get_ext_fullpath(ext.name))
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, destination)


# Package layout lives here rather than in [tool.setuptools], which setuptools 66 flags as beta.
setup(
    packages=["pyepp"],
    package_dir={"": "python"},
    package_data={"pyepp": ["py.typed", "*.pyi"]},
    zip_safe=False,
    ext_modules=[CMakeExtension("pyepp._pyepp", target="_pyepp")],
    cmdclass={"build_ext": CMakeBuild},
)
