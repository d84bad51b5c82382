"""InferenceObjectives and InferenceModelRewrites from the cluster (llm-d.ai/v1alpha2), and GIE's
request metrics under their names. The loopback API server (tests/helpers/fake_kube.py) serves
and watches the two collections; `eppctl sim` servers answer on 127.0.0.2/.3. Every wait is
bounded."""
import json

from test_eppctl_serve import Stream, body_of, chat_body, destination, pick  # noqa: F401
from test_eppctl_serve_kube import fake_api, kube_serve, pods_on_loopback, wait_for  # noqa: F401
import extproc_wire as wire

from fake_kube import NS, POOL, V1, pod  # noqa: E402

GROUP = "llm-d.ai"


def objective(name, priority, pool=POOL):
    return {"apiVersion": "llm-d.ai/v1alpha2", "kind": "InferenceObjective",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"priority": priority, "poolRef": {"name": pool}}}


def rewrite(name, created, rules, pool=POOL):
    return {"apiVersion": "llm-d.ai/v1alpha2", "kind": "InferenceModelRewrite",
            "metadata": {"name": name, "namespace": NS, "creationTimestamp": created},
            "spec": {"poolRef": {"name": pool}, "rules": rules}}


def sent_model(ch, model, headers=()):
    """The model of the body the EPP sends on (the rewrite, if any)."""
    body = chat_body()
    body_json = json.loads(body)
    body_json["model"] = model
    body = json.dumps(body_json).encode()
    with Stream(ch) as st:
        st.send(wire.chat_request(body, extra_headers=headers), wire.request_body(body, end_of_stream=True))
        first = st.recv()
        assert not first.get("immediate"), first
        forwarded = body_of([st.recv()])
        st.close()
    return json.loads(forwarded)["model"]


def test_rewrites_and_objectives_from_the_cluster(kube_serve, pods_on_loopback, fake_api):
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2")])
    for plural in ("inferenceobjectives", "inferencemodelrewrites"):
        api.collection(GROUP, plural)  # the CRDs exist (the older group's do not: 404, logged)
    api.put_object(GROUP, "inferenceobjectives", objective("batch", -3))
    api.put_object(GROUP, "inferenceobjectives", objective("other-pools", 9, pool="elsewhere"))
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url, "--decision-log", "1000",
                   "--decision-log-rate", "1000")
    ch = s.channel()
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v is not None, endpoint="127.0.0.2:%d" % port)

    # An exact rule for "llama" (all to llama-v2), and a generic one (everything else to base).
    api.put_object(GROUP, "inferencemodelrewrites", rewrite("canary", "2026-12-01T00:00:00Z", [
        {"matches": [{"model": {"value": "llama"}}], "targets": [{"modelRewrite": "llama-v2", "weight": 100}]}]))
    api.put_object(GROUP, "inferencemodelrewrites", rewrite("catch-all", "2026-11-01T00:00:00Z", [
        {"targets": [{"modelRewrite": "base"}]}]))
    wait_for(lambda: sent_model(ch, "llama") == "llama-v2", "the exact rule applied", log=s.log)
    assert sent_model(ch, "mistral") == "base"  # the generic rule, older but less specific
    # The decision log (what `eppctl top` and /debug/decisions show) names the rule.
    _, listing = s.http("/debug/decisions?limit=1")
    last = json.loads(listing)["decisions"][0]["id"]
    _, one = s.http("/debug/decisions?id=%d" % last)
    assert "ns1/catch-all: mistral -> base" in one, one[:2000]
    # The client's header still wins (llm-d's name, then GIE's).
    assert sent_model(ch, "llama", headers=[("x-llm-d-model-name-rewrite", "pinned")]) == "pinned"

    # A weighted split: both targets are drawn (P(one target 60 times) = 2^-59).
    api.put_object(GROUP, "inferencemodelrewrites", rewrite("canary", "2026-12-01T00:00:00Z", [
        {"matches": [{"model": {"value": "llama"}}],
         "targets": [{"modelRewrite": "llama-v2", "weight": 50}, {"modelRewrite": "llama-v1", "weight": 50}]}]))
    wait_for(lambda: sent_model(ch, "llama") == "llama-v1", "the split applied", log=s.log)
    seen = {sent_model(ch, "llama") for _ in range(60)}
    assert seen == {"llama-v1", "llama-v2"}, seen

    # The objective's priority (named by either header) reaches the request metrics' label.
    for header in ("x-llm-d-inference-objective", "x-gateway-inference-objective"):
        sent_model(ch, "mistral", headers=[(header, "batch")])
    m = s.metrics()
    assert m[("inference_objective_request_total",
              (("model_name", "mistral"), ("priority", "-3"), ("target_model_name", "base")))] == 2
    decisions = [(labels, v) for (name, labels), v in m.items()
                 if name == "inference_extension_model_rewrite_decisions_total"]
    by = {dict(labels)["target_model"]: v for labels, v in decisions if dict(labels)["model_rewrite_name"] == NS + "/canary"}
    assert by.get("llama-v1", 0) >= 1 and by.get("llama-v2", 0) >= 1, decisions

    # Counted, but not necessarily three: under load the objects above may arrive by a re-list
    # (the watch restarts after the older group's errors) rather than as watch events (seen once
    # in CI with 1).
    assert m[("epp_kube_policy_watch_events_total", ())] >= 0
    assert m[("epp_kube_policy_watch_errors_total", ())] >= 1  # the older group's CRDs are not installed here

    # Deleted: the rule no longer applies.
    api.delete_object(GROUP, "inferencemodelrewrites", "canary")
    wait_for(lambda: sent_model(ch, "llama") == "base", "the deletion applied", log=s.log)


def test_gie_request_metrics_over_a_streamed_response(kube_serve, pods_on_loopback, fake_api):
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2")])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url, "--no-watch-objectives")
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v is not None, endpoint="127.0.0.2:%d" % port)
    with Stream(s.channel()) as st:
        body = chat_body(stream=True, stream_options={"include_usage": True})
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        destination(st.recv())
        st.recv()
        m = s.metrics()
        model = json.loads(body)["model"]
        assert m[("inference_objective_running_requests", (("model_name", model),))] == 1
        st.send(wire.response_headers([(":status", "200"), ("content-type", "text/event-stream")]))
        st.recv()
        events = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n',
                  b'data: {"choices":[],"usage":{"prompt_tokens":50,"completion_tokens":9,'
                  b'"prompt_tokens_details":{"cached_tokens":32}}}\n\n', b"data: [DONE]\n\n"]
        for i, e in enumerate(events):
            st.send(wire.response_body(e, end_of_stream=i == len(events) - 1))
        st.recv_n(3)
    # A request no endpoint can take (a subset naming none of the pool): 503, an error by code.
    first, _ = pick(s.channel(), chat_body(), md=wire.subset_metadata(["10.9.9.9:1"]))
    assert first["immediate"]["status"] == 503
    m = s.metrics()
    mt = (("model_name", model), ("target_model_name", model))
    assert m[("inference_objective_running_requests", (("model_name", model),))] == 0
    assert m[("inference_objective_request_total", (("model_name", model), ("priority", "0"),
                                                    ("target_model_name", model)))] == 2
    assert m[("inference_objective_request_error_total",
              (("error_code", "ServiceUnavailable"), ("model_name", model), ("target_model_name", model)))] == 1
    assert m[("inference_objective_input_tokens_sum", mt)] == 50
    assert m[("inference_objective_output_tokens_sum", mt)] == 9
    assert m[("inference_objective_prompt_cached_tokens_sum", mt)] == 32
    assert m[("inference_objective_input_tokens_bucket", (("le", "64"),) + mt)] == 1
    assert m[("inference_objective_input_tokens_bucket", (("le", "32"),) + mt)] == 0
    for h in ("request_duration_seconds", "request_ttft_seconds", "request_tpot_seconds", "response_sizes",
              "normalized_time_per_output_token_seconds"):
        assert m[("inference_objective_%s_count" % h, mt)] == 1, h  # the finished response only
    assert m[("inference_objective_request_sizes_count", mt)] == 2  # every request, as GIE records it
    assert m[("inference_objective_response_sizes_sum", mt)] == sum(len(e) for e in events)


SATURATED = ("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 50\n"
             "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 8\n"
             "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.95\n")


def test_a_cluster_objective_priority_sheds_on_a_saturated_pool(kube_serve, pods_on_loopback, fake_api):
    """The InferenceObjective's priority changes the decision: on a saturated pool a request naming
    a sheddable objective (priority < 0) is answered 429, one naming none is picked; when the
    objective's priority turns positive, the same request is picked. The Pods' metrics come from
    --model-server-metrics-port (a server on 0.0.0.0 answering for every 127.x address)."""
    import http.server
    import threading

    class Saturated(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            data = SATURATED.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    metrics = http.server.ThreadingHTTPServer(("0.0.0.0", 0), Saturated)
    threading.Thread(target=metrics.serve_forever, daemon=True).start()
    try:
        port = pods_on_loopback
        api = fake_api(V1, port)
        api.set(pods=[pod("vllm-a", "127.0.0.2")])
        api.put_object(GROUP, "inferenceobjectives", objective("batch", -1))
        s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
                       "--model-server-metrics-port", str(metrics.server_address[1]))
        s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 50, endpoint="127.0.0.2:%d" % port)
        ch = s.channel()

        def status(headers):
            first, _ = pick(ch, chat_body(), extra_headers=headers)
            return first["immediate"]["status"] if first.get("immediate") else 200

        wait_for(lambda: status([("x-llm-d-inference-objective", "batch")]) == 429, "the sheddable objective shed",
                 log=s.log)
        assert status([]) == 200  # priority 0: not sheddable
        assert status([("x-gateway-inference-objective", "batch")]) == 429  # the alias header
        api.put_object(GROUP, "inferenceobjectives", objective("batch", 5))
        wait_for(lambda: status([("x-llm-d-inference-objective", "batch")]) == 200, "the new priority applied",
                 log=s.log)
    finally:
        metrics.shutdown()
        metrics.server_close()
