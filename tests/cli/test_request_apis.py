"""The request APIs of llm-d Router's parsers, end to end: `eppctl serve` over real gRPC ext_proc in
front of `eppctl sim` servers, for Anthropic Messages (JSON and SSE), vLLM's
/inference/v1/generate, SGLang's /generate and vLLM's gRPC Generate.

Each request goes through ext_proc, is sent to the endpoint epp picked (the sim answers it for
real), and the sim's answer goes back through ext_proc as the response path, in chunks; the
token usage epp read shows in epp_response_tokens_total. Every process is stopped by its handle.
"""
import json
import struct
import urllib.request

import pytest

grpc = pytest.importorskip("grpc")

import extproc_wire as wire  # noqa: E402
from test_eppctl_serve import Stream, body_of, destination, serve  # noqa: E402,F401  (serve: a fixture)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: openai-parser
- type: anthropic-parser
- type: vllmhttp-parser
- type: sglanghttp-parser
- type: vllmgrpc-parser
- type: queue-scorer
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: max-score-picker
requestHandler:
  parsers:
  - pluginRef: openai-parser
  - pluginRef: anthropic-parser
  - pluginRef: vllmhttp-parser
  - pluginRef: sglanghttp-parser
  - pluginRef: vllmgrpc-parser
"""


@pytest.fixture
def setup(serve, sim, tmp_path):
    sims = sim("--count", "2")
    live = [u.split("//", 1)[1] for u in sims.urls]
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n" + "".join("  - address: %s\n" % a for a in live))
    config = tmp_path / "apis.yaml"
    config.write_text(CONFIG)
    return serve("--endpoints", endpoints, "--config", config), live


def tokens(s):
    return {k: s.metric("epp_response_tokens_total", kind=k) or 0 for k in ("prompt", "completion", "cached")}


def roundtrip(s, path, body, stream=False, chunk_on=None):
    """Sends `body` through ext_proc, posts it to the picked sim, and plays the sim's answer back
    through ext_proc's response path (split at `chunk_on` for a stream). Returns (endpoint, answer)."""
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(body, path=path), wire.request_body(body, end_of_stream=True))
        first = st.recv()
        endpoint = destination(first)
        assert body_of([st.recv()]) == body  # sent on unchanged
        req = urllib.request.Request("http://%s%s" % (endpoint, path), data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            answer = resp.read()
            content_type = resp.headers["Content-Type"]
        assert ("text/event-stream" in content_type) == stream, content_type
        st.send(wire.response_headers([(":status", "200"), ("content-type", content_type)]))
        assert st.recv()["kind"] == "response_headers"
        if chunk_on:
            parts = [p + chunk_on for p in answer.split(chunk_on) if p]
        else:
            parts = [answer[: len(answer) // 2], answer[len(answer) // 2:]]
        for i, p in enumerate(parts):
            st.send(wire.response_body(p, end_of_stream=i == len(parts) - 1))
        assert body_of(st.recv_n(len(parts))) == b"".join(parts)
        assert st.rest() == []
    return endpoint, answer


def test_anthropic_messages_json_and_stream(setup):
    s, live = setup
    conversation = [{"role": "user", "content": "Plan a trip to Zurich with three stops " * 8},
                    {"role": "assistant", "content": [
                        {"type": "thinking", "thinking": "Call the weather tool first.", "signature": "s"},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Zurich"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "22C"}]}]
    body = {"model": MODEL, "max_tokens": 5, "system": [{"type": "text", "text": "You plan trips."}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}], "messages": conversation}
    before = tokens(s)
    endpoint, answer = roundtrip(s, "/v1/messages", json.dumps(body).encode())
    assert endpoint in live
    usage = json.loads(answer)["usage"]
    after = tokens(s)
    assert after["prompt"] - before["prompt"] == usage["input_tokens"] > 0
    assert after["completion"] - before["completion"] == usage["output_tokens"] == 5

    # The next turn streams: message_start and message_delta arrive in different body chunks and
    # their usage is merged (llm-d #2437); the grown conversation goes where its prefix is.
    body["messages"] = conversation + [{"role": "assistant", "content": "Sunny."},
                                       {"role": "user", "content": "And the second stop?"}]
    body["stream"] = True
    before = tokens(s)
    endpoint2, answer = roundtrip(s, "/v1/messages", json.dumps(body).encode(), stream=True, chunk_on=b"\n\n")
    assert endpoint2 == endpoint
    events = [json.loads(line[6:]) for line in answer.decode().splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events][:2] == ["message_start", "content_block_start"]
    assert events[-1]["type"] == "message_stop"
    delta = next(e for e in events if e["type"] == "message_delta")
    after = tokens(s)
    assert after["prompt"] - before["prompt"] == delta["usage"]["input_tokens"] > 0
    assert after["completion"] - before["completion"] == delta["usage"]["output_tokens"] == 5
    assert after["cached"] - before["cached"] == delta["usage"]["cache_read_input_tokens"] > 0  # the prefix was cached


def test_anthropic_body_errors_name_the_json_path(setup):
    s, _ = setup
    body = json.dumps({"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": 7}]}).encode()
    with Stream(s.channel()) as st:
        st.send(wire.chat_request(body, path="/v1/messages"), wire.request_body(body, end_of_stream=True))
        r = st.recv()
        assert r["kind"] == "immediate_response" and r["immediate"]["status"] == 400
        assert "messages[0].content: expected a string or an array of content blocks" in r["immediate"]["details"]


def test_vllm_and_sglang_generate(setup):
    s, live = setup
    ids = list(range(100, 400))
    body = {"model": MODEL, "token_ids": ids, "sampling_params": {"max_tokens": 4}}
    before = tokens(s)
    endpoint, answer = roundtrip(s, "/inference/v1/generate", json.dumps(body).encode())
    assert endpoint in live
    usage = json.loads(answer)["usage"]
    assert usage["prompt_tokens"] == len(ids)
    after = tokens(s)
    assert after["prompt"] - before["prompt"] == len(ids)
    assert after["completion"] - before["completion"] == 4

    # Streamed, with the usage chunk vLLM adds for stream_options.include_usage.
    body.update(stream=True, stream_options={"include_usage": True})
    before = tokens(s)
    endpoint2, _ = roundtrip(s, "/inference/v1/generate", json.dumps(body).encode(), stream=True, chunk_on=b"\n\n")
    assert endpoint2 == endpoint  # the same ids: the same prefix blocks
    after = tokens(s)
    assert after["prompt"] - before["prompt"] == len(ids)
    assert after["cached"] - before["cached"] > 0

    # SGLang: token ids, then text; usage from meta_info (streamed: the finished chunk's).
    sg = {"input_ids": ids, "sampling_params": {"max_new_tokens": 3}}
    before = tokens(s)
    endpoint3, answer = roundtrip(s, "/generate", json.dumps(sg).encode())
    assert json.loads(answer)["meta_info"]["prompt_tokens"] == len(ids)
    after = tokens(s)
    assert (after["prompt"] - before["prompt"], after["completion"] - before["completion"]) == (len(ids), 3)
    # SGLang's body names no model, and the model seeds the prefix hashes: its blocks are its own,
    # and a repeat goes where the first went.
    assert roundtrip(s, "/generate", json.dumps(sg).encode())[0] == endpoint3
    before = tokens(s)
    roundtrip(s, "/generate", json.dumps({"text": "hello sglang", "stream": True,
                                          "sampling_params": {"max_new_tokens": 2}}).encode(),
              stream=True, chunk_on=b"\n\n")
    after = tokens(s)
    assert after["completion"] - before["completion"] == 2


def _frame(message):
    return b"\x00" + struct.pack(">I", len(message)) + message


def test_vllm_grpc_generate_frames(setup):
    # No gRPC engine in the simulator: the frames are built by hand with vllm_engine.proto's field
    # numbers, and the picked endpoint's answer is played back as a gRPC server would stream it.
    s, live = setup
    packed = b"".join(wire.varint(i) for i in range(1, 200))
    request = _frame(wire.f_bytes(1, "r1") + wire.f_bytes(2, wire.f_bytes(2, packed)) + wire.f_varint(5, 1))
    path = "/vllm.grpc.engine.VllmEngine/Generate"
    before = tokens(s)
    with Stream(s.channel()) as st:
        headers = [(":method", "POST"), (":path", path), ("content-type", "application/grpc")]
        st.send(wire.request_headers(headers), wire.request_body(request, end_of_stream=True))
        assert destination(st.recv()) in live
        assert body_of([st.recv()]) == request  # the frame goes on unchanged
        st.send(wire.response_headers([(":status", "200"), ("content-type", "application/grpc")]))
        st.recv()
        chunk = _frame(wire.f_bytes(1, wire.f_bytes(1, wire.varint(7))))  # a token, no counters yet
        done = _frame(wire.f_bytes(2, wire.f_bytes(2, "length") + wire.f_varint(3, 199) + wire.f_varint(4, 2)
                                   + wire.f_varint(5, 64)))
        st.send(wire.response_body(chunk), wire.response_body(done, end_of_stream=True))
        st.recv_n(2)
        assert st.rest() == []
    after = tokens(s)
    assert (after["prompt"] - before["prompt"], after["completion"] - before["completion"],
            after["cached"] - before["cached"]) == (199, 2, 64)
    # A compressed frame is refused, as llm-d refuses it.
    with Stream(s.channel()) as st:
        bad = b"\x01" + request[1:]
        st.send(wire.request_headers([(":method", "POST"), (":path", path)]), wire.request_body(bad, end_of_stream=True))
        r = st.recv()
        assert r["kind"] == "immediate_response" and r["immediate"]["status"] == 400
        assert "compressed gRPC payload is not supported" in r["immediate"]["details"]
