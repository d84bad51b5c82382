import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "helpers"))  # shared fakes

ROOT = pathlib.Path(os.environ.get("EPP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
FIXTURES = pathlib.Path(os.environ.get("EPP_SHARED_FIXTURES", ROOT.parent / "shared" / "fixtures"))
# Waits for a condition multiply their timeouts by this (scripts/test --sanitize exports it: an
# instrumented eppctl is that much slower).
TIME_SCALE = float(os.environ.get("EPP_TEST_TIME_SCALE") or 1)


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


class SimProcess:
    """`eppctl sim` running in the background; `.urls` are its servers."""

    def __init__(self, eppctl_path, args):
        import re
        self.proc = subprocess.Popen([eppctl_path, "sim", "--port", "0", *map(str, args)], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.urls = []
        count = 1
        if "--count" in args:
            count = int(args[list(args).index("--count") + 1])
        while len(self.urls) < count:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("eppctl sim exited: " + self.proc.stderr.read())
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                self.urls.append(m.group(1))
        self.url = self.urls[0]

    def stop(self):
        import signal
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()
            self.proc.stderr.close()


@pytest.fixture
def sim():
    path = _eppctl_path()
    started = []

    def start(*args):
        s = SimProcess(path, list(args))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
