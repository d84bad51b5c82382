import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))

ROOT = pathlib.Path(os.environ.get("EPP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
FIXTURES = pathlib.Path(os.environ.get("EPP_SHARED_FIXTURES", ROOT.parent / "shared" / "fixtures"))


def _eppctl_path():
    p = os.environ.get("EPPCTL") or str(ROOT / "build" / "cli" / "eppctl")
    if not os.path.exists(p):
        pytest.skip("eppctl not built at %s (set EPPCTL)" % p)
    return p


@pytest.fixture(scope="session")
def eppctl():
    path = _eppctl_path()

    def run(*args, timeout=60):
        return subprocess.run([path, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "NO_COLOR": "1"})

    return run


@pytest.fixture(scope="session")
def fixtures_dir():
    if not (FIXTURES / "metrics").is_dir():
        pytest.skip("shared fixtures not found at %s" % FIXTURES)
    return FIXTURES


@pytest.fixture(scope="session")
def root():
    return ROOT
