"""pyepp.extproc: message streams from captures, protobuf JSON, Session, and pyepp.serve driven by
grpcio over loopback.

The protocol itself (session state machine, wire encoding, server) is tested in C++
(tests/cpp/extproc) and against eppctl serve (tests/cli/test_eppctl_serve.py); these tests check
that it crosses the binding intact: bytes in and out, decisions, errors, TLS, health, threads,
lifetimes. The gRPC client is Debian's python3-grpcio through a generic stream with identity
serializers, so no generated code is involved.
"""

from __future__ import annotations

import base64
import json
import queue
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

import pyepp
from pyepp import extproc

grpc = pytest.importorskip("grpc")

PROCESS = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING, NOT_SERVING = 1, 2
TIMEOUT = 20  # seconds: bounds every RPC
# Every channel gets its own subchannels. grpcio otherwise shares them between channels to one
# target, and an RPC on a new channel to a server that closed while an older channel to it was
# still open can then wait past its deadline (seen with grpcio 1.51).
LOCAL = [("grpc.use_local_subchannel_pool", 1)]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = ["127.0.0.1:8000", "127.0.0.2:8000", "127.0.0.3:8000"]
IDLE = {"waiting_queue_size": 0, "running_requests": 1, "kv_cache_usage": 0.1}


def _identity(b: bytes) -> bytes:
    return b


def endpoints(addresses: List[str] = POOL) -> List[pyepp.Endpoint]:
    return [pyepp.Endpoint(a, IDLE) for a in addresses]


def chat_capture(text: str = "Which endpoint will serve me?", **extra: Any) -> Dict[str, Any]:
    return {"path": "/v1/chat/completions", "headers": {"x-request-id": "r1", "content-type": "application/json"},
            "body": {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}}


def body_bytes(message: Dict[str, Any]) -> bytes:
    """The body a decoded request/response body message carries."""
    return base64.b64decode(message.get("body", ""))


def destination(first: Dict[str, Any]) -> str:
    """The picked endpoint of a headers response; checks the header and metadata agree."""
    common = first["request_headers"]["response"]
    assert common["clear_route_cache"] is True
    header = extproc.header_value(common["header_mutation"], "x-gateway-destination-endpoint")
    metadata = first["dynamic_metadata"]["envoy.lb"]["x-gateway-destination-endpoint"]
    assert header == metadata, first
    return header


def streamed_body(responses: List[Dict[str, Any]]) -> bytes:
    chunks = [r["request_body"]["response"]["body_mutation"]["streamed_response"] for r in responses]
    assert [c.get("end_of_stream", False) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    return b"".join(body_bytes(c) for c in chunks)


def immediate(response: Dict[str, Any]) -> Tuple[int, str]:
    """(HTTP status, body text) of an ImmediateResponse."""
    im = response["immediate_response"]
    return {"BadRequest": 400, "PayloadTooLarge": 413, "TooManyRequests": 429,
            "ServiceUnavailable": 503}[im["status"]["code"]], body_bytes(im).decode()


def process(channel: Any, messages: List[bytes]) -> List[Dict[str, Any]]:
    """One whole stream: sends `messages`, half-closes, returns every decoded response."""
    call = channel.stream_stream(PROCESS, request_serializer=_identity, response_deserializer=_identity)
    return [extproc.decode_response(b) for b in call(iter(messages), timeout=TIMEOUT)]


@pytest.fixture
def served() -> Iterator[Any]:
    """Starts pyepp.serve(...) handles and loopback channels, closed after the test."""
    handles: List[pyepp.ServeHandle] = []
    channels: List[Any] = []

    class Served:
        def start(self, scheduler: Optional[pyepp.Scheduler] = None, pool: Optional[List[pyepp.Endpoint]] = None,
                  **kwargs: Any) -> pyepp.ServeHandle:
            handle = pyepp.serve(scheduler or pyepp.Scheduler.default(seed=1), endpoints() if pool is None else pool,
                                 **kwargs)
            handles.append(handle)
            return handle

        def channel(self, port: int, credentials: Any = None, options: Any = None) -> Any:
            target = f"127.0.0.1:{port}"
            options = LOCAL + list(options or [])
            ch = grpc.secure_channel(target, credentials, options=options) if credentials else \
                grpc.insecure_channel(target, options=options)
            channels.append(ch)
            return ch

    yield Served()
    for ch in channels:
        ch.close()
    for h in handles:
        h.close()


# --- messages ----------------------------------------------------------------------------------


def test_requests_from_capture_chunks_and_path(tmp_path: Path) -> None:
    capture = chat_capture("x" * 300)
    body = json.dumps(capture["body"], separators=(",", ":")).encode()
    messages = extproc.requests_from_capture(capture, chunk_bytes=64)
    assert all(isinstance(m, bytes) for m in messages)
    decoded = [extproc.decode_request(m) for m in messages]
    headers = decoded[0]["request_headers"]
    assert not headers.get("end_of_stream", False)
    pairs = [(h["key"], base64.b64decode(h["raw_value"]).decode()) for h in headers["headers"]["headers"]]
    assert pairs[:2] == [(":method", "POST"), (":path", "/v1/chat/completions")]
    assert ("x-request-id", "r1") in pairs
    bodies = [d["request_body"] for d in decoded[1:]]
    assert len(bodies) == -(-len(body) // 64)
    assert b"".join(body_bytes(b) for b in bodies) == body
    assert [b.get("end_of_stream", False) for b in bodies] == [False] * (len(bodies) - 1) + [True]
    assert all("metadata_context" not in d for d in decoded)

    # The same capture from a file and from JSON text; a bare body with its own path.
    path = tmp_path / "capture.json"
    path.write_text(json.dumps(capture), encoding="utf-8")
    assert extproc.requests_from_capture(path, chunk_bytes=64) == messages
    assert extproc.requests_from_capture(str(path), chunk_bytes=64) == messages
    assert extproc.requests_from_capture(json.dumps(capture), chunk_bytes=64) == messages
    bare = extproc.requests_from_capture({"path": "/v1/completions", "model": MODEL, "prompt": "hi"})
    assert len(bare) == 2
    first = extproc.decode_request(bare[0])["request_headers"]["headers"]["headers"]
    assert base64.b64decode(first[1]["raw_value"]) == b"/v1/completions"
    # Path from the headers, and the override.
    env = {"headers": {":path": "/v1/chat/completions"}, "body": capture["body"]}
    first = extproc.decode_request(extproc.requests_from_capture(env)[0])["request_headers"]["headers"]["headers"]
    assert [h["key"] for h in first].count(":path") == 1
    assert base64.b64decode(first[1]["raw_value"]) == b"/v1/chat/completions"
    over = extproc.requests_from_capture(env, path="/v1/responses")
    first = extproc.decode_request(over[0])["request_headers"]["headers"]["headers"]
    assert base64.b64decode(first[1]["raw_value"]) == b"/v1/responses"


def test_requests_from_capture_subset_forms_and_empty_body() -> None:
    listed = [extproc.decode_request(m) for m in extproc.requests_from_capture(chat_capture(), subset=POOL[:2])]
    joined = [extproc.decode_request(m) for m in
              extproc.requests_from_capture(chat_capture(), subset=POOL[:2], subset_as_string=True)]
    for d in listed:
        assert d["metadata_context"]["filter_metadata"]["envoy.lb.subset_hint"][
            "x-gateway-destination-endpoint-subset"] == POOL[:2]
    for d in joined:
        assert d["metadata_context"]["filter_metadata"]["envoy.lb.subset_hint"][
            "x-gateway-destination-endpoint-subset"] == ",".join(POOL[:2])
    empty = extproc.requests_from_capture({"headers": {}, "body": ""}, subset=[])
    assert len(empty) == 1 and extproc.decode_request(empty[0])["request_headers"]["end_of_stream"] is True


def test_requests_from_capture_errors(tmp_path: Path) -> None:
    with pytest.raises(pyepp.NotFoundError, match="cannot read capture"):
        extproc.requests_from_capture(tmp_path / "missing.json")
    with pytest.raises(pyepp.ConfigError, match="invalid JSON"):
        extproc.requests_from_capture("{not json")
    with pytest.raises(pyepp.ConfigError, match="chunk_bytes"):
        extproc.requests_from_capture(chat_capture(), chunk_bytes=-1)
    with pytest.raises(TypeError):
        extproc.requests_from_capture(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        extproc.requests_from_capture(chat_capture(), subset=[1])  # type: ignore[list-item]


def test_encode_decode_round_trip_and_errors() -> None:
    messages = extproc.requests_from_capture(chat_capture(), subset=["10.0.0.1"], chunk_bytes=10)
    for m in messages:
        assert extproc.encode_request(extproc.decode_request(m)) == m
    built = extproc.encode_request({"request_body": {"body": base64.b64encode(b"{}").decode(), "end_of_stream": True}})
    assert extproc.decode_request(built)["request_body"] == {"body": "e30=", "end_of_stream": True}
    with pytest.raises(pyepp.ConfigError, match="ProcessingRequest"):
        extproc.encode_request({"request_body": {"end_of_stream": "maybe"}})
    with pytest.raises(pyepp.ConfigError, match="not a serialized"):
        extproc.decode_request(b"\xff\xff\xff")
    with pytest.raises(pyepp.ConfigError, match="not a serialized"):
        extproc.decode_response(b"\x0a\x05ab")
    with pytest.raises(TypeError):
        extproc.decode_response("text")  # type: ignore[arg-type]


def test_response_messages() -> None:
    msgs = extproc.response_messages(200, {"content-type": "application/json"}, '{"usage": {}}',
                                     served_endpoint=POOL[1])
    assert len(msgs) == 2
    headers = extproc.decode_request(msgs[0])
    keys = [(h["key"], base64.b64decode(h["raw_value"]).decode())
            for h in headers["response_headers"]["headers"]["headers"]]
    assert keys == [(":status", "200"), ("content-type", "application/json")]
    assert headers["metadata_context"]["filter_metadata"]["envoy.lb"][
        "x-gateway-destination-endpoint-served"] == POOL[1]
    assert body_bytes(extproc.decode_request(msgs[1])["response_body"]) == b'{"usage": {}}'
    only = extproc.response_messages(204, [("x-a", "1"), ("x-a", "2")])
    assert len(only) == 1 and extproc.decode_request(only[0])["response_headers"]["end_of_stream"] is True


# --- Session -----------------------------------------------------------------------------------


def test_session_without_a_server() -> None:
    scheduler = pyepp.Scheduler.default(seed=3)
    session = extproc.Session(scheduler, endpoints())
    assert session.result is None and not session.finished
    capture = chat_capture("hello " * 40)
    messages = extproc.requests_from_capture(capture, chunk_bytes=50)
    out: List[bytes] = []
    for m in messages[:-1]:
        assert session.send(m) == []  # the headers response waits for the whole body
    out = session.send(messages[-1])
    decoded = [extproc.decode_response(b) for b in out]
    picked = destination(decoded[0])
    assert streamed_body(decoded[1:]) == json.dumps(capture["body"], separators=(",", ":")).encode()
    result = session.result
    assert result is not None and result.status == 200 and result.endpoint == picked
    assert result.request is not None and result.request.model == MODEL
    assert not session.finished
    assert scheduler.inflight(picked)[0] == 1

    # The response path is echoed; its end releases the load.
    usage = json.dumps({"usage": {"prompt_tokens": 7, "completion_tokens": 2}})
    echoed = []
    for m in extproc.response_messages(200, {"content-type": "application/json"}, usage, served_endpoint=picked):
        echoed += [extproc.decode_response(b) for b in session.send(m)]
    assert "response_headers" in echoed[0]
    assert body_bytes(echoed[1]["response_body"]["response"]["body_mutation"]["streamed_response"]) == usage.encode()
    assert session.served == picked
    assert scheduler.inflight(picked) == (0, 0)
    assert "Session(" in repr(session)


def test_session_errors_outcomes_and_trace() -> None:
    scheduler = pyepp.Scheduler.default()
    session = extproc.Session(scheduler, endpoints())
    with pytest.raises(pyepp.ConfigError, match="not a serialized"):
        session.send(b"\xff\xff")
    body_first = extproc.requests_from_capture(chat_capture())[1]
    with pytest.raises(pyepp.ConfigError, match="before request_headers"):
        session.send(body_first)

    bad = extproc.Session(scheduler, endpoints())
    out = []
    for m in extproc.requests_from_capture({"path": "/v1/chat/completions",
                                            "body": {"model": MODEL, "messages": [{"role": "user", "content": 5}]}}):
        out += bad.send(m)
    status, text = immediate(extproc.decode_response(out[0]))
    assert status == 400 and "messages[0].content" in text and bad.finished
    assert bad.result is not None and bad.result.status == 400 and bad.result.request is None

    big = extproc.Session(scheduler, endpoints(), max_request_bytes=64)
    out = []
    for m in extproc.requests_from_capture(chat_capture("y" * 200), chunk_bytes=32):
        out += big.send(m)
    assert immediate(extproc.decode_response(out[0]))[0] == 413

    traced = extproc.Session(scheduler, endpoints(), trace=True)
    for m in extproc.requests_from_capture(chat_capture()):
        traced.send(m)
    assert traced.result is not None and traced.result.explain()["profiles"]
    with pytest.raises(TypeError):
        extproc.Session("scheduler", endpoints())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        extproc.Session(scheduler, ["127.0.0.1:8000"])  # type: ignore[list-item]


def test_session_from_threads() -> None:
    scheduler = pyepp.Scheduler.default(seed=5)
    pool = endpoints()
    errors: List[BaseException] = []

    def run(i: int) -> None:
        try:
            s = extproc.Session(scheduler, pool)
            out: List[bytes] = []
            for m in extproc.requests_from_capture(chat_capture(f"thread {i} " * 20), chunk_bytes=40):
                out += s.send(m)
            assert destination(extproc.decode_response(out[0])) in POOL
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)


class SlowScorer:
    """A Python scorer that holds the GIL for a while, so other threads run in between."""

    def __init__(self, name: str, params: Dict[str, Any]) -> None:
        pass

    def score(self, request: pyepp.Request, eps: List[pyepp.Endpoint]) -> List[float]:
        time.sleep(0.05)  # releases the GIL, as any Python code may
        return [1.0 if e.address == eps[-1].address else 0.0 for e in eps]


def python_scheduler() -> pyepp.Scheduler:
    registry = pyepp.PluginRegistry()
    registry.register_scorer("slow", SlowScorer)
    return pyepp.Scheduler.from_yaml("""
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: slow
schedulingProfiles:
- name: default
  plugins: [{pluginRef: slow}]
""", registry=registry)


def test_session_with_a_python_scorer_while_another_thread_reads_it() -> None:
    session = extproc.Session(python_scheduler(), endpoints())
    messages = extproc.requests_from_capture(chat_capture())
    out: List[bytes] = []
    sender = threading.Thread(target=lambda: [out.extend(session.send(m)) for m in messages])
    sender.start()
    deadline = time.monotonic() + TIMEOUT
    polls = 0
    while sender.is_alive() and time.monotonic() < deadline:
        # While send() runs the scorer (holding the session), these must not keep the GIL.
        assert not session.finished
        session.result, session.served
        polls += 1
    sender.join(TIMEOUT)
    assert not sender.is_alive() and polls > 0
    assert destination(extproc.decode_response(out[0])) == POOL[-1]


# --- serve ------------------------------------------------------------------------------------


def test_serve_chunked_chat_request(served: Any) -> None:
    handle = served.start()
    assert handle.port > 0 and handle.health_port is None and handle.cert_pem is None
    capture = chat_capture("a long question " * 300)
    messages = extproc.requests_from_capture(capture, chunk_bytes=1000)
    assert len(messages) > 3
    responses = process(served.channel(handle.port), messages)
    assert destination(responses[0]) in POOL
    assert streamed_body(responses[1:]) == json.dumps(capture["body"], separators=(",", ":")).encode()
    stats = handle.stats()
    assert stats["streams_total"] == 1 and stats["outcome_200"] == 1
    assert stats["latency_count"] == 1 == sum(stats["latency_bucket_counts"])
    assert len(stats["latency_bucket_counts"]) == len(stats["latency_bucket_bounds_us"]) + 1
    assert "serving" in repr(handle)


def test_serve_subset_hint_list_and_string(served: Any) -> None:
    handle = served.start()
    ch = served.channel(handle.port)
    for i in range(5):
        first = process(ch, extproc.requests_from_capture(chat_capture(f"q{i}"), subset=[POOL[1]]))[0]
        assert destination(first) == POOL[1]
    for i in range(5):
        first = process(ch, extproc.requests_from_capture(chat_capture(f"r{i}"), subset=[POOL[0], POOL[2]],
                                                          subset_as_string=True))[0]
        assert destination(first) in (POOL[0], POOL[2])
    first = process(ch, extproc.requests_from_capture(chat_capture("ip"), subset="127.0.0.3"))[0]
    assert destination(first) == POOL[2]


def test_serve_empty_subset_is_503_and_bad_body_is_400(served: Any) -> None:
    handle = served.start()
    ch = served.channel(handle.port)
    responses = process(ch, extproc.requests_from_capture(chat_capture(), subset=[]))
    assert len(responses) == 1
    status, text = immediate(responses[0])
    assert status == 503 and "subset" in text

    bad = {"path": "/v1/chat/completions", "body": {"model": MODEL, "messages": [{"role": "user", "content": 5}]}}
    responses = process(ch, extproc.requests_from_capture(bad, chunk_bytes=16))
    status, text = immediate(responses[0])
    assert status == 400 and text.startswith("inference error: BadRequest - ") and "messages[0].content" in text
    assert extproc.header_value(responses[0]["immediate_response"]["headers"], "content-type").startswith("text/plain")
    stats = handle.stats()
    assert stats["outcome_503"] == 1 and stats["outcome_400"] == 1 and stats["outcome_200"] == 0


def test_serve_tls(served: Any) -> None:
    handle = served.start(tls=True)
    assert handle.cert_pem is not None and handle.cert_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    credentials = grpc.ssl_channel_credentials(root_certificates=handle.cert_pem)
    ch = served.channel(handle.port, credentials, options=[("grpc.ssl_target_name_override", "localhost")])
    responses = process(ch, extproc.requests_from_capture(chat_capture(), chunk_bytes=20))
    assert destination(responses[0]) in POOL
    # A plaintext client gets nowhere.
    with pytest.raises(grpc.RpcError):
        process(served.channel(handle.port), extproc.requests_from_capture(chat_capture()))


def _openssl_cert(directory: Path, name: str, ca: Optional[str] = None) -> Tuple[bytes, bytes]:
    """(certificate, key) PEM, EC P-256: a CA, or a client certificate the CA `ca` signs."""
    import subprocess
    crt, key = directory / f"{name}.crt", directory / f"{name}.key"
    cmd = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
           "-days", "2", "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(crt)]
    if ca is None:
        cmd += ["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"]
    else:
        cmd += ["-CA", str(directory / f"{ca}.crt"), "-CAkey", str(directory / f"{ca}.key"),
                "-addext", "basicConstraints=CA:FALSE", "-addext", "extendedKeyUsage=clientAuth"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)
    return crt.read_bytes(), key.read_bytes()


def test_serve_client_ca(served: Any, tmp_path: Path) -> None:
    _openssl_cert(tmp_path, "ca")
    client_crt, client_key = _openssl_cert(tmp_path, "client", ca="ca")
    _openssl_cert(tmp_path, "other-ca")
    stranger_crt, stranger_key = _openssl_cert(tmp_path, "stranger", ca="other-ca")
    handle = served.start(tls=True, client_ca=tmp_path / "ca.crt")
    assert handle.cert_pem is not None
    target = [("grpc.ssl_target_name_override", "localhost")]

    def attempt(crt: Optional[bytes], key: Optional[bytes]) -> Optional[grpc.StatusCode]:
        creds = grpc.ssl_channel_credentials(root_certificates=handle.cert_pem, private_key=key, certificate_chain=crt)
        try:
            responses = process(served.channel(handle.port, creds, options=target),
                                extproc.requests_from_capture(chat_capture()))
        except grpc.RpcError as e:
            return e.code()
        assert destination(responses[0]) in POOL
        return None

    assert attempt(client_crt, client_key) is None
    assert attempt(None, None) == grpc.StatusCode.UNAVAILABLE
    assert attempt(stranger_crt, stranger_key) == grpc.StatusCode.UNAVAILABLE
    with pytest.raises(pyepp.ConfigError, match="client_ca: client certificates are checked in the TLS handshake, "
                                                "and tls is off"):
        served.start(client_ca=tmp_path / "ca.crt")
    with pytest.raises(pyepp.ConfigError, match="client_ca: .*: no PEM certificate in it"):
        served.start(tls=True, client_ca=tmp_path / "client.key")


def test_serve_cert_path(served: Any, tmp_path: Path) -> None:
    import subprocess
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=epp-test", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True, timeout=60)
    handle = served.start(tls=True, cert_path=tmp_path)
    assert handle.cert_pem == crt.read_bytes()
    creds = grpc.ssl_channel_credentials(root_certificates=crt.read_bytes())
    responses = process(served.channel(handle.port, creds, options=[("grpc.ssl_target_name_override", "localhost")]),
                        extproc.requests_from_capture(chat_capture()))
    assert destination(responses[0]) in POOL
    # Rotated (certificate reload is on by default): cert_pem follows what new connections get.
    old = crt.read_bytes()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=epp-test-2", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(tmp_path / "new.key"), "-out", str(tmp_path / "new.crt")], check=True,
                   capture_output=True, timeout=60)
    (tmp_path / "new.key").replace(key)
    (tmp_path / "new.crt").replace(crt)
    deadline = time.monotonic() + 15  # looked at every second, applied once settled
    while handle.cert_pem == old and time.monotonic() < deadline:
        time.sleep(0.2)
    assert handle.cert_pem == crt.read_bytes() != old
    with pytest.raises(pyepp.NotFoundError, match="cert_path: cannot read .*nowhere/tls.crt"):
        served.start(tls=True, cert_path=tmp_path / "nowhere")


def _health_status(port: int, service: str) -> int:
    try:  # the generated client, when grpcio-health-checking is installed
        from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-not-found]
    except ImportError:
        health_pb2 = None
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=LOCAL) as ch:
        if health_pb2 is not None:
            stub = health_pb2_grpc.HealthStub(ch)
            return int(stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT).status)
        # By hand: HealthCheckRequest{service = 1 (string)} -> HealthCheckResponse{status = 1 (enum)}.
        data = service.encode()
        request = (b"\x0a" + bytes([len(data)]) + data) if data else b""
        check = ch.unary_unary(HEALTH_CHECK, request_serializer=_identity, response_deserializer=_identity)
        reply = check(request, timeout=TIMEOUT)
        assert reply[:1] in (b"", b"\x08"), reply
        return reply[1] if reply else 0


def test_serve_health_and_readiness(served: Any) -> None:
    handle = served.start(health_port=0)
    port = handle.health_port
    assert port and port != handle.port
    for service in ("", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"):
        assert _health_status(port, service) == SERVING, service
    handle.set_ready(False)
    assert _health_status(port, "readiness") == NOT_SERVING
    assert _health_status(port, "liveness") == SERVING
    handle.set_ready(True)
    assert _health_status(port, "readiness") == SERVING
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=LOCAL) as ch:
        check = ch.unary_unary(HEALTH_CHECK, request_serializer=_identity, response_deserializer=_identity)
        with pytest.raises(grpc.RpcError) as e:
            check(b"\x0a\x07unknown", timeout=TIMEOUT)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
    without = served.start()
    with pytest.raises(pyepp.EppError, match="no health server"):
        without.set_ready(True)


def test_serve_100_concurrent_streams(served: Any) -> None:
    scheduler = pyepp.Scheduler.default(seed=2)
    handle = served.start(scheduler)
    ch = served.channel(handle.port)
    streams = 100
    barrier = threading.Barrier(streams, timeout=TIMEOUT)
    results: "queue.Queue[Any]" = queue.Queue()

    def run(i: int) -> None:
        try:
            messages = extproc.requests_from_capture(chat_capture(f"stream {i} " * 30), chunk_bytes=100)
            call = ch.stream_stream(PROCESS, request_serializer=_identity, response_deserializer=_identity)
            barrier.wait()
            responses = [extproc.decode_response(b) for b in call(iter(messages), timeout=TIMEOUT)]
            results.put(destination(responses[0]))
        except BaseException as e:  # noqa: BLE001 - reported below
            results.put(e)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(streams)]
    for t in threads:
        t.start()
    got = [results.get(timeout=TIMEOUT * 2) for _ in range(streams)]
    for t in threads:
        t.join(TIMEOUT)
    errors = [g for g in got if isinstance(g, BaseException)]
    assert not errors, errors[:3]
    assert set(got) <= set(POOL) and len(set(got)) > 1  # load spreads over the pool
    stats = handle.stats()
    assert stats["streams_total"] == streams and stats["outcome_200"] == streams
    deadline = time.monotonic() + TIMEOUT
    while handle.stats()["streams_active"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert handle.stats()["streams_active"] == 0 and handle.stats()["requests_in_flight"] == 0
    assert all(scheduler.inflight(a) == (0, 0) for a in POOL)


def test_serve_set_endpoints_python_plugin_and_close(served: Any) -> None:
    scheduler = python_scheduler()
    handle = served.start(scheduler, endpoints(POOL[:1]))
    assert handle.scheduler is scheduler
    ch = served.channel(handle.port)
    # The Python scorer runs on a gRPC thread: the GIL is free while this thread waits.
    assert destination(process(ch, extproc.requests_from_capture(chat_capture()))[0]) == POOL[0]
    handle.set_endpoints(endpoints(POOL))
    assert destination(process(ch, extproc.requests_from_capture(chat_capture()))[0]) == POOL[2]
    handle.set_endpoints([])
    assert immediate(process(ch, extproc.requests_from_capture(chat_capture()))[0])[0] == 503

    ch.close()
    handle.close(drain_s=0.5)
    handle.close()  # idempotent
    assert handle.closed and "closed" in repr(handle)
    assert handle.stats()["streams_total"] == 3  # still readable
    with pytest.raises(grpc.RpcError):
        process(served.channel(handle.port), extproc.requests_from_capture(chat_capture()))


def test_serve_close_drains_then_cancels_open_streams(served: Any) -> None:
    handle = served.start()
    ch = served.channel(handle.port)
    messages = extproc.requests_from_capture(chat_capture())
    requests: "queue.Queue[Optional[bytes]]" = queue.Queue()
    requests.put(messages[0])  # headers only: the stream stays open, waiting for the body
    call = ch.stream_stream(PROCESS, request_serializer=_identity, response_deserializer=_identity)(
        iter(requests.get, None), timeout=TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while handle.stats()["streams_active"] != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert handle.stats()["streams_active"] == 1
    started = time.monotonic()
    handle.close(drain_s=0.3)
    assert 0.25 <= time.monotonic() - started < TIMEOUT
    with pytest.raises(grpc.RpcError):
        next(call)
    requests.put(None)
    assert handle.stats()["streams_active"] == 0


def test_serve_context_manager_keeps_scheduler_alive(served: Any) -> None:
    with pyepp.serve(pyepp.Scheduler.default(), endpoints()) as handle:  # no other reference to the scheduler
        import gc

        gc.collect()
        ch = grpc.insecure_channel(f"127.0.0.1:{handle.port}", options=LOCAL)
        try:
            assert destination(process(ch, extproc.requests_from_capture(chat_capture()))[0]) in POOL
        finally:
            ch.close()
    assert handle.closed


def test_serve_errors(served: Any) -> None:
    handle = served.start()
    with pytest.raises(pyepp.UnavailableError):
        served.start(port=handle.port)
    with pytest.raises(pyepp.ConfigError, match="port"):
        pyepp.serve(pyepp.Scheduler.default(), endpoints(), port=70000)
    with pytest.raises(pyepp.ConfigError, match="drain_s"):
        handle.close(drain_s=-1)
    with pytest.raises(TypeError):
        pyepp.serve("not a scheduler", endpoints())  # type: ignore[arg-type]
    with pytest.raises(pyepp.ConfigError, match="max_request_bytes"):
        pyepp.serve(pyepp.Scheduler.default(), endpoints(), max_request_bytes=0)
