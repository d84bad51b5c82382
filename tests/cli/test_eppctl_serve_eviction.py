"""`eppctl serve` with llm-d's in-flight eviction (flowControl.enableEviction) over real gRPC.

One endpoint, one request in flight at most (concurrency-detector). A sheddable request
(priority < 0) that runs while a higher-priority request waits is evicted: its stream gets a 429
with x-llm-d-request-dropped-reason: evicted and ends, and the waiting request goes out. A
non-sheddable request is never evicted. Every wait is bounded.
"""
import pytest

grpc = pytest.importorskip("grpc")

import extproc_wire as wire  # noqa: E402
from conftest import _eppctl_path  # noqa: E402
from test_eppctl_serve import Serve, write_pool  # noqa: E402
from test_eppctl_serve_flow_control import CONFIG, ENDPOINT, POOL_NAME, Held, queued  # noqa: E402


@pytest.fixture
def evict_serve(eppctl, tmp_path):
    started = []

    def start(eviction=True):
        pool = write_pool(tmp_path / "pool", [(ENDPOINT, 0, 0, 0.0)])
        cfg = tmp_path / "flow-control.yaml"
        cfg.write_text(CONFIG % ("20s", "\n  enableEviction: true" if eviction else ""))
        s = Serve(_eppctl_path(), tmp_path, ["--endpoints", pool, "--config-file", cfg, "--objective", "high=10",
                                              "--objective", "low=0", "--objective", "batch=-1",
                                              "--refresh-metrics-interval", "20ms"])
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def evicted(held):
    answer = held.recv(5)
    assert answer not in ("silent", None), answer
    assert answer["kind"] == "immediate_response", answer
    assert answer["immediate"]["status"] == 429
    assert wire.header({"header_mutation": answer["immediate"]["headers"]}, "x-llm-d-request-dropped-reason") == "evicted"
    assert held.recv() is None  # the stream ends after the answer


def test_sheddable_request_is_evicted_for_a_waiting_higher_priority_one(evict_serve):
    s = evict_serve()
    ch = s.channel()
    batch = Held(ch, "batch-1", "batch")
    batch.picked()  # in flight: the pool is full
    high = Held(ch, "high-1", "high")
    evicted(batch)  # revoked to make room
    high.picked()  # the waiting request goes out once the capacity is back
    high.finish_response()
    assert queued(s) == 0
    assert s.metric("llm_d_epp_flow_control_revocations_issued_total", priority="10", inference_pool=POOL_NAME) == 1
    assert s.metric("llm_d_epp_flow_control_revocations_total", outcome="confirmed", inference_pool=POOL_NAME) == 1
    assert s.metric("epp_endpoint_inflight_requests", endpoint=ENDPOINT) == 0


def test_a_request_that_is_not_sheddable_is_never_evicted(evict_serve):
    s = evict_serve()
    ch = s.channel()
    low = Held(ch, "low-1", "low")
    low.picked()
    high = Held(ch, "high-1", "high")
    assert low.silent() and high.silent()  # priority 0 is not sheddable: the high one waits
    low.finish_response()
    high.picked()
    high.finish_response()
    assert s.metric("llm_d_epp_flow_control_revocations_total", outcome="confirmed", inference_pool=POOL_NAME) == 0


def test_without_enable_eviction_the_sheddable_request_runs_to_its_end(evict_serve):
    s = evict_serve(eviction=False)
    ch = s.channel()
    batch = Held(ch, "batch-1", "batch")
    batch.picked()
    high = Held(ch, "high-1", "high")
    assert batch.silent() and high.silent()
    batch.finish_response()
    high.picked()
    high.finish_response()
    assert "llm_d_epp_flow_control_revocations_total" not in {name for (name, _) in s.metrics()}
