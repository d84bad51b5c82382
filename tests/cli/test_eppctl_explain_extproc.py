"""`eppctl explain --ext-proc FILE`: replaying a captured ext_proc stream.

The capture is written in the format `eppctl serve --capture DIR` produces: one JSON line per
message, {"direction": "request"|"response", "message": <protobuf JSON>}. The request messages are
built with pyepp.extproc from a chat request split over three body chunks.
"""
import json
import pathlib

import pytest

pyepp = pytest.importorskip("pyepp")
from pyepp import extproc  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
POOL = ROOT / "examples" / "endpoints" / "pool.yaml"


def write_capture(tmp_path, body, subset=None, extra=()):
    capture = {"path": "/v1/chat/completions", "headers": {"x-request-id": "r1"}, "body": body}
    messages = extproc.requests_from_capture(capture, chunk_bytes=400, subset=subset)
    path = tmp_path / "stream.jsonl"
    with open(path, "w") as f:
        for m in messages:
            f.write(json.dumps({"direction": "request", "message": extproc.decode_request(m)}) + "\n")
            # A recorded answer in between must be skipped, not replayed.
            f.write(json.dumps({"direction": "response", "message": {}}) + "\n")
        for line in extra:
            f.write(line + "\n")
    return path, len(messages)


CHAT = {"model": "m", "messages": [{"role": "system", "content": "You are terse. " * 60},
                                   {"role": "user", "content": "hello"}]}


def test_replay_gives_the_decision_and_its_explanation(eppctl, tmp_path):
    path, n = write_capture(tmp_path, CHAT)
    assert n == 4  # headers + 3 body chunks
    r = eppctl("explain", "--ext-proc", str(path), "--endpoints", str(POOL), "-o", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["messages_replayed"] == n
    first = doc["responses"][0]["response"]
    # The headers response comes only after the last body chunk, as in FULL_DUPLEX_STREAMED.
    assert doc["responses"][0]["after_request_line"] == 2 * n - 1
    headers = first["request_headers"]["response"]["header_mutation"]["set_headers"]
    dest = [h for h in headers if h["header"]["key"] == "x-gateway-destination-endpoint"][0]
    import base64
    value = base64.b64decode(dest["header"]["raw_value"]).decode()
    meta = first["dynamic_metadata"]["envoy.lb"]["x-gateway-destination-endpoint"]
    assert value == meta == doc["explain"]["result"]["endpoint"]
    assert doc["explain"]["profiles"][0]["scores"], "the replayed pick carries its trace"


def test_text_output_and_subset_503(eppctl, tmp_path):
    path, _ = write_capture(tmp_path, CHAT)
    r = eppctl("explain", "--ext-proc", str(path), "--endpoints", str(POOL))
    assert r.returncode == 0, r.stderr
    assert "x-gateway-destination-endpoint:" in r.stdout and "won on" in r.stdout or "tie" in r.stdout
    path, _ = write_capture(tmp_path, CHAT, subset=["10.9.9.9:1"])
    r = eppctl("explain", "--ext-proc", str(path), "--endpoints", str(POOL), "-o", "json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["explain"]["result"]["status"] == 503
    assert doc["responses"][-1]["response"]["immediate_response"]["status"]["code"] == "ServiceUnavailable"


def test_bad_capture_lines_exit_2_naming_the_line(eppctl, tmp_path):
    path, n = write_capture(tmp_path, CHAT, extra=["not json"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    r = eppctl("explain", "--ext-proc", str(bad), "--endpoints", str(POOL))
    assert r.returncode == 2
    assert "bad.jsonl:1" in r.stderr
    r = eppctl("explain", "--ext-proc", str(tmp_path / "missing.jsonl"), "--endpoints", str(POOL))
    assert r.returncode == 2
    r = eppctl("explain", "--endpoints", str(POOL))  # neither --request nor --ext-proc
    assert r.returncode == 2
