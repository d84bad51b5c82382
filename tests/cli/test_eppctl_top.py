"""Decisions, live: `eppctl serve --decision-log N` and /debug/decisions on the metrics port, and
`eppctl top` reading them with /metrics (one frame with --once, and interactively, driven in tmux
on its own socket whose server is killed at the end)."""
import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest import TIME_SCALE, _eppctl_path
from test_eppctl_serve import POOL, Serve, chat_body, destination, pick, pool, serve  # noqa: F401


def get(s, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (s.metrics_port, path), timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_decision_log_over_http(serve, pool):
    s = serve("--endpoints", pool, "--decision-log", "5", "--decision-log-rate", "1000")
    ch = s.channel()
    picks = [destination(pick(ch, chat_body("decision number %d" % i), extra_headers=[("x-request-id", "req-%d" % i)])[0])
             for i in range(8)]
    status, text = get(s, "/debug/decisions")
    assert status == 200
    j = json.loads(text)
    assert (j["capacity"], j["seen"], j["kept"], j["include_prompt"]) == (5, 8, 8, False)
    assert [d["id"] for d in j["decisions"]] == [4, 5, 6, 7, 8]
    assert [d["endpoint"] for d in j["decisions"]] == picks[3:]
    assert [d["request_id"] for d in j["decisions"]] == ["req-%d" % i for i in range(3, 8)]
    last = j["decisions"][-1]
    assert last["status"] == 200 and last["path"] == "/v1/chat/completions" and last["prompt_chars"] > 0
    assert last["summary"]["winner"] == picks[-1] and last["summary"]["kind"] in ("margin", "tie")
    assert "prompt" not in last and "decision number" not in text  # metadata only, never prompt text
    assert [d["id"] for d in json.loads(get(s, "/debug/decisions?after=6")[1])["decisions"]] == [7, 8]
    assert [d["id"] for d in json.loads(get(s, "/debug/decisions?limit=2")[1])["decisions"]] == [7, 8]
    status, text = get(s, "/debug/decisions?id=8")
    one = json.loads(text)["decision"]
    assert status == 200 and one["explain"]["result"]["endpoint"] == picks[-1]
    assert "winner" in one["explain_text"] and picks[-1] in one["explain_text"]
    assert "decision number" not in text
    status, text = get(s, "/debug/decisions?id=1")
    assert status == 404 and "no longer" in text
    status, text = get(s, "/debug/decisions?limit=x")
    assert status == 400 and "limit" in text
    # Per-endpoint pick counters on /metrics, which eppctl top turns into rates.
    counted = {a: s.metric("epp_endpoint_picks_total", endpoint=a) for a in POOL}
    assert sum(counted.values()) == 8
    assert all(counted[a] == picks.count(a) for a in POOL)


def test_decision_log_off_by_default_prompts_only_when_asked_and_rate(serve, pool):
    s = serve("--endpoints", pool)
    status, text = get(s, "/debug/decisions")
    assert status == 404 and "--decision-log" in text
    s2 = serve("--endpoints", pool, "--decision-log", "10", "--decision-log-prompts")
    pick(s2.channel(), chat_body("the secret words"))
    d = json.loads(get(s2, "/debug/decisions")[1])
    assert d["include_prompt"] is True and "the secret words" in d["decisions"][0]["prompt"]
    s3 = serve("--endpoints", pool, "--decision-log", "100", "--decision-log-rate", "2")
    ch = s3.channel()
    for i in range(10):
        pick(ch, chat_body("burst %d" % i))
    d = json.loads(get(s3, "/debug/decisions")[1])
    assert d["seen"] == 10 and 2 <= d["kept"] <= 6 and len(d["decisions"]) == d["kept"]


def test_bad_decision_log_flags_exit_2(eppctl, pool):
    r = eppctl("serve", "--endpoints", pool, "--decision-log", "-1")
    assert r.returncode == 2 and "--decision-log" in r.stderr
    r = eppctl("serve", "--endpoints", pool, "--decision-log", "5", "--decision-log-rate", "0")
    assert r.returncode == 2 and "--decision-log-rate" in r.stderr


def test_top_once_prints_endpoints_and_decisions(serve, pool, eppctl):
    s = serve("--endpoints", pool, "--decision-log", "50")
    ch = s.channel()
    picked = {destination(pick(ch, chat_body("top %d" % i))[0]) for i in range(6)}
    r = eppctl("top", "--target", "127.0.0.1:%d" % s.metrics_port, "--once", "--interval", "0.2", "--width", "160",
               "--height", "30")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 30 and all(len(line) <= 160 for line in lines)
    assert "picked 6" in lines[0]
    for a in POOL:
        assert any(line.startswith(a) for line in lines), r.stdout  # one row per endpoint
    rows = [line for line in lines if line[:2] in ("> ", "  ") and line[2:].split() and line[2:].split()[0].isdigit()]
    assert len(rows) == 6, r.stdout
    assert {row[16:40].strip() for row in rows} == picked, r.stdout  # the WINNER column
    r = eppctl("top", "--target", "127.0.0.1:1", "--once", "--interval", "0.2")
    assert r.returncode == 1 and "error:" in r.stderr
    s2 = serve("--endpoints", pool)
    r = eppctl("top", "--target", "127.0.0.1:%d" % s2.metrics_port, "--once", "--interval", "0.2")
    assert r.returncode == 0 and "decision log off" in r.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed (scripts/setup installs it)")
def test_top_interactive_in_tmux(serve, pool):
    s = serve("--endpoints", pool, "--decision-log", "50")
    ch = s.channel()
    pick(ch, chat_body("before top started"))
    sock = "epp-top-test-%d" % os.getpid()

    def tmux(*args, check=True):
        return subprocess.run(["tmux", "-L", sock, *args], capture_output=True, text=True, timeout=10, check=check)

    def screen():
        return tmux("capture-pane", "-p", "-t", "top").stdout

    def wait_screen(pred, what, timeout=15):
        deadline = time.monotonic() + timeout * TIME_SCALE
        while time.monotonic() < deadline:
            text = screen()
            if pred(text):
                return text
            time.sleep(0.1)
        raise AssertionError("tmux screen never showed %s:\n%s" % (what, screen()))

    cmd = "%s top --target 127.0.0.1:%d --interval 0.3" % (_eppctl_path(), s.metrics_port)
    tmux("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "160", "-y", "45", cmd)
    pane_pid = int(tmux("display-message", "-p", "-t", "top", "#{pane_pid}").stdout.strip())
    try:
        wait_screen(lambda t: "DECISIONS" in t and all(a in t for a in POOL), "the endpoint table")
        for i in range(3):
            pick(ch, chat_body("while top runs %d" % i))
        text = wait_screen(lambda t: "> 4 " in t, "the fourth decision selected")
        assert "picked 4" in text
        tmux("send-keys", "-t", "top", "Enter")
        # The whole explanation, not its first line: a capture may catch the screen half drawn.
        wait_screen(lambda t: "decision explanation" in t and "winner" in t and "profile default" in t,
                    "a decision's explanation")
        tmux("send-keys", "-t", "top", "Escape")
        wait_screen(lambda t: "DECISIONS" in t, "the tables again")
        tmux("send-keys", "-t", "top", "s")
        wait_screen(lambda t: "sort: queue" in t, "the sort key changed")
        tmux("send-keys", "-t", "top", "Down")
        wait_screen(lambda t: "> 3 " in t, "the selection moved down")
        tmux("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + 10
        while tmux("has-session", "-t", "top", check=False).returncode == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert tmux("has-session", "-t", "top", check=False).returncode != 0, "eppctl top did not exit on q"
    finally:
        tmux("kill-server", check=False)
        try:
            os.kill(pane_pid, 9)
        except ProcessLookupError:
            pass
