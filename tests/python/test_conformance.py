"""pyepp.conformance: the black-box ext_proc suite (epp/tools/conformance.h) run from Python against
pyepp.serve in this very process, through the --target / --endpoints-out form: the suite writes
the pool into the endpoints file the server watches, waits until a pick lands in it, and gives the
file back as it was at the end."""
from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import pyepp

# Deadlines that bound a correct answer scale with this (scripts/test --sanitize exports it).
TIME_SCALE = float(os.environ.get("EPP_TEST_TIME_SCALE") or 1)


def test_green_against_pyepp_serve(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text("endpoints:\n- address: 127.0.0.1:9\n  metrics: none\n")  # replaced by the suite
    with pyepp.serve(endpoints_file=pool, health_port=0, objective_priorities={"batch": -1}) as h:
        report = pyepp.conformance(target=f"127.0.0.1:{h.port}", endpoints_out=str(pool),
                                   health=f"127.0.0.1:{h.health_port}", sheddable_objective="batch",
                                   stream_timeout_s=5.0 * TIME_SCALE)
    failing = {c["id"]: c["detail"] for c in report["checks"] if c["outcome"] != "pass"}
    assert report["passed"] is True and not failing, failing
    assert report["counts"]["pass"] == len(pyepp.conformance_checks())
    assert report["target"] == f"127.0.0.1:{h.port}"
    assert len(report["pool"]) == 3
    assert pool.read_text() == "endpoints:\n- address: 127.0.0.1:9\n  metrics: none\n"  # given back
    assert report["endpoints_file_after"].startswith("restored to what it held before")


def test_checks_formats_and_errors(tmp_path: Path) -> None:
    checks = pyepp.conformance_checks()
    assert len({c["id"] for c in checks}) == len(checks) >= 18
    assert all(c["asserts"] and c["cites"] for c in checks)
    pool = tmp_path / "pool.yaml"
    pool.write_text("endpoints:\n- address: 127.0.0.1:9\n  metrics: none\n")
    with pyepp.serve(endpoints_file=pool) as h:
        junit = pyepp.conformance(target=f"127.0.0.1:{h.port}", endpoints_out=str(pool),
                                  only=["subset-empty-503", "bad-body-400"], format="junit")
    suite = ET.fromstring(junit)
    assert suite.get("failures") == "0" and suite.get("skipped") == str(len(checks) - 2)
    with pytest.raises(pyepp.ConfigError, match="exactly one of"):
        pyepp.conformance()
    with pytest.raises(pyepp.ConfigError, match="unknown check"):
        pyepp.conformance(target="127.0.0.1:1", endpoints_out=str(pool), only=["nope"])
    with pytest.raises(pyepp.UnavailableError, match="answered no pick"):
        pyepp.conformance(target="127.0.0.1:1", endpoints_out=str(tmp_path / "e.yaml"), startup_timeout_s=1)
    assert not (tmp_path / "e.yaml").exists()
    with pytest.raises(ValueError):
        pyepp.conformance(target="x", format="xml")


def test_wrong_transport_raises_at_once(tmp_path: Path) -> None:
    pool = tmp_path / "pool.yaml"
    pool.write_text("endpoints:\n- address: 127.0.0.1:9\n  metrics: none\n")
    for tls, want in ((True, "the target speaks TLS; add --tls"), (False, "the target speaks plaintext; drop --tls")):
        with pyepp.serve(endpoints_file=pool, tls=tls) as h:
            t0 = time.monotonic()
            with pytest.raises(pyepp.ConfigError, match=want):
                pyepp.conformance(target=f"127.0.0.1:{h.port}", endpoints_out=str(pool), tls=not tls, startup_timeout_s=30)
            assert time.monotonic() - t0 < 5
        assert "127.0.0.1:9" in pool.read_text()
