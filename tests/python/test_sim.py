"""pyepp.Simulator (real HTTP on 127.0.0.1) and pyepp.SimServer (virtual time)."""
import json
import threading
import urllib.error
import urllib.request

import pytest

import pyepp
from sim_metrics import counter  # tests/helpers

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_simulator_context_manager_serves_and_passes_check():
    with pyepp.Simulator(engine="vllm", loras=["sql-lora"], time_scale=0.01) as sim:
        assert sim.url == "http://127.0.0.1:%d" % sim.port
        report = pyepp.check(sim.url)
        assert report["status"] == "pass", report
        prompt = "The quick brown fox jumps over the lazy dog. " * 10
        first = _post(sim.url + "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 2})
        second = _post(sim.url + "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 2})
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # The HTTP front and SimServer.prompt_blocks hash a prompt the same way.
    tokens, blocks = pyepp.SimServer().prompt_blocks(prompt)
    assert first["usage"]["prompt_tokens"] == tokens
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == min(len(blocks) * 16, tokens - 1)


def test_simulator_stop_is_idempotent_and_frees_the_port():
    sim = pyepp.Simulator(engine="sglang", time_scale=0.01)
    url = sim.url
    sim.stop()
    sim.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/health", timeout=2)


def test_simulator_bad_arguments_raise():
    with pytest.raises(pyepp.ConfigError, match="engine"):
        pyepp.Simulator(engine="tgi")
    with pytest.raises(pyepp.ConfigError, match="time_scale"):
        pyepp.Simulator(time_scale=0)
    with pytest.raises(TypeError, match="unknown simulator parameter"):
        pyepp.Simulator(max_runing=3)


def test_simulator_roles_run_the_prefill_hop():
    with pyepp.Simulator(role="prefill", time_scale=0.01) as prefill, \
            pyepp.Simulator(role="decode", time_scale=0.01, kv_link_gbytes_per_s=10.0) as decode:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "k" * 2000}], "max_tokens": 2}
        req = urllib.request.Request(decode.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json",
                                              "x-prefiller-host-port": "127.0.0.1:%d" % prefill.port})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["usage"]["completion_tokens"] == 2
        assert counter(decode.url, "epp_sim_prefill_hops_total") == 1
        assert counter(prefill.url, "epp_sim_remote_prefills_total") == 1
    with pytest.raises(pyepp.ConfigError, match="role"):
        pyepp.Simulator(role="router")


def test_sim_server_virtual_time_is_exact():
    s = pyepp.SimServer(decode_step_ms=10, decode_ms_per_seq=0, prefill_tokens_per_s=1000, block_size=4)
    rid, events = s.submit(t_us=0, prompt_tokens=8, output_tokens=3, block_hashes=[11, 12])
    assert events == []
    events = s.run_until_idle()
    # 8 prefill tokens (8 ms) + a 10 ms decode step, then two more steps.
    assert events == [("first_token", rid, 18_000), ("finished", rid, 38_000)]
    r = s.result(rid)
    assert (r["first_token_us"], r["finish_us"], r["cached_tokens"]) == (18_000, 38_000, 0)
    assert s.result(rid) is None
    assert s.cached_prefix_blocks([11, 12, 13]) == 2
    rid2, _ = s.submit(t_us=50_000, prompt_tokens=8, output_tokens=1, block_hashes=[11, 12])
    s.run_until_idle()
    assert s.result(rid2)["cached_tokens"] == 7
    snap = s.snapshot()
    assert snap["requests_finished"] == 2 and snap["prefix_hit_tokens_total"] == 7
    text = s.metrics_text(1.7e9)
    assert pyepp.extract_metrics(text).running_requests == 0


def test_sim_server_errors_and_threads():
    s = pyepp.SimServer()
    with pytest.raises(pyepp.ConfigError):
        s.submit(t_us=0, prompt_tokens=0, output_tokens=1)
    with pytest.raises(pyepp.ConfigError, match="unknown LoRA"):
        s.submit(t_us=0, prompt="hello", output_tokens=1, adapter="nope")
    with pytest.raises(TypeError):
        s.submit(t_us=0, output_tokens=1)
    s.advance_to(100)
    with pytest.raises(pyepp.ConfigError, match="backwards"):
        s.advance_to(50)
    # Independent servers in threads.
    results = []

    def run(i):
        srv = pyepp.SimServer(seed=i)
        for k in range(50):
            srv.submit(t_us=k * 1000, prompt="shared prefix " * 20 + str(k), output_tokens=4)
        srv.run_until_idle()
        results.append(srv.snapshot()["requests_finished"])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [50, 50, 50, 50]


def test_simulator_publishes_kv_events_on_a_bound_address():
    with pyepp.Simulator(kv_events="tcp://127.0.0.1:0", kv_events_replay="tcp://127.0.0.1:0") as sim:
        assert sim.kv_events_endpoint.startswith("tcp://127.0.0.1:")
        assert not sim.kv_events_endpoint.endswith(":0")
        assert sim.kv_events_replay_endpoint.startswith("tcp://127.0.0.1:")
        body = json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 2,
                           "messages": [{"role": "user", "content": "hello " * 100}]}).encode()
        req = urllib.request.Request(sim.url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            assert json.loads(r.read())["usage"]["prompt_tokens"] > 100
    with pyepp.Simulator() as plain:
        assert plain.kv_events_endpoint == ""
    with pytest.raises(pyepp.EppError):
        pyepp.Simulator(kv_events="tcp://256.1.1.1:1")  # cannot bind
    with pytest.raises(pyepp.EppError):
        pyepp.Simulator(kv_events_replay="tcp://127.0.0.1:0")  # replay without events


def test_simulator_renders_and_tokenizes_with_its_tokenizer():
    # The estimate tokenizer packs 4 bytes a token, little-endian: computable here.
    with pyepp.Simulator() as sim:
        got = _post(sim.url + "/v1/completions/render", {"model": MODEL, "prompt": "abcdefgh"})
        assert isinstance(got, list) and got[0]["token_ids"] == [0x64636261, 0x68676665]
        tok = _post(sim.url + "/tokenize", {"model": MODEL, "prompt": "abcdefgh"})
        assert tok["tokens"] == got[0]["token_ids"] and tok["count"] == 2
    # The words tokenizer: a token per word (with its leading space) or punctuation byte.
    messages = [{"role": "user", "content": "one two three, four"}]
    with pyepp.Simulator(tokenizer="words") as sim:
        chat = _post(sim.url + "/v1/chat/completions/render", {"model": MODEL, "messages": messages})
        tok = _post(sim.url + "/tokenize", {"model": MODEL, "messages": messages})
        assert chat["token_ids"] == tok["tokens"]
        assert _post(sim.url + "/tokenize", {"prompt": "one two three, four"})["count"] == 5
    with pyepp.Simulator(render_endpoints=False) as old:
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(old.url + "/v1/completions/render", {"model": MODEL, "prompt": "x"})
        assert e.value.code == 404
        e.value.close()  # an HTTPError holds the response's socket open until closed
    with pytest.raises(pyepp.EppError):
        pyepp.Simulator(tokenizer="sentencepiece")


def test_token_producer_asks_a_simulator_for_its_tokens():
    with pyepp.Simulator(tokenizer="words") as sim:
        config = ("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                  "- type: token-producer\n  parameters: {vllm: {url: '%s', timeout: 5s}}\n"
                  "- type: precise-prefix-cache-producer\n- type: prefix-cache-scorer\n"
                  "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: prefix-cache-scorer\n" % sim.url)
        sched = pyepp.Scheduler.from_yaml(config)
        pool = [pyepp.Endpoint("10.0.0.1:8000")]
        body = {"model": MODEL, "prompt": "one two three, four"}
        r = sched.pick(pyepp.Request.from_openai(body), pool, record=False)
        assert (r.tokens_source, r.tokens, r.tokens_note) == ("vllm", 5, "")
        r = sched.pick(pyepp.Request.from_openai(body), pool, record=False)
        assert r.tokens_source == "vllm-cache"  # the same body again
        r = sched.pick(pyepp.Request.from_capture({"path": "/v1/completions", "body": {**body, "n": 1}}), pool,
                       record=False)
        assert (r.tokens_source, r.tokens) == ("vllm", 5)  # a capture's body is sent too
    # The server is gone: estimated (4 bytes a token), and said why.
    r = sched.pick(pyepp.Request.from_openai({"model": MODEL, "prompt": "five six"}), pool, record=False)
    assert r.status == 200 and r.tokens_source == "estimate-fallback" and r.tokens == 2
    assert r.tokens_note.startswith(("unavailable", "timeout")), r.tokens_note
