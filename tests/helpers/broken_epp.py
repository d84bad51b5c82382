"""A small Endpoint Picker in Python (grpcio, raw protobuf bytes), correct unless told to break.

Written for the `eppctl conformance` tests: without --defect it answers the Endpoint Picker
protocol as the suite expects (round robin over the endpoints file, the subset hint as a list or a
string, 503 / 400 answers, body echo in chunks of at most 62,000 bytes, the response path echoed
chunk by chunk, grpc.health.v1 on its own port), so the suite is shown to test the protocol and
not epp's own server. Each --defect breaks one thing a real implementation has got wrong:

  no-metadata      the destination only as a header, no envoy.lb dynamic metadata
  ignore-subset    the subset hint is ignored (every pick from the whole pool)
  big-chunks       the request body echoed as one chunk, however large
  buffer-sse       response chunks held back until the response ends
  500-on-bad-body  an unparsable body answered with 500 instead of 400

Usage: broken_epp.py --endpoints FILE --port P --health-port H [--defect NAME]...
"""
import argparse
import itertools
import json
import re
import sys
import threading
from concurrent import futures
import pathlib

import grpc

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "cli"))
import extproc_wire as w  # noqa: E402

CHUNK = 62000
DEFECTS = {"no-metadata", "ignore-subset", "big-chunks", "buffer-sse", "500-on-bad-body"}


def read_pool(path):
    text = pathlib.Path(path).read_text()
    return re.findall(r"address:\s*(\S+)", text)


def hvo(key, val):  # HeaderValueOption{header=1 HeaderValue{key=1, raw_value=3}}
    return w.f_bytes(1, w.f_bytes(1, w.f_bytes(1, key) + w.f_bytes(3, val)))


def common(headers=(), streamed=None, clear_route_cache=False):
    out = b""
    if headers:
        out += w.f_bytes(2, b"".join(hvo(k, v) for k, v in headers))
    if streamed is not None:
        body, eos = streamed  # BodyMutation{streamed_response=3 StreamedBodyResponse{body=1, end_of_stream=2}}
        out += w.f_bytes(3, w.f_bytes(3, w.f_bytes(1, body) + w.f_bool(2, eos)))
    out += w.f_bool(5, clear_route_cache)
    return out


def response(kind_field, common_bytes, dynamic=None):
    out = w.f_bytes(kind_field, w.f_bytes(1, common_bytes))
    if dynamic is not None:
        out += w.f_bytes(8, w.struct(dynamic))
    return out


def immediate(status, body):
    return w.f_bytes(7, w.f_bytes(1, w.f_varint(1, status)) + w.f_bytes(3, body))


def decode_request(buf):
    f = w.fields(buf)
    out = {"kind": None, "headers": {}, "body": b"", "eos": False, "subset": None}
    for field, kind in ((2, "request_headers"), (3, "response_headers"), (4, "request_body"),
                        (5, "response_body"), (6, "request_trailers"), (7, "response_trailers")):
        if field in f:
            out["kind"] = kind
            inner = w.fields(f[field][-1])
            if field in (2, 3):
                hm = w.fields(inner.get(1, [b""])[-1])
                for hv in hm.get(1, []):
                    h = w.decode_header_value(hv)
                    out["headers"][h["key"].lower()] = h["raw_value"].decode() if h["raw_value"] else h["value"]
                out["eos"] = bool(inner.get(3, [0])[-1])
            elif field in (4, 5):
                out["body"] = inner.get(1, [b""])[-1]
                out["eos"] = bool(inner.get(2, [0])[-1])
    if 8 in f:
        md = w.fields(f[8][-1])
        for entry in md.get(1, []):
            e = w.fields(entry)
            if e.get(1, [b""])[-1].decode() == "envoy.lb.subset_hint":
                s = w.decode_struct(e.get(2, [b""])[-1])
                if "x-gateway-destination-endpoint-subset" in s:
                    out["subset"] = s["x-gateway-destination-endpoint-subset"]
    return out


class Picker:
    def __init__(self, pool, defects):
        self.pool, self.defects = pool, defects
        self.rr = itertools.count()
        self.lock = threading.Lock()

    def pick(self, subset):
        candidates = self.pool
        if subset is not None and "ignore-subset" not in self.defects:
            entries = subset if isinstance(subset, list) else [subset]
            wanted = {x.strip() for e in entries for x in str(e).split(",") if x.strip()}
            candidates = [p for p in self.pool if p in wanted]
        if not candidates:
            return None
        with self.lock:
            return candidates[next(self.rr) % len(candidates)]

    def headers_response(self, dest):
        dyn = None if "no-metadata" in self.defects else {"envoy.lb": {"x-gateway-destination-endpoint": dest}}
        return response(1, common([("x-gateway-destination-endpoint", dest)], clear_route_cache=True), dyn)

    def process(self, requests, context):
        subset, body, pending, streaming = None, b"", b"", False
        for raw in requests:
            m = decode_request(raw)
            if m["subset"] is not None:
                subset = m["subset"]
            kind = m["kind"]
            if kind == "request_headers":
                if m["eos"]:
                    dest = self.pick(subset)
                    if dest is None:
                        yield immediate(503, b"no endpoint")
                        return
                    yield self.headers_response(dest)
                continue
            if kind == "request_body":
                body += m["body"]
                if not m["eos"]:
                    continue
                try:
                    doc = json.loads(body)
                    ok = isinstance(doc, dict) and isinstance(doc.get("model"), str)
                except ValueError:
                    yield immediate(500 if "500-on-bad-body" in self.defects else 400, b"bad body")
                    return
                if not ok:
                    yield immediate(400, b"no model")
                    return
                dest = self.pick(subset)
                if dest is None:
                    yield immediate(503, b"no endpoint in the subset")
                    return
                yield self.headers_response(dest)
                size = len(body) if "big-chunks" in self.defects else CHUNK
                for off in range(0, len(body), size):
                    yield response(3, common(streamed=(body[off:off + size], off + size >= len(body))))
                continue
            if kind == "response_headers":
                streaming = "text/event-stream" in m["headers"].get("content-type", "")
                yield response(2, common())
                continue
            if kind == "response_body":
                if streaming and "buffer-sse" not in self.defects:
                    yield response(4, common(streamed=(m["body"], m["eos"])))
                    continue
                pending += m["body"]
                if m["eos"]:
                    for off in range(0, max(len(pending), 1), CHUNK):
                        yield response(4, common(streamed=(pending[off:off + CHUNK], off + CHUNK >= len(pending))))
                continue


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--health-port", type=int, required=True)
    ap.add_argument("--defect", action="append", default=[], choices=sorted(DEFECTS))
    a = ap.parse_args()
    picker = Picker(read_pool(a.endpoints), set(a.defect))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=128))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "envoy.service.ext_proc.v3.ExternalProcessor",
        {"Process": grpc.stream_stream_rpc_method_handler(picker.process)}),))
    server.add_insecure_port("127.0.0.1:%d" % a.port)
    health = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    health.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(lambda req, ctx: w.f_varint(1, 1))}),))
    health.add_insecure_port("127.0.0.1:%d" % a.health_port)
    server.start()
    health.start()
    print("broken_epp: serving on %d (health %d), defects: %s" % (a.port, a.health_port, ",".join(a.defect) or "none"),
          flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
