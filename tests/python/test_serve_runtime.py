"""pyepp.serve(config=..., endpoints_file=... | endpoint=... | pool_name=...): the same EppServer
`eppctl serve` runs, in this process: endpoints read from files (scraped, reloaded), /metrics on
its own port, configuration reloads, InferencePool discovery from a loopback API server.

Every wait is bounded; every server is closed by the fixture.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest

import pyepp
from pyepp import extproc

grpc = pytest.importorskip("grpc")

from test_extproc import LOCAL, PROCESS, chat_capture, destination, process  # noqa: E402

A, B = "10.0.0.1:8000", "10.0.0.2:8000"


def vllm_metrics(waiting: int) -> str:
    return ("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} %d\n"
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.2\n" % waiting)


def replace(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a new inode, as a ConfigMap update


def zone_config(zone: str) -> str:
    return ("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
            "- name: zone\n  type: label-selector-filter\n  parameters:\n    matchLabels: {zone: %s}\n"
            "- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: zone\n"
            "  - pluginRef: queue-scorer\n" % zone)


def wait_for(what: str, pred: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.02)


@pytest.fixture
def runtime() -> Iterator[Any]:
    handles: List[pyepp.ServeHandle] = []
    channels: List[Any] = []

    class Runtime:
        def start(self, **kwargs: Any) -> pyepp.ServeHandle:
            h = pyepp.serve(**kwargs)
            handles.append(h)
            return h

        def pick(self, handle: pyepp.ServeHandle) -> str:
            ch = grpc.insecure_channel(f"127.0.0.1:{handle.port}", options=LOCAL)
            channels.append(ch)
            return destination(process(ch, extproc.requests_from_capture(chat_capture()))[0])

    yield Runtime()
    for ch in channels:
        ch.close()
    for h in handles:
        h.close()


def metrics(handle: pyepp.ServeHandle, token: str = "") -> str:
    request = urllib.request.Request(f"http://127.0.0.1:{handle.metrics_port}/metrics",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.read().decode()


def test_endpoints_file_config_reload_and_metrics(runtime: Any, tmp_path: Path) -> None:
    (tmp_path / "a.prom").write_text(vllm_metrics(0))
    (tmp_path / "b.prom").write_text(vllm_metrics(0))
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n"
                         f"  - {{address: {A}, metrics: {tmp_path / 'a.prom'}, labels: {{zone: a}}}}\n"
                         f"  - {{address: {B}, metrics: {tmp_path / 'b.prom'}, labels: {{zone: b}}}}\n")
    config = tmp_path / "config.yaml"
    config.write_text(zone_config("a"))
    h = runtime.start(config=config, endpoints_file=endpoints, metrics_port=0, health_port=0,
                      refresh_interval_s=0.02, log_level="error")
    assert h.scheduler is None and h.metrics_port and h.health_port
    assert "2 endpoints from %s (watched)" % endpoints in h.describe()
    assert runtime.pick(h) == A
    text = metrics(h)
    assert "epp_endpoints 2\n" in text and 'epp_requests_total{outcome="200"} 1\n' in text
    assert h.metrics_text().startswith("# HELP epp_info ")
    # Metrics are scraped from the files every cycle.
    replace(tmp_path / "a.prom", vllm_metrics(7))
    wait_for("the scrape to see 7 waiting",
             lambda: any(e.address == A and e.metrics.waiting_queue_size == 7 for e in h.endpoints()))
    ages = [e.metrics_age_s for e in h.endpoints()]
    assert all(a is not None and 0 <= a < 5 for a in ages), ages  # seconds since the last read
    # The config file is watched: a change is picked up and counted.
    replace(config, zone_config("b"))
    wait_for("the config reload", lambda: h.config_reloads()["ok"] == 1)
    assert runtime.pick(h) == B
    # One that does not build raises from reload_config() and keeps the running scheduler.
    replace(config, "kind: [")
    wait_for("the failed reload", lambda: h.config_reloads()["failed"] >= 1)
    with pytest.raises(pyepp.ConfigError):
        h.reload_config()
    assert h.config_reloads()["last_error"]
    assert runtime.pick(h) == B
    # The endpoints file is watched too.
    endpoints.write_text(f"endpoints:\n  - {{address: {B}, metrics: none, labels: {{zone: b}}}}\n")
    wait_for("the endpoints reload", lambda: [e.address for e in h.endpoints()] == [B])
    with pytest.raises(pyepp.EppError):
        h.set_endpoints([pyepp.Endpoint(A)])  # this server reads its endpoints itself


def test_endpoint_specs_default_config_and_errors(runtime: Any, tmp_path: Path) -> None:
    h = runtime.start(endpoint=[f"{A}=none", f"{B}=none"])
    assert h.metrics_port is None and h.health_port is None
    assert runtime.pick(h) in (A, B)
    assert "<default: GIE's default profile>" in h.describe()
    with pytest.raises(pyepp.EppError):
        h.reload_config()  # no file to reload
    with pytest.raises(pyepp.ConfigError):
        pyepp.serve(endpoint=["10.0.0.1"])  # no port
    with pytest.raises(pyepp.NotFoundError):
        pyepp.serve(endpoint=[f"{A}=none"], config=tmp_path / "missing.yaml")
    with pytest.raises(TypeError):
        pyepp.serve()  # no endpoints at all
    with pytest.raises(TypeError):
        pyepp.serve(pyepp.Scheduler.default(), [pyepp.Endpoint(A)], endpoint=[f"{A}=none"])


def test_pool_discovery_from_a_loopback_api_server(runtime: Any, tmp_path: Path) -> None:
    from fake_kube import V1, FakeApiServer, pod  # tests/helpers, shared with the eppctl serve tests

    api = FakeApiServer(V1, 8000)
    try:
        api.set(pods=[pod("p0", "10.0.0.1")])
        token = tmp_path / "token"
        token.write_text("t0k3n\n")
        h = runtime.start(pool_name="llama", pool_namespace="ns1", kube_api_server=api.url, kube_token_file=token,
                          pool_resync_interval_s=0.05, engine="vllm", metrics_port=0, log_level="error")
        assert [e.address for e in h.endpoints()] == [A]
        assert "inferencepool ns1/llama" in h.describe()
        api.set(pods=[pod("p0", "10.0.0.1"), pod("p1", "10.0.0.2")])
        wait_for("the second Pod", lambda: sorted(e.address for e in h.endpoints()) == [A, B])
        # With a Kubernetes API, /metrics answers only a token the API server authenticates and
        # allows (metrics_endpoint_auth's default); False opens it.
        assert 'epp_pool_discovery_total{result="ok"}' in metrics(h, token="scraper-token")
        for token, code in (("", 401), ("nobody-token", 403)):
            with pytest.raises(urllib.error.HTTPError) as e:
                metrics(h, token)
            assert e.value.code == code, token
            e.value.close()
        assert any(auth == "Bearer t0k3n" for _, _, auth in api.requests)
        h.close()  # before the API server goes away
        h = runtime.start(pool_name="llama", pool_namespace="ns1", kube_api_server=api.url, metrics_port=0,
                          metrics_endpoint_auth=False, log_level="error")
        assert "epp_endpoints 2\n" in metrics(h)
        h.close()
    finally:
        api.close()


def test_standalone_discovery_by_selector_lists_once_then_watches(runtime: Any) -> None:
    # GIE's standalone mode (--endpoint-selector / --endpoint-target-ports) from Python: the Pods
    # the selector matches are the endpoints, one per target port; with pool_watch (the default)
    # a Pod added later arrives by the watch, with no new LIST even at a short resync interval.
    from fake_kube import NS, V1, FakeApiServer, pod

    pods_path = "/api/v1/namespaces/%s/pods" % NS
    api = FakeApiServer(V1, 8000)
    try:
        other = pod("other", "10.0.0.9", labels={"app": "other"})
        api.set(pods=[pod("p0", "10.0.0.1"), other])
        h = runtime.start(endpoint_selector="app=vllm", endpoint_target_ports=[8000, 8001, 8000], pool_namespace=NS,
                          kube_api_server=api.url, pool_resync_interval_s=0.05, engine="vllm",
                          model_server_metrics_port=9999, log_level="error")
        assert sorted(e.address for e in h.endpoints()) == ["10.0.0.1:8000", "10.0.0.1:8001"]
        assert "from pods of namespace ns1 matching 'app=vllm' (watched)" in h.describe()
        assert api.lists(pods_path), "the first list"
        # Metrics are read where model_server_metrics_port says (nothing listens there).
        wait_for("a scrape of port 9999", lambda: all(
            "http://10.0.0.1:9999/metrics" in e.metrics_error for e in h.endpoints()))
        assert not api.lists("/apis/%s/v1/namespaces/%s/inferencepools" % (V1, NS)), "no InferencePool in standalone mode"
        t = time.monotonic()
        api.set(pods=[pod("p0", "10.0.0.1"), pod("p1", "10.0.0.2"), other])
        wait_for("the added Pod", lambda: sorted(e.address for e in h.endpoints()) == [
            "10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "10.0.0.2:8001"])
        time.sleep(0.3)  # six resync intervals
        assert api.lists(pods_path, since=t) == []
        h.close()  # before the API server goes away

        # pool_watch=False: a LIST every pool_resync_interval_s instead.
        t = time.monotonic()
        h = runtime.start(endpoint_selector="app=vllm", endpoint_target_ports=[8000], pool_namespace=NS,
                          kube_api_server=api.url, pool_resync_interval_s=0.05, pool_watch=False, log_level="error")
        assert sorted(e.address for e in h.endpoints()) == [A, B]
        wait_for("periodic lists", lambda: len(api.lists(pods_path, since=t)) >= 3)
        h.close()
    finally:
        api.close()


def test_leader_election_between_two_in_process_replicas(runtime: Any) -> None:
    # ha_enable_leader_election on fake_kube's Leases: exactly one replica leads and reports ready;
    # closing it gives the Lease up, so the standby leads within a retry period, not a lease.
    from fake_kube import NS, POOL, V1, FakeApiServer, pod
    from test_extproc import NOT_SERVING, SERVING, _health_status

    lease_s = 2.0
    api = FakeApiServer(V1, 8000)
    try:
        api.set(pods=[pod("p0", "10.0.0.1")])
        common = dict(pool_name=POOL, pool_namespace=NS, kube_api_server=api.url, health_port=0, log_level="error",
                      ha_enable_leader_election=True, leader_election_lease_duration_s=lease_s,
                      leader_election_renew_deadline_s=1.5, leader_election_retry_period_s=0.25)
        a = runtime.start(leader_election_identity="epp-a", **common)
        b = runtime.start(leader_election_identity="epp-b", **common)
        wait_for("exactly one leader", lambda: sorted([a.leading, b.leading]) == [False, True])
        leader, standby = (a, b) if a.leading else (b, a)
        assert _health_status(leader.health_port, "readiness") == SERVING
        assert _health_status(standby.health_port, "readiness") == NOT_SERVING
        assert _health_status(standby.health_port, "liveness") == SERVING
        assert [e.address for e in standby.endpoints()] == [A]  # the standby's pool is warm
        with api.lock:
            holder = api.leases["epp-%s-%s.llm-d.ai" % (NS, POOL)]["spec"]["holderIdentity"]
        assert holder == ("epp-a" if leader is a else "epp-b")
        closed = time.monotonic()
        leader.close()
        wait_for("the standby leading", lambda: standby.leading, timeout=lease_s + 10)
        assert time.monotonic() - closed < lease_s  # the release, not the expiry
        assert _health_status(standby.health_port, "readiness") == SERVING
        standby.close()  # before the API server goes away
    finally:
        api.close()


def test_config_text(runtime: Any) -> None:
    h = runtime.start(endpoint=[f"{A}=none"], config_text=zone_config("a"))
    assert "config <embedded>" in h.describe()
    with pytest.raises(pyepp.EppError):
        h.reload_config()  # no file to reload
    with pytest.raises(pyepp.ConfigError):
        pyepp.serve(endpoint=[f"{A}=none"], config_text="kind: [")


def test_health_checking_on_the_ext_proc_port(runtime: Any) -> None:
    from test_extproc import SERVING, _health_status

    h = runtime.start(endpoint=[f"{A}=none"], health_checking=True)
    assert h.health_port is None and _health_status(h.port, "") == SERVING
    static = pyepp.serve(pyepp.Scheduler.default(), [pyepp.Endpoint(A)], health_checking=True,
                         grpc_max_recv_msg_size="8MiB", grpc_max_send_msg_size=8 << 20)
    try:
        assert _health_status(static.port, "") == SERVING
    finally:
        static.close()


def test_stream_time_limits(runtime: Any) -> None:
    h = runtime.start(endpoint=[f"{A}=none"], request_timeout_s=0.3, idle_timeout_s=0)
    ch = grpc.insecure_channel(f"127.0.0.1:{h.port}", options=LOCAL)
    try:
        headers_only = extproc.requests_from_capture(chat_capture())[:1]
        call = ch.stream_stream(PROCESS, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        # The request iterator stays open (headers, then silence): only the server's limit ends it.
        never = threading.Event()

        def messages() -> Iterator[bytes]:
            yield from headers_only
            never.wait(10)

        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            list(call(messages(), timeout=10))
        never.set()
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "request timeout (300 ms)" in err.value.details()
        assert time.monotonic() - t0 < 5
        wait_for("the timeout count", lambda: h.stats()["timeouts_request"] == 1)
        assert h.stats()["timeouts_idle"] == 0
        assert runtime.pick(h) == A  # a whole exchange is untouched
    finally:
        ch.close()
    for bad in (-1, float("nan"), "1"):
        with pytest.raises(pyepp.ConfigError):
            pyepp.serve(endpoint=[f"{A}=none"], idle_timeout_s=bad)


def test_decision_log(runtime: Any) -> None:
    h = runtime.start(endpoint=[f"{A}=none", f"{B}=none"], decision_log=3, decision_log_rate=1000)
    picks = [runtime.pick(h) for _ in range(4)]
    d = h.decisions()
    assert d["seen"] == 4 and d["kept"] == 4 and d["capacity"] == 3
    assert [x["id"] for x in d["decisions"]] == [2, 3, 4]
    assert [x["endpoint"] for x in d["decisions"]] == picks[1:]
    assert [x["id"] for x in h.decisions(limit=1)["decisions"]] == [4]
    assert [x["id"] for x in h.decisions(after=3)["decisions"]] == [4]
    one = h.decision(4)
    assert one is not None and one["explain"]["result"]["endpoint"] == picks[-1] and "winner" in one["explain_text"]
    assert h.decision(1) is None  # evicted
    assert "prompt" not in one
    off = runtime.start(endpoint=[f"{A}=none"])
    with pytest.raises(pyepp.EppError, match="decision log is off"):
        off.decisions()
    with pytest.raises(pyepp.ConfigError, match="decision_log"):
        pyepp.serve(endpoint=[f"{A}=none"], decision_log=-1)



def test_settings_are_checked_by_the_library_eppctl_serve_uses(tmp_path: Path) -> None:
    # pyepp.serve and eppctl serve fill one ServeArgs and libepp's BuildServeConfig checks it: the
    # same limits and the same messages, with the settings named by this API's keywords
    # (tests/cli/test_eppctl_serve.py checks the flags' side).
    with pytest.raises(pyepp.ConfigError, match=r"^decision_log: must be in \[0, 1000000\], got 1000001"):
        pyepp.serve(endpoint=[f"{A}=none"], decision_log=1000001)
    with pytest.raises(pyepp.ConfigError, match=r"^decision_log_rate: must be >= 1"):
        pyepp.serve(endpoint=[f"{A}=none"], decision_log_rate=0)
    with pytest.raises(pyepp.ConfigError, match=r"^pool_group: 'example.com' is neither inference.networking.k8s.io"):
        pyepp.serve(endpoint=[f"{A}=none"], pool_group="example.com")
    with pytest.raises(pyepp.ConfigError, match=r"^pool_import needs clusters_file FILE"):
        pyepp.serve(pool_import="imp")
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text("endpoints: []\n")
    with pytest.raises(pyepp.ConfigError, match=r"^clusters_file is the cluster directory of pool_import"):
        pyepp.serve(endpoint=[f"{A}=none"], clusters_file=clusters)
    with pytest.raises(pyepp.ConfigError, match=r"^pool_import and pool_name cannot be combined"):
        pyepp.serve(pool_import="imp", pool_name="p", clusters_file=clusters)
    with pytest.raises(pyepp.ConfigError, match=r"^pool_import and endpoints_file cannot be combined"):
        pyepp.serve(pool_import="imp", clusters_file=clusters, endpoints_file=tmp_path / "pool.yaml")
    # The reference EPP's Kubernetes settings, named by their keywords.
    with pytest.raises(pyepp.ConfigError, match=r"^endpoint_target_ports: invalid port number 70000"):
        pyepp.serve(endpoint_selector="app=vllm", endpoint_target_ports=[70000])
    with pytest.raises(pyepp.ConfigError, match=r"^endpoint_target_ports: expected 1 to 8 ports with endpoint_selector"):
        pyepp.serve(endpoint_selector="app=vllm")
    with pytest.raises(pyepp.ConfigError, match=r"^endpoint_target_ports is for endpoint_selector"):
        pyepp.serve(endpoint=[f"{A}=none"], endpoint_target_ports=[8000])
    with pytest.raises(pyepp.ConfigError, match=r"^pool_name and endpoint_selector cannot be combined"):
        pyepp.serve(pool_name="p", endpoint_selector="app=vllm", endpoint_target_ports=[8000])
    with pytest.raises(pyepp.ConfigError, match=r"^endpoint_selector: "):
        pyepp.serve(endpoint_selector="app in (", endpoint_target_ports=[8000])
    with pytest.raises(pyepp.ConfigError, match=r"^model_server_metrics_scheme: expected http or https, got 'ftp'"):
        pyepp.serve(endpoint_selector="app=vllm", endpoint_target_ports=[8000], model_server_metrics_scheme="ftp")
    with pytest.raises(pyepp.ConfigError, match=r"^model_server_metrics_port: must be in \[0, 65535\], got 70000"):
        pyepp.serve(endpoint_selector="app=vllm", endpoint_target_ports=[8000], model_server_metrics_port=70000)
    with pytest.raises(pyepp.ConfigError, match=r"^model_server_metrics_port: 4294967296 is out of range"):
        pyepp.serve(endpoint_selector="app=vllm", endpoint_target_ports=[8000], model_server_metrics_port=2**32)
    with pytest.raises(pyepp.ConfigError, match=r"^total_queued_requests_metric: "):
        pyepp.serve(endpoint=[f"{A}=none"], total_queued_requests_metric="bad{")
    with pytest.raises(pyepp.ConfigError, match=r"^grpc_max_recv_msg_size: 'lots' is not a size"):
        pyepp.serve(endpoint=[f"{A}=none"], grpc_max_recv_msg_size="lots")
    with pytest.raises(pyepp.ConfigError, match=r"^config and config_text cannot both be set"):
        pyepp.serve(endpoint=[f"{A}=none"], config=tmp_path / "c.yaml", config_text="kind: EndpointPickerConfig\n")
    with pytest.raises(pyepp.ConfigError, match=r"^ha_enable_leader_election needs pool_name"):
        pyepp.serve(endpoint=[f"{A}=none"], ha_enable_leader_election=True)
    with pytest.raises(pyepp.ConfigError, match=r"^leader_election_retry_period_s < leader_election_renew_deadline_s < "
                                                r"leader_election_lease_duration_s must hold, got 2s, 20.0s, 15s"):
        pyepp.serve(pool_name="p", ha_enable_leader_election=True, leader_election_renew_deadline_s=20)
    with pytest.raises(pyepp.ConfigError, match=r"^leader_election_retry_period_s must be a finite number of seconds"):
        pyepp.serve(pool_name="p", ha_enable_leader_election=True, leader_election_retry_period_s=0)
    with pytest.raises(TypeError, match="endpoint_target_ports must be an int, not str"):
        pyepp.serve(endpoint_selector="app=vllm", endpoint_target_ports=["8000"])
    with pytest.raises(TypeError, match="not both"):
        pyepp.serve(pyepp.Scheduler.default(), [], endpoint_selector="app=vllm")
    # Static mode: its servers' and streams' settings go through the same function.
    with pytest.raises(pyepp.ConfigError, match=r"^decision_log: must be in \[0, 1000000\]"):
        pyepp.serve(pyepp.Scheduler.default(), [], decision_log=1000001)


REDIS_SERVER = "/usr/bin/redis-server"


@pytest.mark.skipif(not os.access(REDIS_SERVER, os.X_OK), reason="redis-server is not installed (scripts/setup installs it)")
def test_shared_state_between_two_in_process_replicas(runtime: Any, tmp_path: Path) -> None:
    import subprocess
    sock = tmp_path / "redis.sock"
    redis = subprocess.Popen([REDIS_SERVER, "--port", "0", "--unixsocket", str(sock), "--save", "", "--appendonly", "no",
                              "--dir", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("redis-server's socket", sock.exists)
        kw: Dict[str, Any] = dict(endpoint=[f"{A}=none", f"{B}=none"], shared_state=f"unix://{sock}",
                                  shared_state_interval_s=0.02, metrics_port=0)
        one = runtime.start(shared_state_replica_id="one", **kw)
        two = runtime.start(shared_state_replica_id="two", **kw)

        def gauge(h: pyepp.ServeHandle, name: str) -> float:
            for line in h.metrics_text().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
            return -1.0

        wait_for("both replicas sharing", lambda: gauge(one, "epp_shared_state_replicas") == 2
                 and gauge(two, "epp_shared_state_replicas") == 2)
        def pick(h: pyepp.ServeHandle) -> str:
            ch = grpc.insecure_channel(f"127.0.0.1:{h.port}", options=LOCAL)
            try:
                text = "A long conversation history that spans several prefix blocks. " * 20
                return destination(process(ch, extproc.requests_from_capture(chat_capture(text)))[0])
            finally:
                ch.close()

        first = pick(one)
        wait_for("the update applied", lambda: gauge(two, "epp_shared_state_prefix_applied_total") >= 1)
        assert all(pick(two) == first for _ in range(3))  # the same prompt, through the other replica
    finally:
        redis.kill()
        redis.wait(timeout=10)
    for bad, word in (({"shared_state": "http://x"}, "shared_state"),
                      ({"shared_state": "redis://127.0.0.1:1", "shared_state_interval_s": 0}, "shared_state_interval_s"),
                      ({"shared_state_key_prefix": "x:"}, "shared_state")):
        with pytest.raises(pyepp.ConfigError, match=word):
            pyepp.serve(endpoint=[f"{A}=none"], **bad)
