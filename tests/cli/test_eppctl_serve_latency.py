"""`eppctl serve` with llm-d's predicted-latency configuration over real gRPC ext_proc.

Two endpoints: A answers its first token at once, B after 200 ms. The response path (streamed
response headers and body chunks sent through ext_proc) trains the in-process predictor; then
requests carrying a TTFT SLO of 100 ms go to A, the one predicted to meet it, and a sheddable
request whose SLO no endpoint can meet is shed with 429 rejected-saturated. Bounded: about 40
requests, each wait a few seconds at most.
"""
import json
import time

import pytest

grpc = pytest.importorskip("grpc")

import extproc_wire as wire  # noqa: E402
from test_eppctl_serve import MODEL, Serve, Stream, chat_body, destination, write_pool  # noqa: E402,F401
from conftest import _eppctl_path  # noqa: E402

A, B = "10.0.0.1:8000", "10.0.0.2:8000"
SLOW_S = 0.2

# llm-d's chart (default-plugins.yaml with router.latencyPredictor.enabled), streamingMode on so
# that TTFT is trained on first tokens.
CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters:
    streamingMode: true
- name: strict-affinity-filter
  type: prefix-cache-affinity-filter
  parameters:
    affinityThreshold: 0.99
    ttftSource: latencyPredictor
    maxTTFTPenaltyMs: 5000
- name: loose-affinity-filter
  type: prefix-cache-affinity-filter
  parameters:
    affinityThreshold: 0.80
    ttftSource: latencyPredictor
    maxTTFTPenaltyMs: 5000
- type: latency-scorer
- type: weighted-random-picker
- type: slo-headroom-tier-filter
- type: latency-slo-admitter
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: predicted-latency-producer
  - pluginRef: strict-affinity-filter
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: loose-affinity-filter
  - pluginRef: latency-scorer
  - pluginRef: weighted-random-picker
"""

CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
LAST = (b'data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":4,"total_tokens":24}}\n\n'
        b"data: [DONE]\n\n")


def request(ch, content, slo_ms=None, subset=None, objective=None):
    """One request with a streamed response: A's first chunk at once, B's after SLOW_S.
    Returns (status or destination, the immediate response when there is one)."""
    headers = []
    if slo_ms is not None:
        headers.append(("x-llm-d-slo-ttft-ms", str(slo_ms)))
    if objective:
        headers.append(("x-llm-d-inference-objective", objective))
    md = wire.subset_metadata([subset]) if subset else None
    body = chat_body(content, stream=True)
    with Stream(ch, timeout=20) as s:
        s.send(wire.chat_request(body, extra_headers=headers, md=md), wire.request_body(body, end_of_stream=True, md=md))
        first = s.recv()
        if first["kind"] == "immediate_response":
            return first["immediate"]["status"], first
        where = destination(first)
        while not s.recv()["common"]["body_mutation"]["streamed_response"]["end_of_stream"]:
            pass
        s.send(wire.response_headers([(":status", "200"), ("content-type", "text/event-stream")]))
        assert s.recv()["kind"] == "response_headers"
        if where == B:
            time.sleep(SLOW_S)
        for part, eos in ((CHUNK, False), (CHUNK, False), (CHUNK, False), (LAST, True)):
            s.send(wire.response_body(part, end_of_stream=eos))
            s.recv()
        return where, None


@pytest.fixture
def latency_serve(eppctl, tmp_path):
    pool = write_pool(tmp_path / "pool", [(A, 0, 1, 0.3), (B, 0, 1, 0.3)])
    cfg = tmp_path / "predicted-latency.yaml"
    cfg.write_text(CONFIG)
    s = Serve(_eppctl_path(), tmp_path, ["--endpoints", pool, "--config-file", cfg, "--objective", "sheddable=-1", "--decision-log", "100",
                                          "--decision-log-rate", "1000",
                                          "--refresh-metrics-interval", "50ms"])
    yield s
    s.close()


def test_predicted_latency_config_routes_by_slo_and_sheds(latency_serve):
    s = latency_serve
    assert "not implemented" not in s.log()
    ch = s.channel()
    # Training: the gateway's subset hint sends 34 requests to each endpoint (the predictor
    # gives an endpoint its own model from 32 samples).
    for i in range(34):
        assert request(ch, "a%d" % i, slo_ms=100, subset=A)[0] == A
        assert request(ch, "b%d" % i, slo_ms=100, subset=B)[0] == B
    # B's responses missed the 100 ms SLO: llm-d's violation counter says so.
    violations = s.wait_metric("inference_objective_request_slo_violation_total", lambda v: v is not None and v >= 30,
                               model_name=MODEL, target_model_name=MODEL, type="ttft")
    assert violations <= 34
    # The predictor trains on its own thread (every second): wait until a pick sees B as slow.
    deadline = time.monotonic() + 10
    while True:
        where = [request(ch, "probe%d-%d" % (time.monotonic_ns(), i), slo_ms=100)[0] for i in range(4)]
        if all(w == A for w in where) or time.monotonic() > deadline:
            break
    picks = [request(ch, "slo%d" % i, slo_ms=100)[0] for i in range(10)]
    # The tier filter keeps the endpoint that meets the SLO; it explores the other tier with
    # llm-d's probability 0.01 per request.
    assert picks.count(A) >= 9, picks

    # Predicted values reach /metrics under llm-d's and GIE's names.
    assert s.metric("llm_d_epp_request_predicted_ttft_seconds_count", plugin_name="predicted-latency-producer",
                    plugin_type="predicted-latency-producer", model_name=MODEL, target_model_name=MODEL) > 0
    assert s.metric("inference_objective_request_predicted_ttft_seconds_count", model_name=MODEL,
                    target_model_name=MODEL) > 0

    # A sheddable request whose SLO no endpoint meets (both busy, neither cold) is shed; the same
    # SLO at priority 0 is served.
    status, answer = request(ch, "shed-me", slo_ms=1, objective="sheddable")
    assert status == 429, answer
    hm = {"header_mutation": answer["immediate"]["headers"]}
    assert wire.header(hm, "x-llm-d-request-dropped-reason") == "rejected-saturated"
    assert "request cannot be admitted" in answer["immediate"]["body"], answer
    assert request(ch, "keep-me", slo_ms=1)[0] in (A, B)
    # Without an SLO a sheddable request is admitted.
    assert request(ch, "no-slo", objective="sheddable")[0] in (A, B)


def test_decision_log_records_the_slo_and_the_prediction(latency_serve):
    """Each decision carries the request's SLO; once the predictor has a model, the prediction."""
    s = latency_serve
    ch = s.channel()
    for i in range(3):
        assert request(ch, "x%d" % i, slo_ms=250, subset=A)[0] == A
    status, text = s.http("/debug/decisions")
    assert status == 200
    decisions = json.loads(text)["decisions"]
    assert len(decisions) == 3, text[:1000]
    assert all(d["slo_ttft_ms"] == 250 for d in decisions), decisions
    # The first pick had nothing to predict from.
    assert "predicted_ttft_ms" not in decisions[0], decisions[0]
    # After the first responses the predictor trains (every second): a later pick is predicted.
    deadline = time.monotonic() + 10
    while True:
        assert request(ch, "y%d" % time.monotonic_ns(), slo_ms=250, subset=A)[0] == A
        last = json.loads(s.http("/debug/decisions")[1])["decisions"][-1]
        if "predicted_ttft_ms" in last or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert last["predicted_ttft_ms"] > 0, last
    one = json.loads(s.http("/debug/decisions?id=%d" % last["id"])[1])["decision"]
    assert one["explain"]["latency"]["slo_ttft_ms"] == 250, one["explain"]
    assert "predicted TTFT" in one["explain_text"], one["explain_text"]
