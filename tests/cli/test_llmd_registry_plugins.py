"""`eppctl explain` over llm-d Router's utilization-filter, header-label-affinity-scorer and
context-length-aware (#36): the offline pool of examples/endpoints/pool.yaml (running requests 12,
38, 7 and 5; zones us-east-1a, us-east-1b, us-east-1a, us-east-1b), a capture naming a zone."""
import json
import os
import pathlib

ROOT = pathlib.Path(os.environ.get("EPP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
POOL = ROOT / "examples" / "endpoints" / "pool.yaml"

CONFIG = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: utilization-filter
  name: busy
  parameters:
    conditions:
    - {metric: running-requests, maxValue: 10}
- type: header-label-affinity-scorer
  name: zone
  parameters: {headerName: x-preferred-zone, labelKey: zone}
- type: context-length-aware
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: busy
  - pluginRef: zone
    weight: 3
  - pluginRef: context-length-aware
"""


def test_explain_shows_the_caps_and_the_zone_affinity(eppctl, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"headers": {"x-preferred-zone": "us-east-1a"},
                               "body": {"model": "m", "prompt": "hello there"}}))
    r = eppctl("explain", "-o", "json", "-c", cfg, "--endpoints", POOL, "-r", req)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    (prof,) = j["profiles"]
    (f,) = prof["filters"]
    assert f["type"] == "utilization-filter"
    assert f["kept"] == ["10.0.0.3:8000", "10.0.0.4:8000"]
    assert {x["endpoint"]: x["reason"] for x in f["removed"]} == {
        "10.0.0.1:8000": "running-requests 12 > 10", "10.0.0.2:8000": "running-requests 38 > 10"}
    by_ep = {s["endpoint"]: {t["plugin"]: t for t in s["scorers"]} for s in prof["scores"]}
    assert by_ep["10.0.0.3:8000"]["zone"]["raw"] == 1
    assert by_ep["10.0.0.3:8000"]["zone"]["detail"] == "zone=us-east-1a matches x-preferred-zone"
    assert by_ep["10.0.0.4:8000"]["zone"]["raw"] == 0
    # No endpoint declares a context-length range: neutral 0.5 everywhere.
    assert {e: s["context-length-aware"]["raw"] for e, s in by_ep.items()} == {"10.0.0.3:8000": 0.5, "10.0.0.4:8000": 0.5}
    assert j["result"]["endpoint"] == "10.0.0.3:8000"
