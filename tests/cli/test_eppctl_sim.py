"""`eppctl sim` over real HTTP on 127.0.0.1: dialects, OpenAI endpoints, load, cache hits, faults."""
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PREFIX = "You are a helpful assistant for the ACME support desk. " * 8


def post(url, body, timeout=30):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return r.read().decode()


def gauge(text, name):
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise KeyError(name)


@pytest.mark.parametrize("engine,lora", [("vllm", True), ("sglang", False), ("trtllm-serve", False)])
def test_check_passes_against_every_dialect(eppctl, sim, engine, lora):
    args = ["--engine", engine, "--time-scale", "0.01"] + (["--lora", "sql-lora"] if lora else [])
    s = sim(*args)
    r = eppctl("check", "--output", "json", s.url)
    report = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout
    t = report["targets"][0]
    assert t["engine"] == engine
    failed = [c for c in t["checks"] if c["status"] == "fail"]
    assert not failed
    statuses = {c["id"]: c["status"] for c in t["checks"]}
    for cid in ("metrics.queue", "metrics.running", "metrics.kv_cache", "metrics.cache_info", "api.models",
                "api.completions", "api.chat", "api.stream"):
        assert statuses[cid] == "pass", (cid, t["checks"])
    assert statuses["metrics.lora"] == ("pass" if lora else "warn")


def test_openai_endpoints_and_deterministic_text(sim):
    a = sim("--time-scale", "0.01", "--seed", "7")
    b = sim("--time-scale", "0.01", "--seed", "7")
    c = sim("--time-scale", "0.01", "--seed", "8")
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 6}
    outs = []
    for s in (a, b, c):
        code, text = post(s.url + "/v1/completions", body)
        assert code == 200
        j = json.loads(text)
        assert j["object"] == "text_completion" and j["usage"]["completion_tokens"] == 6
        outs.append(j["choices"][0]["text"])
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]
    code, text = post(a.url + "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                                        "max_tokens": 3})
    assert code == 200 and json.loads(text)["choices"][0]["message"]["role"] == "assistant"
    with urllib.request.urlopen(a.url + "/health", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(a.url + "/v1/models", timeout=5) as r:
        assert [m["id"] for m in json.loads(r.read())["data"]] == [MODEL]


def test_streaming_with_usage(sim):
    s = sim("--time-scale", "0.01")
    for path, body in [("/v1/chat/completions", {"messages": [{"role": "user", "content": PREFIX}]}),
                       ("/v1/completions", {"prompt": PREFIX})]:
        code, text = post(s.url + path, {"model": MODEL, "max_tokens": 4, "stream": True,
                                         "stream_options": {"include_usage": True}, **body})
        assert code == 200
        data = [l[6:] for l in text.splitlines() if l.startswith("data: ")]
        assert data[-1] == "[DONE]"
        chunks = [json.loads(d) for d in data[:-1]]
        assert len(chunks) == 5  # 4 tokens + the usage chunk
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
        assert chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_bad_requests_get_openai_style_errors(sim):
    s = sim("--time-scale", "0.01")
    req = urllib.request.Request(s.url + "/v1/completions", data=b"{not json", headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 400
    assert json.loads(e.value.read())["error"]["type"] == "invalid_request_error"
    for body, code, needle in [({"prompt": "x"}, 400, "model"),
                               ({"model": "nope", "prompt": "x"}, 404, "does not exist"),
                               ({"model": MODEL}, 400, "prompt"),
                               ({"model": MODEL, "prompt": "x", "max_tokens": 0}, 400, "max_tokens")]:
        got, text = post(s.url + "/v1/completions", body)
        assert got == code and needle in json.loads(text)["error"]["message"], (body, text)
    got, text = post(s.url + "/v1/chat/completions", {"model": MODEL, "messages": []})
    assert got == 400 and "messages" in text


def test_load_grows_queue_and_kv_and_repeated_prefix_hits_cache(sim):
    # 2 running slots; 40 ms decode steps, 40 output tokens: each request holds a slot ~1.6 s.
    s = sim("--max-running", "2", "--decode-step-ms", "40", "--kv-blocks", "400")
    results = []

    def one(i):
        results.append(post(s.url + "/v1/completions", {"model": MODEL, "prompt": PREFIX + "question %d" % i,
                                                        "max_tokens": 40}, timeout=60))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    seen_waiting, seen_kv = 0.0, 0.0
    deadline = time.monotonic() + 20
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        text = metrics(s.url)
        assert gauge(text, "vllm:num_requests_running") <= 2
        seen_waiting = max(seen_waiting, gauge(text, "vllm:num_requests_waiting"))
        seen_kv = max(seen_kv, gauge(text, "vllm:kv_cache_usage_perc"))
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=30)
    assert seen_waiting >= 2, "queue never grew past max_running"
    assert seen_kv > 0
    assert all(code == 200 for code, _ in results)
    cached = [json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"] for _, body in results]
    assert max(cached) > 0, "a repeated prefix never hit the cache"
    text = metrics(s.url)
    assert gauge(text, "vllm:prefix_cache_hits_total") > 0
    assert gauge(text, "vllm:num_requests_waiting") == 0


def test_fault_flags_produce_the_failures_check_reports(eppctl, sim):
    cases = [
        (["--fail-rate", "1"], [], {"api.completions": "HTTP 500", "api.chat": "HTTP 500"}),
        (["--metrics-delay", "2"], ["--timeout", "0.3", "--no-api"], {"metrics.reachable": "timed out"}),
        (["--metrics-malformed"], ["--no-api"], {"metrics.parse": "line"}),
        (["--drop-connections", "1"], ["--no-api"], {"metrics.reachable": "connection dropped"}),
    ]
    for sim_args, check_args, expect in cases:
        s = sim("--time-scale", "0.01", *sim_args)
        r = eppctl("check", "--output", "json", *check_args, s.url)
        assert r.returncode == 1, (sim_args, r.stdout, r.stderr)
        checks = {c["id"]: c for c in json.loads(r.stdout)["targets"][0]["checks"]}
        for cid, needle in expect.items():
            assert checks[cid]["status"] == "fail" and needle in checks[cid]["message"], (sim_args, checks[cid])


def test_count_starts_several_servers_and_sigterm_stops_them(sim):
    s = sim("--count", "3", "--time-scale", "0.01")
    assert len(set(s.urls)) == 3
    for u in s.urls:
        assert "vllm:num_requests_running" in metrics(u)
    assert s.stop() == 0


def test_invalid_flags_exit_2(eppctl):
    for args in (["--engine", "tgi"], ["--max-running", "0"], ["--time-scale", "0"], ["--count", "2", "--port", "8000"]):
        r = eppctl("sim", *args, timeout=10)
        assert r.returncode == 2, (args, r.stderr)
