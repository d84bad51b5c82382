"""Fault drills (issue #17): `eppctl serve` over real loopback servers, each fault injected on
purpose and the answer checked against what was written down first (each drill's docstring,
"Expected"). docs/reliability.md has the table; `scripts/drills` runs this file verbosely and
writes what each drill measured (EPP_DRILL_REPORT=FILE: one JSON object per drill).

Every process is started here and stopped by its pid; every wait is bounded.
"""
import json
import os
import random
import signal
import socket
import ssl
import subprocess
import threading
import time
import http.server
import urllib.request

import grpc
import pytest

from conftest import _eppctl_path
from test_eppctl_serve import Serve, Stream, chat_body, destination, pick, serve, server_certificate  # noqa: F401
from test_eppctl_serve_kube import pods_on_loopback  # noqa: F401  (fixture)
from test_eppctl_serve_kv import PRECISE_CONFIG
import extproc_wire as wire
from fake_kube import NS, POOL, V1, FakeApiServer, pod


def report(name, **observed):
    """Appends what a drill measured to $EPP_DRILL_REPORT (scripts/drills)."""
    path = os.environ.get("EPP_DRILL_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"drill": name, **observed}) + "\n")


def wait_until(pred, what, timeout=10, log=None):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("%s not reached after %s s\n%s" % (what, timeout, log() if log else ""))
        time.sleep(0.02)


def rss_fds(pid):
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SimAt:
    """`eppctl sim` on a given port (so that it can be killed and started again there)."""

    def __init__(self, port, *args):
        self.port = port
        self.proc = subprocess.Popen([_eppctl_path(), "sim", "--host", "127.0.0.1", "--port", str(port), *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        assert "listening on" in line, line
        self.address = "127.0.0.1:%d" % port
        self.url = "http://" + self.address

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


@pytest.fixture
def procs():
    """Processes a drill starts (SimAt, Serve); all stopped at the end."""
    started = []
    yield started
    for p in started:
        if isinstance(p, Serve):
            p.close()
        else:
            p.kill()


class BadMetrics:
    """An HTTP server whose /metrics answers `body_fn()` (bytes), on 127.0.0.1."""

    def __init__(self, body_fn):
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                data = body_fn()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.address = "127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def picks(s, n, prefix="drill"):
    """n whole exchanges through serve; the destinations, and the slowest exchange in seconds."""
    out, slowest = [], 0.0
    ch = s.channel()
    for i in range(n):
        t0 = time.monotonic()
        first, _ = pick(ch, chat_body("%s %d %f" % (prefix, i, random.random())))
        slowest = max(slowest, time.monotonic() - t0)
        out.append(destination(first))
    return out, slowest


# ---------------------------------------------------------------------------------------------


def test_drill_model_server_killed(procs, serve):
    """Expected: once the scrape after the kill is refused, the endpoint is marked unreachable
    (epp_endpoint_unreachable 1) and no pick goes to it; a stream picked for it before the kill
    releases its load when the gateway ends it; started again on its port, it is picked again."""
    a, b = SimAt(free_port(), "--seed", "1"), SimAt(free_port(), "--seed", "2")
    procs += [a, b]
    s = serve("-e", a.address, "-e", b.address, "--refresh-metrics-interval", "50ms")
    s.wait_metric("epp_endpoint_metrics_fresh", lambda v: v == 1, endpoint=a.address)
    # A stream picked for A, left open (its response path pending) while A dies.
    open_stream = None
    for i in range(40):
        st = Stream(s.channel())
        body = chat_body("held %d" % i)
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        if destination(st.recv()) == a.address:
            st.recv()
            open_stream = st
            break
        st.recv()
        st.rest()
    assert open_stream is not None, "A never picked among 40 requests"
    assert s.metric("epp_endpoint_inflight_requests", endpoint=a.address) == 1
    t_kill = time.monotonic()
    a.kill()
    s.wait_metric("epp_endpoint_unreachable", lambda v: v == 1, endpoint=a.address)
    seen_after = time.monotonic() - t_kill
    dests, _ = picks(s, 40, "after kill")
    assert set(dests) == {b.address}, dests
    open_stream.rest()  # the gateway ends the stream whose upstream died
    s.wait_metric("epp_endpoint_inflight_requests", lambda v: v == 0, endpoint=a.address)
    assert "connection refused: picks pass it over" in s.log()
    # Back on the same port: reachable again, picked again.
    a2 = SimAt(a.port, "--seed", "1")
    procs.append(a2)
    s.wait_metric("epp_endpoint_unreachable", lambda v: v == 0, endpoint=a.address)
    dests2, _ = picks(s, 40, "after restart")
    assert a.address in dests2
    report("model server killed", seconds_until_passed_over=round(seen_after, 3), picks_to_dead_after=0,
           picks_after_restart={d: dests2.count(d) for d in set(dests2)})


def test_drill_metrics_hang_garbage_and_50mib(procs, serve):
    """Expected: a /metrics that hangs past --scrape-timeout, one that answers garbage and one
    that answers 50 MiB each count scrape errors and keep their last metrics (aging, not
    unreachable: they answer); the scrape cycle stays near the timeout (the hang does not hold
    the others); the 50 MiB body is cut at the 16 MiB cap; picks go on at normal latency and
    serve's RSS grows by less than 64 MiB."""
    good = SimAt(free_port(), "--seed", "3")
    hang = SimAt(free_port(), "--metrics-delay", "5")
    procs += [good, hang]
    garbage = BadMetrics(lambda: bytes(random.getrandbits(8) for _ in range(4096)))
    big_body = b"# junk\n" * (50 * 2**20 // 7)  # made once: each scrape must not rebuild 50 MiB
    big = BadMetrics(lambda: big_body)
    try:
        s = serve("-e", good.address, "-e", hang.address, "-e", garbage.address, "-e", big.address,
                  "--refresh-metrics-interval", "100ms", "--scrape-timeout", "300ms")
        rss0, _ = rss_fds(s.proc.pid)
        for addr in (hang.address, garbage.address, big.address):
            s.wait_metric("epp_endpoint_scrape_errors_total", lambda v: v >= 3, endpoint=addr)
        s.wait_metric("epp_endpoint_metrics_fresh", lambda v: v == 1, endpoint=good.address)
        cycle = s.metric("epp_scrape_duration_seconds")
        assert cycle < 1.5, cycle
        for addr in (hang.address, garbage.address, big.address):
            assert s.metric("epp_endpoint_unreachable", endpoint=addr) == 0
        dests, slowest = picks(s, 30, "bad metrics")
        assert good.address in dests
        assert slowest < 1.0, slowest
        rss1, _ = rss_fds(s.proc.pid)
        # A scrape of the 50 MiB server must read 16 MiB within the 300 ms timeout to hit the cap;
        # on a loaded machine the first ones may time out instead: allow a few seconds of retries.
        deadline = time.monotonic() + 15
        while "exceeds the cap of 16 MiB" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.2)
        log = s.log()
        assert "exceeds the cap of 16 MiB" in log, log
        assert "timed out" in log
        assert s.proc.poll() is None
        assert rss1 - rss0 < 64 * 2**20, (rss0, rss1)
        report("metrics hang, garbage, 50 MiB", scrape_cycle_s=cycle, slowest_pick_s=round(slowest, 3),
               rss_growth_mib=round((rss1 - rss0) / 2**20, 1))
    finally:
        garbage.close()
        big.close()


def test_drill_slow_model_server(procs, serve):
    """Expected: a server that answers slowly builds a waiting queue its /metrics shows; while it
    does, picks go to the other server (queue and KV scorers)."""
    slow = SimAt(free_port(), "--max-running", "1", "--decode-step-ms", "200", "--seed", "4")
    fast = SimAt(free_port(), "--seed", "5")
    procs += [slow, fast]
    s = serve("-e", slow.address, "-e", fast.address, "--refresh-metrics-interval", "50ms")
    body = json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 20,
                       "messages": [{"role": "user", "content": "take your time"}]}).encode()

    def direct():
        req = urllib.request.Request(slow.url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=30).read()
        except OSError:
            pass

    threads = [threading.Thread(target=direct, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v is not None and v >= 3, endpoint=slow.address)
    dests, _ = picks(s, 20, "while slow")
    assert set(dests) == {fast.address}, dests
    report("slow model server", picks_to_slow=dests.count(slow.address), picks_to_fast=dests.count(fast.address))
    for t in threads:
        t.join(timeout=30)


def test_drill_kube_api_down_and_garbage(serve, pods_on_loopback, tmp_path):  # noqa: F811
    """Expected: when the Kubernetes API answers 500, then garbage, discovery errors are counted,
    the endpoints discovered before are kept and picked; when it recovers, discovery succeeds
    again and a Pod change is applied."""
    port = pods_on_loopback
    a, b = "127.0.0.2:%d" % port, "127.0.0.3:%d" % port
    api = FakeApiServer(V1, port)
    try:
        api.set(pods=[pod("vllm-a", "127.0.0.2"), pod("vllm-b", "127.0.0.3")])
        s = serve("--pool-name", POOL, "--pool-namespace", NS, "--kube-api-server", api.url, "--no-pool-watch",
                  "--pool-resync-interval", "100ms", "--refresh-metrics-interval", "50ms")
        assert s.metric("epp_endpoints") == 2
        api.set(fail=500)
        s.wait_metric("epp_pool_discovery_total", lambda v: v >= 3, result="error")
        assert s.metric("epp_endpoints") == 2
        assert set(picks(s, 10, "api down")[0]) <= {a, b}
        errors_500 = s.metric("epp_pool_discovery_total", result="error")
        with api.lock:
            api.fail = None
            api.garbage = b"\x00{not json" + bytes(range(256))
        s.wait_metric("epp_pool_discovery_total", lambda v: v >= errors_500 + 3, result="error")
        assert s.metric("epp_endpoints") == 2
        assert set(picks(s, 10, "api garbage")[0]) <= {a, b}
        assert s.proc.poll() is None
        with api.lock:
            api.garbage = None
            api.pods = [pod("vllm-a", "127.0.0.2")]
        wait_until(lambda: s.metric("epp_endpoints") == 1, "the recovered API's Pod list applied", log=s.log)
        assert set(picks(s, 10, "recovered")[0]) == {a}
        report("kubernetes API down / garbage", endpoints_kept=2,
               discovery_errors=s.metric("epp_pool_discovery_total", result="error"))
    finally:
        api.close()


def test_drill_files_replaced_with_garbage(procs, serve, tmp_path):
    """Expected: an endpoints file and a config file replaced with garbage are each rejected
    (reload error counted, logged once), the running endpoints and scheduler stay, picks go on;
    valid files afterwards are applied."""
    a, b = SimAt(free_port(), "--seed", "6"), SimAt(free_port(), "--seed", "7")
    procs += [a, b]
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n  - address: %s\n  - address: %s\n" % (a.address, b.address))
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
                      "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n"
                      "  - pluginRef: queue-scorer\n")
    s = serve("--endpoints", endpoints, "--config", config, "--refresh-metrics-interval", "50ms")
    for path in (endpoints, config):
        tmp = path.with_suffix(".new")
        tmp.write_bytes(b"\xff\xfe garbage: [[[ {{{ \x00\x01")
        os.replace(tmp, path)
    s.wait_metric("epp_endpoints_reloads_total", lambda v: v >= 1, result="error")
    s.wait_metric("epp_config_reloads_total", lambda v: v >= 1, result="error")
    assert s.metric("epp_endpoints") == 2
    assert set(picks(s, 10, "garbage files")[0]) <= {a.address, b.address}
    endpoints.write_text("endpoints:\n  - address: %s\n" % b.address)
    wait_until(lambda: s.metric("epp_endpoints") == 1, "a valid endpoints file applied", log=s.log)
    assert set(picks(s, 5, "valid again")[0]) == {b.address}
    report("endpoints / config file garbage", endpoints_kept=2,
           endpoints_reload_errors=s.metric("epp_endpoints_reloads_total", result="error"),
           config_reload_errors=s.metric("epp_config_reloads_total", result="error"))


def test_drill_sigterm_under_load(procs, serve):
    """Expected: SIGTERM with 40 streams open (picked, response path pending): readiness turns
    NOT_SERVING, new streams are refused, none of the 40 is cut before --drain-timeout: each
    finishes its response path OK; serve exits 0 once the last one ends, well before the drain
    timeout."""
    a = SimAt(free_port(), "--seed", "8")
    procs.append(a)
    s = serve("-e", a.address, "--drain-timeout", "20s")
    ch = s.channel()
    streams = []
    for i in range(40):
        st = Stream(ch)
        body = chat_body("draining %d" % i)
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        assert destination(st.recv()) == a.address
        st.recv()
        streams.append(st)
    t0 = time.monotonic()
    s.signal(signal.SIGTERM)
    wait_until(lambda: s.health("readiness") == wire.NOT_SERVING, "readiness NOT_SERVING", log=s.log)
    with pytest.raises(grpc.RpcError) as refused:
        pick(s.channel(), chat_body("too late"))
    # Refused: UNAVAILABLE when the listener is closed, CANCELLED when gRPC's shutdown cancels a
    # stream that reached it as the server stopped accepting.
    assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    time.sleep(1.0)  # the open streams are still being held
    assert s.proc.poll() is None
    usage = json.dumps({"usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}).encode()
    for st in streams:
        st.send(wire.response_headers([(":status", "200")]), wire.response_body(usage, end_of_stream=True))
    ok = 0
    for st in streams:
        st.recv_n(2)
        assert st.rest() == []
        ok += st.call.code() == grpc.StatusCode.OK
    assert ok == 40
    assert s.wait(timeout=20) == 0
    took = time.monotonic() - t0
    assert took < 15, took
    report("SIGTERM under load", open_streams=40, finished_ok=ok, exit_after_s=round(took, 2))


def test_drill_tls_garbage_and_handshake_stall(procs, serve):
    """Expected: with TLS on, 100 connections that send garbage are closed at once and 100 that
    connect and say nothing are closed by --handshake-timeout (1 s here); meanwhile a TLS client
    gets its picks; afterwards serve holds no more descriptors than before."""
    a = SimAt(free_port(), "--seed", "9")
    procs.append(a)
    s = serve("-e", a.address, "--handshake-timeout", "1s", tls=True)
    cert = server_certificate(s.grpc_port)
    _, fds0 = rss_fds(s.proc.pid)
    garbage, silent = [], []
    for _ in range(100):
        g = socket.create_connection(("127.0.0.1", s.grpc_port), timeout=5)
        g.sendall(b"GET / HTTP/1.1\r\n\r\n" + os.urandom(512))
        garbage.append(g)
        silent.append(socket.create_connection(("127.0.0.1", s.grpc_port), timeout=5))
    t0 = time.monotonic()
    ctx_ok = 0
    ch = s.channel(grpc.ssl_channel_credentials(root_certificates=cert))
    for i in range(10):
        first, _ = pick(ch, chat_body("tls %d" % i))
        ctx_ok += destination(first) == a.address
    assert ctx_ok == 10

    def closed(sock):
        try:
            return sock.recv(4096) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    for g in garbage:
        g.settimeout(5)
        while True:  # the server may answer with a TLS alert before closing
            try:
                data = g.recv(4096)
            except (ConnectionResetError, socket.timeout):
                break
            if not data:
                break
    garbage_closed_s = time.monotonic() - t0
    for q in silent:
        q.settimeout(5)
        assert closed(q), "a silent connection was not closed"
    silent_closed_s = time.monotonic() - t0
    for c in garbage + silent:
        c.close()
    wait_until(lambda: rss_fds(s.proc.pid)[1] <= fds0 + 2, "descriptors back to the baseline", log=s.log)
    assert silent_closed_s < 4, silent_closed_s
    report("TLS garbage and handshake stall", garbage_connections=100, silent_connections=100,
           all_closed_after_s=round(silent_closed_s, 2), tls_picks_meanwhile=ctx_ok,
           fds_before=fds0, fds_after=rss_fds(s.proc.pid)[1])


def test_drill_thousands_of_silent_streams(procs, serve):
    """Expected: 2,000 streams that send headers and go silent are all ended by
    --stream-request-timeout (1 s here) with DEADLINE_EXCEEDED; picks of a normal client go on
    meanwhile; afterwards no stream is open. Memory is bounded, not leaked: later waves of
    2,000 reuse what the first left allocated (the third wave adds less than half of what the
    first did; a leak would add as much every wave)."""
    load = os.path.join(os.path.dirname(os.path.dirname(_eppctl_path())), "bench", "epp_extproc_load")
    if not os.access(load, os.X_OK):
        pytest.skip("bench/epp_extproc_load not built (EPP_BUILD_BENCH=OFF)")
    a = SimAt(free_port(), "--seed", "10")
    procs.append(a)
    s = serve("-e", a.address, "--stream-request-timeout", "1s")
    picks(s, 5, "warm")
    rss = [rss_fds(s.proc.pid)[0]]
    slowest = 0.0
    for wave in range(3):
        gen = subprocess.Popen([load, "--target", "127.0.0.1:%d" % s.grpc_port, "--requests", "2000",
                                "--concurrency", "2000", "--stall-fraction", "1", "--timeout", "30s", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            s.wait_metric("epp_streams_active", lambda v: v >= 1000)
            dests, wave_slowest = picks(s, 10, "beside silent streams %d" % wave)
            slowest = max(slowest, wave_slowest)
            assert set(dests) == {a.address}
            out, err = gen.communicate(timeout=60)
        finally:
            if gen.poll() is None:
                gen.kill()
                gen.wait()
        level = json.loads(out)["levels"][0]
        assert level["stalled_ended"] == 2000, (level, err)
        assert level["errors"] == 0, level
        s.wait_metric("epp_streams_active", lambda v: v == 0)
        rss.append(rss_fds(s.proc.pid)[0])
    assert s.metric("epp_stream_timeouts_total", phase="request") == 6000
    assert rss[3] - rss[2] < 0.5 * (rss[1] - rss[0]), rss
    report("thousands of silent gRPC streams", silent_streams="3 x 2000", ended_by_server=6000,
           slowest_pick_meanwhile_s=round(slowest, 3),
           rss_mib=[round(r / 2**20, 1) for r in rss])




class KvSimAt(SimAt):
    """`eppctl sim` on given HTTP and KV-event ports (to restart it on the same ones)."""

    def __init__(self, port, kv_port, replay_port, *args):
        self.kv = "tcp://127.0.0.1:%d" % kv_port
        self.replay = "tcp://127.0.0.1:%d" % replay_port
        super().__init__(port, "--kv-events", self.kv, "--kv-events-replay", self.replay, *args)

    def chat(self, system, question):
        body = json.dumps({"model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 2,
                           "messages": [{"role": "system", "content": system},
                                        {"role": "user", "content": question}]}).encode()
        req = urllib.request.Request(self.url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()


def test_drill_kv_event_sockets_drop_and_replay(procs, serve, tmp_path):
    """Expected: with 30% of A's KV-event batches lost on the way, the EPP sees the gaps and fills
    each from A's replay socket, so it still knows every prompt A holds and sends requests sharing
    them to A; when A restarts (its sequence starts again at 0), the EPP drops what the old process
    held (a reset) and the old prompts no longer pull requests to A."""
    ports = [free_port() for _ in range(6)]
    a = KvSimAt(ports[0], ports[1], ports[2], "--kv-events-drop-rate", "0.3", "--seed", "11")
    b = KvSimAt(ports[3], ports[4], ports[5], "--seed", "12")
    procs += [a, b]
    config = tmp_path / "precise.yaml"
    config.write_text(PRECISE_CONFIG)
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n" + "".join(
        "  - {address: %s, kvEvents: '%s', kvEventsReplay: '%s'}\n" % (s.address, s.kv, s.replay) for s in (a, b)))
    s = serve("--config", config, "--endpoints", endpoints, "--refresh-metrics-interval", "50ms")
    for sim in (a, b):
        s.wait_metric("epp_endpoint_kv_replays_total", lambda v: v is not None and v >= 1, endpoint=sim.address)
    time.sleep(0.2)
    systems = [("System prompt number %d for the drill. " % i) * 20 for i in range(12)]
    for i, system in enumerate(systems):
        a.chat(system, "question %d" % i)
    # A lost last batch shows only when a later one arrives: more requests until one gets through.
    flushes = iter(range(1000))
    wait_until(lambda: (a.chat(("flush %d " % next(flushes)) * 20, "flush"),
                        (s.metric("epp_endpoint_kv_last_sequence", endpoint=a.address) or -1) >= len(systems))[1],
               "A's batches applied", timeout=15, log=s.log)
    s.wait_metric("epp_endpoint_kv_gaps_total", lambda v: v is not None and v >= 1, endpoint=a.address)
    gaps = s.metric("epp_endpoint_kv_gaps_total", endpoint=a.address)
    replays = s.metric("epp_endpoint_kv_replays_total", endpoint=a.address)
    assert s.metric("epp_endpoint_kv_replay_failures_total", endpoint=a.address) == 0
    dests = [destination(pick(s.channel(), json.dumps({
        "model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 2,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "via the EPP"}]}).encode())[0])
        for system in systems]
    assert dests == [a.address] * len(systems), dests
    # A restarts on the same ports: a new publisher, sequence from 0.
    a.kill()
    a2 = KvSimAt(ports[0], ports[1], ports[2], "--seed", "13")
    procs.append(a2)
    resets_before = s.metric("epp_endpoint_kv_resets_total", endpoint=a.address)
    # New prompts (new blocks, so new batches) until one reaches the reconnected subscriber.
    fresh = iter(range(1000))
    wait_until(lambda: (a2.chat(("after the restart %d " % next(fresh)) * 20, "hello"),
                        s.metric("epp_endpoint_kv_resets_total", endpoint=a.address) > resets_before)[1],
               "the restart seen as a reset", timeout=15, log=s.log)
    after = [destination(pick(s.channel(), json.dumps({
        "model": "meta-llama/Llama-3.1-8B-Instruct", "max_tokens": 2,
        "messages": [{"role": "system", "content": systems[0]}, {"role": "user", "content": "again %d" % i}]}).encode())[0])
        for i in range(16)]
    assert set(after) == {a.address, b.address}, after  # no preference left for the old prompt
    report("KV-event sockets drop and replay", batches_dropped_rate=0.3, gaps=gaps, replays=replays,
           picks_to_holder=len(systems), restart_resets=s.metric("epp_endpoint_kv_resets_total", endpoint=a.address))
