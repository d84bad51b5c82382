"""What tripped a new user (issue #40): help texts whose defaults read wrong, errors without their
OS reason, serve errors printed twice. Each check runs the real eppctl."""
import re
import socket
import subprocess

import pytest

from conftest import _eppctl_path


def help_text(eppctl, *cmd):
    r = eppctl(*cmd, "--help")
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("cmd", [["serve"], ["sim"], ["replay"], ["tokenize"], ["explain"], ["pick"], ["lint"]])
def test_no_negated_flag_reads_as_default_false(eppctl, cmd):
    # CLI11 prints "!--no-x" flags as "--no-x{false}", which reads as "default false".
    assert "{false}" not in help_text(eppctl, *cmd)


def test_help_states_the_defaults_that_matter(eppctl):
    serve = help_text(eppctl, "serve")
    line = next(l for l in serve.splitlines() if l.strip().startswith("--secure-serving"))
    assert "Default: on" in line + serve[serve.index(line) + len(line):][:200]
    assert "--no-secure-serving" in serve
    # No default pool: the help must not show one.
    assert re.search(r"--pool-name TEXT\s", serve) and "--pool-name TEXT=default" not in serve
    tokenize = help_text(eppctl, "tokenize")
    assert re.search(r"--add-special-tokens TEXT:\{auto,true,false\}=auto", tokenize) or "=auto" in tokenize
    assert re.search(r"-o,--output TEXT:\{text,json\}=text", tokenize), tokenize
    assert "body implies" in help_text(eppctl, "explain")


def test_flags_that_changed_shape_still_work(eppctl, tmp_path):
    # --no-progress and --no-render are flags of their own now: a replay with --no-progress runs,
    # and both stay in the help.
    assert "--no-render" in help_text(eppctl, "sim")
    assert "--no-progress" in help_text(eppctl, "replay")
    r = eppctl("replay", "--workload", "shared-prefix", "--groups", "2", "--prompts-per-group", "2", "--rate", "20",
               "--servers", "2", "--policy", "round-robin", "--no-progress", "-o", "json")
    assert r.returncode == 0, r.stderr


def test_a_missing_file_says_why(eppctl, tmp_path):
    missing = tmp_path / "missing.json"
    r = eppctl("explain", "--endpoints", missing, "-r", missing)
    assert r.returncode != 0
    assert "No such file or directory" in r.stderr, r.stderr
    r = eppctl("replay", "--trace", missing, "--rate", "5", "--servers", "2")
    assert r.returncode != 0
    assert "No such file or directory" in r.stderr, r.stderr
    r = eppctl("tokenize", "--tokenizer", tmp_path / "nope.json", "--text", missing)
    assert r.returncode != 0
    assert "No such file or directory" in r.stderr, r.stderr
    r = eppctl("replay", "--workload", "shared-prefix", "--groups", "2", "--prompts-per-group", "2", "--rate", "20",
               "--servers", "2", "--policy", "round-robin", "--report", tmp_path / "no-such-dir" / "r.html")
    assert r.returncode != 0
    assert "No such file or directory" in r.stderr, r.stderr


def test_a_port_in_use_says_so_once(tmp_path):
    pool = tmp_path / "endpoints.yaml"
    pool.write_text("endpoints:\n  - address: 10.0.0.1:8000\n")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        r = subprocess.run([_eppctl_path(), "serve", "--endpoints", str(pool), "--listen-address", "127.0.0.1",
                            "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", str(port),
                            "--secure-serving=false"], capture_output=True, text=True, timeout=60)
    finally:
        busy.close()
    assert r.returncode != 0
    assert "Address already in use" in r.stderr, r.stderr
    # The error is printed once, not by both the server and the command.
    assert r.stderr.count("cannot listen for /metrics") == 1, r.stderr
