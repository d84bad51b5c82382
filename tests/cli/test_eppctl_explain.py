"""`eppctl explain` end to end: the built binary on examples/ (offline metrics files) and against
`eppctl sim` servers on 127.0.0.1.

Golden files: tests/data/golden/explain_<scenario>.json hold the JSON of fixed scenarios (offline
metrics, fixed seed). The test compares parsed JSON (floats within 1e-9), so key order and
whitespace do not matter. After an intended change of the output, regenerate them with

    EPP_UPDATE_GOLDEN=1 EPPCTL=build/cli/eppctl python3 -m pytest -q tests/cli/test_eppctl_explain.py -k golden

and review the diff before committing.
"""
import json
import math
import os
import pathlib
import re
import subprocess
import threading
import time
import urllib.request

import pytest

ROOT = pathlib.Path(os.environ.get("EPP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))

EXAMPLES = ROOT / "examples"
POOL = EXAMPLES / "endpoints" / "pool.yaml"
CONFIGS = EXAMPLES / "configs"
CHAT = EXAMPLES / "requests" / "chat-capture.json"
COMPLETIONS = EXAMPLES / "requests" / "completions.json"
RESPONSES = EXAMPLES / "requests" / "responses.json"
TRACE = EXAMPLES / "traces" / "shared-prefix.jsonl"
VLLM_METRICS = EXAMPLES / "metrics" / "vllm.txt"
GOLDEN = ROOT / "tests" / "data" / "golden"
POOL_ADDRS = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000"]
DEST = "x-gateway-destination-endpoint"


def explain(eppctl, *args, code=None):
    """Runs `eppctl explain -o json ARGS`; returns (exit code, parsed JSON)."""
    r = eppctl("explain", "-o", "json", *args)
    assert r.returncode in (0, 1), r.stderr
    if code is not None:
        assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    return r.returncode, json.loads(r.stdout)


def explain_text(eppctl, *args):
    r = eppctl("explain", *args)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, r.stdout


def write_config(tmp_path, name, body):
    p = tmp_path / name
    p.write_text("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n" + body)
    return p


def vllm_metrics(queue, kv, running=4):
    return ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %d\n"
            "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting %d\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc %s\n" % (running, queue, kv))


def scorer(score, plugin):
    (s,) = [s for s in score["scorers"] if s["plugin"] == plugin]
    return s


# --- JSON shape and the decision ------------------------------------------------------------


def test_json_shape_scores_and_decision(eppctl):
    code, j = explain(eppctl, "--endpoints", POOL, "-r", CHAT)
    assert code == 0
    assert list(j) == ["request", "profiles", "result", "decision"]
    req = j["request"]
    assert {"model", "path", "prompt_chars", "prefix_blocks"} <= set(req)
    assert req["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert req["path"] == "/v1/chat/completions" and req["api"] == "chat_completions" and req["stream"] is True
    # 16-token blocks of 64 characters (the first candidate is vLLM with block_size 16): full blocks only.
    assert req["prefix_block_size_tokens"] == 16
    assert req["prefix_blocks"] == req["prompt_chars"] // 64 > 20

    (prof,) = j["profiles"]
    assert prof["name"] == "default" and prof["filters"] == []
    assert sorted(s["endpoint"] for s in prof["scores"]) == POOL_ADDRS
    totals = [s["total"] for s in prof["scores"]]
    assert totals == sorted(totals, reverse=True), "scores are listed highest first"
    for s in prof["scores"]:
        assert [x["plugin"] for x in s["scorers"]] == ["queue-scorer", "kv-cache-utilization-scorer",
                                                       "prefix-cache-scorer"]
        assert [x["weight"] for x in s["scorers"]] == [2, 2, 3]
        for x in s["scorers"]:
            assert {"plugin", "raw", "weight", "weighted"} <= set(x)
            assert 0 <= x["raw"] <= 1
            assert math.isclose(x["weighted"], x["raw"] * x["weight"], abs_tol=1e-12)
        assert math.isclose(s["total"], sum(x["weighted"] for x in s["scorers"]), abs_tol=1e-12)
    # The examples' metrics: queue 3/1/2/0 and KV 0.4375/0.61/0.25/0.125 -> min-max queue score
    # and 1 - KV; the idle 10.0.0.4 wins with 2*1 + 2*0.875.
    best = prof["scores"][0]
    assert best["endpoint"] == "10.0.0.4:8000" and math.isclose(best["total"], 3.75)
    assert scorer(best, "queue-scorer")["detail"] == "queue 0"
    assert prof["picked"] == ["10.0.0.4:8000"]

    res = j["result"]
    assert {"status", "endpoint", "fallbacks", "reason"} <= set(res)
    assert res["status"] == 200 and res["endpoint"] == "10.0.0.4:8000" and res["fallbacks"] == []
    assert res["candidates"] == 4
    assert j["decision"] == {"header": {DEST: "10.0.0.4:8000"},
                             "dynamic_metadata": {"envoy.lb": {DEST: "10.0.0.4:8000"}}}
    assert j["decision"]["header"][DEST] == j["decision"]["dynamic_metadata"]["envoy.lb"][DEST]


def test_text_report_shows_filters_table_winner_and_decision(eppctl):
    code, out = explain_text(eppctl, "--endpoints", POOL, "-c", CONFIGS / "label-selector.yaml", "-r", CHAT)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("request    /v1/chat/completions  model=meta-llama/Llama-3.1-8B-Instruct  1638 prompt chars")
    assert "candidates 4" in lines
    assert "profile default" in lines
    assert "  filter zone-a (label-selector-filter): kept 2, removed 2" in lines
    assert "    - 10.0.0.2:8000  label zone=us-east-1b (want us-east-1a)" in lines
    assert "    - 10.0.0.4:8000  label zone=us-east-1b (want us-east-1a)" in lines
    header = [l for l in lines if "queue-scorer (x2)" in l]
    assert len(header) == 1 and "kv-cache-utilization-scorer (x2)" in header[0] and "prefix-cache-scorer (x3)" in header[0]
    assert any(l.startswith("  * 10.0.0.3:8000") for l in lines), out
    assert "  picked 10.0.0.3:8000 by max-score-picker" in lines
    assert "winner     10.0.0.3:8000 total 3.5 vs runner-up 10.0.0.1:8000 1.125" in lines
    assert "           won on queue-scorer: 1 x 2 = 2 vs 0 x 2 = 0 (margin 2.375)" in lines
    assert "result     200 OK  endpoint 10.0.0.3:8000" in lines
    assert "decision   header x-gateway-destination-endpoint: 10.0.0.3:8000" in lines
    assert '           metadata envoy.lb {"x-gateway-destination-endpoint": "10.0.0.3:8000"}' in lines
    assert "\033[" not in out  # NO_COLOR and not a terminal


def test_decode_filter_removes_the_prefill_server(eppctl):
    _, base = explain(eppctl, "--endpoints", POOL, "-r", CHAT, code=0)
    assert base["result"]["endpoint"] == "10.0.0.4:8000"
    _, j = explain(eppctl, "--endpoints", POOL, "-c", CONFIGS / "llm-d-style.yaml", "-r", CHAT, code=0)
    (prof,) = j["profiles"]
    assert prof["name"] == "decode"
    (f,) = prof["filters"]
    assert f["plugin"] == "decode-filter"
    assert f["kept"] == ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]  # no role label counts as decode
    assert f["removed"] == [{"endpoint": "10.0.0.4:8000",
                             "reason": "llm-d.ai/role=prefill (want one of both, decode, encode-prefill-decode, prefill-decode)"}]
    assert j["result"]["endpoint"] != "10.0.0.4:8000" and j["result"]["status"] == 200


def test_every_example_request_parses_with_its_path(eppctl):
    expect = {CHAT: ("/v1/chat/completions", "chat_completions"),
              COMPLETIONS: ("/v1/completions", "completions"),  # bare body with "path"
              RESPONSES: ("/v1/responses", "responses")}  # envelope, path from the ":path" header
    for f, (path, api) in expect.items():
        _, j = explain(eppctl, "--endpoints", POOL, "-r", f, code=0)
        assert (j["request"]["path"], j["request"]["api"]) == (path, api), f
        assert j["request"]["prompt_chars"] > 0 and j["request"]["prefix_blocks"] == j["request"]["prompt_chars"] // 64


def test_path_flag_and_stdin(eppctl, tmp_path):
    bare_chat = tmp_path / "chat.json"
    bare_chat.write_text(json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
    # No path: the body's `messages` imply chat completions.
    _, j = explain(eppctl, "--endpoints", POOL, "-r", bare_chat, code=0)
    assert j["request"]["api"] == "chat_completions" and j["request"]["path"] == "/v1/chat/completions"
    _, j = explain(eppctl, "--endpoints", POOL, "-r", bare_chat, "--path", "/v1/chat/completions", code=0)
    assert j["request"]["api"] == "chat_completions"
    # A given path still wins: /v1/completions wants "prompt".
    code, j = explain(eppctl, "--endpoints", POOL, "-r", bare_chat, "--path", "/v1/completions")
    assert code == 1 and j["result"]["status"] == 400
    assert "prompt" in j["result"]["reason"]
    responses = tmp_path / "responses.json"
    responses.write_text(json.dumps({"model": "m", "input": "hello there"}))
    _, j = explain(eppctl, "--endpoints", POOL, "-r", responses, code=0)
    assert j["request"]["api"] == "responses"
    r = subprocess.run([os.environ.get("EPPCTL") or str(ROOT / "build" / "cli" / "eppctl"), "explain", "-o", "json",
                        "--endpoints", str(POOL), "-r", "-"], input=COMPLETIONS.read_text(), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["result"]["endpoint"] == "10.0.0.4:8000"


# --- --history warms the prefix index -------------------------------------------------------


def test_history_sends_the_request_to_the_endpoint_that_served_its_prefix(eppctl):
    # Three endpoints with identical metrics: without history every total ties; with history the
    # prefix of chat-capture.json (system prompt 0 of the trace) sits on one endpoint, chosen by
    # the seeded tie-breaks while the history was routed.
    eps = [a for i in (1, 2, 3) for a in ("-e", "10.1.0.%d:8000=%s" % (i, VLLM_METRICS))]
    trace = [json.loads(l) for l in TRACE.read_text().splitlines()]
    assert CHAT.exists() and json.loads(CHAT.read_text())["body"]["messages"][0] == trace[
        [t["headers"]["x-system-prompt"] for t in trace].index("0")]["body"]["messages"][0]
    _, cold = explain_text(eppctl, *eps, "-r", CHAT)
    assert "tie on total score: broken at random by the picker (seed decides)" in cold
    holders = set()
    for seed in range(4):
        # Where did the history put system prompt 0? `pick` routes the trace exactly as
        # --history does (same seed, one request at a time).
        r = eppctl("pick", *eps, "-t", TRACE, "--seed", seed, "-o", "jsonl")
        assert r.returncode == 0, r.stderr
        served = {json.loads(l)["endpoint"] for l, t in zip(r.stdout.splitlines(), trace)
                  if t["headers"]["x-system-prompt"] == "0"}
        assert len(served) == 1, served  # once routed, the prefix stays where it went
        (holder,) = served
        holders.add(holder)
        _, j = explain(eppctl, *eps, "-r", CHAT, "--history", TRACE, "--seed", seed, code=0)
        assert j["result"]["endpoint"] == holder, seed
        for s in j["profiles"][0]["scores"]:
            raw = scorer(s, "prefix-cache-scorer")["raw"]
            assert (raw > 0.9) if s["endpoint"] == holder else (raw == 0), (seed, s)
        _, text = explain_text(eppctl, *eps, "-r", CHAT, "--history", TRACE, "--seed", seed)
        assert "won on prefix-cache-scorer" in text
        assert "winner     %s total" % holder in text
    assert len(holders) > 1, "the seed should decide where the history's ties went"


def test_history_on_the_example_pool(eppctl):
    _, j = explain(eppctl, "--endpoints", POOL, "-r", CHAT, "--history", TRACE, code=0)
    best = j["profiles"][0]["scores"][0]
    assert best["endpoint"] == j["result"]["endpoint"] == "10.0.0.4:8000"
    pc = scorer(best, "prefix-cache-scorer")
    assert pc["raw"] == 24 / 25 and pc["detail"] == "24/25 blocks cached (384 tokens)"
    # explain itself is a what-if: the explained request is not recorded.
    _, again = explain(eppctl, "--endpoints", POOL, "-r", CHAT, code=0)
    assert scorer(again["profiles"][0]["scores"][0], "prefix-cache-scorer")["raw"] == 0


def test_prefix_matches_need_the_same_model_and_cache_salt(eppctl, tmp_path):
    for field, value in [("cache_salt", "tenant-b"), ("model", "other-model")]:
        env = json.loads(CHAT.read_text())
        env["body"][field] = value
        req = tmp_path / ("%s.json" % field)
        req.write_text(json.dumps(env))
        _, j = explain(eppctl, "--endpoints", POOL, "-r", req, "--history", TRACE, code=0)
        assert [scorer(s, "prefix-cache-scorer")["raw"] for s in j["profiles"][0]["scores"]] == [0, 0, 0, 0], field


def test_prefix_block_size_comes_from_the_first_candidate_unless_fixed(eppctl):
    # autoTune (the default) takes the block size of the first candidate, as GIE does: with only
    # the trtllm-serve server (32-token KV blocks) left by the subset hint, the prompt is hashed in
    # 32-token blocks and the 16-token blocks the history recorded there no longer match.
    _, j = explain(eppctl, "--endpoints", POOL, "-r", CHAT, "--history", TRACE, "--subset", "10.0.0.4", code=0)
    assert j["request"]["prefix_block_size_tokens"] == 32
    assert scorer(j["profiles"][0]["scores"][0], "prefix-cache-scorer")["raw"] == 0
    # prefix-heavy.yaml fixes the block size (autoTune: false), so the match survives the hint.
    _, j = explain(eppctl, "--endpoints", POOL, "-c", CONFIGS / "prefix-heavy.yaml", "-r", CHAT, "--history", TRACE,
                   "--subset", "10.0.0.4", code=0)
    assert j["request"]["prefix_block_size_tokens"] == 16
    pc = scorer(j["profiles"][0]["scores"][0], "prefix-cache-scorer")
    assert pc["detail"] == "24/25 blocks cached (384 tokens)"
    # matchLengthWeight 0.3, matchLengthScaleTokens 4096: 0.3 * (384 / 4096)^2 + 0.7 * 24 / 25.
    assert math.isclose(pc["raw"], 0.3 * (384 / 4096) ** 2 + 0.7 * 24 / 25)


def test_history_with_a_bad_line_is_a_usage_error(eppctl, tmp_path):
    h = tmp_path / "history.jsonl"
    h.write_text(TRACE.read_text().splitlines()[0] + "\n\n{\"model\": \"m\"\n")
    r = eppctl("explain", "--endpoints", POOL, "-r", CHAT, "--history", h)
    assert r.returncode == 2
    assert "history.jsonl:3: invalid JSON" in r.stderr
    r = eppctl("explain", "--endpoints", POOL, "-r", CHAT, "--history", tmp_path / "missing.jsonl")
    assert r.returncode == 2 and "cannot read history file" in r.stderr


# --- subset hint -------------------------------------------------------------------------------


@pytest.mark.parametrize("subset,candidates,allowed", [
    (["10.0.0.2:8000"], 1, {"10.0.0.2:8000"}),
    (["10.0.0.2"], 1, {"10.0.0.2:8000"}),  # a bare IP matches every port
    (["10.0.0.1:8000,10.0.0.3"], 2, {"10.0.0.1:8000", "10.0.0.3:8000"}),
    (["10.0.0.1:8000", "--subset", "10.0.0.2:8000"], 2, {"10.0.0.1:8000", "10.0.0.2:8000"}),
])
def test_subset_hint_narrows_the_candidates(eppctl, subset, candidates, allowed):
    _, j = explain(eppctl, "--endpoints", POOL, "-r", COMPLETIONS, "--subset", *subset, code=0)
    assert j["result"]["candidates"] == candidates
    assert j["result"]["endpoint"] in allowed
    assert {s["endpoint"] for s in j["profiles"][0]["scores"]} == allowed


@pytest.mark.parametrize("subset,needle", [
    ("10.0.0.9", "no endpoint of the pool matches the subset hint [10.0.0.9]"),
    ("10.0.0.2:9000", "no endpoint of the pool matches the subset hint [10.0.0.2:9000]"),  # port differs
    ("10.0.0", "subset hint [10.0.0]"),  # not a prefix match
    ("", "the subset hint is empty"),
])
def test_subset_hint_without_a_match_is_503(eppctl, subset, needle):
    code, j = explain(eppctl, "--endpoints", POOL, "-r", COMPLETIONS, "--subset", subset)
    assert code == 1
    assert j["result"]["status"] == 503 and j["result"]["endpoint"] is None and j["result"]["candidates"] == 0
    assert needle in j["result"]["reason"]
    # A pre-dispatch rejection names its reason, as llm-d sends it.
    assert j["decision"] == {"immediate_response": {"status": 503, "body": j["result"]["reason"],
                                                    "headers": {"x-llm-d-request-dropped-reason": "rejected-no-endpoints"}}}
    code, text = explain_text(eppctl, "--endpoints", POOL, "-r", COMPLETIONS, "--subset", subset)
    assert code == 1 and "result     503 Service Unavailable" in text and "ImmediateResponse 503" in text


def test_subset_hint_matches_ipv6_and_hostnames(eppctl, root):
    pool = root / "tests" / "data" / "endpoints" / "pool.yaml"
    for subset, want in [("fd00::3", "[fd00::3]:8000"), ("[fd00::3]", "[fd00::3]:8000"),
                         ("pod-4.vllm.default.svc:8000", "pod-4.vllm.default.svc:8000")]:
        _, j = explain(eppctl, "--endpoints", pool, "-r", COMPLETIONS, "--subset", subset, code=0)
        assert j["result"]["endpoint"] == want, subset


def test_filters_that_remove_every_candidate_give_503(eppctl):
    args = ["--endpoints", POOL, "-c", CONFIGS / "label-selector.yaml", "-r", COMPLETIONS, "--subset",
            "10.0.0.2,10.0.0.4"]
    code, j = explain(eppctl, *args)
    assert code == 1
    (prof,) = j["profiles"]
    assert prof["filters"][0]["kept"] == [] and len(prof["filters"][0]["removed"]) == 2
    assert prof["scores"] == [] and prof["picked"] == []
    assert prof["error"] == "filter 'zone-a' removed every remaining endpoint"
    assert j["result"]["status"] == 503 and j["result"]["candidates"] == 2
    assert j["result"]["reason"] == "no eligible endpoint: default: filter 'zone-a' removed every remaining endpoint"
    code, text = explain_text(eppctl, *args)
    assert code == 1 and "  no endpoint: filter 'zone-a' removed every remaining endpoint" in text.splitlines()


# --- admission (429) and bad requests (400) ----------------------------------------------------


def test_sheddable_request_is_rejected_when_saturated(eppctl, tmp_path):
    code, j = explain(eppctl, "--endpoints", POOL, "-c", CONFIGS / "shed.yaml", "-r", COMPLETIONS, "--priority", "-1")
    assert code == 1
    assert j["result"]["status"] == 429 and j["result"]["endpoint"] is None
    assert j["result"]["saturation"] > 1
    assert "sheddable request dropped (priority -1" in j["result"]["reason"]
    assert j["decision"]["immediate_response"]["status"] == 429
    assert j["profiles"] == []  # rejected before any profile ran
    # The same request at priority 0 is routed, and the detector, used as a filter, keeps only
    # the endpoint under both thresholds.
    _, j = explain(eppctl, "--endpoints", POOL, "-c", CONFIGS / "shed.yaml", "-r", COMPLETIONS, code=0)
    (f,) = j["profiles"][0]["filters"]
    assert f["kept"] == ["10.0.0.4:8000"] and [x["reason"] for x in f["removed"]] == ["queue 3 >= 1", "queue 1 >= 1",
                                                                                       "queue 2 >= 1"]
    # GIE's default thresholds (queue 5, KV 0.8) with saturated servers.
    hot = tmp_path / "hot.prom"
    hot.write_text(vllm_metrics(queue=40, kv=0.97))
    eps = ["-e", "10.2.0.1:8000=%s" % hot, "-e", "10.2.0.2:8000=%s" % hot]
    code, text = explain_text(eppctl, *eps, "-r", COMPLETIONS, "--priority", "-1")
    assert code == 1 and "result     429 Too Many Requests" in text and "priority -1" in text
    _, j = explain(eppctl, *eps, "-r", COMPLETIONS, "--priority", "0", code=0)  # not sheddable
    # Below saturation, sheddable requests are routed too.
    _, j = explain(eppctl, "--endpoints", POOL, "-r", COMPLETIONS, "--priority", "-1", code=0)
    assert j["result"]["saturation"] < 1 and j["request"]["priority"] == -1


def test_body_that_fails_to_parse_is_400_with_the_json_path(eppctl, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"path": "/v1/chat/completions",
                               "body": {"model": "m", "messages": [{"role": "user", "content": "ok"},
                                                                   {"role": "user", "content": 7}]}}))
    code, j = explain(eppctl, "--endpoints", POOL, "-r", bad)
    assert code == 1
    assert j["request"] is None and j["profiles"] == []
    assert j["result"]["status"] == 400 and j["result"]["endpoint"] is None
    assert "body.messages[1].content: expected a string or an array of parts" in j["result"]["reason"]
    assert j["decision"] == {"immediate_response": {"status": 400, "body": j["result"]["reason"]}}
    code, text = explain_text(eppctl, "--endpoints", POOL, "-r", bad)
    assert code == 1 and "result     400 Bad Request" in text and "body.messages[1].content" in text
    syntax = tmp_path / "syntax.json"
    syntax.write_text('{"model": "m", "prompt": ')
    code, j = explain(eppctl, "--endpoints", POOL, "-r", syntax)
    assert code == 1 and j["result"]["status"] == 400 and "invalid JSON at byte" in j["result"]["reason"]


# --- usage and configuration errors (exit 2) ---------------------------------------------------


def test_configuration_errors_exit_2(eppctl, tmp_path):
    unknown = write_config(tmp_path, "unknown.yaml", "plugins:\n- type: frobnicate-scorer\n- type: queue-scorer\n")
    pool, req = ["--endpoints", POOL], ["-r", COMPLETIONS]
    cases = [
        (pool + req + ["-c", tmp_path / "missing.yaml"], "cannot read config file"),
        (pool + req + ["-c", unknown], "unsupported plugin types: frobnicate-scorer (plugins[0], line 4)"),
        (req + ["--endpoints", tmp_path / "missing-pool.yaml"], "missing-pool.yaml"),
        (pool + ["-r", tmp_path / "missing.json"], "cannot read"),
        (pool + req + ["--output", "yaml"], "yaml"),
        (pool + req + ["--priority", "high"], "priority"),
        (pool + req + ["--bogus"], "--bogus"),
        (req, "no endpoints"),
        (pool, "--request"),
    ]
    for args, needle in cases:
        r = eppctl("explain", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert needle in r.stderr, (args, r.stderr)
        assert r.stdout == "", args


# --- seeds and fallbacks -----------------------------------------------------------------------


def test_same_seed_same_json(eppctl):
    args = ["--endpoints", POOL, "-c", CONFIGS / "weighted-random.yaml", "-r", CHAT, "--history", TRACE]
    a = eppctl("explain", "-o", "json", "--seed", 7, *args)
    b = eppctl("explain", "-o", "json", "--seed", 7, *args)
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout
    outcomes = set()
    for seed in range(12):
        _, j = explain(eppctl, "--seed", seed, *args, code=0)
        outcomes.add((j["result"]["endpoint"], tuple(j["result"]["fallbacks"])))
    assert len(outcomes) > 1, "weighted-random-picker ignored --seed"


def test_fallbacks_with_max_num_of_endpoints_2(eppctl, tmp_path):
    _, j = explain(eppctl, "--endpoints", POOL, "-c", CONFIGS / "weighted-random.yaml", "-r", CHAT, code=0)
    res = j["result"]
    assert len(res["fallbacks"]) == 1 and res["fallbacks"][0] != res["endpoint"]
    assert j["profiles"][0]["picked"] == [res["endpoint"]] + res["fallbacks"]
    value = res["endpoint"] + "," + res["fallbacks"][0]
    assert j["decision"]["header"][DEST] == j["decision"]["dynamic_metadata"]["envoy.lb"][DEST] == value
    # With max-score-picker the fallbacks are the next best totals, in order.
    cfg = write_config(tmp_path, "top3.yaml",
                       "plugins:\n- type: queue-scorer\n- type: kv-cache-utilization-scorer\n"
                       "- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 3}\n")
    _, j = explain(eppctl, "--endpoints", POOL, "-c", cfg, "-r", CHAT, code=0)
    ranked = [s["endpoint"] for s in j["profiles"][0]["scores"]]
    assert [j["result"]["endpoint"]] + j["result"]["fallbacks"] == ranked[:3]
    _, text = explain_text(eppctl, "--endpoints", POOL, "-c", cfg, "-r", CHAT)
    assert "fallbacks %s,%s" % (ranked[1], ranked[2]) in text
    assert "x-gateway-destination-endpoint: %s" % ",".join(ranked[:3]) in text


# --- live servers ------------------------------------------------------------------------------


def hostport(url):
    return url.split("://", 1)[1].rstrip("/")


def test_explain_scrapes_live_simulators(eppctl, sim):
    # One server with a single running slot and slow decoding, loaded until requests queue up;
    # explain scrapes all three and must see the queue and route elsewhere.
    s = sim("--count", "3", "--max-running", "1", "--decode-step-ms", "20")
    busy, *idle = s.urls
    body = json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "load", "max_tokens": 30}).encode()

    def send():
        req = urllib.request.Request(busy + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=15).read()
        except OSError:
            pass

    threads = [threading.Thread(target=send, daemon=True) for _ in range(5)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with urllib.request.urlopen(busy + "/metrics", timeout=5) as r:
            text = r.read().decode()
        waiting = [l for l in text.splitlines() if l.startswith("vllm:num_requests_waiting")]
        if waiting and float(waiting[0].rsplit(" ", 1)[1]) >= 2:
            break
        time.sleep(0.02)
    else:
        pytest.fail("the simulator never queued requests")
    eps = [a for u in s.urls for a in ("--endpoint", hostport(u))]
    r = eppctl("explain", "-o", "json", *eps, "-r", CHAT, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    j = json.loads(r.stdout)
    scores = {x["endpoint"]: x for x in j["profiles"][0]["scores"]}
    assert set(scores) == {hostport(u) for u in s.urls}
    q = scorer(scores[hostport(busy)], "queue-scorer")
    assert q["detail"].startswith("queue ") and float(q["detail"].split()[1]) >= 1, q
    assert q["raw"] == 0
    assert j["result"]["endpoint"] in {hostport(u) for u in idle}
    for u in idle:
        assert scorer(scores[hostport(u)], "queue-scorer")["detail"] == "queue 0"
    # ADDR=URL: the metrics come from that URL, the address is only a name.
    r = eppctl("explain", "-o", "json", "-e", "10.4.0.1:8000=%s/metrics" % idle[0], "-e",
               "10.4.0.2:8000=%s/metrics" % busy, "-r", CHAT, timeout=30)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    for sc in json.loads(r.stdout)["profiles"][0]["scores"]:
        assert re.fullmatch(r"queue \d+", scorer(sc, "queue-scorer")["detail"]), sc  # scraped, not "no queue metric"


def test_unreachable_endpoint_is_a_warning_not_an_error(eppctl, tmp_path):
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    r = eppctl("explain", "-o", "json", "-e", "127.0.0.1:%d" % port, "-e", "10.3.0.1:8000=%s" % VLLM_METRICS,
               "-r", COMPLETIONS, "--timeout", "1")
    assert r.returncode == 0, r.stderr
    assert "warning:" in r.stderr and "127.0.0.1:%d" % port in r.stderr and "connection refused" in r.stderr
    j = json.loads(r.stdout)
    assert j["result"]["endpoint"] == "10.3.0.1:8000"
    # Nothing listens there: passed over (not scored), and said so.
    assert j["result"]["unreachable"] == ["127.0.0.1:%d" % port]
    assert j["result"]["candidates"] == 1
    assert not [s for s in j["profiles"][0]["scores"] if s["endpoint"] == "127.0.0.1:%d" % port]


# --- golden files ------------------------------------------------------------------------------

GOLDEN_SCENARIOS = {
    # GIE's default profile on the example pool: the idle prefill server wins on load.
    "default_chat": ["--endpoints", "examples/endpoints/pool.yaml", "-r", "examples/requests/chat-capture.json",
                     "--seed", "1"],
    # The shared-prefix trace routed first: the prefix decides.
    "history_prefix": ["--endpoints", "examples/endpoints/pool.yaml", "-r", "examples/requests/chat-capture.json",
                       "--history", "examples/traces/shared-prefix.jsonl", "--seed", "1"],
    # llm-d style: decode-filter removes the prefill server; a responses request.
    "llm_d_decode_filter": ["--endpoints", "examples/endpoints/pool.yaml", "-c", "examples/configs/llm-d-style.yaml",
                            "-r", "examples/requests/responses.json", "--seed", "1"],
}


def same_json(a, b, path="$"):
    """Equal JSON values, numbers within 1e-9 (relative); returns the first difference or None."""
    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    if number(a) and number(b):
        return None if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) else "%s: %r != %r" % (path, a, b)
    if type(a) is not type(b):
        return "%s: %r != %r" % (path, a, b)
    if isinstance(a, dict):
        if set(a) != set(b):
            return "%s: keys %s != %s" % (path, sorted(a), sorted(b))
        return next((d for k in a for d in [same_json(a[k], b[k], "%s.%s" % (path, k))] if d), None)
    if isinstance(a, list):
        if len(a) != len(b):
            return "%s: length %d != %d" % (path, len(a), len(b))
        return next((d for i, (x, y) in enumerate(zip(a, b)) for d in [same_json(x, y, "%s[%d]" % (path, i))] if d),
                    None)
    return None if a == b else "%s: %r != %r" % (path, a, b)


@pytest.mark.parametrize("scenario", sorted(GOLDEN_SCENARIOS))
def test_golden(scenario):
    exe = os.path.abspath(os.environ.get("EPPCTL") or str(ROOT / "build" / "cli" / "eppctl"))
    if not os.path.exists(exe):
        pytest.skip("eppctl not built at %s (set EPPCTL)" % exe)
    # Relative paths from the source root: nothing in the output depends on where it lives.
    r = subprocess.run([exe, "explain", "-o", "json", *GOLDEN_SCENARIOS[scenario]], cwd=ROOT, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "NO_COLOR": "1"})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    path = GOLDEN / ("explain_%s.json" % scenario)
    if os.environ.get("EPP_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=2) + "\n")
    assert path.exists(), "missing %s: run with EPP_UPDATE_GOLDEN=1" % path
    diff = same_json(json.loads(path.read_text()), got)
    assert diff is None, "%s differs from the golden file (EPP_UPDATE_GOLDEN=1 regenerates it): %s" % (path.name, diff)


def test_custom_metric_attributes_and_topology_in_a_pd_explain(eppctl, tmp_path):
    """core-metrics-extractor's customMetrics feed endpoint-attribute-filter; the prefill profile's
    topology filter compares with the decode pick (the peer); explain shows both reasons."""
    def metrics(name, queue, util):
        p = tmp_path / name
        p.write_text(vllm_metrics(queue, 0.1) + f"# TYPE gpu_util gauge\ngpu_util {util}\n")
        return p
    eps = tmp_path / "eps.yaml"
    eps.write_text(
        "endpoints:\n"
        f"- {{address: 10.0.0.1:8000, metrics: {metrics('d1', 0, 0.95)}, labels: {{llm-d.ai/role: decode, kubernetes.io/hostname: n1}}}}\n"
        f"- {{address: 10.0.0.2:8000, metrics: {metrics('d2', 3, 0.2)}, labels: {{llm-d.ai/role: decode, kubernetes.io/hostname: n2}}}}\n"
        f"- {{address: 10.0.0.3:8000, metrics: {metrics('p1', 0, 0.1)}, labels: {{llm-d.ai/role: prefill, kubernetes.io/hostname: n1}}}}\n"
        f"- {{address: 10.0.0.4:8000, metrics: {metrics('p2', 5, 0.1)}, labels: {{llm-d.ai/role: prefill, kubernetes.io/hostname: n2}}}}\n")
    cfg = write_config(tmp_path, "pd.yaml", """plugins:
- type: core-metrics-extractor
  parameters:
    engineConfigs:
    - name: vllm
      queuedRequestsSpec: vllm:num_requests_waiting
      runningRequestsSpec: vllm:num_requests_running
      kvUsageSpec: vllm:kv_cache_usage_perc
      customMetrics: [{attributeKey: gpu.util, metricSpec: gpu_util}]
- type: endpoint-attribute-filter
  parameters: {attribute: gpu.util, algorithm: {type: threshold, threshold: {operator: LessThan, value: 0.9}}}
- {type: topology-extractor}
- {type: topology-affinity-filter}
- {type: decode-filter}
- {type: prefill-filter}
- {type: queue-scorer}
- {type: always-disagg-pd-decider}
- type: disagg-profile-handler
  parameters: {deciders: {prefill: always-disagg-pd-decider}}
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: endpoint-attribute-filter}, {pluginRef: queue-scorer}]
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: topology-affinity-filter}, {pluginRef: queue-scorer}]
""")
    code, text = explain_text(eppctl, "--config", str(cfg), "--endpoints", str(eps), "-r", str(COMPLETIONS))
    assert code == 0, text
    # The idle decode server runs hot: the busier, cool one (on n2) decodes; prefill follows it
    # to n2 although the n1 prefill server is idle.
    assert "gpu.util = 0.95, not < 0.9" in text
    assert "closest level shared with peer 10.0.0.2:8000: none (minAffinity host)" in text
    assert "header x-gateway-destination-endpoint: 10.0.0.2:8000" in text
    assert "header x-prefiller-host-port: 10.0.0.4:8000" in text
    _, js = explain(eppctl, "--config", str(cfg), "--endpoints", str(eps), "-r", str(COMPLETIONS))
    assert [p["name"] for p in js["profiles"]] == ["decode", "prefill"]
