"""`eppctl serve` end to end: the built binary on loopback, driven by real gRPC ext_proc streams.

Messages are built and read by tests/cli/extproc_wire.py (hand-written protobuf with the public
field numbers), sent through grpcio's generic stream_stream with identity serializers. Every
server binds port 0 and reports its ports through --ready-file, so tests can run in parallel.
Every wait is bounded.
"""
import asyncio
import json
import os
import pathlib
import queue
import signal
import socket
import ssl
import subprocess
import time
import urllib.request

import pytest

grpc = pytest.importorskip("grpc")

from conftest import TIME_SCALE, _eppctl_path  # noqa: E402
import extproc_wire as wire  # noqa: E402  (tests/cli is on sys.path via conftest.py)

ROOT = pathlib.Path(os.environ.get("EPP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
POOL = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]


def _identity(b):
    return b


def vllm_metrics(queue_size=0, running=0, kv=0.0):
    return ("# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{model_name="%s"} %s\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="%s"} %s\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{model_name="%s"} %s\n'
            "# TYPE vllm:cache_config_info gauge\n"
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="4096"} 1\n') % (MODEL, running, MODEL, queue_size,
                                                                                   MODEL, kv)


def write_pool(directory, endpoints, name="endpoints.yaml"):
    """endpoints: [(address, queue, running, kv)] -> an endpoints file whose metrics are files."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lines = ["endpoints:"]
    for address, q, r, kv in endpoints:
        m = directory.parent / ("metrics-%s.prom" % address.replace(":", "_").replace(".", "_"))
        m.write_text(vllm_metrics(q, r, kv))
        lines += ["  - address: %s" % address, "    metrics: %s" % m]
    path = directory / name
    path.write_text("\n".join(lines) + "\n")
    return path


def chat_body(content="Say hello to the picker", **extra):
    body = {"model": MODEL, "messages": [{"role": "system", "content": "You are terse."},
                                         {"role": "user", "content": content}], "max_tokens": 8}
    body.update(extra)
    return json.dumps(body).encode()


def parse_exposition(text):
    """{(sample name, ((label, value), ...)): value}, parsed by our own parser when available."""
    try:
        import pyepp
        families = pyepp.parse_prometheus(text)  # strict: raises on any malformed line
    except ImportError:
        from prometheus_client.parser import text_string_to_metric_families
        families = list(text_string_to_metric_families(text))
    out = {}
    for fam in families:
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out, families


class Serve:
    """`eppctl serve` in the background; ports from its --ready-file."""

    count = 0

    def __init__(self, eppctl_path, tmp_path, args, tls=False, env=None):
        Serve.count += 1
        self.ready_file = tmp_path / ("ready-%d.json" % Serve.count)
        self.log_path = tmp_path / ("serve-%d.log" % Serve.count)
        # The `epp` entry point takes the same flags without the subcommand.
        command = [eppctl_path] if os.path.basename(eppctl_path) == "epp" else [eppctl_path, "serve"]
        cmd = [*command, "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0",
               "--listen-address", "127.0.0.1", "--ready-file", str(self.ready_file), *map(str, args)]
        if not tls:
            cmd.append("--secure-serving=false")
        # With a Kubernetes API, /metrics is authenticated by default (TokenReview); tests read it
        # freely unless they test that (they pass --metrics-endpoint-auth and set `token`).
        if not any(str(a).startswith("--metrics-endpoint-auth") for a in args):
            cmd.append("--metrics-endpoint-auth=false")
        self.token = None
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._log,
                                     env=None if env is None else {**os.environ, **env})
        deadline = time.monotonic() + 30
        while not self.ready_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError("eppctl serve exited %d:\n%s" % (self.proc.returncode, self.log()))
            if time.monotonic() > deadline:
                raise RuntimeError("eppctl serve not ready after 30 s:\n" + self.log())
            time.sleep(0.02)
        ports = json.loads(self.ready_file.read_text())
        self.grpc_port, self.health_port, self.metrics_port = ports["grpc"], ports["health"], ports["metrics"]
        self._channels = []

    def log(self):
        return self.log_path.read_text()

    def http(self, path):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.metrics_port, path))
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()

    def exposition(self):
        """/metrics as (text, {(sample, labels): value}, {family: type})."""
        status, text = self.http("/metrics")
        assert status == 200
        samples, families = parse_exposition(text)
        return text, samples, {f.name: f.type for f in families}

    def metrics(self):
        return self.exposition()[1]

    def metric(self, name, **labels):
        return self.metrics().get((name, tuple(sorted(labels.items()))))

    def wait_metric(self, name, pred, timeout=15, **labels):
        timeout *= TIME_SCALE
        deadline = time.monotonic() + timeout
        while True:
            v = self.metric(name, **labels)
            if pred(v):
                return v
            if time.monotonic() > deadline:
                raise AssertionError("%s%s = %r after %s s\n%s" % (name, labels, v, timeout, self.log()))
            time.sleep(0.05)

    def channel(self, credentials=None, options=None):
        target = "127.0.0.1:%d" % self.grpc_port
        ch = grpc.secure_channel(target, credentials, options=options) if credentials else grpc.insecure_channel(target)
        self._channels.append(ch)
        return ch

    def health(self, service, timeout=5, port=None):
        with grpc.insecure_channel("127.0.0.1:%d" % (port or self.health_port)) as ch:
            check = ch.unary_unary(wire.HEALTH_CHECK_METHOD, request_serializer=_identity,
                                   response_deserializer=_identity)
            return wire.decode_health_response(check(wire.health_request(service), timeout=timeout))

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout=30):
        return self.proc.wait(timeout=timeout)

    def close(self):
        for ch in self._channels:
            ch.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class Stream:
    """One ext_proc stream: send() queues ProcessingRequests, recv() decodes the next response."""

    def __init__(self, channel, timeout=30):
        self._q = queue.Queue()
        process = channel.stream_stream(wire.PROCESS_METHOD, request_serializer=_identity,
                                        response_deserializer=_identity)
        self.call = process(iter(self._q.get, None), timeout=timeout)  # the deadline bounds every recv()

    def send(self, *messages):
        for m in messages:
            self._q.put(m)

    def recv(self):
        return wire.decode_response(next(self.call))

    def recv_n(self, n):
        return [self.recv() for _ in range(n)]

    def close(self):
        self._q.put(None)

    def rest(self):
        """Half-closes and returns what the server still sends before ending the stream."""
        self.close()
        return [wire.decode_response(b) for b in self.call]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def body_of(responses):
    chunks = [r["common"]["body_mutation"]["streamed_response"] for r in responses]
    assert all(c is not None for c in chunks)
    assert [c["end_of_stream"] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    return b"".join(c["body"] for c in chunks)


def pick(channel, body, chunks=1, md=None, extra_headers=(), path="/v1/chat/completions"):
    """Sends one whole request; returns (first response, responses through the end of the request path)."""
    with Stream(channel) as s:
        s.send(wire.chat_request(body, path=path, extra_headers=extra_headers, md=md))
        step = max(1, -(-len(body) // chunks))
        parts = [body[i:i + step] for i in range(0, len(body), step)] or [b""]
        for i, part in enumerate(parts):
            s.send(wire.request_body(part, end_of_stream=i == len(parts) - 1, md=md))
        first = s.recv()
        if first["kind"] == "immediate_response":
            return first, [first] + s.rest()
        rest = []
        while True:
            r = s.recv()
            rest.append(r)
            if r["common"]["body_mutation"]["streamed_response"]["end_of_stream"]:
                break
        assert s.rest() == []
        assert s.call.code() == grpc.StatusCode.OK
        return first, [first] + rest


def destination(first):
    assert first["kind"] == "request_headers", first
    return wire.header(first["common"], "x-gateway-destination-endpoint")


@pytest.fixture
def serve(eppctl, tmp_path):
    path = _eppctl_path()
    started = []

    def start(*args, tls=False):
        s = Serve(path, tmp_path, list(args), tls=tls)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


@pytest.fixture
def pool(tmp_path):
    return write_pool(tmp_path / "pool", [(POOL[0], 3, 10, 0.4), (POOL[1], 1, 12, 0.2), (POOL[2], 2, 4, 0.3)])


# ---------------------------------------------------------------------------------------------
# Request path


def test_chat_request_in_three_chunks(serve, pool):
    s = serve("--endpoints", pool)
    body = chat_body()
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(body))
        third = -(-len(body) // 3)
        st.send(wire.request_body(body[:third]), wire.request_body(body[third:2 * third]))
        st.send(wire.request_body(body[2 * third:], end_of_stream=True))
        first = st.recv()
        assert first["kind"] == "request_headers"
        common = first["common"]
        assert common["clear_route_cache"] is True
        dest = wire.header(common, "x-gateway-destination-endpoint")
        assert dest in POOL
        # The header carries raw_value (Envoy ignores `value` when raw_value is set) ...
        h = [h for h in common["header_mutation"]["set_headers"] if h["key"] == "x-gateway-destination-endpoint"][0]
        assert h["raw_value"] == dest.encode() and h["value"] == ""
        # ... and the same value is in dynamic metadata envoy.lb.
        assert first["dynamic_metadata"] == {"envoy.lb": {"x-gateway-destination-endpoint": dest}}
        # The body comes back unchanged, as streamed_response chunks ending the stream once.
        rest = []
        while not rest or not rest[-1]["common"]["body_mutation"]["streamed_response"]["end_of_stream"]:
            rest.append(st.recv())
        assert all(r["kind"] == "request_body" for r in rest)
        assert body_of(rest) == body
        assert st.rest() == []
        assert st.call.code() == grpc.StatusCode.OK
    assert s.metric("epp_requests_total", outcome="200") == 1
    assert s.metric("epp_pick_duration_seconds_count") == 1


def test_large_body_is_reassembled_and_rechunked(serve, pool):
    s = serve("--endpoints", pool)
    body = chat_body("x" * 150000)
    first, responses = pick(s.channel(), body, chunks=7)
    assert destination(first) in POOL
    chunks = responses[1:]
    assert len(chunks) == 3 and all(len(c["common"]["body_mutation"]["streamed_response"]["body"]) <= 62000
                                     for c in chunks)
    assert body_of(chunks) == body


def test_subset_hint_as_list_and_as_comma_string(serve, pool):
    s = serve("--endpoints", pool)
    ch = s.channel()
    for i in range(4):
        first, _ = pick(ch, chat_body("q%d" % i), md=wire.subset_metadata([POOL[1]]))
        assert destination(first) == POOL[1]
    seen = set()
    for i in range(6):
        first, _ = pick(ch, chat_body("r%d" % i), md=wire.subset_metadata("%s, %s" % (POOL[0], POOL[2])))
        seen.add(destination(first))
    assert seen <= {POOL[0], POOL[2]} and seen
    # A bare IP in the hint selects every port of it.
    first, _ = pick(ch, chat_body("ip"), md=wire.subset_metadata(["10.0.0.3"]))
    assert destination(first) == POOL[2]


def test_client_sidecar_control_headers_are_removed(serve, pool):
    """With the default profile (no P/D handler), a client's x-prefiller-host-port and its kin are
    removed from the forwarded request and counted; other headers are not touched."""
    s = serve("--endpoints", pool)
    forged = [("x-prefiller-host-port", "169.254.169.254:80"), ("x-encoder-hosts-ports", "6.6.6.6:1"),
              ("x-data-parallel-host-port", "6.6.6.6:2"), ("x-custom", "kept")]
    first, _ = pick(s.channel(), chat_body("steer the sidecar"), extra_headers=forged)
    assert destination(first) in POOL
    removed = first["common"]["header_mutation"]["remove_headers"]
    assert sorted(removed) == ["x-data-parallel-host-port", "x-encoder-hosts-ports", "x-prefiller-host-port"]
    assert wire.header(first["common"], "x-prefiller-host-port") is None
    assert s.metric("epp_stripped_control_headers_total") == 3


def test_empty_subset_is_503(serve, pool):
    s = serve("--endpoints", pool)
    first, responses = pick(s.channel(), chat_body(), md=wire.subset_metadata([]))
    assert first["kind"] == "immediate_response"
    assert first["immediate"]["status"] == 503
    hm = {"header_mutation": first["immediate"]["headers"]}
    assert wire.header(hm, "x-llm-d-request-dropped-reason") == "rejected-no-endpoints"
    assert responses == [first]  # nothing after an ImmediateResponse; the stream ends cleanly
    first, _ = pick(s.channel(), chat_body(), md=wire.subset_metadata(["10.9.9.9:8000"]))
    assert first["immediate"]["status"] == 503
    assert s.metric("epp_requests_total", outcome="503") == 2


def test_disable_endpoint_subset_filter(serve, pool):
    s = serve("--endpoints", pool, "--disable-endpoint-subset-filter")
    first, _ = pick(s.channel(), chat_body(), md=wire.subset_metadata([]))
    assert destination(first) in POOL


def test_bad_json_is_400_naming_the_path(serve, pool):
    s = serve("--endpoints", pool)
    bad = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": 5}]}).encode()
    first, responses = pick(s.channel(), bad, chunks=2)
    im = first["immediate"]
    assert im["status"] == 400
    assert "messages[0].content" in im["body"], im
    assert im["body"].startswith("inference error: BadRequest - ")
    ct = wire.header({"header_mutation": im["headers"]}, "content-type")
    assert ct.startswith("text/plain")
    first, _ = pick(s.channel(), b'{"model": "m", "messages": [')
    assert first["immediate"]["status"] == 400
    assert s.metric("epp_requests_total", outcome="400") == 2


def test_model_rewrite_header_not_utf8_is_answered_400(serve, pool):
    # Header values arrive as raw bytes. Such a value used to make the body rewrite throw inside
    # the reactor: the stream was never answered and its state stayed behind.
    s = serve("--endpoints", pool)
    for bad in (b"\xff\xfe", b"llama-\xc3", b"a\xed\xa0\x80b"):
        first, responses = pick(s.channel(), chat_body(), extra_headers=[("x-gateway-model-name-rewrite", bad)])
        assert first["kind"] == "immediate_response", first
        assert first["immediate"]["status"] == 400
        assert "x-gateway-model-name-rewrite: cannot rewrite the model" in first["immediate"]["body"]
        assert responses == [first]
    assert s.metric("epp_requests_total", outcome="400") == 3
    s.wait_metric("epp_streams_active", lambda v: v == 0)  # every stream ended
    # The server goes on picking.
    first, _ = pick(s.channel(), chat_body())
    assert destination(first) in POOL


def test_body_over_max_request_bytes_is_413(serve, pool):
    s = serve("--endpoints", pool, "--max-request-bytes", "1000")
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(b"x" * 1200))
        st.send(wire.request_body(b"x" * 600))
        st.send(wire.request_body(b"x" * 600))  # 1200 > 1000: answered at once, before end_of_stream
        first = st.recv()
        assert first["kind"] == "immediate_response" and first["immediate"]["status"] == 413
        assert "1000" in first["immediate"]["body"]
        assert st.rest() == []
    first, _ = pick(s.channel(), chat_body())  # a small body still passes
    assert destination(first) in POOL
    assert s.metric("epp_requests_total", outcome="413") == 1


def test_sheddable_objective_is_429_when_saturated(serve, tmp_path):
    busy = write_pool(tmp_path / "busy", [(POOL[0], 40, 64, 0.95), (POOL[1], 55, 64, 0.97)])
    s = serve("--endpoints", busy, "--objective", "low=-1", "--objective", "high=10")
    ch = s.channel()
    first, responses = pick(ch, chat_body(), extra_headers=[("x-gateway-inference-objective", "low")])
    assert first["kind"] == "immediate_response" and first["immediate"]["status"] == 429
    assert "inference error: ResourceExhausted" in first["immediate"]["body"]
    hm = {"header_mutation": first["immediate"]["headers"]}
    assert wire.header(hm, "x-llm-d-request-dropped-reason") == "rejected-saturated"
    # llm-d's name of the objective header sets the priority too, and wins over the old alias.
    first, _ = pick(ch, chat_body("llm-d"), extra_headers=[("x-llm-d-inference-objective", "low")])
    assert first["kind"] == "immediate_response" and first["immediate"]["status"] == 429
    first, _ = pick(ch, chat_body("both"), extra_headers=[("x-llm-d-inference-objective", "high"),
                                                          ("x-gateway-inference-objective", "low")])
    assert destination(first) in POOL[:2]
    for objective in ("high", "unknown-objective"):  # priority >= 0 is never shed
        first, _ = pick(ch, chat_body(), extra_headers=[("x-gateway-inference-objective", objective)])
        assert destination(first) in POOL[:2]
    first, _ = pick(ch, chat_body())
    assert destination(first) in POOL[:2]
    assert s.metric("epp_requests_total", outcome="429") == 2
    assert s.metric("epp_requests_total", outcome="200") == 4


def test_untrusted_objective_header_is_ignored(serve, tmp_path):
    # --trust-objective-header=false: a client's sheddable objective no longer sheds it (and a
    # high one would no longer lift it); the ignored header is counted.
    busy = write_pool(tmp_path / "busy", [(POOL[0], 40, 64, 0.95), (POOL[1], 55, 64, 0.97)])
    s = serve("--endpoints", busy, "--objective", "low=-1", "--trust-objective-header=false")
    ch = s.channel()
    first, _ = pick(ch, chat_body(), extra_headers=[("x-gateway-inference-objective", "low")])
    assert destination(first) in POOL[:2]
    assert s.metric("epp_untrusted_headers_ignored_total") == 1
    assert s.metric("epp_requests_total", outcome="429") == 0


def test_trust_header_flags_take_booleans_only(eppctl, pool):
    r = eppctl("serve", "--endpoints", pool, "--trust-model-rewrite-header=maybe")
    assert r.returncode != 0 and "trust-model-rewrite-header" in r.stderr, r.stderr


def test_bodyless_get_is_answered_at_headers(serve, pool):
    s = serve("--endpoints", pool)
    with Stream(s.channel()) as st:
        st.send(wire.request_headers([(":method", "GET"), (":path", "/v1/models")], end_of_stream=True))
        first = st.recv()
        dest = destination(first)
        assert dest in POOL
        assert first["dynamic_metadata"]["envoy.lb"]["x-gateway-destination-endpoint"] == dest
        assert st.rest() == []


def test_response_path_echo_usage_and_served(serve, pool):
    s = serve("--endpoints", pool)
    with Stream(s.channel()) as st:
        body = chat_body()
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        dest = destination(st.recv())
        assert body_of([st.recv()]) == body
        s.wait_metric("epp_requests_in_flight", lambda v: v == 1)
        assert s.metric("epp_endpoint_inflight_requests", endpoint=dest) == 1
        # The gateway reports a different served endpoint (a retry went elsewhere).
        served = next(a for a in POOL if a != dest)
        md = {"envoy.lb": {"x-gateway-destination-endpoint-served": served}}
        st.send(wire.response_headers([(":status", "200"), ("content-type", "application/json")], md=md))
        rh = st.recv()
        assert rh["kind"] == "response_headers"
        answer = json.dumps({"id": "c1", "object": "chat.completion", "model": MODEL,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}],
                             "usage": {"prompt_tokens": 21, "completion_tokens": 7, "total_tokens": 28,
                                       "prompt_tokens_details": {"cached_tokens": 16}}}).encode()
        st.send(wire.response_body(answer[:30], md=md), wire.response_body(answer[30:], end_of_stream=True, md=md))
        echoed = st.recv_n(2)
        assert [r["kind"] for r in echoed] == ["response_body", "response_body"]
        assert body_of(echoed) == answer
        assert st.rest() == []
    m = s.metrics()
    assert m[("epp_response_tokens_total", (("kind", "completion"),))] == 7
    assert m[("epp_response_tokens_total", (("kind", "prompt"),))] == 21
    assert m[("epp_response_tokens_total", (("kind", "cached"),))] == 16
    assert m[("epp_served_mismatch_total", ())] == 1
    assert m[("epp_requests_in_flight", ())] == 0
    assert m[("epp_endpoint_inflight_requests", (("endpoint", dest),))] == 0


def test_streaming_response_usage_from_sse(serve, pool):
    s = serve("--endpoints", pool)
    with Stream(s.channel()) as st:
        body = chat_body(stream=True, stream_options={"include_usage": True})
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        destination(st.recv())
        st.recv()
        st.send(wire.response_headers([(":status", "200"), ("content-type", "text/event-stream")]))
        assert st.recv()["kind"] == "response_headers"
        events = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n',
                  b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\n', b"data: [DONE]\n\n"]
        for i, e in enumerate(events):
            st.send(wire.response_body(e, end_of_stream=i == len(events) - 1))
        echoed = st.recv_n(3)
        assert body_of(echoed) == b"".join(events)
        assert st.rest() == []
    assert s.metric("epp_response_tokens_total", kind="completion") == 3


# ---------------------------------------------------------------------------------------------
# Health, TLS, metrics


def test_health_services(serve, pool):
    s = serve("--endpoints", pool)
    for service in ("liveness", "readiness", "inference-extension", EXT_PROC_SERVICE, ""):
        assert s.health(service) == wire.SERVING, service
    with pytest.raises(grpc.RpcError) as e:
        s.health("no-such-service")
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # Other methods on the health port are not there.
    with grpc.insecure_channel("127.0.0.1:%d" % s.health_port) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary(wire.PROCESS_METHOD, request_serializer=_identity, response_deserializer=_identity)(
                b"", timeout=5)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def make_cert(directory):
    directory.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(directory / "tls.key"),
                    "-out", str(directory / "tls.crt"), "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    return directory


def test_tls_with_cert_path(serve, pool, tmp_path):
    certs = make_cert(tmp_path / "certs")
    s = serve("--endpoints", pool, "--cert-path", certs, tls=True)
    assert "TLS, certificate from" in s.log()
    creds = grpc.ssl_channel_credentials(root_certificates=(certs / "tls.crt").read_bytes())
    first, _ = pick(s.channel(creds), chat_body())
    assert destination(first) in POOL
    # A plaintext client cannot talk to it.
    with pytest.raises(grpc.RpcError) as e:
        pick(s.channel(), chat_body())
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    # Health stays plaintext.
    assert s.health("readiness") == wire.SERVING


def server_certificate(port):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with ctx.wrap_socket(sock, server_hostname="localhost") as tls:
            assert tls.selected_alpn_protocol() == "h2"
            return ssl.DER_cert_to_PEM_cert(tls.getpeercert(binary_form=True)).encode()


def test_tls_self_signed_by_default(serve, pool):
    s = serve("--endpoints", pool, tls=True)
    assert "TLS, self-signed certificate" in s.log()
    pem = server_certificate(s.grpc_port)
    creds = grpc.ssl_channel_credentials(root_certificates=pem)
    first, _ = pick(s.channel(creds), chat_body())
    assert destination(first) in POOL


def test_cert_path_without_files_is_exit_2(eppctl, pool, tmp_path):
    (tmp_path / "empty").mkdir()
    r = eppctl("serve", "--endpoints", pool, "--cert-path", tmp_path / "empty", "--grpc-port", "0",
               "--grpc-health-port", "0", "--metrics-port", "0", timeout=30)
    assert r.returncode == 2
    assert "tls.crt" in r.stderr


def test_metrics_exposition_parses(serve, pool):
    s = serve("--endpoints", pool, "--pool-name", "llama")
    ch = s.channel()
    shared = "A long shared context that every request repeats, so the prefix index has blocks. " * 40
    for i in range(3):
        pick(ch, chat_body(shared + "question %d" % i))
    text, m, types = s.exposition()
    assert types["epp_requests"] == "counter"
    assert types["epp_pick_duration_seconds"] == "histogram"
    assert types["epp_endpoint_scrape_errors"] == "counter"
    for g in ("epp_streams_active", "epp_requests_in_flight", "epp_endpoint_waiting_queue_size",
              "epp_endpoint_running_requests", "epp_endpoint_kv_cache_usage", "epp_endpoint_metrics_age_seconds",
              "epp_endpoint_inflight_requests", "epp_prefix_index_entries", "epp_prefix_hit_ratio",
              "inference_extension_prefix_indexer_size", "inference_pool_ready_pods"):
        assert types[g] == "gauge", g
    # The other parser agrees.
    from prometheus_client.parser import text_string_to_metric_families
    assert {f.name for f in text_string_to_metric_families(text)} == set(types)

    assert m[("epp_requests_total", (("outcome", "200"),))] == 3
    assert m[("epp_streams_total", ())] == 3
    assert m[("epp_pick_duration_seconds_count", ())] == 3
    assert m[("epp_pick_duration_seconds_bucket", (("le", "+Inf"),))] == 3
    buckets = [v for (n, l), v in m.items() if n == "epp_pick_duration_seconds_bucket"]
    assert buckets == sorted(buckets)
    assert m[("epp_endpoint_waiting_queue_size", (("endpoint", POOL[0]),))] == 3
    assert m[("epp_endpoint_running_requests", (("endpoint", POOL[1]),))] == 12
    assert m[("epp_endpoint_kv_cache_usage", (("endpoint", POOL[2]),))] == pytest.approx(0.3)
    for a in POOL:
        assert m[("epp_endpoint_scrape_errors_total", (("endpoint", a),))] == 0
        assert 0 <= m[("epp_endpoint_metrics_age_seconds", (("endpoint", a),))] < 5
    assert m[("epp_prefix_index_entries", ())] > 0
    assert m[("inference_extension_prefix_indexer_size", ())] == m[("epp_prefix_index_entries", ())]
    assert m[("inference_pool_ready_pods", (("name", "llama"),))] == 3
    assert m[("inference_pool_average_queue_size", (("name", "llama"),))] == pytest.approx(2)
    assert 0 <= m[("epp_prefix_hit_ratio", ())] <= 1
    assert s.http("/healthz") == (200, "ok")


TIMING_CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - name: 'gold "pool" \\ only'
    type: label-selector-filter
    parameters:
      matchLabels: {pool: gold}
  - name: queue
    type: queue-scorer
  - name: kv
    type: kv-cache-utilization-scorer
  - name: prefix
    type: prefix-cache-scorer
  - name: best
    type: max-score-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: 'gold "pool" \\ only'
      - pluginRef: queue
        weight: 2
      - pluginRef: kv
        weight: 2
      - pluginRef: prefix
        weight: 3
      - pluginRef: best
"""


def test_metrics_plugin_durations_per_extension_point(serve, sim, tmp_path):
    sims = sim("--count", "2")
    live = [u.split("//", 1)[1] for u in sims.urls]
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n" + "".join(
        "  - address: %s\n    labels: {pool: gold}\n" % a for a in live))
    config = tmp_path / "timing.yaml"
    config.write_text(TIMING_CONFIG)
    s = serve("--endpoints", endpoints, "--config", config)
    ch = s.channel()
    for i in range(6):
        first, _ = pick(ch, chat_body("timing question %d " % i * 20))
        assert destination(first) in live
    text, m, types = s.exposition()
    assert types["inference_extension_plugin_duration_seconds"] == "histogram"
    assert types["inference_extension_scheduler_e2e_duration_seconds"] == "histogram"
    from prometheus_client.parser import text_string_to_metric_families
    assert {f.name for f in text_string_to_metric_families(text)} == set(types)
    # The plugin name's quotes and backslash are escaped in the label value.
    assert 'plugin_name="gold \\"pool\\" \\\\ only"' in text

    name = "inference_extension_plugin_duration_seconds"
    series = {}
    for (sample, labels), value in m.items():
        if sample.startswith(name):
            d = dict(labels)
            key = (d.pop("extension_point"), d.pop("plugin_type"), d.pop("plugin_name"))
            series.setdefault(key, {})[(sample[len(name):], d.get("le"))] = value
    producer, handler = "approx-prefix-cache-producer", "single-profile-handler"
    expected_calls = {
        ("Filter", "label-selector-filter", 'gold "pool" \\ only'): 6,
        ("Scorer", "queue-scorer", "queue"): 6,
        ("Scorer", "kv-cache-utilization-scorer", "kv"): 6,
        ("Scorer", "prefix-cache-scorer", "prefix"): 6,
        ("Picker", "max-score-picker", "best"): 6,
        ("ProfilePicker", handler, handler): 12,
        ("ProcessProfilesResults", handler, handler): 6,
        ("DataProducer", producer, producer): 6,
        ("PreRequest", producer, producer): 6,
        ("SaturationDetector", "utilization-detector", "utilization-detector"): 6,
    }
    assert set(expected_calls) <= set(series), sorted(series)
    for key, calls in expected_calls.items():
        h = series[key]
        assert h[("_count", None)] == calls, key
        assert h[("_bucket", "+Inf")] == calls, key
        assert h[("_sum", None)] > 0, key
        bounds = sorted((float(le), v) for (kind, le), v in h.items() if kind == "_bucket")
        assert [v for _, v in bounds] == sorted(v for _, v in bounds), key
        assert bounds[0][0] == pytest.approx(1e-6) and len(bounds) == 17, key
    e2e = "inference_extension_scheduler_e2e_duration_seconds"
    assert m[(e2e + "_count", ())] == 6
    assert m[(e2e + "_bucket", (("le", "+Inf"),))] == 6
    assert 0 < m[(e2e + "_sum", ())] <= m[("epp_pick_duration_seconds_sum", ())]
    plugin_seconds = sum(h[("_sum", None)] for h in series.values())
    assert plugin_seconds <= m[(e2e + "_sum", ())]


# ---------------------------------------------------------------------------------------------
# Endpoints: scraping and reloads


def test_live_scrape_with_one_endpoint_down(serve, sim):
    sims = sim("--count", "2")
    live = [u.split("//", 1)[1] for u in sims.urls]
    dead = "127.0.0.1:1"  # nothing listens on port 1: connection refused
    # A generous timeout: on a loaded test machine a live simulator may take over 100 ms to answer.
    s = serve("--endpoint", live[0], "--endpoint", live[1], "--endpoint", dead, "--objective", "low=-1",
              "--scrape-timeout", "2s")
    assert s.health("readiness") == wire.SERVING  # ready after the first scrape, even with one endpoint down
    s.wait_metric("epp_endpoint_scrape_errors_total", lambda v: v is not None and v >= 3, endpoint=dead)
    m = s.metrics()
    for a in live:
        assert m[("epp_endpoint_scrape_errors_total", (("endpoint", a),))] == 0
        assert m[("epp_endpoint_waiting_queue_size", (("endpoint", a),))] == 0
        assert m[("epp_endpoint_metrics_age_seconds", (("endpoint", a),))] < 5
    assert ("epp_endpoint_metrics_age_seconds", (("endpoint", dead),)) not in m
    assert m[("epp_endpoint_metrics_fresh", (("endpoint", dead),))] == 0
    # Picks never wait for scrapes; a failing endpoint stays a candidate with unknown metrics.
    ch = s.channel()
    for i in range(5):
        first, _ = pick(ch, chat_body("q%d" % i))
        assert destination(first) in live + [dead]
    first, _ = pick(ch, chat_body("to the dead one"), md=wire.subset_metadata([dead]))
    assert destination(first) == dead
    # ... but a sheddable request over stale metrics only is shed (stale counts as saturated).
    first, _ = pick(ch, chat_body(), md=wire.subset_metadata([dead]),
                    extra_headers=[("x-gateway-inference-objective", "low")])
    assert first["immediate"]["status"] == 429
    # The failure is logged once, not on every scrape.
    assert s.log().count("endpoint %s: metrics cannot be read" % dead) == 1


def configmap_dir(root, version, endpoints):
    """Kubernetes' ConfigMap volume layout: endpoints.yaml -> ..data/endpoints.yaml, ..data -> ..<version>."""
    root.mkdir(exist_ok=True)
    target = root / ("..%s" % version)
    if isinstance(endpoints, str):
        target.mkdir()
        (target / "endpoints.yaml").write_text(endpoints)
    else:
        write_pool(target, endpoints)
    tmp_link = root / "..data_tmp"
    os.symlink(target.name, tmp_link)
    os.replace(tmp_link, root / "..data")  # the atomic swap the kubelet does
    link = root / "endpoints.yaml"
    if not link.is_symlink():
        os.symlink("..data/endpoints.yaml", link)
    return link


def test_endpoints_file_reload_configmap_swap(serve, tmp_path):
    cm = tmp_path / "cm"
    path = configmap_dir(cm, "v1", [(POOL[0], 1, 1, 0.1), (POOL[1], 2, 2, 0.2)])
    s = serve("--endpoints", path, "--refresh-metrics-interval", "20ms")
    assert s.metric("epp_endpoints") == 2
    first, _ = pick(s.channel(), chat_body(), md=wire.subset_metadata([POOL[0]]))
    assert destination(first) == POOL[0]

    # Swap: POOL[0] leaves, POOL[2] joins.
    configmap_dir(cm, "v2", [(POOL[1], 2, 2, 0.2), (POOL[2], 7, 3, 0.3)])
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 7, endpoint=POOL[2])
    m = s.metrics()
    assert ("epp_endpoint_waiting_queue_size", (("endpoint", POOL[0]),)) not in m
    assert m[("epp_endpoints", ())] == 2
    assert m[("epp_endpoints_reloads_total", (("result", "ok"),))] == 1
    first, _ = pick(s.channel(), chat_body(), md=wire.subset_metadata([POOL[2]]))
    assert destination(first) == POOL[2]
    first, _ = pick(s.channel(), chat_body(), md=wire.subset_metadata([POOL[0]]))
    assert first["immediate"]["status"] == 503  # gone from the pool
    assert "removed: %s" % POOL[0] in s.log()

    # A bad file keeps the set in use and is logged once.
    configmap_dir(cm, "v3", "endpoints:\n  - address: not an address\n")
    s.wait_metric("epp_endpoints_reloads_total", lambda v: v == 1, result="error")
    time.sleep(0.2)
    assert s.metric("epp_endpoints_reloads_total", result="error") == 1
    assert s.metric("epp_endpoints") == 2
    first, _ = pick(s.channel(), chat_body(), md=wire.subset_metadata([POOL[2]]))
    assert destination(first) == POOL[2]
    assert s.log().count("not loaded") == 1

    # Fixed again.
    configmap_dir(cm, "v4", [(POOL[0], 4, 4, 0.4)])
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 4, endpoint=POOL[0])
    assert s.metric("epp_endpoints") == 1


def test_endpoints_file_rewritten_in_place(serve, tmp_path):
    path = write_pool(tmp_path / "p", [(POOL[0], 1, 1, 0.1)])
    s = serve("--endpoints", path, "--endpoint", "10.0.0.9:8000=none", "--refresh-metrics-interval", "20ms")
    assert s.metric("epp_endpoints") == 2
    write_pool(tmp_path / "p", [(POOL[0], 1, 1, 0.1), (POOL[1], 6, 1, 0.1)])  # open(..., "w") + write
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 6, endpoint=POOL[1])
    assert s.metric("epp_endpoints") == 3  # the --endpoint flag stays
    # A metrics file changing (not the endpoints file) shows on the next scrape.
    (tmp_path / ("metrics-%s.prom" % POOL[1].replace(":", "_").replace(".", "_"))).write_text(vllm_metrics(9, 1, 0.1))
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v == 9, endpoint=POOL[1])


def test_empty_endpoints_file_starts_ready_and_answers_503_until_endpoints_appear(serve, tmp_path):
    # As the reference EPP with a pool whose Pods are not Ready yet: start, be ready, answer 503.
    path = tmp_path / "p" / "endpoints.yaml"
    path.parent.mkdir()
    path.write_text("endpoints: []\n")
    s = serve("--endpoints", path, "--refresh-metrics-interval", "20ms")
    assert "lists no endpoints yet" in s.log()
    assert s.health("readiness") == wire.SERVING
    assert s.metric("epp_endpoints") == 0
    first, _ = pick(s.channel(), chat_body())
    assert first["kind"] == "immediate_response"
    assert first["immediate"]["status"] == 503
    write_pool(tmp_path / "p", [(POOL[1], 0, 0, 0.1)])
    s.wait_metric("epp_endpoints", lambda v: v == 1)
    first, _ = pick(s.channel(), chat_body())
    assert destination(first) == POOL[1]
    # And back to none: the pool empties (503 again) rather than keeping departed endpoints.
    path.write_text("endpoints: []\n")
    s.wait_metric("epp_endpoints", lambda v: v == 0)
    first, _ = pick(s.channel(), chat_body())
    assert first["immediate"]["status"] == 503


def zone_config(zone):
    return ("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
            "- name: zone\n  type: label-selector-filter\n  parameters:\n    matchLabels: {zone: %s}\n"
            "- type: queue-scorer\n- type: prefix-cache-scorer\n"
            "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: zone\n  - pluginRef: queue-scorer\n"
            "  - pluginRef: prefix-cache-scorer\n" % zone)


def replace_file(path, text):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # a new inode, as a ConfigMap swap


def test_config_file_change_is_picked_up_without_dropping_a_stream(serve, tmp_path):
    # Endpoints in zones a and b; the config keeps one zone. A stream opened before the config
    # changes is answered by the scheduler it started with; new streams use the new config; a
    # config that does not build keeps the running one and shows on /metrics.
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n"
                         "  - {address: %s, metrics: none, labels: {zone: a}}\n"
                         "  - {address: %s, metrics: none, labels: {zone: b}}\n" % (POOL[0], POOL[1]))
    config = tmp_path / "config.yaml"
    config.write_text(zone_config("a"))
    s = serve("--config", config, "--endpoints", endpoints, "--refresh-metrics-interval", "20ms")
    assert "config %s (watched)" % config in s.log()
    first, _ = pick(s.channel(), chat_body())
    assert destination(first) == POOL[0]

    body = chat_body()
    with Stream(s.channel()) as open_stream:
        open_stream.send(wire.chat_request(body), wire.request_body(body[:10], end_of_stream=False))
        replace_file(config, zone_config("b"))
        s.wait_metric("epp_config_reloads_total", lambda v: v == 1, result="ok")
        assert "reloaded: new streams use it" in s.log()
        first, _ = pick(s.channel(), chat_body())
        assert destination(first) == POOL[1], "a new stream uses the new config"
        open_stream.send(wire.request_body(body[10:], end_of_stream=True))
        answered = open_stream.recv()
        assert destination(answered) == POOL[0], "the open stream finishes on the scheduler it started with"

    replace_file(config, "kind: [")
    s.wait_metric("epp_config_reloads_total", lambda v: v == 1, result="error")
    samples = s.metrics()
    errors = [labels for (name, labels), v in samples.items() if name == "epp_config_reload_error" and v == 1]
    assert len(errors) == 1 and str(config) in dict(errors[0])["error"], errors
    first, _ = pick(s.channel(), chat_body())
    assert destination(first) == POOL[1], "a config that does not load keeps the running scheduler"
    assert "not reloaded" in s.log()
    replace_file(config, zone_config("a"))
    s.wait_metric("epp_config_reloads_total", lambda v: v == 2, result="ok")
    assert not [k for k in s.metrics() if k[0] == "epp_config_reload_error"]
    assert destination(pick(s.channel(), chat_body())[0]) == POOL[0]


# ---------------------------------------------------------------------------------------------
# Lifecycle


def test_stream_time_limits_end_silent_streams(serve, pool):
    s = serve("--endpoints", pool, "--stream-request-timeout", "300ms", "--stream-idle-timeout", "400ms")
    body = chat_body()
    # Headers and never a body: ended by the request-phase limit.
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(body))
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            st.recv()
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "request timeout (300 ms)" in err.value.details()
        assert 0.25 < time.monotonic() - t0 < 5
    # Picked, then no response path: ended by the idle limit, its load released.
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        assert destination(st.recv()) in POOL
        st.recv()  # the body
        s.wait_metric("epp_requests_in_flight", lambda v: v == 1)
        with pytest.raises(grpc.RpcError) as err:
            st.recv()
        assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "idle timeout (400 ms)" in err.value.details()
    s.wait_metric("epp_stream_timeouts_total", lambda v: v == 1, phase="request")
    s.wait_metric("epp_stream_timeouts_total", lambda v: v == 1, phase="idle")
    s.wait_metric("epp_requests_in_flight", lambda v: v == 0)
    s.wait_metric("epp_streams_active", lambda v: v == 0)
    # A whole exchange is untouched by either limit.
    first, _ = pick(s.channel(), body)
    assert destination(first) in POOL


def test_stream_timeout_flags_are_checked(eppctl, pool):
    r = eppctl("serve", "--endpoints", pool, "--stream-idle-timeout", "-1s")
    assert r.returncode == 2
    assert "--stream-idle-timeout" in r.stderr


def test_sigterm_drains_open_stream(serve, pool):
    s = serve("--endpoints", pool, "--drain-timeout", "20s")
    with Stream(s.channel()) as st:
        body = chat_body()
        st.send(wire.chat_request(body), wire.request_body(body[:10]))
        s.wait_metric("epp_streams_active", lambda v: v == 1)
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while s.health("readiness") != wire.NOT_SERVING:
            assert time.monotonic() < deadline, s.log()
            time.sleep(0.02)
        assert s.health("liveness") == wire.SERVING
        assert s.proc.poll() is None  # still draining: the stream is open
        st.send(wire.request_body(body[10:], end_of_stream=True))
        assert destination(st.recv()) in POOL
        assert body_of([st.recv()]) == body
        assert st.rest() == []
        assert st.call.code() == grpc.StatusCode.OK
    assert s.wait(timeout=20) == 0
    assert time.monotonic() - t0 < 20
    log = s.log()
    assert "received SIGTERM" in log and "stopped" in log
    assert not s.ready_file.exists()


def test_sigint_exits_0_and_drain_deadline_cuts_streams(serve, pool):
    s = serve("--endpoints", pool, "--drain-timeout", "300ms")
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(chat_body()))  # never finished by this client
        s.wait_metric("epp_streams_active", lambda v: v == 1)
        t0 = time.monotonic()
        s.signal(signal.SIGINT)
        assert s.wait(timeout=15) == 0
        assert time.monotonic() - t0 < 10
        with pytest.raises(grpc.RpcError):
            st.recv()
    assert "received SIGINT" in s.log()


def test_second_signal_exits_at_once(serve, pool):
    s = serve("--endpoints", pool, "--drain-timeout", "60s")
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(chat_body()))
        s.wait_metric("epp_streams_active", lambda v: v == 1)
        s.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "received SIGTERM:" not in s.log():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        t0 = time.monotonic()
        s.signal(signal.SIGTERM)
        assert s.wait(timeout=10) == 1
        assert time.monotonic() - t0 < 5
    assert "received SIGTERM again: exiting without waiting" in s.log()


def test_shutdown_delay_keeps_accepting_streams(serve, pool):
    s = serve("--endpoints", pool, "--shutdown-delay", "3s", "--drain-timeout", "5s")
    ch = s.channel()
    pick(ch, chat_body())  # the connection is up
    s.signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while s.health("readiness") != wire.NOT_SERVING:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    first, _ = pick(ch, chat_body())  # not ready, but still serving new streams during the delay
    assert destination(first) in POOL
    assert s.wait(timeout=20) == 0


def test_200_concurrent_streams(serve, pool):
    s = serve("--endpoints", pool)
    n = 200
    target = "127.0.0.1:%d" % s.grpc_port

    async def main():
        async with grpc.aio.insecure_channel(target) as ch:
            process = ch.stream_stream(wire.PROCESS_METHOD, request_serializer=_identity,
                                       response_deserializer=_identity)
            all_open, go = asyncio.Event(), asyncio.Event()
            opened = 0

            async def one(i):
                nonlocal opened
                body = chat_body("request number %d" % i)
                call = process(timeout=60)
                await call.write(wire.chat_request(body))
                await call.write(wire.request_body(body[:20]))
                opened += 1
                if opened == n:
                    all_open.set()
                await go.wait()  # every stream is open (and counted by the server) before any finishes
                await call.write(wire.request_body(body[20:], end_of_stream=True))
                first = wire.decode_response(await call.read())
                second = wire.decode_response(await call.read())
                await call.done_writing()
                assert await call.read() == grpc.aio.EOF
                assert await call.code() == grpc.StatusCode.OK
                return destination(first), body_of([second]) == body

            tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
            await asyncio.wait_for(all_open.wait(), 60)
            loop = asyncio.get_running_loop()
            try:
                active = await loop.run_in_executor(None, lambda: s.wait_metric("epp_streams_active", lambda v: v == n))
            finally:
                go.set()
            return active, await asyncio.wait_for(asyncio.gather(*tasks), 120)

    active, results = asyncio.run(main())
    assert active == n
    assert len(results) == n
    assert all(d in POOL and same for d, same in results)
    m = s.metrics()
    assert m[("epp_requests_total", (("outcome", "200"),))] == n
    assert m[("epp_streams_total", ())] == n


# ---------------------------------------------------------------------------------------------
# Flags and startup


def test_startup_errors_exit_2(eppctl, pool, tmp_path):
    ports = ["--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--secure-serving=false"]
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
                           "plugins:\n  - type: no-such-plugin\n")
    cases = [
        (["--endpoints", pool, "--config", bad_config], "no-such-plugin"),
        (["--endpoints", pool, "--config", tmp_path / "missing.yaml"], "missing.yaml"),
        ([], "no endpoints"),
        (["--endpoints", tmp_path / "nope.yaml"], "nope.yaml"),
        (["--endpoint", "10.0.0.1"], "port"),
        (["--endpoints", pool, "--refresh-metrics-interval", "soon"], "--refresh-metrics-interval"),
        (["--endpoints", pool, "--drain-timeout", "-1s"], "--drain-timeout"),
        (["--endpoints", pool, "--objective", "low"], "--objective"),
        (["--endpoints", pool, "--objective", "low=x"], "--objective"),
        (["--endpoints", pool, "--log-level", "loud"], "log-level"),
        (["--endpoints", pool, "--grpc-port", "70000"], "grpc-port"),
        # libepp's BuildServeConfig checks these for eppctl and pyepp alike (test_serve_runtime.py):
        # the same limits and messages, named by the flags here.
        (["--endpoints", pool, "--decision-log", "1000001"], "--decision-log: must be in [0, 1000000], got 1000001"),
        (["--endpoints", pool, "--pool-group", "example.com"], "--pool-group: example.com not in"),
        (["--pool-import", "imp"], "--pool-import needs --clusters FILE"),
        (["--endpoints", pool, "--stream-idle-timeout", "-1s"], "--stream-idle-timeout: expected a non-negative duration"),
    ]
    for args, needle in cases:
        r = eppctl("serve", *ports, *args, timeout=30)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert needle in r.stderr, (args, r.stderr)


def test_port_in_use_is_exit_1(eppctl, pool):
    for flag, needle in (("--grpc-port", "ext_proc"), ("--grpc-health-port", "health"), ("--metrics-port", "/metrics")):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            ports = {"--grpc-port": 0, "--grpc-health-port": 0, "--metrics-port": 0, flag: busy.getsockname()[1]}
            r = eppctl("serve", "--endpoints", pool, "--listen-address", "127.0.0.1", "--secure-serving=false",
                       *[x for kv in ports.items() for x in kv], timeout=30)
        assert r.returncode == 1, (flag, r.stderr)
        assert "cannot listen" in r.stderr and needle in r.stderr, (flag, r.stderr)


def test_startup_line_and_staleness_flag(serve, pool, tmp_path):
    s = serve("--endpoints", pool, "--metrics-staleness-threshold", "1s", "--log-level", "debug")
    line = [l for l in s.log().splitlines() if " serving: " in l][0]
    for part in ("ext_proc 127.0.0.1:%d (plaintext h2c)" % s.grpc_port, "health 127.0.0.1:%d" % s.health_port,
                 "/metrics", "3 endpoints from %s" % pool, "<default: GIE's default profile>"):
        assert part in line, (part, line)
    assert "--metrics-staleness-threshold=1s applied to the saturation detector" in s.log()

    shed = ROOT / "examples" / "configs" / "shed.yaml"
    s2 = serve("--endpoints", pool, "--config", shed, "--metrics-staleness-threshold", "1s")
    assert "keeps its own metricsStalenessThreshold" in s2.log()
    assert "config %s" % shed in s2.log()


def test_capture_dir(serve, pool, tmp_path):
    cap = tmp_path / "capture"
    s = serve("--endpoints", pool, "--capture", cap)
    pick(s.channel(), chat_body(), chunks=2)
    deadline = time.monotonic() + 10
    while True:
        files = list(cap.glob("*.jsonl"))
        lines = [json.loads(l) for f in files for l in f.read_text().splitlines()]
        if len(lines) >= 5:
            break
        assert time.monotonic() < deadline, lines
        time.sleep(0.05)
    assert [l["direction"] for l in lines] == ["request"] * 3 + ["response"] * 2
    assert "request_headers" in lines[0]["message"]


def test_capture_files_are_private_redacted_and_bounded(serve, pool, tmp_path):
    """--capture files are 0600, credential headers are redacted, and --capture-max-bytes bounds
    what all files together hold (issue #41)."""
    import stat
    cap = tmp_path / "capture"
    s = serve("--endpoints", pool, "--capture", cap, "--capture-max-bytes", "6000")
    secret = [("authorization", "Bearer sk-very-secret"), ("cookie", "session=abc123")]
    pick(s.channel(), chat_body("first"), extra_headers=secret)
    deadline = time.monotonic() + 10
    while not list(cap.glob("*.jsonl")) or "response" not in list(cap.glob("*.jsonl"))[0].read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    first = list(cap.glob("*.jsonl"))[0]
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    text = first.read_text()
    assert "sk-very-secret" not in text and "abc123" not in text
    assert "<redacted>" in text or "PHJlZGFjdGVkPg==" in text  # raw_value is bytes: base64 in JSON
    # A large body spends the rest of the budget: its file ends with a truncation line, and once
    # the budget is spent later streams are not captured at all.
    pick(s.channel(), chat_body("x" * 20000))
    s.wait_metric("epp_capture_truncated_total", lambda v: v == 1)
    pick(s.channel(), chat_body("after"))
    files = sorted(cap.glob("*.jsonl"))
    assert len(files) == 2
    assert sum(f.stat().st_size for f in files) <= 6000 + 200
    assert any('"truncated"' in f.read_text() for f in files)
    assert s.metric("epp_capture_bytes_total") <= 6000


def test_session_token_on_the_response_steers_the_next_stream(serve, pool, tmp_path):
    # llm-d's session-affinity-scorer: the response carries x-session-token (base64 of the endpoint
    # that served it); a request that sends it back goes there again, though its queue is not the
    # shortest.
    import base64
    config = tmp_path / "session.yaml"
    config.write_text("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                      "- type: session-affinity-scorer\n- type: queue-scorer\n- type: max-score-picker\n"
                      "schedulingProfiles:\n- name: default\n  plugins:\n"
                      "  - {pluginRef: session-affinity-scorer, weight: 10}\n  - {pluginRef: queue-scorer}\n"
                      "  - pluginRef: max-score-picker\n")
    s = serve("--config", config, "--endpoints", pool)
    body = chat_body()
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        dest = destination(st.recv())
        assert dest == POOL[1]  # the shortest queue
        st.recv()  # the body
        st.send(wire.response_headers([(":status", "200"), ("content-type", "application/json")]))
        rh = st.recv()
        assert rh["kind"] == "response_headers"
        token = wire.header(rh["common"], "x-session-token")
        assert base64.b64decode(token).decode() == POOL[1]
    forged = base64.b64encode(POOL[2].encode()).decode()
    for t, want in ((token, POOL[1]), (forged, POOL[2])):
        with Stream(s.channel()) as st:
            st.send(wire.chat_request(body, extra_headers=[("x-session-token", t)]),
                    wire.request_body(body, end_of_stream=True))
            assert destination(st.recv()) == want


def test_passthrough_parser_routes_bodies_it_does_not_read(serve, pool, tmp_path):
    # llm-d's passthrough-parser: alone, every request is routed without reading its body; after
    # openai-parser, only the paths the OpenAI parser does not claim.
    def config(parsers):
        path = tmp_path / ("pass-%d.yaml" % len(parsers))
        path.write_text("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                        + "".join("- type: %s\n" % p for p in parsers)
                        + "- type: queue-scorer\n- type: max-score-picker\nschedulingProfiles:\n- name: default\n"
                        "  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n"
                        "requestHandler:\n  parsers:\n" + "".join("  - pluginRef: %s\n" % p for p in parsers))
        return path

    triton = b"\x00\x01 binary tensor payload, not JSON"
    bad_json = b"{not json"
    for parsers, cases in ((["passthrough-parser"], [("/v2/models/m/infer", triton, True), ("/v1/chat/completions", bad_json, True)]),
                           (["openai-parser", "passthrough-parser"], [("/v2/models/m/infer", triton, True),
                                                                      ("/v1/chat/completions", bad_json, False)])):
        s = serve("--config", config(parsers), "--endpoints", pool)
        for path, body, routed in cases:
            with Stream(s.channel()) as st:
                st.send(wire.chat_request(body, path=path), wire.request_body(body, end_of_stream=True))
                first = st.recv()
                if routed:
                    assert destination(first) == POOL[1], (parsers, path)  # the shortest queue
                    assert body_of([st.recv()]) == body  # sent on unchanged
                else:
                    assert first["kind"] == "immediate_response" and first["immediate"]["status"] == 400, (parsers, path)
        s.close()


def test_request_attribute_reporter_puts_the_cost_in_the_last_body_message(serve, pool, tmp_path):
    # llm-d's integration config for the reporter: completion tokens as the request's cost in
    # envoy.lb, on the response's last body message; listed among the profile's plugins as there.
    config = tmp_path / "reporter.yaml"
    config.write_text("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                      "- type: openai-parser\n- type: queue-scorer\n- name: cost\n  type: request-attribute-reporter\n"
                      "  parameters:\n    attributes:\n    - key: {namespace: envoy.lb, name: x-gateway-inference-request-cost}\n"
                      "      expression: usage.completion_tokens\n      condition: has(usage.completion_tokens)\n"
                      "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: cost\n"
                      "requestHandler:\n  parsers:\n  - pluginRef: openai-parser\n")
    s = serve("--config", config, "--endpoints", pool)
    body = chat_body()
    answer = json.dumps({"id": "c1", "object": "chat.completion", "model": MODEL, "choices": [],
                         "usage": {"completion_tokens": 10, "prompt_tokens": 32, "total_tokens": 42}}).encode()
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        destination(st.recv())
        st.recv()
        st.send(wire.response_headers([(":status", "200"), ("content-type", "application/json")]))
        st.recv()
        st.send(wire.response_body(answer[:20]), wire.response_body(answer[20:], end_of_stream=True))
        first, last = st.recv_n(2)
        assert first["dynamic_metadata"] is None
        assert last["dynamic_metadata"]["envoy.lb"]["x-gateway-inference-request-cost"] == 10


def test_fairness_id_headers_reach_the_decision_log(serve, pool):
    # llm-d's x-llm-d-inference-fairness-id names the request's tenant; the old
    # x-gateway-inference-fairness-id is read when the new one is absent.
    s = serve("--endpoints", pool, "--decision-log", "100", "--decision-log-rate", "1000")
    ch = s.channel()
    cases = [([("x-llm-d-inference-fairness-id", "team-a")], "team-a"),
             ([("x-gateway-inference-fairness-id", "team-b")], "team-b"),
             ([("x-gateway-inference-fairness-id", "old"), ("x-llm-d-inference-fairness-id", "new")], "new"),
             ([], "")]
    for i, (headers, _) in enumerate(cases):
        first, _ = pick(ch, chat_body("f%d" % i), extra_headers=headers)
        assert destination(first) in POOL
    _, listing = s.http("/debug/decisions?limit=%d" % len(cases))
    got = [d["fairness_id"] for d in json.loads(listing)["decisions"]]
    assert sorted(got) == sorted(want for _, want in cases), got
