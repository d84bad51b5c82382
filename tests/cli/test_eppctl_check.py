"""`eppctl check` end to end: the built binary against real HTTP servers on 127.0.0.1 and files."""
import json
import socket
import time

import pytest

from modelserver import VLLM_METRICS, ModelServer

CHECK_IDS = ["metrics.reachable", "metrics.parse", "metrics.engine", "metrics.queue", "metrics.running",
             "metrics.kv_cache", "metrics.lora", "metrics.cache_info", "api.models", "api.completions",
             "api.chat", "api.stream"]


def check_json(eppctl, *args):
    r = eppctl("check", "--output", "json", *args)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def by_id(target):
    return {c["id"]: c for c in target["checks"]}


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_healthy_server_passes_every_check_with_exact_json_shape(eppctl):
    with ModelServer() as srv:
        code, report = check_json(eppctl, srv.url)
    assert code == 0
    assert set(report) == {"status", "targets"}
    assert report["status"] == "pass"
    (t,) = report["targets"]
    assert set(t) == {"target", "engine", "status", "metrics", "checks", "elapsed_ms"}
    assert t["target"] == srv.url and t["engine"] == "vllm" and t["status"] == "pass"
    assert t["metrics"] == {"waiting_queue_size": 2, "running_requests": 3, "kv_cache_usage": 0.25,
                            "lora": {"max_lora": 2, "running": ["a"], "waiting": [], "slots_in_use": 1},
                            "cache_block_size": 16, "cache_num_blocks": 512}
    assert [c["id"] for c in t["checks"]] == CHECK_IDS
    assert all(c["status"] == "pass" for c in t["checks"]), t["checks"]
    assert all(set(c) == {"id", "status", "message"} for c in t["checks"])
    assert isinstance(t["elapsed_ms"], (int, float))


def test_api_probes_send_the_first_listed_model_or_the_given_one(eppctl):
    with ModelServer(models=["first", "second"]) as srv:
        check_json(eppctl, srv.url)
        posts = [s for s in srv.seen if s[0] == "POST"]
        assert {p[3]["model"] for p in posts} == {"first"}
        assert any(p[3].get("stream") is True for p in posts)
        srv.seen.clear()
        check_json(eppctl, "--model", "second", srv.url)
        assert {p[3]["model"] for p in srv.seen if p[0] == "POST"} == {"second"}


def test_connection_refused_fails_reachable(eppctl):
    url = "http://127.0.0.1:%d" % closed_port()
    code, report = check_json(eppctl, url)
    assert code == 1
    c = by_id(report["targets"][0])
    assert c["metrics.reachable"]["status"] == "fail"
    assert "connection refused" in c["metrics.reachable"]["message"]
    assert c["api.models"]["status"] == "fail"
    assert c["metrics.queue"]["status"] == "skip"


def test_timeout_is_reported_not_hung(eppctl):
    with ModelServer(metrics_delay=3) as srv:
        start = time.monotonic()
        code, report = check_json(eppctl, "--timeout", "0.3", "--no-api", srv.url)
        elapsed = time.monotonic() - start
    assert code == 1
    msg = by_id(report["targets"][0])["metrics.reachable"]["message"]
    assert "timed out after 300 ms" in msg
    assert elapsed < 3, "check waited for the slow server instead of timing out"


def test_http_500_on_metrics_and_api(eppctl):
    with ModelServer(metrics_status=500, api_status=500) as srv:
        code, report = check_json(eppctl, srv.url)
    assert code == 1
    c = by_id(report["targets"][0])
    assert "HTTP 500" in c["metrics.reachable"]["message"]
    for cid in ("api.completions", "api.chat", "api.stream"):
        assert c[cid]["status"] == "fail" and "HTTP 500" in c[cid]["message"], c[cid]


def test_garbage_body_fails_parse_with_line_and_column(eppctl):
    with ModelServer(metrics="<html>\n<body>oops</body>\n</html>\n") as srv:
        code, report = check_json(eppctl, "--no-api", srv.url)
    assert code == 1
    c = by_id(report["targets"][0])
    assert c["metrics.parse"]["status"] == "fail"
    assert "line 1, column 1" in c["metrics.parse"]["message"]


def test_50_mib_body_is_cut_at_the_cap(eppctl):
    with ModelServer(metrics_huge_mib=50) as srv:
        code, report = check_json(eppctl, "--no-api", "--timeout", "20", srv.url)
    assert code == 1
    msg = by_id(report["targets"][0])["metrics.reachable"]["message"]
    assert "exceeds the cap of 16 MiB" in msg


def test_wrong_metric_type_names_both_types(eppctl):
    text = VLLM_METRICS.replace("# TYPE vllm:num_requests_running gauge", "# TYPE vllm:num_requests_running counter")
    with ModelServer(metrics=text) as srv:
        code, report = check_json(eppctl, "--no-api", srv.url)
    assert code == 1
    msg = by_id(report["targets"][0])["metrics.running"]["message"]
    assert "counter" in msg and "gauge" in msg
    assert report["targets"][0]["metrics"]["running_requests"] is None


def test_percent_where_fraction_belongs(eppctl):
    text = VLLM_METRICS.replace("} 0.25", "} 25")
    with ModelServer(metrics=text) as srv:
        code, report = check_json(eppctl, "--no-api", srv.url)
    assert code == 1
    c = by_id(report["targets"][0])["metrics.kv_cache"]
    assert c["status"] == "fail" and "looks like a percent" in c["message"]


def test_auth_headers_and_metrics_path_are_sent(eppctl, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with ModelServer(metrics_path="/custom/metrics") as srv:
        code, _ = check_json(eppctl, "--no-api", "--metrics-path", "/custom/metrics", "--bearer-token-file", token,
                             "--header", "X-Tenant: blue", srv.url)
        assert code == 0
        headers = srv.seen[0][2]
    assert headers.get("Authorization") == "Bearer s3cret"
    assert headers.get("X-Tenant") == "blue"


def test_many_targets_are_checked_concurrently(eppctl):
    servers = [ModelServer(metrics_delay=1.0) for _ in range(5)]
    for s in servers:
        s.__enter__()
    try:
        start = time.monotonic()
        code, report = check_json(eppctl, "--no-api", *[s.url for s in servers])
        elapsed = time.monotonic() - start
    finally:
        for s in servers:
            s.__exit__(None, None, None)
    assert code == 0
    assert len(report["targets"]) == 5
    # Five one-second scrapes run together: well under the five seconds a sequential scraper takes.
    assert elapsed < 4.5


def test_metric_override_and_forced_engine(eppctl, tmp_path):
    text = VLLM_METRICS.replace("vllm:num_requests_waiting", "custom_waiting")
    f = tmp_path / "m.prom"
    f.write_text(text)
    code, report = check_json(eppctl, f)
    assert code == 1 and by_id(report["targets"][0])["metrics.queue"]["status"] == "fail"
    code, report = check_json(eppctl, "--engine", "vllm", "--metric", "queue=custom_waiting", f)
    assert code == 0
    assert report["targets"][0]["metrics"]["waiting_queue_size"] == 2


def test_metrics_config_yaml_defines_an_engine(eppctl, tmp_path):
    f = tmp_path / "m.prom"
    f.write_text("# TYPE q gauge\nq 4\n# TYPE r gauge\nr 1\n# TYPE kv gauge\nkv 0.5\n")
    cfg = tmp_path / "engines.yaml"
    cfg.write_text("engineConfigs:\n- name: mine\n  queuedRequestsSpec: q\n  runningRequestsSpec: r\n  kvUsageSpec: kv\n")
    code, report = check_json(eppctl, "--metrics-config", cfg, f)
    assert code == 0
    t = report["targets"][0]
    assert t["engine"] == "mine" and t["metrics"]["waiting_queue_size"] == 4


def test_usage_errors_exit_2_with_a_message(eppctl, tmp_path):
    for args, needle in [
        (["--engine", "tgi", "x"], "unknown engine 'tgi'"),
        (["--metric", "latency=x", "x"], "unknown metric field 'latency'"),
        (["--metric", "queue", "x"], "expected FIELD=SPEC"),
        (["--metric", "queue=bad{", "x"], "invalid metric spec"),
        (["--output", "yaml", "x"], "yaml"),
        (["--bearer-token-file", str(tmp_path / "missing"), "x"], "cannot read"),
        (["ftp://example/x"], "only http:// and https://"),
        ([], "targets"),
    ]:
        r = eppctl("check", *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert needle in r.stderr, (args, r.stderr)
    bad = tmp_path / "bad.yaml"
    bad.write_text("engineConfigs:\n- name: x\n  queueSpec: q\n")
    r = eppctl("check", "--metrics-config", bad, "x")
    assert r.returncode == 2 and "bad.yaml:3:3" in r.stderr and "unknown key" in r.stderr


def test_text_output_has_a_line_per_check(eppctl, root):
    r = eppctl("check", root / "examples" / "metrics" / "vllm.txt")
    assert r.returncode == 0, r.stderr
    for cid in CHECK_IDS:
        assert cid in r.stdout
    assert "\x1b[" not in r.stdout  # no colour when not a terminal
    assert "=> queue 3, running 12, kv 0.4375" in r.stdout


EXPECTED = {
    "llm-d-inference-sim-v0.7.1-idle-maxlora2.prom": ("vllm", "pass", 0, 0, 0, {"max_lora": 2, "running": [], "waiting": [], "slots_in_use": 0}, 16, 1024),
    "sglang-2025-docs-production-metrics-loaded.prom": ("sglang", "warn", 2826, 162, 0.28, None, None, None),
    "sglang-2024q4-docs-production-metrics-name-label.prom": ("sglang", "warn", 0, 0, 0.01, None, None, None),
    "triton-trtllm-backend-2026-readme-inflight.prom": ("triton-tensorrt-llm", "warn", 1, 1, 0.4875, None, 64, 6239),
    "vllm-0.7-v0engine-aibrix-runtime-doc-truncated.prom": ("vllm", "pass", 0, 0, 0.0, {"max_lora": 0, "running": [], "waiting": [], "slots_in_use": 0}, 16, 81767),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_captures(eppctl, fixtures_dir, name):
    engine, status, waiting, running, kv, lora, bs, nb = EXPECTED[name]
    code, report = check_json(eppctl, fixtures_dir / "metrics" / name)
    assert code == 0
    t = report["targets"][0]
    assert (t["engine"], t["status"]) == (engine, status)
    assert t["metrics"] == {"waiting_queue_size": waiting, "running_requests": running, "kv_cache_usage": kv,
                            "lora": lora, "cache_block_size": bs, "cache_num_blocks": nb}


def test_real_capture_elided_and_epp_own_metrics(eppctl, fixtures_dir):
    elided = fixtures_dir / "metrics" / "vllm-v1-design-doc-example-elided.prom"
    code, report = check_json(eppctl, elided)
    assert code == 1 and "line 4, column 1" in by_id(report["targets"][0])["metrics.parse"]["message"]
    code, report = check_json(eppctl, "--lenient", elided)
    c = by_id(report["targets"][0])
    assert code == 1
    assert c["metrics.parse"]["status"] == "warn" and "skipped 3" in c["metrics.parse"]["message"]
    assert report["targets"][0]["metrics"]["running_requests"] == 8
    assert c["metrics.queue"]["status"] == "fail" and c["metrics.kv_cache"]["status"] == "fail"
    code, report = check_json(eppctl, fixtures_dir / "metrics" / "gie-epp-testdata-request_ttft_seconds.prom")
    assert code == 1
    assert report["targets"][0]["engine"] is None
    assert by_id(report["targets"][0])["metrics.parse"]["message"].startswith("1 families, 114 samples")
