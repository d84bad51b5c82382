"""Locates the compiled module, ``_pyepp``, for the rest of the package.

An installed package (``pip install .``) carries it inside the package as
``pyepp/_pyepp<EXT_SUFFIX>``. A CMake build tree has it as a top-level module,
``<build>/python/_pyepp<EXT_SUFFIX>``, used with
``PYTHONPATH=<build>/python:<source>/python``: the pure-Python package stays in the source tree,
and Python never looks for a second ``pyepp/`` folder once it has found one (see
``python/CMakeLists.txt``). So: the package's own copy when there is one, else the top-level one.
"""

from __future__ import annotations

import importlib
import importlib.util

_PACKAGE = __name__.rpartition(".")[0]

if importlib.util.find_spec(f"{_PACKAGE}._pyepp") is not None:
    lib = importlib.import_module(f"{_PACKAGE}._pyepp")
else:
    try:
        lib = importlib.import_module("_pyepp")
    except ModuleNotFoundError as error:
        if error.name != "_pyepp":
            raise
        raise ImportError(
            "pyepp's native module _pyepp was not found: pip install the package, or build the "
            "CMake target _pyepp and put <build>/python on PYTHONPATH"
        ) from error

__all__ = ["lib"]
