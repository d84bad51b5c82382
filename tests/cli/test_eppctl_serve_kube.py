"""`eppctl serve --pool-name --no-pool-watch`: endpoints discovered from an InferencePool's Pods by
listing them every --pool-resync-interval (the watch, the default, is tested in
test_eppctl_serve_watch.py).

A small Python http.server on 127.0.0.1 plays the Kubernetes API server (InferencePool and PodList
JSON written here); the Pods' IPs are 127.0.0.2 and 127.0.0.3 (Linux routes all of 127/8 to
loopback) where `eppctl sim` servers listen on one port, the pool's target port. Every wait is
bounded.
"""
import os
import re
import subprocess
import time

import pytest

from conftest import TIME_SCALE, _eppctl_path
from test_eppctl_serve import Serve, Stream, ROOT, body_of, chat_body, destination, pick  # noqa: F401
import extproc_wire as wire

from fake_kube import NS, POOL, V1, V1ALPHA2, FakeApiServer, pod, pool_object  # noqa: E402,F401


def start_sim(eppctl_path, host, port):
    proc = subprocess.Popen([eppctl_path, "sim", "--host", host, "--port", str(port), "--threads", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"listening on http://[^:]+:(\d+)", line)
    if not m:
        proc.kill()
        proc.wait()
        raise RuntimeError("eppctl sim on %s:%s did not start: %s %s" % (host, port, line, proc.stderr.read()))
    return proc, int(m.group(1))


@pytest.fixture
def pods_on_loopback(eppctl):
    """Two simulators, on 127.0.0.2:P and 127.0.0.3:P (one target port P for both Pods)."""
    path = _eppctl_path()
    procs = []
    try:
        for _ in range(5):  # P free on 127.0.0.2 may be taken on 127.0.0.3: try another
            a, port = start_sim(path, "127.0.0.2", 0)
            procs.append(a)
            try:
                b, _ = start_sim(path, "127.0.0.3", port)
            except RuntimeError:
                continue
            procs.append(b)
            yield port
            return
        pytest.skip("no port free on both 127.0.0.2 and 127.0.0.3")
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()


@pytest.fixture
def kube_serve(eppctl, tmp_path):
    path = _eppctl_path()
    started = []

    def start(*args):
        s = Serve(path, tmp_path, list(args))
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


@pytest.fixture
def fake_api():
    """Starts FakeApiServer(group, pod_port) instances, closed when the test ends."""
    servers = []

    def start(group, pod_port):
        servers.append(FakeApiServer(group, pod_port))
        return servers[-1]

    yield start
    for api in servers:
        api.close()


def wait_for(pred, what, timeout=15, log=None):
    timeout *= TIME_SCALE
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("%s not reached after %s s\n%s" % (what, timeout, log() if log else ""))
        time.sleep(0.05)


def test_pool_pods_are_endpoints_and_a_not_ready_pod_is_dropped(kube_serve, pods_on_loopback, tmp_path, fake_api):
    port = pods_on_loopback
    a, b, c = "127.0.0.2:%d" % port, "127.0.0.3:%d" % port, "127.0.0.4:%d" % port
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3"),
                  pod("vllm-c", "127.0.0.4", ready=False), pod("vllm-d", "127.0.0.5", deleting=True)])
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
                   "--kube-token-file", token, "--no-pool-watch", "--pool-resync-interval", "100ms",
                   "--refresh-metrics-interval", "50ms", "--scrape-timeout", "2s")
    assert s.metric("epp_endpoints") == 2
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 0, endpoint=a)
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 0, endpoint=b)
    # Ready = fresh metrics at the moment of the read: waited for, as a slow (sanitized) scrape may lag.
    wait_for(lambda: s.metrics().get(("inference_pool_ready_pods", (("name", POOL),))) == 2, "2 ready pods", log=s.log)
    assert "2 endpoints from inferencepool ns1/llama" in s.log()
    with api.lock:
        reqs = list(api.requests)
    assert reqs[0][0] == "/apis/inference.networking.k8s.io/v1/namespaces/ns1/inferencepools/llama"
    assert reqs[1][0] == "/api/v1/namespaces/ns1/pods"
    assert reqs[1][1]["labelSelector"] == ["app=vllm"]
    assert reqs[1][1]["resourceVersion"] == ["0"]  # from the watch cache, no quorum read
    assert "resourceVersion" not in reqs[0][1]
    assert all(r[2] == "Bearer t0ken" for r in reqs)

    ch = s.channel()
    first, _ = pick(ch, chat_body(), md=wire.subset_metadata([b]))
    assert destination(first) == b

    # vllm-b turns not Ready: dropped at the next list; picks for it are 503.
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3", ready=False),
                  pod("vllm-c", "127.0.0.4", ready=False)])
    s.wait_metric("epp_endpoints", lambda v: v == 1)
    assert s.metric("epp_endpoint_waiting_queue_size", endpoint=b) is None
    wait_for(lambda: "removed: %s" % b in s.log(), "removal logged", log=s.log)
    first, _ = pick(ch, chat_body(), md=wire.subset_metadata([b]))
    assert first["immediate"]["status"] == 503
    first, _ = pick(ch, chat_body())
    assert destination(first) == a

    # The API server fails: the set in use stays, picks go on, each failure is logged once. A list
    # under way when the server broke can fail on the Pod LIST first (another message), so wait
    # for the steady failure on the pool GET; after that, repeats log nothing new.
    api.set(fail=500)
    pool_get_failed = "inferencepools/llama: HTTP 500"
    wait_for(lambda: pool_get_failed in s.log(), "discovery failure logged", log=s.log)
    failures = [line for line in s.log().splitlines() if "discovery failed" in line]
    assert len(failures) in (1, 2) and len({line.split(" ", 1)[1] for line in failures}) == len(failures), failures
    time.sleep(0.5)  # about five more failed lists
    assert s.log().count("discovery failed") == len(failures)
    assert "HTTP 500 (InternalError): etcd is down" in s.log()
    assert s.metric("epp_pool_discovery_total", result="error") >= 2
    assert s.metric("epp_pool_discovery_total", result="ok") >= 2
    assert s.metric("epp_endpoints") == 1
    first, _ = pick(ch, chat_body())
    assert destination(first) == a

    # Back, with vllm-b Ready again and vllm-c Ready (nothing listens there: kept, unreadable).
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3"), pod("vllm-c", "127.0.0.4")])
    s.wait_metric("epp_endpoints", lambda v: v == 3)
    assert "discovery works again" in s.log()
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 0, endpoint=b)
    s.wait_metric("epp_endpoint_scrape_errors_total", lambda v: v is not None and v >= 1, endpoint=c)
    assert s.metric("epp_endpoints_reloads_total", result="ok") == 2


def test_v1alpha2_pool_and_flag_endpoints(kube_serve, pods_on_loopback, fake_api):
    port = pods_on_loopback
    api = fake_api(V1ALPHA2, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("other", "127.0.0.3", labels={"app": "other"})])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--pool-group", V1ALPHA2, "--no-pool-watch",
                   "--kube-api-server", api.url, "--endpoint", "10.9.9.9:8000=none")
    # The Pod the selector does not match is not taken even though the server listed it.
    assert s.metric("epp_endpoints") == 2
    with api.lock:
        reqs = list(api.requests)
    assert reqs[0][0] == "/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/ns1/inferencepools/llama"
    assert reqs[1][1]["labelSelector"] == ["app=vllm"]
    assert reqs[1][1]["resourceVersion"] == ["0"]
    assert reqs[0][2] is None  # no token file: no Authorization header
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 0, endpoint="127.0.0.2:%d" % port)


def test_startup_discovery_errors(eppctl, tmp_path, fake_api):
    ports = ["--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--secure-serving=false"]
    api = fake_api(V1, 8000)
    # No such pool: 404, naming the URL.
    r = eppctl("serve", *ports, "--pool-name", "nope", "--pool-namespace", NS, "--kube-api-server", api.url,
               "--no-pool-watch", timeout=30)
    assert r.returncode == 2, r.stderr
    assert ("GET %s/apis/inference.networking.k8s.io/v1/namespaces/ns1/inferencepools/nope: HTTP 404 (NotFound)"
            % api.url) in r.stderr
    # The API server failing at start: no last good set, so serve does not start.
    api.set(fail=500)
    r = eppctl("serve", *ports, "--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
               "--no-pool-watch", timeout=30)
    assert r.returncode == 1, r.stderr
    assert "inferencepool ns1/llama: GET" in r.stderr and "etcd is down" in r.stderr
    r = eppctl("serve", *ports, "--pool-name", POOL, "--pool-group", "example.com", timeout=30)
    assert r.returncode == 2 and "--pool-group" in r.stderr, r.stderr
    # Outside a cluster without --kube-api-server.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    path = _eppctl_path()
    r = subprocess.run([path, "serve", *ports, "--pool-name", POOL, "--pool-namespace", NS], capture_output=True,
                       text=True, timeout=30, env=env)
    assert r.returncode == 2, r.stderr
    assert "--kube-api-server" in r.stderr


def test_rejected_list_is_handed_over_again(kube_serve, pods_on_loopback, fake_api):
    """A discovered list the scrape thread rejects is retried at the next list even when unchanged."""
    port = pods_on_loopback
    a, b = "127.0.0.2:%d" % port, "127.0.0.3:%d" % port
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3")])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
                   "--no-pool-watch", "--pool-resync-interval", "100ms", "--refresh-metrics-interval", "50ms")
    assert s.metric("epp_endpoints") == 2
    # An empty label name: discovery reads it, endpoint validation rejects the list.
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3", labels={"app": "vllm", "": "x"})])
    # The same list again and again: handed over (and rejected) each time, logged once.
    s.wait_metric("epp_endpoints_reloads_total", lambda v: v is not None and v >= 3, result="error")
    assert s.log().count("not loaded") == 1, s.log()
    assert "empty label name" in s.log()
    assert "keeping the 2 endpoints in use" in s.log()
    assert s.metric("epp_endpoints") == 2
    # Fixed: installed at the next list.
    api.set(pods=[pod("vllm-a", "127.0.0.2")])
    s.wait_metric("epp_endpoints", lambda v: v == 1)
    wait_for(lambda: "removed: %s" % b in s.log(), "removal logged", log=s.log)
    assert s.metric("epp_endpoint_waiting_queue_size", endpoint=a) is not None


def test_new_pod_on_an_old_pods_address_starts_clean(kube_serve, pods_on_loopback, fake_api):
    """A new Pod reusing an old Pod's IP:port: the old Pod's in-flight load is forgotten."""
    port = pods_on_loopback
    b = "127.0.0.3:%d" % port
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3")])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
                   "--no-pool-watch", "--pool-resync-interval", "100ms", "--refresh-metrics-interval", "50ms")
    assert s.metric("epp_endpoints") == 2
    with Stream(s.channel()) as st:
        body = chat_body()
        md = wire.subset_metadata([b])
        st.send(wire.chat_request(body, md=md), wire.request_body(body, end_of_stream=True, md=md))
        assert destination(st.recv()) == b
        assert body_of([st.recv()]) == body
        s.wait_metric("epp_endpoint_inflight_requests", lambda v: v == 1, endpoint=b)
        # vllm-b is gone; vllm-b2 has its IP. Same addresses, another Pod behind one of them.
        api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b2", "127.0.0.3")])
        wait_for(lambda: "replaced (state forgotten): %s (pod ns1/vllm-b -> pod ns1/vllm-b2)" % b in s.log(),
                 "replacement logged", log=s.log)
        assert "added: none; removed: none" in s.log()
        assert s.metric("epp_endpoint_inflight_requests", endpoint=b) == 0
        assert s.metric("epp_endpoints") == 2
        st.close()
    s.wait_metric("epp_requests_in_flight", lambda v: v == 0)
    assert s.metric("epp_endpoint_inflight_requests", endpoint=b) == 0  # the old request's end clamps at 0


def test_stop_during_pool_get_makes_no_pod_list(kube_serve, pods_on_loopback, fake_api):
    """SIGTERM while the pool GET is answered: discovery stops before the Pod LIST (one API timeout at most)."""
    port = pods_on_loopback
    api = fake_api(V1, port)
    api.set(pods=[pod("vllm-a", "127.0.0.2")])
    s = kube_serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url,
                   "--no-pool-watch", "--pool-resync-interval", "100ms")
    with api.lock:
        api.pool_delay = 2
    assert api.pool_get.wait(15), "no pool GET after start"
    with api.lock:
        n = len(api.requests)
    s.signal()
    assert s.wait(timeout=30) == 0, s.log()
    time.sleep(0.3)  # a LIST sent right after the delayed answer would have arrived by now
    with api.lock:
        later = [r[0] for r in api.requests[n:]]
    assert "/api/v1/namespaces/%s/pods" % NS not in later, later
