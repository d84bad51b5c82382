"""`pip install --no-build-isolation .` into a fresh venv gives a working `import pyepp`.

This builds libepp and the module again through setup.py (about a minute on two cores), so it is
marked slow; it still runs in the normal suite. It works offline: --no-index, and the build uses
the interpreter's setuptools and wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PIP_TIMEOUT_S = 1800  # a full Release build of libepp + _pyepp; slow when ctest -j2 runs other suites

# Top-level entries of the source tree that are never part of a build: build trees, VCS data.
_SKIP_TOP = ("build", ".git", "dist")
_SKIP_ANYWHERE = {"__pycache__", ".pytest_cache"}


def _copy_source(source: Path, destination: Path) -> None:
    """Copies the working tree (including files not yet committed), without build outputs."""

    def ignore(folder: str, names: list) -> set:
        skipped = {n for n in names if n in _SKIP_ANYWHERE or n.endswith(".egg-info")}
        if Path(folder) == source:
            skipped |= {n for n in names if n.startswith(_SKIP_TOP)}
        # A module built in place (build_ext --inplace) would hide a broken build.
        skipped |= {n for n in names if n.startswith("_pyepp") and n.endswith(".so")}
        return skipped

    shutil.copytree(source, destination, ignore=ignore, symlinks=True)


@pytest.mark.slow
def test_pip_install_into_fresh_venv(tmp_path: Path, source_dir: Path, vllm_metrics: str) -> None:
    source = tmp_path / "src"
    _copy_source(source_dir, source)
    # Copying keeps pip's in-tree build (build/, *.egg-info) out of the real tree and away from
    # other builds running there.

    venv = tmp_path / "venv"
    # --system-site-packages: Debian's ensurepip puts pip and setuptools into a venv but not
    # `wheel`, which setuptools 66 needs to build a wheel, and nothing can be downloaded here.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-build-isolation", "--no-index", str(source)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT_S,
    )
    assert install.returncode == 0, install.stdout[-4000:] + install.stderr[-4000:]

    metrics = tmp_path / "vllm.prom"
    metrics.write_text(vllm_metrics, encoding="utf-8")
    script = textwrap.dedent(
        f"""
        import pathlib, sys
        import pyepp
        package = pathlib.Path(pyepp.__file__).parent
        assert package.is_relative_to(pathlib.Path(sys.prefix)), package
        native = pathlib.Path(pyepp._lib.__file__)
        assert native.parent == package and native.name.startswith("_pyepp"), native
        assert (package / "_pyepp.pyi").is_file() and (package / "py.typed").is_file()
        text = pathlib.Path({str(metrics)!r}).read_text()
        families = pyepp.parse_prometheus(text)
        assert [f.type for f in families][:3] == ["gauge", "gauge", "gauge"], families
        m = pyepp.extract_metrics(text)
        assert (m.engine, m.running_requests, m.cache_block_size) == ("vllm", 7.0, 16), m
        report = pyepp.check({str(metrics)!r})
        assert report["status"] == "pass", report
        try:
            pyepp.extract_metrics(text, engine="nope")
        except pyepp.NotFoundError as error:
            assert error.code == "NOT_FOUND"
        else:
            raise AssertionError("no NotFoundError")
        print("ok", pyepp.__version__)
        """
    )
    run = subprocess.run([str(python), "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("ok ")
