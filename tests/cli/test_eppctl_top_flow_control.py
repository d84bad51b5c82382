"""`eppctl top --once` shows the flow-control layer of an `eppctl serve` with
featureGates: [flowControl] in front of one `eppctl sim` on loopback: the queued requests per band
and per flow (tenant), the totals, and after the waiting clients leave, their outcome. A serve
without the layer shows no such section. Every process is stopped by pid (the fixtures)."""
import queue
import threading
import time

import pytest

grpc = pytest.importorskip("grpc")

import extproc_wire as wire  # noqa: E402
from conftest import _eppctl_path  # noqa: E402
from test_eppctl_serve import Serve, chat_body, destination  # noqa: E402
from test_eppctl_serve_flow_control import CONFIG, Held  # noqa: E402

NO_FLOW_CONTROL = CONFIG.replace("featureGates:\n- flowControl\n", "")


class Tenant(Held):
    """Held (one ext_proc stream read by a thread) whose request names a fairness id."""

    def __init__(self, channel, content, tenant, objective):  # Held's own sends no fairness id
        self._in = queue.Queue()
        self._out = queue.Queue()
        process = channel.stream_stream(wire.PROCESS_METHOD, request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
        self.call = process(iter(self._in.get, None), timeout=30)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        body = chat_body(content)
        headers = [("x-request-id", content), ("x-llm-d-inference-objective", objective),
                   ("x-llm-d-inference-fairness-id", tenant)]
        self._in.put(wire.chat_request(body, extra_headers=headers))
        self._in.put(wire.request_body(body, end_of_stream=True))


@pytest.fixture
def sim_serve(sim, tmp_path):
    started = []
    server = sim("--time-scale", "0.01")
    address = server.url[len("http://"):]
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n  - address: %s\n" % address)

    def start(config_text):
        cfg = tmp_path / ("config-%d.yaml" % len(started))
        cfg.write_text(config_text % ("20s", ""))
        s = Serve(_eppctl_path(), tmp_path, ["--endpoints", endpoints, "--config-file", cfg, "--objective", "high=10",
                                              "--objective", "low=0", "--refresh-metrics-interval", "20ms"])
        started.append(s)
        return s

    start.address = address
    yield start
    for s in started:
        s.close()


def top(eppctl, s):
    r = eppctl("top", "--target", "127.0.0.1:%d" % s.metrics_port, "--once", "--interval", "0.2", "--width", "160",
               "--height", "40")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 40 and all(len(line) <= 160 for line in lines), r.stdout
    return r.stdout, lines


def queued(s):
    return sum(v for (name, _), v in s.metrics().items() if name == "llm_d_epp_flow_control_queue_size")


def test_top_shows_the_flow_control_queues(sim_serve, eppctl):
    s = sim_serve(CONFIG)
    ch = s.channel()
    a = Tenant(ch, "a", "tenant-a", "low")
    first = a.recv()
    assert first not in ("silent", None) and destination(first) == sim_serve.address, first
    assert a.recv()["kind"] == "request_body"  # picked: the pool is full (maxConcurrency 1)
    held = [Tenant(ch, "b", "tenant-a", "low"), Tenant(ch, "c", "tenant-a", "low"), Tenant(ch, "d", "tenant-b", "high")]
    deadline = time.monotonic() + 10
    while queued(s) != 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert queued(s) == 3

    out, lines = top(eppctl, s)
    assert any(line.startswith(sim_serve.address) for line in lines), out  # the endpoints table
    section = next(i for i, line in enumerate(lines) if line.startswith("FLOW CONTROL"))
    decisions = next(i for i, line in enumerate(lines) if line.startswith("DECISIONS"))
    assert section < decisions, out
    assert "saturation 1.00" in lines[section], out  # one request in flight of maxConcurrency 1
    assert lines[section + 1].split()[:5] == ["BAND", "QUEUED", "BYTES", "REQ%", "BYTES%"], out
    rows = [line.split() for line in lines[section + 2:section + 5]]
    # Left: band 10 (one), band 0 (two), the layer's totals; right: tenant-a (band 0, two), tenant-b.
    assert [r[:2] for r in rows] == [["10", "1"], ["0", "2"], ["all", "3"]], out
    assert [r[6:9] for r in rows[:2]] == [["tenant-a", "0", "2"], ["tenant-b", "10", "1"]], out
    assert "dropped/s (total): none" in lines[section + 5] and "dispatched/s" in lines[section + 5], out

    # The waiting clients leave: the queues empty and their outcome is counted.
    for h in held:
        h.cancel()
    deadline = time.monotonic() + 10
    while queued(s) != 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert queued(s) == 0
    a.finish_response()
    out, lines = top(eppctl, s)
    section = next(i for i, line in enumerate(lines) if line.startswith("FLOW CONTROL"))
    block = "\n".join(lines[section:section + 6])
    assert "(no requests queued)" in block, out
    assert "EvictedContextCancelled 0.0 (3)" in block, out  # all three left before both polls
    assert any(line.split()[:2] == ["all", "0"] for line in lines[section:section + 6]), out


def test_top_without_the_layer_has_no_flow_control_section(sim_serve, eppctl):
    s = sim_serve(NO_FLOW_CONTROL)
    out, lines = top(eppctl, s)
    assert any(line.startswith(sim_serve.address) for line in lines), out
    assert "FLOW CONTROL" not in out and "DECISIONS" in out, out
