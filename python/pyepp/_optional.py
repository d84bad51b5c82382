"""Optional third-party packages (pandas, matplotlib): imported only when a function needs one.

pyepp depends on neither; a function that needs one raises :class:`MissingDependencyError` (an
``ImportError``) naming the package and the function.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["MissingDependencyError", "require"]


class MissingDependencyError(ImportError):
    """An optional package a pyepp function needs is not installed (pandas for ``to_pandas()``,
    matplotlib for :mod:`pyepp.plots`). ``package`` is its import name."""

    def __init__(self, package: str, what: str) -> None:
        super().__init__(f"{what} needs {package}, which is not installed (pyepp does not depend on it): "
                         f"pip install {package}, or apt-get install python3-{package}", name=package)
        self.package = package


def require(package: str, what: str) -> ModuleType:
    """``import package``, or :class:`MissingDependencyError` saying ``what`` needs it."""
    try:
        return importlib.import_module(package)
    except ImportError as e:
        # Only the package itself missing is "not installed"; a broken install re-raises as is.
        if e.name is not None and e.name != package and not package.startswith(e.name + "."):
            raise
        raise MissingDependencyError(package, what) from e
