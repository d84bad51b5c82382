"""Discovery by watch (the default) and the reference EPP's command line (`epp`).

The loopback API server (tests/helpers/fake_kube.py) answers lists and chunked watches of the
InferencePool and its Pods and turns each `set(pods=...)` into watch events; the Pods' IPs are
127.0.0.2 and 127.0.0.3 where `eppctl sim` servers listen. Every wait is bounded.
"""
import json
import os
import time

import pytest

from conftest import ROOT
from test_eppctl_serve import Serve, chat_body, destination, pick  # noqa: F401
from test_eppctl_serve_kube import fake_api, kube_serve, pods_on_loopback, wait_for  # noqa: F401
import extproc_wire as wire

from fake_kube import NS, POOL, V1, pod, pool_object  # noqa: E402

PODS = "/api/v1/namespaces/%s/pods" % NS
POOLS = "/apis/inference.networking.k8s.io/v1/namespaces/%s/inferencepools" % NS
SERVING, NOT_SERVING = 1, 2


def epp_path():
    p = os.environ.get("EPP") or str(ROOT / "build" / "cli" / "epp")
    if not os.path.exists(p):
        pytest.skip("epp not built at %s (set EPP)" % p)
    return p


def test_ready_pod_is_picked_from_its_watch_event_with_no_list_after(kube_serve, pods_on_loopback, fake_api):
    """A Pod turning Ready is picked once its MODIFIED event arrives; in the 10 s after, nothing is
    listed again (the watch alone keeps the set)."""
    port = pods_on_loopback
    a, b = "127.0.0.2:%d" % port, "127.0.0.3:%d" % port
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3", ready=False)])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
                   "--refresh-metrics-interval", "50ms")
    assert s.metric("epp_endpoints") == 1
    assert "inferencepool ns1/llama (watched)" in s.log()
    s.wait_metric("epp_kube_watches_total", lambda v: v is not None and v >= 2)
    assert s.metric("epp_kube_watch_synced") == 1
    assert s.metric("epp_kube_lists_total") == 2  # the pool and its Pods, once each
    ch = s.channel()
    first, _ = pick(ch, chat_body(), md=wire.subset_metadata([b]))
    assert first["immediate"]["status"] == 503  # not Ready: not an endpoint

    changed = time.monotonic()
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3")])
    deadline = time.monotonic() + 10
    while True:
        first, _ = pick(ch, chat_body(), md=wire.subset_metadata([b]))
        if not first.get("immediate"):
            break
        assert time.monotonic() < deadline, "vllm-b never picked:\n" + s.log()
        time.sleep(0.01)
    picked_after = time.monotonic() - changed
    assert destination(first) == b
    assert s.metric("epp_kube_watch_events_total") >= 1
    # Ten seconds of watching: no LIST of the Pods or the pool, the watches stay open.
    time.sleep(10)
    assert api.lists(PODS, since=changed) == [] and api.lists(POOLS, since=changed) == []
    assert s.metric("epp_kube_lists_total") == 2
    assert s.metric("epp_kube_watch_errors_total") == 0
    assert s.metric("epp_kube_watch_bookmarks_total") >= 1  # allowWatchBookmarks is asked for
    print("pod Ready event -> picked in %.3f s (pick loop included)" % picked_after)


def test_gone_relists_and_an_outage_keeps_the_set(kube_serve, pods_on_loopback, fake_api):
    """410 Gone: the informer lists again (a quorum read) and watches from there. The API server
    failing: the watch backs off, the set in use stays and is picked; when it is back, the
    changes made meanwhile arrive."""
    port = pods_on_loopback
    a, b = "127.0.0.2:%d" % port, "127.0.0.3:%d" % port
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3")])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url)
    assert s.metric("epp_endpoints") == 2
    s.wait_metric("epp_kube_watches_total", lambda v: v is not None and v >= 2)

    # The server forgets its history (as after an etcd compaction): open watches end, the next
    # watch from the old resourceVersion is answered 410.
    before = time.monotonic()
    api.compact()
    s.wait_metric("epp_kube_watch_relists_total", lambda v: v is not None and v >= 1)
    # Each watch relists on its own schedule (the pool's may come first): wait for the Pods'.
    wait_for(lambda: [c for c in api.lists(PODS, since=before) if "resourceVersion" not in c[2]],
             "a quorum relist of the Pods after 410", log=s.log)
    api.set(pods=[pod("vllm-a", "127.0.0.2")])  # b leaves: an event on the new watch
    s.wait_metric("epp_endpoints", lambda v: v == 1)

    # Outage: every answer 500. The set stays and is picked.
    api.set(fail=500)
    s.wait_metric("epp_kube_watch_errors_total", lambda v: v is not None and v >= 1)
    wait_for(lambda: "HTTP 500" in s.log(), "watch failure logged", log=s.log)
    ch = s.channel()
    first, _ = pick(ch, chat_body())
    assert destination(first) == a
    assert s.metric("epp_endpoints") == 1
    # Back, with b Ready again: the re-watch (or relist) brings it.
    with api.lock:
        api.fail = None
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3")])
    s.wait_metric("epp_endpoints", lambda v: v == 2, timeout=40)  # backoff up to a few seconds
    wait_for(lambda: "working again" in s.log(), "recovery logged", log=s.log)
    first, _ = pick(ch, chat_body(), md=wire.subset_metadata([b]))
    assert destination(first) == b


def test_pool_selector_and_ports_change_through_the_watch(kube_serve, pods_on_loopback, fake_api):
    """The InferencePool is watched too: a new selector restarts the Pods' watch; two target
    ports make two endpoints per Pod (data-parallel ranks)."""
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("sgl-b", "127.0.0.3", labels={"app": "sgl"})])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url)
    assert s.metric("epp_endpoints") == 1
    pool = pool_object(V1, port)
    pool["spec"]["selector"]["matchLabels"] = {"app": "sgl"}
    pool["spec"]["targetPorts"] = [{"number": port}, {"number": port + 1}]
    api.set_pool(pool)
    s.wait_metric("epp_endpoints", lambda v: v == 2)
    wait_for(lambda: "added: 127.0.0.3:%d, 127.0.0.3:%d" % (port, port + 1) in s.log(), "both ranks added", log=s.log)
    assert s.metric("epp_endpoint_waiting_queue_size", endpoint="127.0.0.2:%d" % port) is None


def test_epp_entry_point_runs_lwepps_arguments(pods_on_loopback, fake_api, tmp_path):
    """The LWEPP Deployment's command line, unchanged: standalone mode (no InferencePool), health
    on the ext_proc port, one endpoint per Pod and target port."""
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3"),
                  pod("other", "127.0.0.4", labels={"app": "other"})])
    s = Serve(epp_path(), tmp_path, ["--pool-namespace=%s" % NS, "--endpoint-selector=app=vllm",
                                     "--endpoint-target-ports=%d" % port, "--health-checking",
                                     "--kube-api-server", api.url])
    try:
        assert s.metric("epp_endpoints") == 2
        assert "epp 0." in s.log() and "pods of namespace ns1 matching 'app=vllm' (watched)" in s.log()
        with api.lock:
            assert not any(c[1].startswith("/apis/") for c in api.calls)  # no InferencePool read
        first, _ = pick(s.channel(), chat_body())
        assert destination(first) in ("127.0.0.2:%d" % port, "127.0.0.3:%d" % port)
        for service in ("", "envoy.service.ext_proc.v3.ExternalProcessor", "liveness", "readiness"):
            assert s.health(service, port=s.grpc_port) == SERVING, service
            assert s.health(service) == SERVING, service
    finally:
        s.close()


# GIE's chart and llm-d's router chart pass these; LWEPP's guide the four above.
REFERENCE_FLAGS = [
    "--grpc-health-port=0", "--metrics-port=0", "--pool-group=inference.networking.k8s.io",
    "--v=2", "--zap-encoder=json", "--zap-log-level=info", "--zap-time-encoding=iso8601", "--zap-devel=true",
    "--zap-stacktrace-level=error", "--tracing=true", "--enable-pprof=true", "--metrics-endpoint-auth=true",
    "--enable-cert-reload=false", "--ha-enable-leader-election=false", "--health-checking=false",
    "--refresh-metrics-interval=50ms", "--refresh-prometheus-metrics-interval=5s", "--metrics-staleness-threshold=2s",
    "--total-queued-requests-metric=vllm:num_requests_waiting", "--total-running-requests-metric=vllm:num_requests_running",
    "--kv-cache-usage-percentage-metric=vllm:kv_cache_usage_perc", "--lora-info-metric=vllm:lora_requests_info",
    "--cache-info-metric=vllm:cache_config_info", "--model-server-metrics-scheme=http",
    "--model-server-metrics-path=/metrics", "--model-server-metrics-port=0",
    "--model-server-metrics-https-insecure-skip-verify=true", "--disable-endpoint-subset-filter=false",
    "--emit-endpoint-scores=false", "--drain-timeout=30s", "--grpc-max-recv-msg-size=16MiB",
    "--grpc-max-send-msg-size=16MiB", "--enable-grpc-stream-metrics=true", "--allow-experimental-plugins=true",
    "--tls-min-version=VersionTLS12", "-v", "2",
]


def test_epp_starts_with_the_reference_runner_flags(pods_on_loopback, fake_api, tmp_path):
    """Every runner flag of GIE's chart and llm-d's router chart is accepted; those asking for
    something epp does not do get one notice each; --zap-encoder=json writes zap's JSON lines."""
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3")])
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n")
    s = Serve(epp_path(), tmp_path, ["--pool-name=%s" % POOL, "--pool-namespace=%s" % NS, "--kube-api-server", api.url,
                                     "--config-file=%s" % config, *REFERENCE_FLAGS])
    try:
        s.token = "scraper-token"  # --metrics-endpoint-auth=true: /metrics asks the API server
        assert s.metric("epp_endpoints") == 2
        lines = [json.loads(line) for line in s.log().splitlines() if line.strip()]
        assert all(set(line) >= {"level", "ts", "logger", "msg"} for line in lines)
        notices = [line["msg"] for line in lines if "accepted but not implemented" in line["msg"]]
        for flag in ("--enable-pprof", "--tls-min-version"):
            assert sum(n.startswith(flag + " ") for n in notices) == 1, (flag, notices)
        # --tracing is implemented; given without an exporter in the OTEL_* variables, it says
        # that nothing is sent.
        assert not any(n.startswith("--tracing") for n in notices), notices
        assert sum("--tracing: no trace exporter is configured" in line["msg"] for line in lines) == 1, lines
        assert not any("--enable-cert-reload" in n or "--metrics-endpoint-auth" in n for n in notices)
        first, _ = pick(s.channel(), chat_body())
        assert not first.get("immediate")
    finally:
        s.close()


def test_reference_flag_errors_name_the_flag(eppctl, fake_api, tmp_path):
    api = fake_api(V1, 8000)
    base = ["serve", "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--kube-api-server", api.url]
    cases = [
        (["--pool-name", POOL, "--endpoint-selector", "app=x"], "--pool-name and --endpoint-selector cannot be combined"),
        (["--endpoint-selector", "app=x"], "--endpoint-target-ports: expected 1 to 8 ports"),
        (["--endpoint-selector", "app in (x", "--endpoint-target-ports", "8000"], "--endpoint-selector: label selector"),
        (["--endpoint-selector", "app=x", "--endpoint-target-ports", "70000"], "--endpoint-target-ports: invalid port"),
        (["--pool-name", POOL, "--grpc-max-recv-msg-size", "lots"], "--grpc-max-recv-msg-size: 'lots' is not a size"),
        (["--pool-name", POOL, "--total-queued-requests-metric", "bad{"], "--total-queued-requests-metric"),
        (["--pool-name", POOL, "--config-file", str(tmp_path / "c.yaml"), "--config-text", "x: 1"],
         "--config and --config-text cannot both be set"),
    ]
    for extra, message in cases:
        r = eppctl(*base, *extra, timeout=30)
        assert r.returncode == 2, (extra, r.stderr)
        assert message in r.stderr, (extra, r.stderr)


def test_metrics_endpoint_auth_asks_the_api_server(kube_serve, pods_on_loopback, fake_api):
    """In a cluster /metrics answers only a scraper whose token the API server authenticates
    (TokenReview) and allows `get` on the path (SubjectAccessReview), as GIE's
    --metrics-endpoint-auth; /healthz stays open for probes."""
    import urllib.error
    import urllib.request
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2")])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
                   "--metrics-endpoint-auth")

    def status(path, token=None):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (s.metrics_port, path))
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert status("/metrics") == 401
    assert status("/metrics", "forged-token") == 401
    assert status("/metrics", "nobody-token") == 403
    assert status("/metrics", "scraper-token") == 200
    assert status("/healthz") == 200
    reviews = [c for c in api.calls if c[1].endswith("tokenreviews")]
    for _ in range(5):
        assert status("/metrics", "scraper-token") == 200
    assert len([c for c in api.calls if c[1].endswith("tokenreviews")]) == len(reviews)  # cached verdicts
