"""pyepp.serve(config_text=...) with llm-d's flow control (featureGates: [flowControl]) over real
gRPC ext_proc: the same layer `eppctl serve` runs (tests/cli/test_eppctl_serve_flow_control.py),
in this process.

The pool is one endpoint and the concurrency-detector allows one request in flight on it: a
picked request holds the pool full until its response ends. A request over capacity waits with
its stream open and no answer, and goes out when capacity frees, the higher priority band first;
while it waits, /metrics on the handle's metrics port shows it in
llm_d_epp_flow_control_queue_size. Every wait is bounded; the fixture closes every channel and
handle.
"""

from __future__ import annotations

import queue
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

import pytest

import pyepp
from pyepp import extproc

grpc = pytest.importorskip("grpc")

from test_extproc import LOCAL, PROCESS, TIMEOUT, _identity, chat_capture, destination  # noqa: E402
from test_serve_runtime import vllm_metrics  # noqa: E402

ENDPOINT = "10.0.0.1:8000"
QUIET = 0.3  # seconds a held stream must stay silent
WAIT = 5.0  # seconds: bounds every wait for an answer or a gauge

CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates:
- flowControl
plugins:
- type: concurrency-detector
  parameters:
    maxConcurrency: 1
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
flowControl:
  defaultRequestTTL: 20s
  saturationDetector:
    pluginRef: concurrency-detector
  priorityBands:
  - priority: 10
  - priority: 0
"""

Answer = Union[Dict[str, Any], str, None]  # a decoded response, "silent", or None: the stream ended


class Held:
    """One ext_proc stream whose responses a reader thread collects, so that silence can be
    asserted with a bounded wait."""

    def __init__(self, channel: Any, name: str, objective: Optional[str] = None) -> None:
        self._in: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self._out: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue()
        process = channel.stream_stream(PROCESS, request_serializer=_identity, response_deserializer=_identity)
        self.call = process(iter(self._in.get, None), timeout=TIMEOUT)
        self._reader = threading.Thread(target=self._read, name=f"held-{name}", daemon=True)
        self._reader.start()
        capture = chat_capture(f"request {name}")
        capture["headers"]["x-request-id"] = name
        if objective:
            capture["headers"]["x-llm-d-inference-objective"] = objective
        for message in extproc.requests_from_capture(capture):
            self._in.put(message)

    def _read(self) -> None:
        try:
            for b in self.call:
                self._out.put(extproc.decode_response(b))
        except grpc.RpcError:
            pass
        self._out.put(None)

    def recv(self, timeout: float = WAIT) -> Answer:
        try:
            return self._out.get(timeout=timeout)
        except queue.Empty:
            return "silent"

    def silent(self) -> bool:
        return self.recv(QUIET) == "silent"

    def picked(self) -> None:
        first = self.recv()
        assert isinstance(first, dict), first
        assert destination(first) == ENDPOINT
        body = self.recv()
        assert isinstance(body, dict) and "request_body" in body, body

    def finish_response(self) -> None:
        answer = '{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}'
        for message in extproc.response_messages(200, {"content-type": "application/json"}, answer):
            self._in.put(message)
        headers, body = self.recv(), self.recv()
        assert isinstance(headers, dict) and "response_headers" in headers, headers
        assert isinstance(body, dict) and "response_body" in body, body
        self._in.put(None)  # half-close: the stream ends
        assert self.recv() is None
        self._reader.join(WAIT)

    def close(self) -> None:
        self._in.put(None)
        self.call.cancel()
        self._reader.join(WAIT)


@pytest.fixture
def fc_serve(tmp_path: Path) -> Iterator[Any]:
    """Starts pyepp.serve with CONFIG over ENDPOINT; closes streams, channels and the handle."""
    handles: List[pyepp.ServeHandle] = []
    channels: List[Any] = []
    streams: List[Held] = []

    class FlowControlServe:
        handle: pyepp.ServeHandle

        def start(self) -> pyepp.ServeHandle:
            metrics = tmp_path / "a.prom"
            metrics.write_text(vllm_metrics(0))
            self.handle = pyepp.serve(config_text=CONFIG, endpoint=[f"{ENDPOINT}={metrics}"],
                                      objective_priorities={"high": 10, "low": 0}, metrics_port=0,
                                      refresh_interval_s=0.02, log_level="error")
            handles.append(self.handle)
            ch = grpc.insecure_channel(f"127.0.0.1:{self.handle.port}", options=LOCAL)
            channels.append(ch)
            self.channel = ch
            return self.handle

        def held(self, name: str, objective: Optional[str] = None) -> Held:
            streams.append(Held(self.channel, name, objective))
            return streams[-1]

    yield FlowControlServe()
    for s in streams:
        s.close()
    for ch in channels:
        ch.close()
    for h in handles:
        h.close()


def queue_sizes(handle: pyepp.ServeHandle) -> Dict[str, float]:
    """llm_d_epp_flow_control_queue_size per priority band, as the metrics port serves it."""
    with urllib.request.urlopen(f"http://127.0.0.1:{handle.metrics_port}/metrics", timeout=WAIT) as r:
        text = r.read().decode()
    sizes: Dict[str, float] = {}
    for family in pyepp.parse_prometheus(text):
        for s in family.samples:
            if s.name == "llm_d_epp_flow_control_queue_size":
                band = s.labels.get("priority", "")
                sizes[band] = sizes.get(band, 0.0) + s.value
    return sizes


def wait_queued(handle: pyepp.ServeHandle, expected: Dict[str, float]) -> Dict[str, float]:
    """The queue gauge once its non-zero bands are `expected` (bounded); the last reading else."""
    deadline = time.monotonic() + WAIT
    while True:
        sizes = {band: v for band, v in queue_sizes(handle).items() if v}
        if sizes == expected or time.monotonic() > deadline:
            return sizes
        time.sleep(0.02)


def test_serve_holds_over_capacity_then_dispatches_by_priority(fc_serve: Any) -> None:
    h = fc_serve.start()
    assert h.scheduler is None and h.metrics_port
    a = fc_serve.held("a", "low")
    a.picked()  # the pool is now full: one in flight, maxConcurrency 1
    b = fc_serve.held("b", "low")
    assert b.silent()  # held: no answer on its stream
    assert wait_queued(h, {"0": 1}) == {"0": 1}
    c = fc_serve.held("c", "high")
    assert c.silent() and b.silent()
    # Both wait, one per band, and the gauge shows them on the metrics port.
    assert wait_queued(h, {"0": 1, "10": 1}) == {"0": 1, "10": 1}
    assert h.stats()["outcome_200"] == 1
    a.finish_response()  # capacity frees: the high band goes first, although it came last
    c.picked()
    assert b.silent()
    c.finish_response()
    b.picked()
    b.finish_response()
    assert wait_queued(h, {}) == {}
    assert h.stats()["outcome_200"] == 3


def test_serve_second_request_waits_for_the_first_response(fc_serve: Any) -> None:
    h = fc_serve.start()
    a = fc_serve.held("a")
    a.picked()
    b = fc_serve.held("b")
    assert b.silent()
    assert wait_queued(h, {"0": 1}) == {"0": 1}  # no objective: the default priority 0
    assert b.silent()  # still held while the first one's response has not ended
    a.finish_response()
    b.picked()
    b.finish_response()
    assert wait_queued(h, {}) == {}
