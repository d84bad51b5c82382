"""pyepp scheduling: Scheduler, Request, Endpoint, PickResult, PluginRegistry, load_endpoints.

The scheduling algorithms are tested in C++ (tests/cpp/scheduling, tests/cpp/plugins); these
tests check that construction, errors, outcomes, explain output, Python plugins and threads
cross the binding intact.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest
import yaml

import pyepp

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

HEADER = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
"""

CONFIG = HEADER + """\
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
"""

IDLE = {"waiting_queue_size": 0, "running_requests": 2, "kv_cache_usage": 0.1}
BUSY = {"waiting_queue_size": 4, "running_requests": 30, "kv_cache_usage": 0.7}
FULL = {"waiting_queue_size": 9, "running_requests": 60, "kv_cache_usage": 0.95}


def chat(text: str = "Which endpoint will serve me?", **body: Any) -> pyepp.Request:
    return pyepp.Request.from_openai(
        {"model": MODEL, "messages": [{"role": "user", "content": text}], **body}, path="/v1/chat/completions")


def pool(*metrics: Dict[str, Any], **kwargs: Any) -> List[pyepp.Endpoint]:
    return [pyepp.Endpoint(f"10.0.0.{i + 1}:8000", pyepp.EndpointMetrics.from_dict(m), **kwargs)
            for i, m in enumerate(metrics)]


# --- construction --------------------------------------------------------------------------


def test_default_scheduler() -> None:
    s = pyepp.Scheduler.default()
    assert s.profile_names == ["default"]
    effective = s.effective_config()
    for plugin in ("queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "max-score-picker"):
        assert plugin in effective
    assert isinstance(s.warnings, list) and all(isinstance(w, str) for w in s.warnings)
    assert s.prefix_index_entries == 0


def test_from_yaml_and_from_file_agree(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    from_yaml = pyepp.Scheduler.from_yaml(CONFIG)
    from_bytes = pyepp.Scheduler.from_yaml(CONFIG.encode())
    from_file = pyepp.Scheduler.from_file(path)
    assert from_yaml.effective_config() == from_file.effective_config() == from_bytes.effective_config()
    weights = [p.get("weight") for p in yaml.safe_load(from_file.effective_config())["schedulingProfiles"][0]["plugins"]]
    assert weights == [2, 2, 3, None]
    assert pyepp.Scheduler.from_file(str(path)).profile_names == ["default"]


def test_warnings_of_unimplemented_sections() -> None:
    s = pyepp.Scheduler.from_yaml(CONFIG + "flowControl: {maxRequests: 10}\n")  # the gate is off
    assert any("flowControl" in w for w in s.warnings), s.warnings


def test_unknown_plugin_type_is_a_config_error_naming_it() -> None:
    yaml = HEADER + "plugins:\n- type: queue-scorer\n- type: no-such-scorer\n- type: decode-filterz\n"
    with pytest.raises(pyepp.ConfigError) as error:
        pyepp.Scheduler.from_yaml(yaml)
    message = str(error.value)
    assert "no-such-scorer" in message and "decode-filterz" in message and "known types" in message
    assert error.value.code == "INVALID_ARGUMENT"
    assert isinstance(error.value, ValueError) and isinstance(error.value, pyepp.EppError)


def test_bad_yaml_names_source_and_line() -> None:
    yaml = HEADER + "plugins:\n- type: queue-scorer\n  paramters: {}\n"
    with pytest.raises(pyepp.ConfigError, match=r"^c\.yaml:5: plugins\[0\]: unknown key 'paramters'"):
        pyepp.Scheduler.from_yaml(yaml, source="c.yaml")
    # An unclosed '[' is named where it opens (line 3), not where the text ends.
    with pytest.raises(pyepp.ConfigError, match=r"^<yaml>:3:10: this '\[' is never closed"):
        pyepp.Scheduler.from_yaml(HEADER + "plugins: [a\n")
    with pytest.raises(pyepp.ConfigError, match="references undefined plugin 'nope'"):
        pyepp.Scheduler.from_yaml(HEADER + "schedulingProfiles:\n- name: p\n  plugins:\n  - pluginRef: nope\n")


def test_construction_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(pyepp.NotFoundError, match="cannot read config file"):
        pyepp.Scheduler.from_file(tmp_path / "missing.yaml")
    with pytest.raises(pyepp.ConfigError, match="seed"):
        pyepp.Scheduler.default(seed=-1)
    with pytest.raises(TypeError):
        pyepp.Scheduler.from_yaml(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="registry"):
        pyepp.Scheduler.default(registry=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="from_yaml"):
        pyepp.Scheduler(None)


# --- requests and endpoints ----------------------------------------------------------------


def test_request_from_openai_attributes() -> None:
    r = chat(stream=True, cache_salt="tenant-a")
    assert (r.model, r.path, r.api, r.stream, r.cache_salt) == (MODEL, "/v1/chat/completions", "chat_completions",
                                                                 True, "tenant-a")
    assert r.prompt == "user\nWhich endpoint will serve me?\n"
    assert r.prompt_tokens == (len(r.prompt) + 3) // 4
    assert r.headers == [] and r.priority == 0
    r.priority = -1
    assert r.priority == -1
    with pytest.raises(TypeError):
        r.priority = 1.5  # type: ignore[assignment]
    with pytest.raises(AttributeError):
        r.model = "x"  # type: ignore[misc]
    completions = pyepp.Request.from_openai('{"model": "m", "prompt": [1, 22, 333]}')
    assert (completions.api, completions.path, completions.prompt, completions.prompt_tokens) == (
        "completions", "/v1/completions", "1 22 333", 3)
    assert pyepp.Request.from_openai(b'{"model": "m", "input": "x"}', path="/v1/embeddings").api == "embeddings"
    # Without a path the body implies the API; a given path wins.
    chat_body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert pyepp.Request.from_openai(chat_body).path == "/v1/chat/completions"
    assert pyepp.Request.from_openai({"model": "m", "input": "x"}).api == "responses"
    assert pyepp.Request.infer_path({"model": "m", "input": "x", "dimensions": 4}) == "/v1/embeddings"
    with pytest.raises(pyepp.ConfigError, match="prompt"):
        pyepp.Request.from_openai(chat_body, path="/v1/completions")
    assert "chat_completions" in repr(r)


def test_request_from_capture() -> None:
    capture = {"path": "/v1/chat/completions", "headers": {"x-request-id": "r1", "X-Tenant": ["a", "b"]},
               "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    r = pyepp.Request.from_capture(capture)
    assert r.api == "chat_completions" and r.model == "m"
    assert r.headers == [("x-request-id", "r1"), ("x-tenant", "a"), ("x-tenant", "b")]
    assert r.header("X-Request-ID") == "r1" and r.header("missing") is None
    bare = pyepp.Request.from_capture('{"model": "m", "prompt": "hello"}', path="/v1/completions")
    assert bare.prompt == "hello"


def test_bad_request_raises_config_error() -> None:
    # The 400 path: a body that does not parse never reaches the scheduler.
    with pytest.raises(pyepp.ConfigError, match="messages"):
        pyepp.Request.from_openai({"model": "m", "messages": []}, path="/v1/chat/completions")
    with pytest.raises(pyepp.ConfigError, match="invalid JSON at byte"):
        pyepp.Request.from_openai('{"model": "m",')
    with pytest.raises(pyepp.ConfigError, match="body.prompt"):
        pyepp.Request.from_capture({"body": {"model": "m", "prompt": 7}})
    with pytest.raises(TypeError):
        pyepp.Request.from_openai(7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="from_openai"):
        pyepp.Request("x")


def test_endpoint_construction() -> None:
    e = pyepp.Endpoint("10.0.0.1:8000", IDLE, labels={"zone": "a"})
    assert (e.address, e.labels, e.engine, e.metrics_age_s, e.metrics_error) == ("10.0.0.1:8000", {"zone": "a"}, "",
                                                                                   0.0, "")
    assert e.metrics is not None and e.metrics.kv_cache_usage == 0.1 and e.metrics.cache_block_size is None
    with pytest.raises(TypeError):
        e.labels["zone"] = "b"  # type: ignore[index]
    m = pyepp.extract_metrics((Path(__file__).resolve().parents[2] / "examples/metrics/vllm.txt").read_text())
    v = pyepp.Endpoint("[::1]:8000", m, metrics_age_s=1.5)
    assert v.engine == "vllm" and v.metrics is m and v.metrics_age_s == 1.5
    assert pyepp.Endpoint("host.example:80", m, engine="custom").engine == "custom"
    none = pyepp.Endpoint("10.0.0.2:8000")
    assert none.metrics is None and none.metrics_age_s is None
    assert "no metrics" in repr(none)
    with pytest.raises(pyepp.ConfigError, match="no port"):
        pyepp.Endpoint("10.0.0.1")
    with pytest.raises(pyepp.ConfigError, match="metrics_age_s"):
        pyepp.Endpoint("10.0.0.1:1", IDLE, metrics_age_s=-1)
    with pytest.raises(TypeError):
        pyepp.Endpoint("10.0.0.1:1", labels={"a": 1})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        pyepp.Endpoint("10.0.0.1:1", metrics=[1])  # type: ignore[arg-type]


def test_lora_slots_are_the_union_of_adapters() -> None:
    # vLLM names an adapter with running and waiting requests in both lists: two slots, not four.
    m = pyepp.EndpointMetrics.from_dict({"lora": {"max_lora": 4, "running": ["a1", "a2"], "waiting": ["a1", "a2"]}})
    assert m.lora.slots_in_use == 2
    assert m.to_dict()["lora"]["slots_in_use"] == 2
    resident = pyepp.EndpointMetrics.from_dict(
        {"lora": {"max_lora": 4, "running": ["a1"], "waiting": [], "loaded": ["a1", "g"], "loaded_cpu": ["c"]}})
    assert resident.lora.slots_in_use == 2 and resident.lora.loaded_cpu == ["c"]
    assert pyepp.EndpointMetrics.from_dict(resident.to_dict()) == resident
    with pytest.raises(pyepp.ConfigError, match="slots_in_use"):
        pyepp.EndpointMetrics.from_dict({"lora": {"max_lora": 4, "running": ["a"], "slots_in_use": 3}})


def test_endpoint_metrics_from_dict_and_text(vllm_metrics: str) -> None:
    full = {"waiting_queue_size": 3, "running_requests": 12.0, "kv_cache_usage": 0.44,
            "lora": {"max_lora": 2, "running": ["a"], "waiting": []}, "cache_block_size": 16, "cache_num_blocks": 4096}
    m = pyepp.EndpointMetrics.from_dict(full)
    assert (m.waiting_queue_size, m.running_requests, m.lora.running, m.cache_num_blocks) == (3.0, 12.0, ["a"], 4096)
    assert pyepp.EndpointMetrics.from_dict(m.to_dict()) == m
    assert pyepp.EndpointMetrics.from_dict({}).kv_cache_usage is None
    with pytest.raises(pyepp.ConfigError, match="unknown metrics key 'queue'"):
        pyepp.EndpointMetrics.from_dict({"queue": 1})
    with pytest.raises(pyepp.ConfigError, match=r"kv_cache_usage: must be in \[0, 1\]"):
        pyepp.EndpointMetrics.from_dict({"kv_cache_usage": 85})  # a percentage, not a fraction
    with pytest.raises(pyepp.ConfigError, match="cache_block_size"):
        pyepp.EndpointMetrics.from_dict({"cache_block_size": 1.5})
    with pytest.raises(pyepp.ConfigError, match="waiting_queue_size"):
        pyepp.EndpointMetrics.from_dict({"waiting_queue_size": "3"})
    with pytest.raises(pyepp.ConfigError, match="lora"):
        pyepp.EndpointMetrics.from_dict({"lora": {"max": 1}})
    # Ranges are libepp's ValidateEndpointMetrics: the same messages as in C++.
    with pytest.raises(pyepp.ConfigError, match=r"^metrics\.waiting_queue_size: must be a finite number >= 0, got -1$"):
        pyepp.EndpointMetrics.from_dict({"waiting_queue_size": -1})
    with pytest.raises(pyepp.ConfigError, match=r"^metrics\.lora\.running\[0\]: an adapter name must not be empty$"):
        pyepp.EndpointMetrics.from_dict({"lora": {"max_lora": 1, "running": [""]}})
    with pytest.raises(pyepp.ConfigError, match=r"^metrics\.cache_num_blocks: out of the 64-bit range"):
        pyepp.EndpointMetrics.from_dict({"cache_num_blocks": 2**64})
    # A snapshot built directly (not through from_dict) is checked when an Endpoint takes it.
    with pytest.raises(pyepp.ConfigError, match=r"^metrics\.kv_cache_usage: must be in \[0, 1\], got 44$"):
        pyepp.Endpoint("10.0.0.1:8000", pyepp.EndpointMetrics(engine="vllm", kv_cache_usage=44.0))
    t = pyepp.EndpointMetrics.from_text(vllm_metrics)
    assert t == pyepp.extract_metrics(vllm_metrics)
    assert (t.engine, t.running_requests, t.cache_block_size) == ("vllm", 7.0, 16)
    with pytest.raises(pyepp.NotFoundError):
        pyepp.EndpointMetrics.from_text(vllm_metrics, engine="nope")


def test_load_endpoints(tmp_path: Path, source_dir: Path) -> None:
    metrics = source_dir / "examples" / "metrics"
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "sglang.prom").write_text((metrics / "sglang.txt").read_text(), encoding="utf-8")
    path = tmp_path / "pool.yaml"
    path.write_text(
        "endpoints:\n"
        f"- address: 10.0.0.1:8000\n  metrics: {metrics / 'vllm.txt'}\n  labels: {{zone: a}}\n"
        "- address: 10.0.0.2:8000\n  metrics: m/sglang.prom\n"
        "- address: 10.0.0.3:8000\n  metrics: none\n"
        "- address: 10.0.0.4:8000\n  metrics: m/missing.prom\n",
        encoding="utf-8")
    eps = pyepp.load_endpoints(path, engine="auto", timeout=0.5)
    assert [e.address for e in eps] == [f"10.0.0.{i}:8000" for i in range(1, 5)]
    assert (eps[0].engine, eps[0].labels, eps[0].metrics_age_s) == ("vllm", {"zone": "a"}, 0.0)
    assert eps[0].metrics is not None and eps[0].metrics.engine == "vllm"
    assert eps[1].engine == "sglang" and eps[1].metrics is not None
    assert eps[2].metrics is None and eps[2].metrics_error == ""
    assert eps[3].metrics is None and "cannot be read" in eps[3].metrics_error
    result = pyepp.Scheduler.default().pick(chat(), eps)
    assert result.status == 200 and result.endpoint in {e.address for e in eps}
    with pytest.raises(pyepp.NotFoundError, match="missing.prom' cannot be read"):
        pyepp.load_endpoints(path, fail_on_metrics_error=True)
    with pytest.raises(pyepp.NotFoundError):
        pyepp.load_endpoints(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("endpoints:\n- address: 10.0.0.1\n", encoding="utf-8")
    with pytest.raises(pyepp.ConfigError, match=r"bad\.yaml:2"):
        pyepp.load_endpoints(bad)


# --- pick outcomes ---------------------------------------------------------------------------


def test_pick_200_prefers_the_idle_endpoint() -> None:
    s = pyepp.Scheduler.from_yaml(CONFIG)
    result = s.pick(chat(), pool(BUSY, IDLE))
    assert (result.status, result.ok, result.endpoint) == (200, True, "10.0.0.2:8000")
    assert result.endpoints == [result.endpoint, *result.fallbacks]
    assert result.reason == "picked by profile 'default'" and result.primary_profile == "default"
    assert result.candidates == 2 and result.load_tokens > 0
    assert result.request.model == MODEL
    assert "10.0.0.2:8000" in repr(result)


def test_pick_503_on_empty_or_unmatched_subset() -> None:
    s = pyepp.Scheduler.default()
    eps = pool(IDLE, IDLE)
    empty = s.pick(chat(), eps, subset=[])
    assert (empty.status, empty.endpoint, empty.endpoints, empty.fallbacks) == (503, None, [], [])
    assert "subset hint is empty" in empty.reason
    unmatched = s.pick(chat(), eps, subset=["10.9.9.9:8000"])
    assert unmatched.status == 503 and "10.9.9.9:8000" in unmatched.reason
    assert s.pick(chat(), eps, subset="10.0.0.2").endpoint == "10.0.0.2:8000"  # a bare IP, as one str
    assert s.pick(chat(), eps, subset=["10.0.0.1:8000"]).endpoint == "10.0.0.1:8000"
    assert s.pick(chat(), []).status == 503
    explain = empty.explain()
    assert explain["decision"] == {"immediate_response": {
        "status": 503, "body": empty.reason, "headers": {"x-llm-d-request-dropped-reason": "rejected-no-endpoints"}}}


def test_pick_429_sheds_sheddable_requests_on_a_saturated_pool() -> None:
    s = pyepp.Scheduler.default()
    sheddable = chat()
    sheddable.priority = -1
    shed = s.pick(sheddable, pool(FULL, FULL))
    assert shed.status == 429 and shed.endpoint is None and shed.saturation >= 1.0
    assert "sheddable" in shed.reason
    assert s.pick(chat(), pool(FULL, FULL)).status == 200  # priority 0 is never shed
    assert s.pick(sheddable, pool(IDLE, FULL)).status == 200
    # No metrics, or metrics older than the 200 ms staleness threshold, count as saturated.
    assert s.pick(sheddable, [pyepp.Endpoint("10.0.0.1:8000")]).status == 429
    assert s.pick(sheddable, pool(IDLE, IDLE, metrics_age_s=1.0)).status == 429
    assert s.pick(sheddable, pool(IDLE, IDLE, metrics_age_s=0.1)).status == 200


def test_pick_argument_errors() -> None:
    s = pyepp.Scheduler.default()
    with pytest.raises(TypeError, match="Request"):
        s.pick({"model": "m"}, pool(IDLE))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Endpoint"):
        s.pick(chat(), ["10.0.0.1:8000"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="subset"):
        s.pick(chat(), pool(IDLE), subset=[1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        s.release("x")  # type: ignore[arg-type]


def test_explain_dict_and_text() -> None:
    s = pyepp.Scheduler.from_yaml(CONFIG)
    result = s.pick(chat(), pool(BUSY, IDLE))
    explain = result.explain()
    assert {"request", "profiles", "result", "decision"} <= set(explain)
    assert explain["request"]["model"] == MODEL and explain["request"]["api"] == "chat_completions"
    (profile,) = explain["profiles"]
    assert profile["name"] == "default" and profile["picked"] == ["10.0.0.2:8000"]
    assert profile["picker"] == "max-score-picker"
    top = profile["scores"][0]
    assert top["endpoint"] == "10.0.0.2:8000"
    assert [sc["plugin"] for sc in top["scorers"]] == ["queue-scorer", "kv-cache-utilization-scorer",
                                                        "prefix-cache-scorer"]
    assert {"raw", "weight", "weighted", "detail"} <= set(top["scorers"][0])
    assert explain["result"]["status"] == 200 and explain["result"]["endpoint"] == "10.0.0.2:8000"
    header = explain["decision"]["header"]["x-gateway-destination-endpoint"]
    assert header == ",".join(result.endpoints)
    text = result.explain_text()
    assert "winner" in text and "10.0.0.2:8000" in text and "\033[" not in text
    assert "\033[" in result.explain_text(color=True)
    untraced = s.pick(chat(), pool(BUSY, IDLE), trace=False)
    assert untraced.endpoint == "10.0.0.2:8000" and untraced.explain()["profiles"] == []


def test_same_seed_same_picks() -> None:
    eps = pool(IDLE, IDLE, IDLE, IDLE)  # all tied: the seeded RNG decides

    def picks(seed: int) -> List[str]:
        s = pyepp.Scheduler.default(seed=seed)
        return [s.pick(chat(f"question {i}"), eps, record=False).endpoint for i in range(24)]

    first = picks(7)
    assert first == picks(7)
    assert len(set(first)) > 1
    assert first != picks(8)


def test_prefix_learning_routes_a_repeated_prompt_to_the_same_endpoint() -> None:
    prompt = "You are a meticulous assistant. Answer with care and cite sources. " * 40
    for seed in range(4):
        s = pyepp.Scheduler.default(seed=seed)
        eps = pool(IDLE, IDLE, IDLE)
        first = s.pick(chat(prompt), eps)
        assert first.status == 200 and first.prefix_blocks > 0 and first.prefix_match_blocks == 0
        assert s.prefix_index_entries >= first.prefix_blocks
        s.release(first)
        second = s.pick(chat(prompt), eps)
        assert second.endpoint == first.endpoint
        assert second.prefix_match_blocks == second.prefix_blocks


def test_record_false_is_a_what_if_and_release_ends_load() -> None:
    s = pyepp.Scheduler.default()
    eps = pool(IDLE, BUSY)
    what_if = s.pick(chat("a" * 400), eps, record=False)
    assert what_if.load_tokens == 0 and s.prefix_index_entries == 0 and s.inflight(what_if.endpoint) == (0, 0)
    recorded = s.pick(chat("a" * 400), eps)
    assert s.inflight(recorded.endpoint) == (1, recorded.load_tokens)
    s.release(recorded)
    assert s.inflight(recorded.endpoint) == (0, 0)
    s.release(what_if)  # recorded nothing: harmless
    assert s.inflight(recorded.endpoint) == (0, 0)


# --- Python plugins --------------------------------------------------------------------------

ZONE_CONFIG = HEADER + """\
plugins:
- type: queue-scorer
- name: prefer-zone-b
  type: zone-scorer
  parameters:
    zone: b
    bonus: 1
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: prefer-zone-b
    weight: 5
"""


class ZoneScorer:
    def __init__(self, name: str, params: Dict[str, Any]) -> None:
        self.name, self.params = name, params
        self.calls = 0

    def score(self, request: pyepp.Request, endpoints: List[pyepp.Endpoint]) -> List[float]:
        assert isinstance(request, pyepp.Request) and all(isinstance(e, pyepp.Endpoint) for e in endpoints)
        self.calls += 1
        return [float(self.params["bonus"]) if e.labels.get("zone") == self.params["zone"] else 0.0
                for e in endpoints]

    def explain(self, request: pyepp.Request, endpoint: pyepp.Endpoint) -> str:
        return f"zone {endpoint.labels.get('zone')} (model {request.model})"


def zone_registry(created: List[ZoneScorer]) -> pyepp.PluginRegistry:
    registry = pyepp.PluginRegistry()

    def factory(name: str, params: Dict[str, Any]) -> ZoneScorer:
        created.append(ZoneScorer(name, params))
        return created[-1]

    registry.register_scorer("zone-scorer", factory)
    return registry


def test_python_scorer_from_yaml_steers_picks() -> None:
    created: List[ZoneScorer] = []
    registry = zone_registry(created)
    assert "zone-scorer" in registry and "queue-scorer" in registry.types() and 7 not in registry
    s = pyepp.Scheduler.from_yaml(ZONE_CONFIG, registry=registry)
    ((scorer),) = created
    assert scorer.name == "prefer-zone-b" and scorer.params == {"zone": "b", "bonus": 1}
    eps = [pyepp.Endpoint("10.0.0.1:8000", IDLE, labels={"zone": "a"}),
           pyepp.Endpoint("10.0.0.2:8000", BUSY, labels={"zone": "b"})]
    result = s.pick(chat(), eps)
    assert result.endpoint == "10.0.0.2:8000"  # busier, but in zone b
    assert scorer.calls == 1
    scores = {sc["endpoint"]: sc for sc in result.explain()["profiles"][0]["scores"]}
    zone = scores["10.0.0.2:8000"]["scorers"][1]
    assert (zone["plugin"], zone["type"], zone["raw"], zone["weighted"]) == ("prefer-zone-b", "zone-scorer", 1.0, 5.0)
    assert zone["detail"] == f"zone b (model {MODEL})"
    effective = yaml.safe_load(s.effective_config())
    assert {"name": "prefer-zone-b", "type": "zone-scorer", "parameters": {"zone": "b", "bonus": 1}} in effective["plugins"]
    # Without the registry the type is unknown.
    with pytest.raises(pyepp.ConfigError, match="zone-scorer"):
        pyepp.Scheduler.from_yaml(ZONE_CONFIG)
    with pytest.raises(pyepp.EppError) as error:
        registry.register_scorer("zone-scorer", ZoneScorer)
    assert error.value.code == "ALREADY_EXISTS"
    with pytest.raises(pyepp.EppError, match="already registered"):
        registry.register_filter("queue-scorer", ZoneScorer)



def test_plugin_timings_count_calls_per_extension_point() -> None:
    s = pyepp.Scheduler.from_yaml(CONFIG)
    before = s.plugin_timings()
    keys = [(t["extension_point"], t["plugin_type"], t["plugin_name"]) for t in before]
    assert len(keys) == len(set(keys))
    assert ("Scorer", "queue-scorer", "queue-scorer") in keys and ("Picker", "max-score-picker", "max-score-picker") in keys
    assert all(t["count"] == 0 and t["sum_seconds"] == 0 for t in before)
    eps = pool(IDLE, BUSY, FULL)
    for i in range(10):
        s.release(s.pick(chat(f"timing {i} " * 40), eps, trace=False))
    s.pick(chat("what if"), eps, record=False)
    timings = {(t["extension_point"], t["plugin_type"], t["plugin_name"]): t for t in s.plugin_timings()}
    assert set(timings) == set(keys)
    for name in ("queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"):
        assert timings[("Scorer", name, name)]["count"] == 11
    assert timings[("Picker", "max-score-picker", "max-score-picker")]["count"] == 11
    assert timings[("ProfilePicker", "single-profile-handler", "single-profile-handler")]["count"] == 22
    producer = "approx-prefix-cache-producer"
    assert timings[("DataProducer", producer, producer)]["count"] == 11
    assert timings[("PreRequest", producer, producer)]["count"] == 10  # the what-if records nothing
    for t in timings.values():
        buckets = t["buckets"]
        assert len(buckets) == 17 and buckets[-1] == (math.inf, t["count"])
        assert [b for b, _ in buckets] == sorted(b for b, _ in buckets)
        assert [c for _, c in buckets] == sorted(c for _, c in buckets)
        assert t["sum_seconds"] >= 0 and (t["count"] == 0) == (t["sum_seconds"] == 0)
    assert buckets[0][0] == pytest.approx(1e-6) and buckets[-2][0] == pytest.approx(0.1)
    cycle = s.cycle_timing()
    assert cycle["count"] == 11 and cycle["sum_seconds"] > 0 and cycle["buckets"][-1] == (math.inf, 11)
    assert sum(t["sum_seconds"] for t in timings.values()) <= cycle["sum_seconds"]


def test_plugin_timings_include_python_plugins() -> None:
    created: List[ZoneScorer] = []
    s = pyepp.Scheduler.from_yaml(ZONE_CONFIG, registry=zone_registry(created))
    eps = [pyepp.Endpoint("10.0.0.1:8000", IDLE, labels={"zone": "a"}),
           pyepp.Endpoint("10.0.0.2:8000", BUSY, labels={"zone": "b"})]
    for _ in range(3):
        s.pick(chat(), eps, trace=False)
    (zone,) = [t for t in s.plugin_timings() if t["plugin_name"] == "prefer-zone-b"]
    assert (zone["extension_point"], zone["plugin_type"], zone["count"]) == ("Scorer", "zone-scorer", 3)
    assert zone["sum_seconds"] > 0 and created[0].calls == 3

def test_python_scorer_sees_metrics_and_age() -> None:
    seen: List[Any] = []

    class Spy:
        def score(self, request: pyepp.Request, endpoints: List[pyepp.Endpoint]) -> List[float]:
            seen.extend((e.address, e.metrics_age_s, e.metrics and e.metrics.waiting_queue_size) for e in endpoints)
            return [0.5] * len(endpoints)

    registry = pyepp.PluginRegistry()
    registry.register_scorer("spy", lambda name, params: Spy())
    s = pyepp.Scheduler.from_yaml(HEADER + "plugins:\n- type: spy\n", registry=registry)
    s.pick(chat(), [pyepp.Endpoint("10.0.0.1:8000", BUSY, metrics_age_s=2.5), pyepp.Endpoint("10.0.0.2:8000")])
    # The age is measured against the scheduler's clock at the pick, a little after the endpoint
    # was built with its age.
    assert [(a, q) for a, _, q in seen] == [("10.0.0.1:8000", 4.0), ("10.0.0.2:8000", None)]
    assert seen[0][1] == pytest.approx(2.5, abs=0.05) and seen[1][1] is None


def test_python_filter_by_flags_and_by_kept_endpoints() -> None:
    class KeepZone:
        def __init__(self, params: Dict[str, Any]) -> None:
            self.zone, self.as_list = params["zone"], params.get("asList", False)

        def filter(self, request: pyepp.Request, endpoints: List[pyepp.Endpoint]) -> List[Any]:
            if self.as_list:
                return [e for e in endpoints if e.labels.get("zone") == self.zone]
            return [e.labels.get("zone") == self.zone for e in endpoints]

        def why_removed(self, request: pyepp.Request, endpoint: pyepp.Endpoint) -> str:
            return f"not in zone {self.zone}"

    registry = pyepp.PluginRegistry()
    registry.register_filter("zone-filter", lambda name, params: KeepZone(params))
    eps = [pyepp.Endpoint("10.0.0.1:8000", IDLE, labels={"zone": "a"}),
           pyepp.Endpoint("10.0.0.2:8000", BUSY, labels={"zone": "b"}),
           pyepp.Endpoint("10.0.0.3:8000", FULL, labels={"zone": "b"})]
    for as_list in ("false", "true"):
        yaml = HEADER + f"plugins:\n- type: zone-filter\n  parameters: {{zone: b, asList: {as_list}}}\n- type: queue-scorer\n"
        result = pyepp.Scheduler.from_yaml(yaml, registry=registry).pick(chat(), eps)
        assert result.endpoint == "10.0.0.2:8000"
        (flt,) = result.explain()["profiles"][0]["filters"]
        assert flt["kept"] == ["10.0.0.2:8000", "10.0.0.3:8000"]
        assert flt["removed"] == [{"endpoint": "10.0.0.1:8000", "reason": "not in zone b"}]
    # Removing every endpoint is the profile's 503, not an error.
    yaml = HEADER + "plugins:\n- type: zone-filter\n  parameters: {zone: c}\n"
    result = pyepp.Scheduler.from_yaml(yaml, registry=registry).pick(chat(), eps)
    assert result.status == 503 and "zone-filter" in result.reason


def test_failing_python_plugins_degrade_without_crashing(caplog: pytest.LogCaptureFixture) -> None:
    class Raises:
        def score(self, request: pyepp.Request, endpoints: List[pyepp.Endpoint]) -> List[float]:
            raise ValueError("boom")

    class WrongLength:
        def score(self, request: pyepp.Request, endpoints: List[pyepp.Endpoint]) -> List[float]:
            return [1.0]

    class BadFilter:
        def filter(self, request: pyepp.Request, endpoints: List[pyepp.Endpoint]) -> List[bool]:
            raise RuntimeError("filter broke")

    registry = pyepp.PluginRegistry()
    registry.register_scorer("raises", lambda name, params: Raises())
    registry.register_scorer("wrong-length", lambda name, params: WrongLength())
    registry.register_filter("bad-filter", lambda name, params: BadFilter())
    yaml = HEADER + "plugins:\n- type: bad-filter\n- type: raises\n- type: wrong-length\n- type: queue-scorer\n"
    s = pyepp.Scheduler.from_yaml(yaml, registry=registry)
    with caplog.at_level(logging.WARNING, logger="pyepp"):
        for _ in range(3):
            result = s.pick(chat(), pool(BUSY, IDLE))
            assert (result.status, result.endpoint) == (200, "10.0.0.2:8000")  # queue-scorer still decides
    (profile,) = result.explain()["profiles"]
    assert profile["filters"][0]["kept"] == ["10.0.0.1:8000", "10.0.0.2:8000"]  # a failing filter keeps all
    for row in profile["scores"]:
        raises, wrong = row["scorers"][0], row["scorers"][1]
        assert raises["raw"] == 0 and raises["detail"] == "python error: ValueError: boom"
        assert wrong["raw"] == 0 and wrong["detail"] == "python error: score() returned 1 scores for 2 endpoints"
    messages = [r.getMessage() for r in caplog.records if r.name == "pyepp"]
    assert len(messages) == 3, messages  # once per plugin, not per pick
    assert any("'raises'" in m and "ValueError: boom" in m for m in messages)
    assert any("filter broke" in m for m in messages)


def test_python_factory_errors_are_config_errors() -> None:
    registry = pyepp.PluginRegistry()

    def needs_threshold(name: str, params: Dict[str, Any]) -> Any:
        if "threshold" not in params:
            raise ValueError(f"{name}: threshold is required")
        return ZoneScorer(name, params)

    registry.register_scorer("needs-threshold", needs_threshold)
    registry.register_scorer("not-a-scorer", lambda name, params: object())
    with pytest.raises(pyepp.ConfigError, match=r"failed to create plugin 'needs-threshold'.*"
                                                r"python error: ValueError: needs-threshold: threshold is required"):
        pyepp.Scheduler.from_yaml(HEADER + "plugins:\n- type: needs-threshold\n", registry=registry)
    with pytest.raises(pyepp.ConfigError, match="no score\\(\\) method"):
        pyepp.Scheduler.from_yaml(HEADER + "plugins:\n- type: not-a-scorer\n", registry=registry)
    with pytest.raises(TypeError):
        registry.register_scorer("x", "not callable")  # type: ignore[arg-type]


# --- threads -------------------------------------------------------------------------------


def test_picks_from_four_threads() -> None:
    created: List[ZoneScorer] = []
    yaml = ZONE_CONFIG.replace("- type: queue-scorer\n", "- type: queue-scorer\n- type: prefix-cache-scorer\n")
    yaml = yaml.replace("  - pluginRef: queue-scorer\n", "  - pluginRef: queue-scorer\n  - pluginRef: prefix-cache-scorer\n")
    s = pyepp.Scheduler.from_yaml(yaml, registry=zone_registry(created))
    eps = [pyepp.Endpoint(f"10.0.1.{i}:8000", IDLE, labels={"zone": "ab"[i % 2]}) for i in range(1, 7)]
    prompts = [f"tenant {t} shared system prompt. " * 30 for t in range(4)]
    errors: List[BaseException] = []
    results: List[List[pyepp.PickResult]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def work(t: int) -> None:
        try:
            start.wait()
            for i in range(60):
                r = s.pick(chat(prompts[(t + i) % 4] + str(i)), eps)
                results[t].append(r)
                r.explain()
                s.release(r)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not any(th.is_alive() for th in threads)
    assert not errors, errors
    picks = [r for rs in results for r in rs]
    assert len(picks) == 240 and all(r.status == 200 for r in picks)
    assert {r.endpoint for r in picks} <= {e.address for e in eps if e.labels["zone"] == "b"}
    assert created[0].calls == 240
    assert all(s.inflight(e.address) == (0, 0) for e in eps)
    assert s.prefix_index_entries > 0


# --- the example ---------------------------------------------------------------------------


def test_example_pick_runs(source_dir: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    run = subprocess.run([sys.executable, str(source_dir / "examples" / "python" / "pick.py")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("200 -> 10.0.0.2:8000\n"), run.stdout
    assert "winner" in run.stdout and '"x-gateway-destination-endpoint": "10.0.0.2:8000"' in run.stdout


def test_missing_inputs_for_an_engine_and_for_endpoints() -> None:
    yaml_text = ("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                 "- type: lora-affinity-scorer\n- type: queue-scorer\n")
    s = pyepp.Scheduler.from_yaml(yaml_text)
    missing = s.missing_inputs(engine="sglang")
    assert [(m["plugin"], m["input"]) for m in missing] == [("lora-affinity-scorer", "lora")]
    assert missing[0]["message"].startswith("plugin 'lora-affinity-scorer' (lora-affinity-scorer) reads lora")
    assert s.missing_inputs(engine="vllm") == []
    with pytest.raises(pyepp.NotFoundError):
        s.missing_inputs(engine="tgi")
    eps = [pyepp.Endpoint("10.0.0.1:8000", {"waiting_queue_size": 1, "running_requests": 0, "kv_cache_usage": 0.1})]
    assert [m["input"] for m in s.missing_inputs(endpoints=eps)] == ["lora"]
    with pytest.raises(TypeError):
        s.missing_inputs()


def test_disaggregated_pick_reports_profiles_and_the_prefiller_header(source_dir: Path) -> None:
    s = pyepp.Scheduler.from_file(source_dir / "examples" / "configs" / "pd-disagg.yaml")
    metrics = {"waiting_queue_size": 0, "running_requests": 0, "kv_cache_usage": 0.1}
    eps = [pyepp.Endpoint("10.0.0.1:8000", metrics, labels={"llm-d.ai/role": "prefill"}),
           pyepp.Endpoint("10.0.0.2:8000", metrics, labels={"llm-d.ai/role": "decode"})]
    long_req = pyepp.Request.from_openai({"model": "m", "messages": [{"role": "user", "content": "x" * 800}]},
                                         "/v1/chat/completions")
    r = s.pick(long_req, eps, record=False)
    assert r.endpoint == "10.0.0.2:8000" and r.primary_profile == "decode"
    assert r.headers == {"x-prefiller-host-port": "10.0.0.1:8000"}
    assert r.profiles_reason == "prefill-decode"
    assert [(p["profile"], p["ran"], p["endpoints"]) for p in r.profile_picks] == [
        ("decode", True, ["10.0.0.2:8000"]), ("prefill", True, ["10.0.0.1:8000"])]
    short = s.pick(pyepp.Request.from_openai({"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                                             "/v1/chat/completions"), eps, record=False)
    assert short.headers == {} and short.profiles_reason == "decode-only"
    assert short.profile_picks[1]["ran"] is False and "nonCachedTokens 16" in short.profile_picks[1]["reason"]


def test_session_token_in_response_headers() -> None:
    import base64
    sched = pyepp.Scheduler.from_yaml(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: session-affinity-scorer\n"
        "- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n"
        "  - {pluginRef: session-affinity-scorer, weight: 10}\n  - pluginRef: queue-scorer\n")
    pool = [pyepp.Endpoint("10.0.0.1:8000", {"waiting_queue_size": 4}), pyepp.Endpoint("10.0.0.2:8000", {"waiting_queue_size": 0})]
    r = sched.pick(pyepp.Request.from_openai({"model": "m", "prompt": "hi"}), pool, record=False)
    token = r.response_headers["x-session-token"]
    assert base64.b64decode(token).decode() == r.endpoint == "10.0.0.2:8000"
    back = pyepp.Request.from_capture({"path": "/v1/completions", "headers": {"x-session-token": base64.b64encode(b"10.0.0.1:8000").decode()},
                                       "body": {"model": "m", "prompt": "hi"}})
    assert sched.pick(back, pool, record=False).endpoint == "10.0.0.1:8000"


# --- llm-d's attribute and topology plugins -------------------------------------------------

ATTRIBUTE_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: core-metrics-extractor
  parameters:
    engineConfigs:
    - name: vllm
      queuedRequestsSpec: vllm:num_requests_waiting
      runningRequestsSpec: vllm:num_requests_running
      kvUsageSpec: vllm:kv_cache_usage_perc
      customMetrics:
      - {attributeKey: gpu.util, metricSpec: 'gpu_util'}
- type: endpoint-attribute-filter
  parameters:
    attribute: gpu.util
    onMissing: Fail
    algorithm: {type: threshold, threshold: {operator: LessThan, value: 0.8}}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: endpoint-attribute-filter}, {pluginRef: queue-scorer}]
"""


def test_endpoint_attributes_round_trip_and_feed_the_attribute_filter() -> None:
    m = pyepp.EndpointMetrics.from_dict({**IDLE, "attributes": {"gpu.util": 0.95}})
    assert m.attributes == {"gpu.util": 0.95}
    assert pyepp.EndpointMetrics.from_dict(m.to_dict()) == m
    with pytest.raises(pyepp.ConfigError, match="metrics.attributes"):
        pyepp.EndpointMetrics.from_dict({"attributes": {"x": "high"}})
    with pytest.raises(pyepp.ConfigError, match=r"metrics\.attributes\.x: must be finite"):
        pyepp.EndpointMetrics.from_dict({"attributes": {"x": float("nan")}})
    s = pyepp.Scheduler.from_yaml(ATTRIBUTE_CONFIG)
    # The idle server runs its GPU hot: the filter sends the request to the busier, cooler one;
    # the one without the attribute is removed (onMissing: Fail).
    eps = pool({**IDLE, "attributes": {"gpu.util": 0.95}}, {**BUSY, "attributes": {"gpu.util": 0.3}}, IDLE)
    result = s.pick(chat(), eps)
    assert result.endpoint == "10.0.0.2:8000"
    text = result.explain_text()
    assert "gpu.util = 0.95, not < 0.8" in text
    assert "gpu.util missing (onMissing: Fail)" in text


TOPOLOGY_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: topology-extractor
- type: topology-affinity-filter
  parameters: {minAffinity: rack}
- type: prefill-filter
- type: decode-filter
- type: queue-scorer
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters: {deciders: {prefill: always-disagg-pd-decider}}
schedulingProfiles:
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: topology-affinity-filter}, {pluginRef: queue-scorer}]
"""


def test_topology_affinity_keeps_prefill_on_the_decode_pods_rack() -> None:
    s = pyepp.Scheduler.from_yaml(TOPOLOGY_CONFIG)

    def ep(address: str, role: str, rack: str, metrics: Dict[str, Any]) -> pyepp.Endpoint:
        return pyepp.Endpoint(address, pyepp.EndpointMetrics.from_dict(metrics),
                              labels={"llm-d.ai/role": role, "topology.kubernetes.io/rack": rack})

    eps = [ep("10.0.0.1:8000", "decode", "r1", IDLE), ep("10.0.0.2:8000", "prefill", "r2", IDLE),
           ep("10.0.0.3:8000", "prefill", "r1", BUSY)]
    result = s.pick(chat(), eps)
    assert result.endpoint == "10.0.0.1:8000"
    # The idle prefill server is on another rack; the busy one shares the decode pod's rack.
    assert result.headers["x-prefiller-host-port"] == "10.0.0.3:8000"
    assert "closest level shared with peer 10.0.0.1:8000: none (minAffinity rack)" in result.explain_text()


CALIBRATED = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
- type: estimated-ttft-scorer
  parameters: {calibratePrefillRate: true, calibrationMinSamples: 1, calibrationMinTokens: 1}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: estimated-ttft-scorer
  - pluginRef: max-score-picker
"""


def test_observe_first_token_calibrates_the_prefill_rate() -> None:
    s = pyepp.Scheduler.from_yaml(CALIBRATED)
    eps = [pyepp.Endpoint("10.0.0.1:8000", IDLE)]

    def ttft_detail() -> str:
        r = s.pick(chat(), eps, record=False)
        (row,) = r.explain()["profiles"][0]["scores"]
        return next(sc["detail"] for sc in row["scorers"] if sc["type"] == "estimated-ttft-scorer")

    assert "(configured; 0 of 1 responses timed)" in ttft_detail()
    unrecorded = s.pick(chat(), eps, record=False)
    s.observe_first_token(unrecorded)  # recorded nothing: nothing learned
    assert "(configured; 0 of 1 responses timed)" in ttft_detail()
    picked = s.pick(chat(), eps)
    assert picked.status == 200
    time.sleep(0.05)  # the first token arrives at least 50 ms after the pick, on the real clock
    s.observe_first_token(picked)
    after = ttft_detail()
    assert "(calibrated from 1 responses)" in after, after
    # (>= 44 ms of prefill) for the request's uncached tokens: far below the configured 20000/s.
    rate = int(after.split(" tokens/s")[0].rsplit(" ", 1)[1])
    assert 1000 <= rate < 20000, after
    with pytest.raises(TypeError):
        s.observe_first_token("not a result")  # type: ignore[arg-type]


def test_load_endpoints_reads_metrics_the_way_the_schedulers_config_says(tmp_path: Path) -> None:
    # The same endpoints file read with and without the scheduler: its core-metrics-extractor
    # reads the queue from another gauge (as eppctl pick --config and eppctl serve do).
    page = tmp_path / "a.prom"
    page.write_text("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 2\n"
                    "# TYPE my_waiting gauge\nmy_waiting 7\n")
    endpoints = tmp_path / "pool.yaml"
    endpoints.write_text(f"endpoints:\n- address: 10.0.0.1:8000\n  engine: vllm\n  metrics: {page}\n")
    s = pyepp.Scheduler.from_yaml(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: core-metrics-extractor\n"
        "  parameters:\n    engineConfigs:\n    - name: vllm\n      queuedRequestsSpec: my_waiting\n"
        "- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n")
    (plain,) = pyepp.load_endpoints(endpoints)
    (configured,) = pyepp.load_endpoints(endpoints, scheduler=s)
    assert plain.metrics is not None and plain.metrics.waiting_queue_size == 2
    assert configured.metrics is not None and configured.metrics.waiting_queue_size == 7
    with pytest.raises(TypeError, match="pyepp.Scheduler"):
        pyepp.load_endpoints(endpoints, scheduler="not a scheduler")  # type: ignore[arg-type]


def test_plugin_schema_describes_every_builtin_type():
    registry = pyepp.PluginRegistry()
    for t in registry.types():
        s = pyepp.plugin_schema(t)
        assert s["declared"] is True, t
        assert all(p["doc"] and p["type"] for p in s["params"]), t
    producer = {p["name"]: p for p in pyepp.plugin_schema("approx-prefix-cache-producer")["params"]}
    assert producer["blockSizeTokens"] == {"name": "blockSizeTokens", "type": "int", "default": "16",
                                           "range": "[1, 65536]", "doc": producer["blockSizeTokens"]["doc"]}
    assert producer["blockSize"]["deprecated"] is True
    assert pyepp.plugin_schema("queue-scorer") == {"declared": True, "params": []}
    assert registry.schema("queue-scorer") == pyepp.plugin_schema("queue-scorer")


def test_plugin_schema_of_python_and_unknown_types():
    registry = pyepp.PluginRegistry()
    registry.register_scorer("mine", lambda name, params: None)
    assert pyepp.plugin_schema("mine", registry=registry) == {"declared": False, "params": []}
    with pytest.raises(pyepp.NotFoundError, match="unknown plugin type 'mine'"):
        pyepp.plugin_schema("mine")
    with pytest.raises(TypeError):
        pyepp.plugin_schema("queue-scorer", registry={})


PREDICTED_LATENCY = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters: {streamingMode: true}
- type: slo-headroom-tier-filter
  parameters: {epsilonExploreNeg: 0}
- type: latency-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: latency-scorer
  - pluginRef: max-score-picker
"""


def test_predicted_latency_learns_from_observed_responses() -> None:
    s = pyepp.Scheduler.from_yaml(PREDICTED_LATENCY)
    eps = [pyepp.Endpoint("10.0.0.1:8000", IDLE)]

    def slo_request(i: int) -> pyepp.Request:
        return pyepp.Request.from_capture({"path": "/v1/chat/completions", "headers": {"x-llm-d-slo-ttft-ms": "500"},
                                           "body": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}})

    first = s.pick(slo_request(0), eps)
    assert first.status == 200 and first.slo == {"ttft_ms": 500.0}
    assert first.predicted_ttft_ms is None  # nothing observed yet
    for i in range(2):  # the model wants two responses
        picked = first if i == 0 else s.pick(slo_request(10 + i), eps)
        time.sleep(0.03)  # the first token 30 ms after the pick, on the real clock
        s.observe_first_token(picked)
        time.sleep(0.01)
        s.observe_completion(picked, completion_tokens=5, prompt_tokens=12)
    # The producer trains on its own thread once a second.
    deadline = time.monotonic() + 5
    predicted = None
    while predicted is None and time.monotonic() < deadline:
        time.sleep(0.1)
        predicted = s.pick(slo_request(1), eps, record=False).predicted_ttft_ms
    assert predicted is not None and 10 < predicted < 500, predicted
    explained = s.pick(slo_request(2), eps, record=False, trace=True).explain_text()
    assert "predicted TTFT" in explained and "SLO TTFT 500 ms" in explained, explained
    with pytest.raises(TypeError):
        s.observe_completion("not a result")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        s.observe_completion(first, completion_tokens=-1)
