"""`eppctl conformance`: the black-box ext_proc suite, run against `eppctl serve` (green), against a
small independent EPP in Python (green: the suite tests the protocol, not epp's server), and
against the same EPP with deliberate defects (the suite fails exactly the checks each defect
breaks). Every EPP the suite launches is stopped by its process group when the suite ends."""
import json
import pathlib
import shlex
import sys
import xml.etree.ElementTree as ET

from conftest import _eppctl_path

HELPERS = pathlib.Path(__file__).resolve().parent.parent / "helpers"
BROKEN = "%s %s --endpoints {endpoints_file} --port {grpc_port} --health-port {health_port}" % (
    shlex.quote(sys.executable), shlex.quote(str(HELPERS / "broken_epp.py")))


def ids(eppctl):
    r = eppctl("conformance", "--list")
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if line and not line.startswith(" ")]


def outcomes(report):
    return {c["id"]: c["outcome"] for c in report["checks"]}


def test_list_names_every_check_with_its_citation(eppctl):
    r = eppctl("conformance", "--list")
    assert r.returncode == 0
    names = ids(eppctl)
    assert len(names) == len(set(names)) >= 18
    assert r.stdout.count("  cites: ") == len(names)
    for must in ("destination-header-and-metadata", "subset-empty-503", "request-body-echo", "shedding-429",
                 "health-services", "model-server-down", "response-path-streaming"):
        assert must in names


def test_green_against_eppctl_serve_over_tls(eppctl, tmp_path):
    launch = ("%s serve --endpoints {endpoints_file} --grpc-port {grpc_port} --grpc-health-port {health_port} "
              "--metrics-port {metrics_port} --listen-address 127.0.0.1 --objective batch=-1 --log-level warn"
              % shlex.quote(_eppctl_path()))
    junit = tmp_path / "junit.xml"
    r = eppctl("conformance", "--launch", launch, "--tls", "--sheddable-objective", "batch", "-o", "json",
               "--junit", junit, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["passed"] is True
    assert report["counts"] == {"pass": len(ids(eppctl)), "fail": 0, "skip": 0}, outcomes(report)
    assert "--grpc-port" in report["launch"] and "{grpc_port}" not in report["launch"]
    assert len(report["pool"]) == 3
    shed = next(c for c in report["checks"] if c["id"] == "shedding-429")
    assert "429" in shed["detail"]
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("failures") == "0"
    assert len(suite.findall("testcase")) == len(ids(eppctl))


def test_green_against_an_independent_python_epp(eppctl):
    r = eppctl("conformance", "--launch", BROKEN, "-o", "json", timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    got = outcomes(report)
    assert got.pop("shedding-429") == "skip"  # no --sheddable-objective
    assert set(got.values()) == {"pass"}, got


def test_defects_fail_exactly_the_checks_they_break(eppctl, tmp_path):
    defects = ["no-metadata", "ignore-subset", "big-chunks", "buffer-sse", "500-on-bad-body"]
    launch = BROKEN + "".join(" --defect " + d for d in defects)
    r = eppctl("conformance", "--launch", launch, "-o", "json", "--junit", tmp_path / "j.xml",
               "--stream-timeout", "3", timeout=240)
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads(r.stdout)
    failed = {k for k, v in outcomes(report).items() if v == "fail"}
    assert failed == {"destination-header-and-metadata", "subset-hint-list", "subset-hint-string", "subset-empty-503",
                      "subset-unmatched-503", "request-body-echo", "response-path-streaming", "bad-body-400"}
    detail = {c["id"]: c["detail"] for c in report["checks"]}
    assert "envoy.lb" in detail["destination-header-and-metadata"]
    assert "more than 64 KiB" in detail["request-body-echo"]
    assert "500" in detail["bad-body-400"] and "expected 400" in detail["bad-body-400"]
    assert "not echoed before the next" in detail["response-path-streaming"]
    assert "broken_epp: serving" in report["epp_log_tail"]
    suite = ET.parse(tmp_path / "j.xml").getroot()
    assert suite.get("failures") == "8"
    assert {t.get("name") for t in suite.findall("testcase") if t.find("failure") is not None} == failed
    # Text output names each failed check with what it asserts and the protocol text it cites.
    r = eppctl("conformance", "--launch", launch, "--only", "bad-body-400", "--only", "subset-empty-503", timeout=120)
    assert r.returncode == 1
    assert "FAIL  bad-body-400" in r.stdout and "FAIL  subset-empty-503" in r.stdout
    assert "cites: Protocol, Endpoint Subset" in r.stdout
    assert "SKIP  pick-within-pool  not selected" in r.stdout


def test_setup_errors_exit_2(eppctl, tmp_path):
    r = eppctl("conformance")
    assert r.returncode == 2 and "exactly one of --launch" in r.stderr
    r = eppctl("conformance", "--target", "127.0.0.1:1")
    assert r.returncode == 2 and "--endpoints-out" in r.stderr
    r = eppctl("conformance", "--launch", "true", "--only", "no-such-check")
    assert r.returncode == 2 and "unknown check 'no-such-check'" in r.stderr
    r = eppctl("conformance", "--launch", "echo starting; exit 3", timeout=60)
    assert r.returncode == 2
    assert "exited with code 3" in r.stderr and "starting" in r.stderr
    r = eppctl("conformance", "--target", "127.0.0.1:1", "--endpoints-out", tmp_path / "e.yaml", "--startup-timeout", "1")
    assert r.returncode == 2 and "answered no pick" in r.stderr
    text = (tmp_path / "e.yaml").read_text()
    assert text.count("address: 127.0.0.1:") == 3
