"""pyepp.Request.parse: the request APIs of llm-d Router's parsers, chosen by path."""
import json
import struct

import pytest

import pyepp


def test_parse_anthropic_and_its_usage():
    body = {"model": "m", "max_tokens": 8, "system": "Be brief.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"},
                                                      {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}]}
    r = pyepp.Request.parse("/v1/messages", body)
    assert (r.api, r.parser, r.model, r.media_parts) == ("messages", "anthropic-parser", "m", 1)
    assert r.prompt == "system\nBe brief.\nuser\nhi<image:https://x/a.png>\n"
    stream = ('event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":9,'
              '"cache_read_input_tokens":4}}}\n\nevent: message_delta\ndata: {"type":"message_delta",'
              '"usage":{"output_tokens":2}}\n\n')
    assert r.response_usage(stream, event_stream=True) == {"prompt_tokens": 9, "completion_tokens": 2,
                                                          "total_tokens": 11, "cached_tokens": 4}
    assert r.response_usage("{}") is None
    chat = json.loads(pyepp._native.lib.anthropic_to_chat_completions(json.dumps(body)))
    assert chat["messages"][0] == {"role": "system", "content": "Be brief."}


def test_parse_generate_grpc_and_errors():
    r = pyepp.Request.parse("/inference/v1/generate", {"token_ids": [3, 4, 5]})
    assert (r.api, r.token_ids, r.prompt_tokens, r.model) == ("generate", [3, 4, 5], 3, "")
    sg = pyepp.Request.parse("/generate", {"input_ids": [1, 2]}, parsers=["sglanghttp-parser"])
    assert (sg.api, sg.token_ids) == ("sglang_generate", [1, 2])
    # vLLM gRPC: GenerateRequest{tokenized=2 {input_ids=2 packed}} in a gRPC frame, as bytes.
    msg = b"\x12\x04\x12\x02\x07\x08"
    g = pyepp.Request.parse("/vllm.grpc.engine.VllmEngine/Generate", b"\x00" + struct.pack(">I", len(msg)) + msg,
                            parsers=["vllmgrpc-parser"])
    assert (g.api, g.token_ids) == ("grpc_generate", [7, 8])
    assert pyepp.Request.parse("/v2/models/m/infer", b"\xff").parser == "passthrough-parser"
    with pytest.raises(pyepp.ConfigError, match=r"messages: must not be empty"):
        pyepp.Request.parse("/v1/messages", {"model": "m", "messages": []})
    with pytest.raises(pyepp.ConfigError, match=r"no parser claims the path '/generate'"):
        pyepp.Request.parse("/generate", {"text": "x"}, parsers=["openai-parser"])
    with pytest.raises(pyepp.ConfigError, match=r"'queue-scorer' is not a request parser type"):
        pyepp.Request.parse("/v1/completions", {"model": "m", "prompt": "x"}, parsers=["queue-scorer"])
