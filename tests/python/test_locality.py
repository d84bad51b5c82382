"""pyepp and the region-level plugins: Endpoint(capacity=...), Scheduler(region=, zone=) and a
pool endpoints file with `capacity:` read by load_endpoints. The algorithms are tested in C++
(tests/cpp/plugins/locality_plugins_test.cc); these check that the values cross the binding.
"""
from __future__ import annotations

import pytest

import pyepp

MODEL = "m"
CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: capacity-filter
- type: region-spillover-filter
- type: zone-preference-scorer
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: capacity-filter
  - pluginRef: region-spillover-filter
  - pluginRef: zone-preference-scorer
    weight: 5
  - pluginRef: queue-scorer
"""


def req(headers=None):
    return pyepp.Request.from_capture({"path": "/v1/completions", "headers": headers or {},
                                       "body": {"model": "m", "prompt": "hello there"}})


def pool_endpoint(address, region, zone, queue=0.0, **capacity):
    return pyepp.Endpoint(address, {"waiting_queue_size": queue, "running_requests": 0, "kv_cache_usage": 0.1},
                          labels={"region": region, "zone": zone}, capacity=capacity or None)


def test_region_and_capacity_cross_the_binding():
    s = pyepp.Scheduler.from_yaml(CONFIG, region="us", zone="us-1")
    pool = [pool_endpoint("us1:1", "us", "us-1", queue=3, requests_per_second=2),
            pool_endpoint("us2:1", "us", "us-2", queue=0),
            pool_endpoint("eu1:1", "eu", "eu-1", queue=0)]
    assert dict(pool[0].capacity) == {"requests_per_second": 2.0}
    assert dict(pool[1].capacity) == {}
    # Home region, same zone (weight 5) beats the shorter queue; twice, then its ceiling.
    assert [s.pick(req(), pool).endpoints[0] for _ in range(3)] == ["us1:1", "us1:1", "us2:1"]
    r = s.pick(req(), pool, record=False)
    why = {x["endpoint"]: x["reason"] for f in r.explain()["profiles"][0]["filters"] for x in f["removed"]}
    assert why["us1:1"].startswith("at its capacity limit: 2 of 2 requests")
    assert "comes later in the spill-over order" in why["eu1:1"]
    # The zone header beats the configured zone.
    assert s.pick(req({"x-gateway-zone": "us-2"}), pool, record=False).endpoints == ["us2:1"]
    # Without region, no home: every region competes (the queue decides among the unsaturated).
    plain = pyepp.Scheduler.from_yaml(CONFIG)
    assert plain.pick(req(), pool[1:], record=False).endpoints[0] in ("us2:1", "eu1:1")


def test_bad_capacity_and_region_values_raise():
    with pytest.raises(pyepp.ConfigError, match="capacity.requests_per_second: must be a finite number > 0"):
        pool_endpoint("a:1", "us", "z", requests_per_second=0)
    with pytest.raises(pyepp.ConfigError, match="capacity.rps: unknown key"):
        pool_endpoint("a:1", "us", "z", rps=3)
    with pytest.raises(TypeError, match="region must be a str"):
        pyepp.Scheduler.from_yaml(CONFIG, region=3)


def test_load_endpoints_reads_capacity(tmp_path):
    (tmp_path / "p.prom").write_text(
        "# TYPE inference_pool_average_queue_size gauge\ninference_pool_average_queue_size{name=\"p\"} 4\n"
        "# TYPE inference_pool_average_running_requests gauge\ninference_pool_average_running_requests{name=\"p\"} 2\n"
        "# TYPE inference_pool_average_kv_cache_utilization gauge\n"
        "inference_pool_average_kv_cache_utilization{name=\"p\"} 0.5\n"
        "# TYPE inference_pool_ready_pods gauge\ninference_pool_ready_pods{name=\"p\"} 3\n")
    f = tmp_path / "pools.yaml"
    f.write_text("endpoints:\n- address: gw.example:443\n  metrics: p.prom\n  engine: epp\n"
                 "  capacity: {requestsPerSecond: 50, tokensPerSecond: 1000}\n")
    [e] = pyepp.load_endpoints(f)
    assert e.engine == "epp"
    assert dict(e.capacity) == {"requests_per_second": 50.0, "tokens_per_second": 1000.0}
    assert e.metrics.waiting_queue_size == 4
    assert e.metrics.kv_cache_usage == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text("endpoints:\n- address: gw.example:443\n  capacity: {requestsPerSecond: -1}\n")
    with pytest.raises(pyepp.ConfigError, match=r"bad.yaml:3: endpoints\[0\].capacity.requestsPerSecond"):
        pyepp.load_endpoints(bad)
