"""`eppctl pick` end to end: dry-running JSONL traces over the example pool (offline metrics)."""
import collections
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(os.environ.get("EPP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))

EXAMPLES = ROOT / "examples"
POOL = EXAMPLES / "endpoints" / "pool.yaml"
CONFIGS = EXAMPLES / "configs"
TRACE = EXAMPLES / "traces" / "shared-prefix.jsonl"
POOL_ADDRS = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"]
LINE_KEYS = ["line", "status", "endpoint", "fallbacks", "model", "prefix_blocks", "prefix_match_blocks", "reason"]


def trace_lines():
    return [json.loads(l) for l in TRACE.read_text().splitlines()]


def pick_jsonl(eppctl, *args, code=0):
    r = eppctl("pick", "-o", "jsonl", *args)
    assert r.returncode == code, (r.returncode, r.stderr)
    return [json.loads(l) for l in r.stdout.splitlines()]


def pick_text(eppctl, *args, code=0):
    r = eppctl("pick", *args)
    assert r.returncode == code, (r.returncode, r.stderr)
    return r.stdout


def summary(text):
    """{endpoint: count}, mean prefix match ratio, requests with at least one block."""
    counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^  (\S+)  (\d+)\s+[\d.]+%$", text, re.M)}
    m = re.search(r"^mean prefix match ratio ([\d.]+) over (\d+) requests with at least one block$", text, re.M)
    assert m, text
    return counts, float(m.group(1)), int(m.group(2))


def write_config(tmp_path, name, body):
    p = tmp_path / name
    p.write_text("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n" + body)
    return p


def test_trace_is_what_the_committed_script_generates(tmp_path):
    out = tmp_path / "regenerated.jsonl"
    subprocess.run([sys.executable, str(EXAMPLES / "traces" / "make_shared_prefix.py"), "-o", str(out)], check=True,
                   timeout=60)
    assert out.read_bytes() == TRACE.read_bytes(), "rerun examples/traces/make_shared_prefix.py"
    lines = trace_lines()
    assert len(lines) == 200
    pairs = collections.Counter((l["headers"]["x-system-prompt"], l["body"]["messages"][1]["content"]) for l in lines)
    assert len(pairs) == 200 and len({p for p, _ in pairs}) == 8  # 8 system prompts x 25 questions, no repeats


def test_jsonl_has_one_decision_per_line(eppctl):
    rows = pick_jsonl(eppctl, "--endpoints", POOL, "-t", TRACE)
    assert [r["line"] for r in rows] == list(range(1, 201))
    for r in rows:
        assert list(r) == LINE_KEYS
        assert r["status"] == 200 and r["endpoint"] in POOL_ADDRS and r["fallbacks"] == []
        assert r["model"] == "meta-llama/Llama-3.1-8B-Instruct"
        assert r["reason"] == "picked by profile 'default'"
        assert 0 <= r["prefix_match_blocks"] <= r["prefix_blocks"]
    # `-o json` is accepted as a synonym.
    r = eppctl("pick", "-o", "json", "--endpoints", POOL, "-t", TRACE)
    assert r.returncode == 0 and [json.loads(l) for l in r.stdout.splitlines()] == rows


def test_text_summary_lists_every_endpoint(eppctl):
    text = pick_text(eppctl, "--endpoints", POOL, "-t", TRACE)
    lines = text.splitlines()
    assert lines[0] == "200 requests  200: 200"
    assert "picks per endpoint" in lines
    counts, ratio, n = summary(text)
    assert list(counts) == POOL_ADDRS  # every endpoint, in pool order, even with 0 picks
    assert sum(counts.values()) == 200
    assert counts["10.0.0.4:8000"] == 200  # frozen metrics: GIE's default keeps choosing the idle server
    assert n == 200
    assert re.search(r"^\d+ picks per second \(parse \+ schedule, [\d.]+ s\)$", text, re.M), text


def test_prefix_index_makes_shared_prefixes_hit(eppctl, tmp_path):
    rows = pick_jsonl(eppctl, "--endpoints", POOL, "-t", TRACE)
    seen = set()
    for r, t in zip(rows, trace_lines()):
        sp = t["headers"]["x-system-prompt"]
        if sp not in seen:
            assert r["prefix_match_blocks"] == 0, r  # the first request with a system prompt is cold
            seen.add(sp)
        else:
            # Every later one finds at least the system prompt's blocks (the rendering starts with
            # "system\n" + the prompt; the last, partial block is shared only by chance).
            assert r["prefix_match_blocks"] >= 23, r
    _, default_ratio, n = summary(pick_text(eppctl, "--endpoints", POOL, "-t", TRACE))
    assert n == 200 and default_ratio > 0.9

    # A random picker with no prefix consumer: no producer is added, nothing is hashed.
    rnd = write_config(tmp_path, "random.yaml", "plugins:\n- type: random-picker\n")
    counts, ratio, n = summary(pick_text(eppctl, "--endpoints", POOL, "-t", TRACE, "-c", rnd))
    assert (ratio, n) == (0.0, 0)
    assert all(c > 20 for c in counts.values()), counts
    # The same picker with a weight-0 prefix scorer, which only measures: requests spread over
    # four servers, so each (prompt, server) pair starts cold and the ratio drops.
    measured = write_config(tmp_path, "random-measured.yaml",
                            "plugins:\n- type: prefix-cache-scorer\n- type: random-picker\n"
                            "schedulingProfiles:\n- name: default\n  plugins:\n"
                            "  - {pluginRef: prefix-cache-scorer, weight: 0}\n  - {pluginRef: random-picker}\n")
    _, random_ratio, n = summary(pick_text(eppctl, "--endpoints", POOL, "-t", TRACE, "-c", measured))
    assert n == 200
    assert 0.5 < random_ratio < default_ratio - 0.05


def test_prefix_heavy_config_follows_the_prefix_under_load(eppctl):
    # With requests in flight, prefix-heavy.yaml still keeps each system prompt on one server.
    rows = pick_jsonl(eppctl, "--endpoints", POOL, "-t", TRACE, "-c", CONFIGS / "prefix-heavy.yaml",
                      "--concurrency", "16")
    by_prompt = collections.defaultdict(set)
    for r, t in zip(rows, trace_lines()):
        by_prompt[t["headers"]["x-system-prompt"]].add(r["endpoint"])
    assert all(len(v) == 1 for v in by_prompt.values()), by_prompt


def test_concurrency_keeps_requests_in_flight(eppctl, tmp_path):
    cfg = write_config(tmp_path, "token-load.yaml",
                       "plugins:\n- type: queue-scorer\n- type: token-load-scorer\n"
                       "  parameters: {queueThresholdTokens: 8192}\n"
                       "schedulingProfiles:\n- name: default\n  plugins:\n"
                       "  - {pluginRef: queue-scorer, weight: 1}\n  - {pluginRef: token-load-scorer, weight: 2}\n")
    counts1, _, _ = summary(pick_text(eppctl, "--endpoints", POOL, "-t", TRACE, "-c", cfg, "--concurrency", "1"))
    assert counts1["10.0.0.4:8000"] == 200  # nothing in flight: the shortest queue always wins
    counts32, _, _ = summary(pick_text(eppctl, "--endpoints", POOL, "-t", TRACE, "-c", cfg, "--concurrency", "32"))
    assert all(c > 0 for c in counts32.values()), counts32
    assert max(counts32.values()) < 120, counts32
    # GIE's default profile has no in-flight scorer: concurrency changes nothing there.
    counts_default, _, _ = summary(pick_text(eppctl, "--endpoints", POOL, "-t", TRACE, "--concurrency", "32"))
    assert counts_default["10.0.0.4:8000"] == 200


def test_cache_aware_scorer_keeps_each_prompt_on_one_server(eppctl):
    rows = pick_jsonl(eppctl, "--endpoints", POOL, "-t", TRACE, "-c", CONFIGS / "cache-aware.yaml")
    by_prompt = collections.defaultdict(set)
    for r, t in zip(rows, trace_lines()):
        by_prompt[t["headers"]["x-system-prompt"]].add(r["endpoint"])
    assert len(by_prompt) == 8 and all(len(v) == 1 for v in by_prompt.values()), by_prompt


def test_malformed_lines_are_400_and_the_rest_are_routed(eppctl, tmp_path):
    t = tmp_path / "trace.jsonl"
    t.write_text("\n".join([
        json.dumps({"model": "m", "prompt": "first"}),
        '{"model": "m", "prompt": ',
        "",
        json.dumps({"path": "/v1/chat/completions", "body": {"model": "m", "messages": []}}),
        json.dumps({"path": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "x"}]}}),
    ]) + "\n")
    rows = pick_jsonl(eppctl, "--endpoints", POOL, "-t", t, code=1)
    assert [(r["line"], r["status"]) for r in rows] == [(1, 200), (2, 400), (4, 400), (5, 200)]
    assert "invalid JSON at byte" in rows[1]["reason"] and rows[1]["endpoint"] is None
    assert rows[2]["reason"] == "body.messages: must not be empty"
    assert "model" not in rows[1]
    text = pick_text(eppctl, "--endpoints", POOL, "-t", t, code=1)
    assert text.splitlines()[0] == "4 requests  200: 2  400: 2"
    # --path applies to every line: a completions body sent to the chat API fails.
    rows = pick_jsonl(eppctl, "--endpoints", POOL, "-t", t, "--path", "/v1/chat/completions", code=1)
    assert [r["status"] for r in rows] == [400, 400, 400, 200]
    assert rows[0]["reason"] == "messages: missing"


def test_trace_from_stdin_and_seeded_determinism(eppctl):
    exe = os.environ.get("EPPCTL") or str(ROOT / "build" / "cli" / "eppctl")
    args = [exe, "pick", "-o", "jsonl", "--endpoints", str(POOL), "-c", str(CONFIGS / "weighted-random.yaml")]
    a = subprocess.run(args + ["-t", "-", "--seed", "3"], input=TRACE.read_text(), capture_output=True, text=True,
                       timeout=60)
    b = subprocess.run(args + ["-t", str(TRACE), "--seed", "3"], capture_output=True, text=True, timeout=60)
    c = subprocess.run(args + ["-t", str(TRACE), "--seed", "4"], capture_output=True, text=True, timeout=60)
    assert a.returncode == b.returncode == c.returncode == 0
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout
    rows = [json.loads(l) for l in a.stdout.splitlines()]
    assert all(len(r["fallbacks"]) == 1 and r["fallbacks"][0] != r["endpoint"] for r in rows)
    assert len({r["endpoint"] for r in rows}) == 4  # weighted random reaches every server


def test_pick_agrees_with_explain(eppctl, tmp_path):
    reqs = [EXAMPLES / "requests" / n for n in ("chat-capture.json", "completions.json", "responses.json")]
    for cfg in ("gie-default.yaml", "llm-d-style.yaml", "label-selector.yaml"):
        for req in reqs:
            t = tmp_path / "one.jsonl"
            t.write_text(json.dumps(json.loads(req.read_text())) + "\n")
            (row,) = pick_jsonl(eppctl, "--endpoints", POOL, "-c", CONFIGS / cfg, "-t", t)
            r = eppctl("explain", "-o", "json", "--endpoints", POOL, "-c", CONFIGS / cfg, "-r", req)
            j = json.loads(r.stdout)
            assert row["endpoint"] == j["result"]["endpoint"], (cfg, req.name)
            assert row["prefix_blocks"] == j["request"]["prefix_blocks"]


def test_usage_errors_exit_2(eppctl, tmp_path):
    unknown = write_config(tmp_path, "unknown.yaml", "plugins:\n- type: no-such-scorer\n")
    for args, needle in [
        (["-t", tmp_path / "missing.jsonl"], "cannot read trace file"),
        (["-t", TRACE, "--concurrency", "0"], "concurrency"),
        (["-t", TRACE, "-o", "csv"], "csv"),
        (["-t", TRACE, "-c", unknown], "unsupported plugin types: no-such-scorer"),
        ([], "--trace"),
    ]:
        r = eppctl("pick", "--endpoints", POOL, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr, (args, r.stderr)
