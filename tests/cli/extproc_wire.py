"""Hand-written protobuf for the ext_proc and grpc.health.v1 messages the `eppctl serve` tests exchange.

No generated code on purpose: every field number below is taken from the public protos
(envoy/service/ext_proc/v3/external_processor.proto, envoy/config/core/v3/base.proto,
envoy/type/v3/http_status.proto, google/protobuf/struct.proto, grpc/health/v1/health.proto; the
table in shared/reference/gie-epp.md section 1.2). Bytes that eppctl accepts from this encoder and
answers in a form this decoder reads are bytes a real gateway would exchange with it.

Encoding: ``request_headers(...)``, ``request_body(...)``, ``response_headers(...)``,
``response_body(...)``, ``request_trailers(...)``, ``health_request(service)``.
Decoding: ``decode_response(bytes)`` -> dict, ``decode_health_response(bytes)`` -> status int.
"""
import struct as _struct

VARINT, I64, LEN, I32 = 0, 1, 2, 5

PROCESS_METHOD = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
HEALTH_CHECK_METHOD = "/grpc.health.v1.Health/Check"
SERVING, NOT_SERVING = 1, 2  # grpc.health.v1.HealthCheckResponse.ServingStatus

# ---------------------------------------------------------------------------------------------
# Encoding


def varint(n):
    if n < 0:
        n += 1 << 64  # int64 / enum negatives: ten-byte two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field, wire_type):
    return varint(field << 3 | wire_type)


def f_varint(field, n):
    return tag(field, VARINT) + varint(n)


def f_bytes(field, data):
    if isinstance(data, str):
        data = data.encode()
    return tag(field, LEN) + varint(len(data)) + data


def f_double(field, x):
    return tag(field, I64) + _struct.pack("<d", x)


def f_bool(field, b):
    return f_varint(field, 1) if b else b""  # proto3: false is the default, not written


# google.protobuf.Struct{fields=1 map<string, Value>}; Value oneof kind {null_value=1,
# number_value=2, string_value=3, bool_value=4, struct_value=5, list_value=6};
# ListValue{values=1}. A map entry is a message {key=1, value=2}.
def value(v):
    if v is None:
        return f_varint(1, 0)
    if isinstance(v, bool):
        return f_varint(4, 1 if v else 0)  # oneof member: written even when false
    if isinstance(v, (int, float)):
        return f_double(2, float(v))
    if isinstance(v, str):
        return f_bytes(3, v)
    if isinstance(v, dict):
        return f_bytes(5, struct(v))
    if isinstance(v, (list, tuple)):
        return f_bytes(6, b"".join(f_bytes(1, value(x)) for x in v))
    raise TypeError("no protobuf Value for %r" % (v,))


def struct(d):
    return b"".join(f_bytes(1, f_bytes(1, k) + f_bytes(2, value(v))) for k, v in d.items())


# envoy.config.core.v3: HeaderValue{key=1, value=2, raw_value=3}; HeaderMap{headers=1};
# Metadata{filter_metadata=1 map<string, Struct>}.
def header_value(key, val, raw=True):
    return f_bytes(1, key) + (f_bytes(3, val) if raw else f_bytes(2, val))


def header_map(headers, raw=True):
    return b"".join(f_bytes(1, header_value(k, v, raw)) for k, v in headers)


def metadata(filter_metadata):
    return b"".join(f_bytes(1, f_bytes(1, ns) + f_bytes(2, struct(fields))) for ns, fields in filter_metadata.items())


def subset_metadata(subset):
    """metadata_context for the gateway's subset hint: a list, or one comma-separated string."""
    return {"envoy.lb.subset_hint": {"x-gateway-destination-endpoint-subset": subset}}


# ProcessingRequest oneof request: request_headers=2, response_headers=3 (HttpHeaders{headers=1,
# end_of_stream=3}); request_body=4, response_body=5 (HttpBody{body=1, end_of_stream=2});
# request_trailers=6, response_trailers=7 (HttpTrailers{trailers=1}); metadata_context=8.
def _request(field, payload, md):
    out = f_bytes(field, payload)
    if md is not None:
        out += f_bytes(8, metadata(md))
    return out


def request_headers(headers, end_of_stream=False, md=None, raw=True):
    return _request(2, f_bytes(1, header_map(headers, raw)) + f_bool(3, end_of_stream), md)


def response_headers(headers, end_of_stream=False, md=None):
    return _request(3, f_bytes(1, header_map(headers)) + f_bool(3, end_of_stream), md)


def request_body(body, end_of_stream=False, md=None):
    return _request(4, f_bytes(1, body) + f_bool(2, end_of_stream), md)


def response_body(body, end_of_stream=False, md=None):
    return _request(5, f_bytes(1, body) + f_bool(2, end_of_stream), md)


def request_trailers(headers=(), md=None):
    return _request(6, f_bytes(1, header_map(headers)), md)


def response_trailers(headers=(), md=None):
    return _request(7, f_bytes(1, header_map(headers)), md)


def chat_request(body, path="/v1/chat/completions", extra_headers=(), md=None):
    """The request-headers message of a POST with a body to come."""
    headers = [(":method", "POST"), (":path", path), (":authority", "gateway"), ("content-type", "application/json"),
               ("content-length", str(len(body)))] + list(extra_headers)
    return request_headers(headers, end_of_stream=False, md=md)


def health_request(service):
    return f_bytes(1, service) if service else b""  # HealthCheckRequest{service=1}


# ---------------------------------------------------------------------------------------------
# Decoding


class WireError(ValueError):
    pass


def parse(buf):
    """[(field, wire_type, value)]: ints for varints, bytes otherwise."""
    out, i, n = [], 0, len(buf)

    def read_varint():
        nonlocal i
        shift = result = 0
        while True:
            if i >= n:
                raise WireError("truncated varint")
            b = buf[i]
            i += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise WireError("varint too long")

    while i < n:
        key = read_varint()
        field, wt = key >> 3, key & 7
        if field == 0:
            raise WireError("field number 0")
        if wt == VARINT:
            out.append((field, wt, read_varint()))
        elif wt == I64:
            out.append((field, wt, bytes(buf[i:i + 8])))
            i += 8
        elif wt == LEN:
            ln = read_varint()
            if i + ln > n:
                raise WireError("truncated length-delimited field %d" % field)
            out.append((field, wt, bytes(buf[i:i + ln])))
            i += ln
        elif wt == I32:
            out.append((field, wt, bytes(buf[i:i + 4])))
            i += 4
        else:
            raise WireError("wire type %d" % wt)
    if i != n:
        raise WireError("trailing bytes")
    return out


def fields(buf, known=None, what="message"):
    """{field: [values]}; with `known`, any other field number is an error (a misnumbered field)."""
    d = {}
    for field, wt, v in parse(buf):
        if known is not None and field not in known:
            raise WireError("%s: unexpected field %d (wire type %d)" % (what, field, wt))
        d.setdefault(field, []).append(v)
    return d


def _last(d, field, default=None):
    return d[field][-1] if field in d else default


def decode_value(buf):
    f = fields(buf, {1, 2, 3, 4, 5, 6}, "Value")
    if 1 in f:
        return None
    if 2 in f:
        return _struct.unpack("<d", f[2][-1])[0]
    if 3 in f:
        return f[3][-1].decode()
    if 4 in f:
        return bool(f[4][-1])
    if 5 in f:
        return decode_struct(f[5][-1])
    if 6 in f:
        return [decode_value(x) for x in fields(f[6][-1], {1}, "ListValue").get(1, [])]
    return None


def decode_struct(buf):
    out = {}
    for entry in fields(buf, {1}, "Struct").get(1, []):
        e = fields(entry, {1, 2}, "Struct.FieldsEntry")
        out[_last(e, 1, b"").decode()] = decode_value(_last(e, 2, b""))
    return out


def decode_header_value(buf):
    f = fields(buf, {1, 2, 3}, "HeaderValue")
    return {"key": _last(f, 1, b"").decode(), "value": _last(f, 2, b"").decode(), "raw_value": _last(f, 3, b"")}


def decode_header_mutation(buf):
    f = fields(buf, {1, 2}, "HeaderMutation")
    sets = []
    for o in f.get(1, []):
        hvo = fields(o, {1, 2, 3, 4}, "HeaderValueOption")
        h = decode_header_value(_last(hvo, 1, b""))
        h["append_action"] = _last(hvo, 3, 0)
        sets.append(h)
    return {"set_headers": sets, "remove_headers": [x.decode() for x in f.get(2, [])]}


def decode_streamed_body(buf):
    f = fields(buf, {1, 2, 3, 4}, "StreamedBodyResponse")
    return {"body": _last(f, 1, b""), "end_of_stream": bool(_last(f, 2, 0))}


def decode_common(buf):
    f = fields(buf, {1, 2, 3, 4, 5}, "CommonResponse")
    out = {"status": _last(f, 1, 0), "clear_route_cache": bool(_last(f, 5, 0)),
           "header_mutation": decode_header_mutation(_last(f, 2, b"")) if 2 in f else None, "body_mutation": None}
    if 3 in f:
        bm = fields(f[3][-1], {1, 2, 3}, "BodyMutation")
        out["body_mutation"] = {"body": _last(bm, 1), "clear_body": bool(_last(bm, 2, 0)),
                                "streamed_response": decode_streamed_body(bm[3][-1]) if 3 in bm else None}
    return out


_RESPONSE_KINDS = {1: "request_headers", 2: "response_headers", 3: "request_body", 4: "response_body",
                   5: "request_trailers", 6: "response_trailers", 7: "immediate_response",
                   11: "streamed_immediate_response"}


def decode_response(buf):
    """A ProcessingResponse as {"kind", "common" | "immediate", "dynamic_metadata"}.

    Raises WireError on a field number the public proto does not define."""
    f = fields(buf, set(range(1, 13)), "ProcessingResponse")
    kinds = [k for k in _RESPONSE_KINDS if k in f]
    if len(kinds) != 1:
        raise WireError("ProcessingResponse with %d oneof members set" % len(kinds))
    k = kinds[0]
    out = {"kind": _RESPONSE_KINDS[k], "common": None, "immediate": None,
           "dynamic_metadata": decode_struct(f[8][-1]) if 8 in f else None}
    payload = f[k][-1]
    if k in (1, 2, 3, 4):  # HeadersResponse / BodyResponse {response=1 CommonResponse}
        inner = fields(payload, {1}, out["kind"])
        out["common"] = decode_common(_last(inner, 1, b""))
    elif k in (5, 6):
        fields(payload, {1}, "TrailersResponse")
    elif k == 7:  # ImmediateResponse{status=1 HttpStatus{code=1}, headers=2, body=3, grpc_status=4, details=5}
        im = fields(payload, {1, 2, 3, 4, 5}, "ImmediateResponse")
        status = fields(_last(im, 1, b""), {1}, "HttpStatus")
        out["immediate"] = {"status": _last(status, 1, 0),
                            "headers": decode_header_mutation(_last(im, 2, b"")) if 2 in im else None,
                            "body": _last(im, 3, b"").decode(errors="replace"),
                            "details": _last(im, 5, b"").decode(errors="replace")}
    return out


def header(common, name):
    """The raw_value (else value) that a CommonResponse's header_mutation sets for `name`, or None."""
    hm = (common or {}).get("header_mutation") or {"set_headers": []}
    for h in hm["set_headers"]:
        if h["key"].lower() == name.lower():
            return h["raw_value"].decode() if h["raw_value"] else h["value"]
    return None


def decode_health_response(buf):
    return _last(fields(buf, {1}, "HealthCheckResponse"), 1, 0)  # HealthCheckResponse{status=1}
