"""`eppctl conformance`: the black-box ext_proc suite, run against `eppctl serve` (green), against a
small independent EPP in Python (green: the suite tests the protocol, not epp's server), and
against the same EPP with deliberate defects (the suite fails exactly the checks each defect
breaks). Every EPP the suite launches is stopped by its process group when the suite ends."""
import contextlib
import json
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import time
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
    assert report["endpoints_file_after"] == "removed with the temporary work directory"
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
    assert not (tmp_path / "e.yaml").exists()  # the suite created it for the run: removed again
    r = eppctl("conformance", "--launch", "true", "--endpoints-out", tmp_path / "e.yaml")
    assert r.returncode == 2 and "--endpoints-out goes with --target" in r.stderr
    assert not (tmp_path / "e.yaml").exists()


@contextlib.contextmanager
def serve(tmp_path, endpoints, tls):
    """`eppctl serve` on loopback reading `endpoints`, TLS (its default) or plaintext; yields its
    gRPC port and is stopped by pid."""
    ready = tmp_path / ("ready-%s.json" % ("tls" if tls else "plain"))
    cmd = [_eppctl_path(), "serve", "--endpoints", str(endpoints), "--grpc-port", "0", "--grpc-health-port", "0",
           "--metrics-port", "0", "--listen-address", "127.0.0.1", "--ready-file", str(ready), "--log-level", "warn"]
    if not tls:
        cmd.append("--secure-serving=false")
    log = open(tmp_path / "serve.log", "a")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "eppctl serve not ready"
            time.sleep(0.02)
        yield json.loads(ready.read_text())["grpc"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


POOL = "endpoints:\n- address: 127.0.0.1:9\n  metrics: none\n"


def test_wrong_transport_is_said_at_once(eppctl, tmp_path):
    """Without --tls at a TLS EPP (and with it at a plaintext one) the suite says so in one line,
    long before its start-up timeout, instead of retrying until it and dumping handshake errors."""
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    for tls, flags, want in ((True, [], "error: the target speaks TLS; add --tls ("),
                             (False, ["--tls"], "error: the target speaks plaintext; drop --tls (")):
        with serve(tmp_path, pool, tls) as port:
            t0 = time.monotonic()
            r = eppctl("conformance", "--target", "127.0.0.1:%d" % port, "--endpoints-out", pool, *flags,
                       "--startup-timeout", "30")
            took = time.monotonic() - t0
        assert r.returncode == 2, r.stdout + r.stderr
        assert r.stderr.startswith(want) and r.stderr.count("\n") == 1, r.stderr
        assert "SSL_ERROR" not in r.stderr and r.stdout == ""
        assert took < 5, took  # the start-up timeout is 30 s
        assert pool.read_text() == POOL
    # --launch, as the issue met it: the launched EPP serves TLS by default.
    launch = ("%s serve --endpoints {endpoints_file} --grpc-port {grpc_port} --grpc-health-port {health_port} "
              "--metrics-port {metrics_port} --listen-address 127.0.0.1 --log-level warn" % shlex.quote(_eppctl_path()))
    t0 = time.monotonic()
    r = eppctl("conformance", "--launch", launch, "--startup-timeout", "60", timeout=120)
    assert r.returncode == 2 and r.stderr.startswith("error: the target speaks TLS; add --tls ("), r.stderr
    assert r.stderr.count("\n") == 1 and "SSL_ERROR" not in r.stderr, r.stderr
    assert time.monotonic() - t0 < 20


def test_endpoints_out_is_given_back(eppctl, tmp_path):
    """--endpoints-out: the EPP's own file holds the suite's pool during the run and what it held
    before afterwards (in place: same inode and mode), and the report says so."""
    pool = tmp_path / "pool.yaml"
    pool.write_text(POOL)
    pool.chmod(0o640)
    inode = pool.stat().st_ino
    with serve(tmp_path, pool, tls=False) as port:
        r = eppctl("conformance", "--target", "127.0.0.1:%d" % port, "--endpoints-out", pool,
                   "--only", "subset-empty-503", "-o", "json", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["endpoints_file"] == str(pool)
    assert report["endpoints_file_after"] == "restored to what it held before (%d bytes)" % len(POOL)
    assert pool.read_text() == POOL
    assert pool.stat().st_ino == inode and pool.stat().st_mode & 0o777 == 0o640


def test_endpoints_out_is_given_back_on_ctrl_c(tmp_path):
    """Interrupted while waiting for the EPP (here one reading another file, so it never picks in
    the suite's pool), the suite still gives the file back before it ends."""
    theirs, lent = tmp_path / "theirs.yaml", tmp_path / "lent.yaml"
    theirs.write_text(POOL)
    lent.write_text("endpoints: []\n")
    with serve(tmp_path, theirs, tls=False) as port:
        proc = subprocess.Popen([_eppctl_path(), "conformance", "--target", "127.0.0.1:%d" % port, "--endpoints-out",
                                 str(lent), "--startup-timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, "NO_COLOR": "1"})
        try:
            deadline = time.monotonic() + 30
            while "conformance" not in lent.read_text():
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == -signal.SIGINT
    assert lent.read_text() == "endpoints: []\n"
