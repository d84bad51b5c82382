"""`eppctl serve --tracing`: OpenTelemetry spans of real ext_proc requests reach a loopback OTLP
receiver over each protocol (OTLP/HTTP with JSON, OTLP/HTTP with protobuf, OTLP/gRPC), configured
only by the standard OTEL_* variables.

Each test starts one `eppctl serve` over a file pool (no model server needed: metrics are files),
sends one or two requests with a W3C traceparent through real gRPC, and reads what the receiver
got: the service name and resource attributes, gateway.request continuing the caller's trace,
the scheduling spans with one span per scorer carrying llm-d's attributes, and the traceparent
sent upstream. Bounded: a few requests, every wait a few seconds.
"""
import http.server
import json
import struct
import threading
import time

import pytest

grpc = pytest.importorskip("grpc")

import extproc_wire as wire  # noqa: E402
from test_eppctl_serve import Serve, Stream, chat_body, destination, write_pool  # noqa: E402
from conftest import _eppctl_path  # noqa: E402

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"

CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: max-score-picker
"""

SCORERS = {"queue-scorer": 2.0, "kv-cache-utilization-scorer": 1.0}


class HttpReceiver:
    """A loopback OTLP/HTTP receiver: POST /v1/traces bodies with their content type."""

    def __init__(self):
        self.posts = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.lock:
                    outer.posts.append((self.path, self.headers.get("Content-Type"), self.headers.get("x-api-key"), body))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# ---- OTLP decoding (JSON as the spec writes it; protobuf by field number) -------------------

def any_value_json(v):
    if "stringValue" in v:
        return v["stringValue"]
    if "intValue" in v:
        return int(v["intValue"])
    if "doubleValue" in v:
        return float(v["doubleValue"])
    if "boolValue" in v:
        return v["boolValue"]
    if "arrayValue" in v:
        return [any_value_json(x) for x in v["arrayValue"].get("values", [])]
    raise AssertionError("unknown AnyValue %r" % v)


def spans_from_json(body):
    """(resource attributes, [span dicts]) of one ExportTraceServiceRequest in OTLP/JSON."""
    req = json.loads(body)
    resource, spans = {}, []
    for rs in req["resourceSpans"]:
        resource.update({a["key"]: any_value_json(a["value"]) for a in rs["resource"]["attributes"]})
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                spans.append({"name": s["name"], "trace_id": s["traceId"], "span_id": s["spanId"],
                              "parent": s.get("parentSpanId", ""), "kind": s["kind"],
                              "start": int(s["startTimeUnixNano"]), "end": int(s["endTimeUnixNano"]),
                              "attributes": {a["key"]: any_value_json(a["value"]) for a in s["attributes"]},
                              "scope": ss["scope"]["name"]})
    return resource, spans


def any_value_pb(buf):
    f = wire.fields(buf, known={1, 2, 3, 4, 5, 6, 7}, what="AnyValue")
    if 1 in f:
        return f[1][0].decode()
    if 2 in f:
        return bool(f[2][0])
    if 3 in f:
        v = f[3][0]
        return v - (1 << 64) if v >= 1 << 63 else v
    if 4 in f:
        return struct.unpack("<d", f[4][0])[0]
    if 5 in f:
        return [any_value_pb(x) for x in wire.fields(f[5][0], known={1}, what="ArrayValue").get(1, [])]
    raise AssertionError("empty AnyValue")


def key_values_pb(bufs):
    out = {}
    for kv in bufs:
        f = wire.fields(kv, known={1, 2}, what="KeyValue")
        out[f[1][0].decode()] = any_value_pb(f[2][0])
    return out


def spans_from_protobuf(body):
    """As spans_from_json, read with OTLP's field numbers (an unknown number fails)."""
    resource, spans = {}, []
    req = wire.fields(body, known={1}, what="ExportTraceServiceRequest")
    for rs_buf in req.get(1, []):
        rs = wire.fields(rs_buf, known={1, 2, 3}, what="ResourceSpans")
        resource.update(key_values_pb(wire.fields(rs[1][0], known={1, 2}, what="Resource").get(1, [])))
        for ss_buf in rs.get(2, []):
            ss = wire.fields(ss_buf, known={1, 2, 3}, what="ScopeSpans")
            scope = wire.fields(ss[1][0], known={1, 2, 3, 4}, what="InstrumentationScope")[1][0].decode()
            for sp_buf in ss.get(2, []):
                sp = wire.fields(sp_buf, known={1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, what="Span")
                spans.append({"name": sp[5][0].decode(), "trace_id": sp[1][0].hex(), "span_id": sp[2][0].hex(),
                              "parent": sp[4][0].hex() if 4 in sp else "", "kind": sp[6][0],
                              "start": struct.unpack("<Q", sp[7][0])[0], "end": struct.unpack("<Q", sp[8][0])[0],
                              "attributes": key_values_pb(sp.get(9, [])), "scope": scope})
    return resource, spans


# ---- The requests -----------------------------------------------------------------------------

def one_request(ch, traceparent, content="hello"):
    """One chat request with `traceparent` and a short streamed response; returns the destination
    and the traceparent sent upstream."""
    body = chat_body(content, stream=True)
    with Stream(ch, timeout=20) as s:
        s.send(wire.chat_request(body, extra_headers=[("traceparent", traceparent), ("x-request-id", "rid-" + content)]),
               wire.request_body(body, end_of_stream=True))
        first = s.recv()
        where = destination(first)
        upstream = wire.header(first["common"], "traceparent")
        while not s.recv()["common"]["body_mutation"]["streamed_response"]["end_of_stream"]:
            pass
        s.send(wire.response_headers([(":status", "200"), ("content-type", "text/event-stream")]))
        s.recv()
        for part, eos in ((b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', False), (b"data: [DONE]\n\n", True)):
            s.send(wire.response_body(part, end_of_stream=eos))
            s.recv()
    return where, upstream


def start_serve(tmp_path, env):
    pool = write_pool(tmp_path / "pool", [("10.0.0.1:8000", 0, 1, 0.1), ("10.0.0.2:8000", 5, 1, 0.8)])
    cfg = tmp_path / "config.yaml"
    cfg.write_text(CONFIG)
    base = {"OTEL_SERVICE_NAME": "epp-under-test", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=loopback",
            "OTEL_TRACES_SAMPLER": "parentbased_always_on", "OTEL_BSP_SCHEDULE_DELAY": "100"}
    return Serve(_eppctl_path(), tmp_path, ["--endpoints", pool, "--config-file", cfg], env={**base, **env})


def wait_spans(decode, get_bodies, want, timeout=10):
    """Spans decoded from the receiver's bodies until `want(spans)` holds."""
    deadline = time.monotonic() + timeout
    while True:
        resource, spans = {}, []
        for body in get_bodies():
            r, s = decode(body)
            resource.update(r)
            spans += s
        if want(spans) or time.monotonic() > deadline:
            return resource, spans
        time.sleep(0.05)


def check_trace(resource, spans, upstream):
    assert resource["service.name"] == "epp-under-test"
    assert resource["deployment.environment"] == "loopback"
    mine = [s for s in spans if s["trace_id"] == TRACE_ID]
    by_name = {}
    for s in mine:
        by_name.setdefault(s["name"], []).append(s)
    root = by_name["gateway.request"][0]
    assert root["parent"] == PARENT, "gateway.request continues the caller's span"
    assert root["kind"] == 2  # SERVER
    assert root["attributes"]["gen_ai.request.model"]
    assert root["attributes"]["llm_d.epp.destination_endpoint"] == "10.0.0.1:8000"
    assert root["attributes"]["http.response.status_code"] == 200
    # The upstream request names gateway.request as its parent, in the same trace, sampled.
    assert upstream == "00-%s-%s-01" % (TRACE_ID, root["span_id"]), upstream
    sched = by_name["llm_d.epp.scheduling"][0]
    assert sched["parent"] == root["span_id"]
    profile = by_name["run_scheduler_profile"][0]
    assert profile["attributes"]["llm_d.epp.scheduling.profile.name"] == "default"
    scoring = by_name["llm_d.epp.scoring"][0]
    assert scoring["parent"] == profile["span_id"]
    assert scoring["attributes"]["llm_d.epp.scorer.count"] == len(SCORERS)
    for scorer, weight in SCORERS.items():
        [sp] = by_name["llm_d.epp.scorer." + scorer]
        assert sp["parent"] == scoring["span_id"]
        a = sp["attributes"]
        assert a["llm_d.epp.scorer.type"] == scorer
        assert a["llm_d.epp.scorer.weight"] == weight
        assert a["llm_d.epp.scorer.candidate_endpoints"] == 2
        assert a["llm_d.epp.scorer.top_endpoints"][0] == "10.0.0.1:8000"
        assert a["llm_d.epp.scorer.score.max"] == max(a["llm_d.epp.scorer.top_scores"])
        assert root["start"] <= sp["start"] <= sp["end"] <= root["end"]
    pick = by_name["pick_endpoints"][0]
    assert pick["attributes"]["llm_d.epp.picker.picked_endpoints"] == ["10.0.0.1:8000"]
    assert pick["attributes"]["gen_ai.request.id"] == "rid-hello"
    assert "gateway.response" in by_name


@pytest.mark.parametrize("protocol", ["http/json", "http/protobuf"])
def test_serve_tracing_sends_spans_over_otlp_http(tmp_path, protocol):
    rx = HttpReceiver()
    s = None
    try:
        s = start_serve(tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:%d" % rx.port,
                                   "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
                                   "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=secret%201"})
        assert "tracing: otlp %s to http://127.0.0.1:%d/v1/traces" % (protocol, rx.port) in s.log()
        ch = s.channel()
        where, upstream = one_request(ch, "00-%s-%s-01" % (TRACE_ID, PARENT))
        assert where == "10.0.0.1:8000"
        # An unsampled caller: the decision is followed, nothing is exported for it.
        _, upstream_off = one_request(ch, "00-%s-%s-00" % ("1" * 32, PARENT), content="quiet")
        assert upstream_off.startswith("00-" + "1" * 32) and upstream_off.endswith("-00")
        decode = spans_from_json if protocol == "http/json" else spans_from_protobuf

        def bodies():
            with rx.lock:
                return [p[3] for p in rx.posts]

        resource, spans = wait_spans(decode, bodies, lambda sp: any(x["name"] == "gateway.request" for x in sp))
        with rx.lock:
            path, ctype, key, _ = rx.posts[0]
        assert path == "/v1/traces"
        assert ctype == ("application/json" if protocol == "http/json" else "application/x-protobuf")
        assert key == "secret 1"
        check_trace(resource, spans, upstream)
        assert not [x for x in spans if x["trace_id"] == "1" * 32], "the unsampled request was exported"
        assert s.wait_metric("epp_tracing_spans_exported_total", lambda v: v is not None and v >= len(spans)) >= len(spans)
        assert s.metric("epp_tracing_traces_sampled_total") == 1
    finally:
        if s:
            s.close()
        rx.close()


def test_serve_tracing_sends_spans_over_otlp_grpc(tmp_path):
    """OTLP/gRPC, the protocol llm-d's exporter speaks: a grpcio server answers
    opentelemetry.proto.collector.trace.v1.TraceService/Export."""
    from concurrent import futures
    got, lock = [], threading.Lock()

    def export(request, context):
        with lock:
            got.append((request, dict(context.invocation_metadata())))
        return b""  # an empty ExportTraceServiceResponse

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "opentelemetry.proto.collector.trace.v1.TraceService",
        {"Export": grpc.unary_unary_rpc_method_handler(export, request_deserializer=None, response_serializer=None)})])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    s = None
    try:
        s = start_serve(tmp_path, {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:%d" % port,
                                   "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=k"})
        _, upstream = one_request(s.channel(), "00-%s-%s-01" % (TRACE_ID, PARENT))

        def bodies():
            with lock:
                return [g[0] for g in got]

        resource, spans = wait_spans(spans_from_protobuf, bodies, lambda sp: any(x["name"] == "gateway.request" for x in sp))
        check_trace(resource, spans, upstream)
        with lock:
            assert got[0][1].get("x-api-key") == "k"
    finally:
        if s:
            s.close()
        server.stop(0)


def test_serve_tracing_errors_and_notices(tmp_path):
    import os
    import subprocess
    # A malformed variable stops serve at start, naming it.
    pool = write_pool(tmp_path / "pool", [("10.0.0.1:8000", 0, 1, 0.1)])
    r = subprocess.run([_eppctl_path(), "serve", "--endpoints", str(pool), "--grpc-port", "0", "--metrics-port", "0",
                        "--grpc-health-port", "0", "--secure-serving=false"],
                       env={**os.environ, "OTEL_TRACES_SAMPLER": "sometimes",
                            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "OTEL_TRACES_SAMPLER: 'sometimes'" in r.stderr, r.stderr
    # --tracing given with no exporter: a notice says nothing is sent; --tracing=false reads nothing.
    s = Serve(_eppctl_path(), tmp_path, ["--endpoints", pool, "--tracing"], env={"OTEL_TRACES_EXPORTER": "none"})
    try:
        assert "no trace exporter is configured" in s.log()
    finally:
        s.close()
    s = Serve(_eppctl_path(), tmp_path, ["--endpoints", pool, "--tracing=false"], env={"OTEL_TRACES_SAMPLER": "sometimes"})
    try:
        assert "tracing: " not in s.log() and "trace exporter" not in s.log()
        assert s.metric("epp_tracing_spans_exported_total") is None
    finally:
        s.close()
