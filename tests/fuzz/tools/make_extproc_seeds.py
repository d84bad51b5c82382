#!/usr/bin/env python3
"""Writes the ext_proc session seeds of tests/fuzz/corpus/extproc_session/ (see the input format
at the top of fuzz_extproc_session.cc): structured exchanges as text, and raw ProcessingRequest
streams encoded by hand from the field numbers of libepp/proto (no generated code needed).

Run from the repository root: python3 tests/fuzz/tools/make_extproc_seeds.py
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(__file__), "..", "corpus", "extproc_session")


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def field(number, payload):  # length-delimited
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def flag(number, value=True):  # bool / varint
    return varint(number << 3) + varint(int(value))


def header_map(headers):  # HeaderMap{headers=1: HeaderValue{key=1, raw_value=3}}
    return b"".join(field(1, field(1, k.encode()) + field(3, v)) for k, v in headers)


def struct_string(key, value):  # Struct{fields=1: map<string, Value{string_value=3}>}
    return field(1, field(1, key.encode()) + field(2, field(3, value.encode())))


def struct_list(key, values):  # Value{list_value=6: ListValue{values=1}}
    lst = b"".join(field(1, field(3, v.encode())) for v in values)
    return field(1, field(1, key.encode()) + field(2, field(6, lst)))


def metadata(namespace, struct):  # Metadata{filter_metadata=1: map<string, Struct>}
    return field(8, field(1, field(1, namespace.encode()) + field(2, struct)))


def request_headers(headers, eos=False, meta=b""):
    return field(2, field(1, header_map(headers)) + (flag(3) if eos else b"")) + meta


def response_headers(headers, eos=False, meta=b""):
    return field(3, field(1, header_map(headers)) + (flag(3) if eos else b"")) + meta


def body(number, data, eos=False, eos_without_message=False):
    return field(number, field(1, data) + (flag(2) if eos else b"") + (flag(3) if eos_without_message else b""))


def trailers(number):
    return field(number, field(1, header_map([("x-trailer", b"1")])))


def raw(messages, flags=0x01):
    return bytes([flags]) + b"".join(struct.pack("<H", len(m)) + m for m in messages)


def structured(text, flags=0x00, request_chunk=0, response_chunk=0):
    return bytes([flags, request_chunk, response_chunk]) + text


def chat(model, content, stream=False):
    b = {"model": model, "messages": [{"role": "user", "content": content}]}
    if stream:
        b["stream"] = True
    return json.dumps(b).encode()


def main():
    os.makedirs(OUT, exist_ok=True)
    req = [(":method", b"POST"), (":path", b"/v1/chat/completions"), ("content-type", b"application/json"),
           ("x-request-id", b"r1")]
    sse = (b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'
           b'data: {"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":3,'
           b'"prompt_tokens_details":{"cached_tokens":16}}}\n\ndata: [DONE]\n\n')
    served = metadata("envoy.lb", struct_string("x-gateway-destination-endpoint-served", "10.0.0.1:8000"))
    seeds = {
        "raw-chat-json-response.bin": raw([
            request_headers(req),
            body(4, chat("llama", "Hello there, how are you?")),
            response_headers([(":status", b"200"), ("content-type", b"application/json")], meta=served),
            body(5, b'{"usage":{"prompt_tokens":7,"completion_tokens":2}}', eos=True),
        ]),
        "raw-chunked-sse-trailers.bin": raw([
            request_headers(req + [("x-gateway-inference-objective", b"critical")]),
            body(4, chat("llama", "x" * 300, stream=True)[:100]),
            body(4, chat("llama", "x" * 300, stream=True)[100:]),
            trailers(6),
            response_headers([(":status", b"200"), ("content-type", b"text/event-stream")]),
            body(5, sse[:40]),
            body(5, sse[40:]),
            trailers(7),
        ], flags=0x21),
        "raw-bodyless-get.bin": raw([
            request_headers([(":method", b"GET"), (":path", b"/v1/models")], eos=True),
            response_headers([(":status", b"200")], eos=True),
        ]),
        "raw-subset-hint-list.bin": raw([
            request_headers(req, meta=metadata("envoy.lb.subset_hint",
                                               struct_list("x-gateway-destination-endpoint-subset",
                                                           ["10.0.0.2:8000", "10.0.0.3"]))),
            body(4, chat("llama", "subset"), eos_without_message=True),
        ]),
        "raw-subset-hint-string.bin": raw([
            request_headers(req, meta=metadata("envoy.lb.subset_hint",
                                               struct_string("x-gateway-destination-endpoint-subset",
                                                             "10.0.0.9:8000,10.0.0.1"))),
            body(4, chat("llama", "no such endpoint"), eos=True),
        ]),
        "raw-model-rewrite-sheddable.bin": raw([
            request_headers(req + [("x-gateway-model-name-rewrite", b"llama-lora"),
                                   ("x-gateway-inference-objective", b"sheddable")]),
            body(4, chat("alias", "rewrite me"), eos=True),
        ], flags=0x05),
        "raw-out-of-order.bin": raw([body(4, b"{}", eos=True), request_headers(req)]),
        "raw-headers-twice.bin": raw([request_headers(req), request_headers(req)]),
        "raw-not-protobuf.bin": raw([b"\xff\xff\xff\xff", b""]),
        "raw-body-over-limit.bin": raw([request_headers(req), body(4, b"a" * 5000), body(4, b"b", eos=True)],
                                       flags=0x03),
        "structured-chat.txt": structured(
            b"/v1/chat/completions\ncontent-type: application/json\nx-request-id: s1\n\n" +
            chat("llama", "Tell me a story about a lighthouse keeper.") +
            b"\n@@response\n200\ncontent-type: application/json\n@served: 10.0.0.1:8000\n\n"
            b'{"id":"c1","object":"chat.completion","usage":{"prompt_tokens":12,"completion_tokens":40,'
            b'"total_tokens":52}}'),
        "structured-completions-sse.txt": structured(
            b"POST /v1/completions\ncontent-type: application/json\n@subset: 10.0.0.1:8000,10.0.0.2\n\n"
            b'{"model":"llama","prompt":"Once upon a time","stream":true}'
            b"\n@@response\n200\ncontent-type: text/event-stream\n\n" + sse, request_chunk=1, response_chunk=1),
        "structured-responses-api.txt": structured(
            b"/v1/responses\nx-gateway-inference-objective: standard\n@subset-string: 10.0.0.3:8000\n\n"
            b'{"model":"llama","input":[{"role":"user","content":"hi"}],"instructions":"brief"}'
            b"\n@@response\n200\ncontent-type: text/event-stream; charset=utf-8\n\n"
            b'event: response.completed\ndata: {"type":"response.completed","response":{"usage":'
            b'{"input_tokens":12,"output_tokens":1,"input_tokens_details":{"cached_tokens":8}}}}\n\n',
            flags=0x20, response_chunk=0x80),
        "structured-bad-json.txt": structured(b"/v1/chat/completions\n\n{\"model\": \"llama\", \"messages\": [}"),
        "structured-empty-pool.txt": structured(b"/v1/completions\n\n{\"model\":\"m\",\"prompt\":\"p\"}", flags=0x08),
        "structured-saturated-shed.txt": structured(
            b"/v1/completions\nx-gateway-inference-objective: sheddable\n\n{\"model\":\"m\",\"prompt\":\"p\"}",
            flags=0xC4),
        "structured-llmd-lora.txt": structured(
            b"/v1/chat/completions\n\n" + chat("sql-lora", "SELECT 1") +
            b"\n@@response\n500\ncontent-type: application/json\n\n{\"error\":{\"message\":\"boom\"}}",
            flags=0x40, request_chunk=2),
        "structured-round-robin.txt": structured(
            b"/v1/embeddings\n\n{\"model\":\"e5\",\"input\":[\"a\",\"b\"]}\n@@response\n204\n\n", flags=0x90),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
