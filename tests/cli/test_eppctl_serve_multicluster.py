"""A region-level EPP over two pools, all on loopback: two `eppctl serve` pools (us-east, us-west),
each in front of its own simulator, and one region-level `eppctl serve --region us-east` whose
endpoints are the two pools' gateways, read from the pools' own /metrics (`engine: epp`) with
examples/configs/multicluster.yaml. Requests stay home until the home pool saturates (real load
on its simulator), then go west, never past west's capacity; an unreachable pool is skipped and
counted. Every process is stopped by the fixtures; every wait is bounded.
"""
import json
import threading
import time
import urllib.request

import pytest

grpc = pytest.importorskip("grpc")
from test_eppctl_serve import MODEL, Serve, chat_body, destination, pick, serve  # noqa: E402,F401
from test_drills import wait_until as wait_for  # noqa: E402

EAST_GW, WEST_GW = "gw-east.test:8443", "gw-west.test:8443"


def load(sim_url, n):
    """n long completions on the simulator (daemon threads: they end when the simulator stops)."""
    def one(i):
        body = json.dumps({"model": MODEL, "prompt": "load %d" % i, "max_tokens": 200}).encode()
        req = urllib.request.Request(sim_url + "/v1/completions", body, {"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=120).read()
        except Exception:  # noqa: BLE001  the simulator stopping ends the request
            pass
    for i in range(n):
        threading.Thread(target=one, args=(i,), daemon=True).start()


@pytest.fixture
def region(serve, sim, tmp_path, root):
    """(region-level Serve, east Serve, west Serve, east simulator URL)."""
    east_sim = sim("--max-running", "1", "--decode-step-ms", "100")
    west_sim = sim("--max-running", "8")
    pools = {}
    for name, s in (("east", east_sim), ("west", west_sim)):
        pools[name] = serve("--endpoint", s.url.split("//", 1)[1], "--scrape-timeout", "1s",
                            "--metrics-staleness-threshold", "2s")
    endpoints = tmp_path / "pools.yaml"
    endpoints.write_text(
        "endpoints:\n"
        "- address: %s\n  metrics: http://127.0.0.1:%d/metrics\n  engine: epp\n"
        "  labels: {region: us-east, zone: us-east-1a}\n  capacity: {requestsPerSecond: 8}\n"
        "- address: %s\n  metrics: http://127.0.0.1:%d/metrics\n  engine: epp\n"
        "  labels: {region: us-west, zone: us-west-2b}\n  capacity: {requestsPerSecond: 3}\n"
        % (EAST_GW, pools["east"].metrics_port, WEST_GW, pools["west"].metrics_port))
    top = serve("--region", "us-east", "--config", root / "examples/configs/multicluster.yaml",
                "--endpoints", endpoints, "--scrape-timeout", "2s")
    for gw in (EAST_GW, WEST_GW):
        top.wait_metric("epp_endpoint_metrics_fresh", lambda v: v == 1, endpoint=gw)
    return top, pools["east"], pools["west"], east_sim.url


def picks(channel, n, tag):
    out = []
    for i in range(n):
        first, _ = pick(channel, chat_body("%s %d" % (tag, i)))
        out.append(first["immediate"]["status"] if first["kind"] == "immediate_response" else destination(first))
    return out


def test_home_until_saturated_then_spill_over_within_capacity_and_skip_an_unreachable_pool(region):
    top, east, west, east_sim = region
    ch = top.channel()
    # The region-level EPP reads each pool's aggregates from that pool's EPP.
    m = top.metrics()
    assert m[("epp_endpoint_waiting_queue_size", (("endpoint", EAST_GW),))] == 0
    assert m[("epp_endpoint_running_requests", (("endpoint", WEST_GW),))] == 0

    # 1. Home while the home pool is not saturated; the pick names the gateway, and that pool's
    #    own EPP then picks the pod (the second level of the hierarchy).
    assert picks(ch, 4, "calm") == [EAST_GW] * 4
    first, _ = pick(east.channel(), chat_body("second level"))
    assert destination(first) == east_sim.split("//", 1)[1]

    # 2. Real load saturates the home pool: 1 running + 7 waiting on its one simulator.
    load(east_sim, 8)
    top.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v is not None and v >= 5, endpoint=EAST_GW)
    time.sleep(1.1)  # the calm picks leave the capacity window
    t0 = time.monotonic()
    burst = picks(ch, 12, "burst")
    took = time.monotonic() - t0
    windows = int(took) + 1  # 1-second windows the burst touched
    to_west, to_east = burst.count(WEST_GW), burst.count(EAST_GW)
    assert 1 <= to_west <= 3 * windows, burst
    assert to_east <= 8 * windows, burst
    assert burst[0] == WEST_GW  # the first request after saturation spills over
    if took < 0.9:  # one window: exactly the ceilings, then shed
        assert burst == [WEST_GW] * 3 + [EAST_GW] * 8 + [429], burst
    # The region-level EPP's decisions say why (explain through its decision log is separate).
    assert top.metric("epp_endpoint_picks_total", endpoint=WEST_GW) == to_west

    # 3. The west pool's EPP goes away: it is skipped and counted; requests stay on east.
    west.close()
    top.wait_metric("epp_endpoint_unreachable", lambda v: v == 1, endpoint=WEST_GW)
    time.sleep(1.1)
    after = picks(ch, 3, "west gone")
    assert after == [EAST_GW] * 3, after
    assert top.metric("epp_endpoint_unreachable_skips_total", endpoint=WEST_GW) >= 3
    assert top.metric("epp_endpoint_scrape_errors_total", endpoint=WEST_GW) >= 1
    assert top.metric("epp_endpoint_picks_total", endpoint=WEST_GW) == to_west


def test_pool_gauges_follow_the_pool(serve, sim):
    """What a region-level EPP reads: GIE's and llm-d's pool gauges from a pool's EPP."""
    s1 = sim("--count", "2")
    s = serve(*sum((["--endpoint", u.split("//", 1)[1]] for u in s1.urls), []), "--scrape-timeout", "1s",
              "--metrics-staleness-threshold", "2s")
    ready = ("inference_pool_ready_pods", (("name", "default"),))
    wait_for(lambda: s.metrics().get(ready) == 2, "2 ready pods", log=s.log)
    m = s.metrics()
    for n in ("llm_d_epp_ready_endpoints", "inference_pool_ready_pods"):
        assert m[(n, (("name", "default"),))] == 2
    for n in ("llm_d_epp_average_queue_size", "inference_pool_average_queue_size",
              "llm_d_epp_average_kv_cache_utilization", "inference_pool_average_kv_cache_utilization"):
        assert m[(n, (("name", "default"),))] == 0
    s1.stop()
    wait_for(lambda: s.metrics().get(ready) == 0, "0 ready pods", log=s.log)  # refused: no longer ready


def test_cluster_endpoints_from_an_inference_pool_import(serve, sim, tmp_path):
    """--pool-import against a loopback Kubernetes API server: the exporting clusters of the import,
    looked up in the cluster directory, are the endpoints; the set follows the import's status."""
    from fake_kube import NS, V1, FakeApiServer, inference_pool_import
    pools = {}
    for name in ("east", "west", "eu"):
        s = sim()
        pools[name] = serve("--endpoint", s.url.split("//", 1)[1], "--scrape-timeout", "1s")
    directory = tmp_path / "clusters.yaml"
    directory.write_text("endpoints:\n" + "".join(
        "- address: gw-%s.test:8443\n  metrics: http://127.0.0.1:%d/metrics\n  engine: epp\n"
        "  labels: {cluster: %s-1, region: %s}\n" % (n, p.metrics_port, n, n) for n, p in pools.items()))
    api = FakeApiServer(V1, 1)
    try:
        api.imports["llama"] = inference_pool_import("llama", {"example.net/mcs": ["east-1", "west-1", "mars-1"]})
        top = serve("--pool-import", "llama", "--pool-namespace", NS, "--clusters", directory,
                    "--kube-api-server", api.url, "--pool-resync-interval", "100ms", "--region", "east",
                    "--scrape-timeout", "1s")
        assert top.metric("epp_endpoints") == 2
        for gw in ("gw-east.test:8443", "gw-west.test:8443"):
            top.wait_metric("epp_endpoint_metrics_fresh", lambda v: v == 1, endpoint=gw)
        assert "mars-1 have no entry with label cluster" in top.log()
        first, _ = pick(top.channel(), chat_body("to a cluster"))
        assert destination(first) in ("gw-east.test:8443", "gw-west.test:8443")
        # A second controller exports it from eu too; east stops exporting.
        with api.lock:
            api.imports["llama"] = inference_pool_import("llama", {"example.net/mcs": ["west-1"],
                                                                   "example.org/other": ["eu-1"]})
        wait_for(lambda: top.metric("epp_endpoint_metrics_fresh", endpoint="gw-eu.test:8443") == 1
                 and top.metric("epp_endpoints") == 2, "west and eu only", log=top.log)
        assert top.metric("epp_endpoint_metrics_fresh", endpoint="gw-east.test:8443") is None
        with api.lock:
            paths = [p for p, _, _ in api.requests]
        assert "/apis/inference.networking.x-k8s.io/v1alpha1/namespaces/%s/inferencepoolimports/llama" % NS in paths
    finally:
        api.close()


def test_pool_import_flag_errors(eppctl, tmp_path):
    d = tmp_path / "clusters.yaml"
    d.write_text("endpoints:\n- address: gw.test:443\n  labels: {region: x}\n")
    r = eppctl("serve", "--pool-import", "llama", "--kube-api-server", "http://127.0.0.1:1")
    assert r.returncode == 2 and "--pool-import needs --clusters FILE" in r.stderr, r.stderr
    r = eppctl("serve", "--pool-import", "llama", "--clusters", d, "--kube-api-server", "http://127.0.0.1:1")
    assert r.returncode == 2 and "no entry of the cluster directory has the label 'cluster'" in r.stderr, r.stderr
    r = eppctl("serve", "--clusters", d)
    assert r.returncode == 2 and "give --pool-import NAME" in r.stderr, r.stderr
