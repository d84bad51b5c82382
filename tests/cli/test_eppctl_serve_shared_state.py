"""Two `eppctl serve` replicas sharing state through a real redis-server (issue #39).

The replicas (different seeds) route the same four endpoints, whose metrics are equal, so only
the prefix index tells them apart. A conversation's first turn goes through replica A, its
follow-up through replica B: with shared state B sends it where A sent the first turn. Then
Redis is SIGKILLed: both keep picking on their own state, say so on /metrics and in their log
once, and share again when Redis is back. redis-server runs on a Unix socket in the test's
folder and is stopped by its pid; every wait is bounded.
"""
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import pytest

grpc = pytest.importorskip("grpc")

from conftest import _eppctl_path  # noqa: E402
from test_eppctl_serve import MODEL, Serve, Stream, destination, pick, serve, write_pool  # noqa: E402,F401
import extproc_wire as wire  # noqa: E402
import json  # noqa: E402

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
ENDPOINTS = ["10.0.1.%d:8000" % i for i in range(1, 5)]

pytestmark = pytest.mark.skipif(not os.access(REDIS, os.X_OK),
                                reason="redis-server is not installed (scripts/setup installs it)")


class Redis:
    """redis-server on a Unix socket, no persistence; started and stopped by pid."""

    def __init__(self, directory):
        self.dir = pathlib.Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.socket = str(self.dir / "redis.sock")
        self.proc = None
        self.start()

    @property
    def url(self):
        return "unix://" + self.socket

    def start(self):
        self.proc = subprocess.Popen([REDIS, "--port", "0", "--unixsocket", self.socket, "--unixsocketperm", "700",
                                      "--save", "", "--appendonly", "no", "--dir", str(self.dir)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(1)
                    s.connect(self.socket)
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not answer in 10 s")
            time.sleep(0.02)

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def redis(tmp_path):
    r = Redis(tmp_path / "redis")
    yield r
    r.kill(signal.SIGTERM)


@pytest.fixture
def replicas(eppctl, tmp_path, redis):
    pool = write_pool(tmp_path / "pool", [(e, 0, 0, 0.1) for e in ENDPOINTS])
    started = []

    def start(seed, *extra):
        s = Serve(_eppctl_path(), tmp_path, ["--endpoints", pool, "--seed", seed, "--shared-state", redis.url,
                                             "--shared-state-interval", "20ms", "--shared-state-replica-id",
                                             "replica-%s" % seed, *extra])
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def conversation(i, follow_up=False):
    system = "You are assistant number %d. " % i + ("Conversation %d has a long shared history. " % i) * 60
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "First question of %d?" % i}]
    if follow_up:
        messages += [{"role": "assistant", "content": "An answer."}, {"role": "user", "content": "And then?"}]
    return json.dumps({"model": MODEL, "messages": messages, "max_tokens": 8}).encode()


def test_follow_ups_through_the_other_replica_land_where_the_first_turn_went(replicas):
    a, b = replicas(1), replicas(2)
    a.wait_metric("epp_shared_state_up", lambda v: v == 1)
    b.wait_metric("epp_shared_state_up", lambda v: v == 1)
    first = [destination(pick(a.channel(), conversation(i))[0]) for i in range(12)]
    b.wait_metric("epp_shared_state_prefix_applied_total", lambda v: v is not None and v >= 12)
    same = sum(destination(pick(b.channel(), conversation(i, follow_up=True))[0]) == first[i] for i in range(12))
    assert same >= 11, (same, first)
    assert a.metric("epp_shared_state_prefix_published_total") >= 12
    assert a.metric("epp_shared_state_errors_total") == 0


def test_both_replicas_keep_picking_after_redis_is_sigkilled_and_share_again_when_it_returns(replicas, redis):
    a, b = replicas(1), replicas(2)
    for s in (a, b):
        s.wait_metric("epp_shared_state_up", lambda v: v == 1)
        s.wait_metric("epp_shared_state_replicas", lambda v: v == 2)
    redis.kill(signal.SIGKILL)
    killed = time.monotonic()
    for s in (a, b):
        s.wait_metric("epp_shared_state_up", lambda v: v == 0)
    down_after = time.monotonic() - killed
    slowest = 0.0
    for i in range(10):
        for s in (a, b):
            t = time.monotonic()
            dest = destination(pick(s.channel(), conversation(100 + i))[0])
            slowest = max(slowest, time.monotonic() - t)
            assert dest in ENDPOINTS
    for s in (a, b):
        assert s.metric("epp_shared_state_errors_total") >= 1
        # Said once, not per failed round.
        assert s.log().count("routes on its own state until Redis answers again") == 1, s.log()
    redis.start()
    restarted = time.monotonic()
    for s in (a, b):
        s.wait_metric("epp_shared_state_up", lambda v: v == 1, timeout=15)
        s.wait_metric("epp_shared_state_replicas", lambda v: v == 2, timeout=15)
    print("\nredis SIGKILL: both down after %.2f s; 20 of 20 picks meanwhile, slowest %.3f s; both sharing again "
          "%.2f s after the restart" % (down_after, slowest, time.monotonic() - restarted))
    assert "answers again" in a.log()
    # Sharing works again: the 10 updates a queued while Redis was away reach b, then a new
    # conversation's follow-up through b lands where a sent its first turn.
    first = destination(pick(a.channel(), conversation(500))[0])
    b.wait_metric("epp_shared_state_prefix_applied_total", lambda v: v is not None and v >= 11)
    assert destination(pick(b.channel(), conversation(500, follow_up=True))[0]) == first


def test_a_replica_started_without_redis_serves_and_joins_when_redis_comes(eppctl, tmp_path):
    pool = write_pool(tmp_path / "pool", [(e, 0, 0, 0.1) for e in ENDPOINTS])
    sock = tmp_path / "later" / "redis.sock"
    s = Serve(_eppctl_path(), tmp_path, ["--endpoints", pool, "--shared-state", "unix://%s" % sock,
                                         "--shared-state-interval", "20ms"])
    try:
        assert destination(pick(s.channel(), conversation(1))[0]) in ENDPOINTS
        assert s.metric("epp_shared_state_up") == 0
        r = Redis(tmp_path / "later")
        try:
            s.wait_metric("epp_shared_state_up", lambda v: v == 1, timeout=15)
        finally:
            r.kill(signal.SIGTERM)
    finally:
        s.close()


def test_bad_shared_state_settings_exit_2_naming_the_flag(eppctl, tmp_path):
    pool = write_pool(tmp_path / "pool", [(e, 0, 0, 0.1) for e in ENDPOINTS])
    r = eppctl("serve", "--endpoints", str(pool), "--shared-state", "http://nope", "--grpc-port", "0")
    assert r.returncode == 2
    assert "--shared-state" in r.stderr and "http" in r.stderr
    r = eppctl("serve", "--endpoints", str(pool), "--shared-state-key-prefix", "x:", "--grpc-port", "0")
    assert r.returncode == 2
    assert "--shared-state" in r.stderr
    r = eppctl("serve", "--endpoints", str(pool), "--shared-state", "redis://127.0.0.1:1",
               "--shared-state-password-file", str(tmp_path / "missing"), "--grpc-port", "0")
    assert r.returncode == 2
    assert "--shared-state-password-file" in r.stderr


def open_pick(channel, body):
    """A picked request whose stream stays open (in flight) until the returned Stream closes."""
    s = Stream(channel)
    s.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
    first = s.recv()
    assert destination(first) in ENDPOINTS
    return s


def test_drill_a_replica_killed_with_requests_in_flight_stops_counting_after_the_expiry(replicas):
    a, b = replicas(1), replicas(2)
    for s in (a, b):
        s.wait_metric("epp_shared_state_replicas", lambda v: v == 2)
    streams = [open_pick(a.channel(), conversation(300 + i)) for i in range(3)]
    b.wait_metric("epp_shared_state_remote_inflight_requests", lambda v: v == 3)
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait(timeout=10)
    killed = time.monotonic()
    # No goodbye: the counts go with their key's expiry (max(1 s, 20 x 20 ms) = 1 s).
    b.wait_metric("epp_shared_state_remote_inflight_requests", lambda v: v == 0, timeout=10)
    gone = time.monotonic() - killed
    assert gone >= 0.5
    b.wait_metric("epp_shared_state_replicas", lambda v: v == 1, timeout=10)
    print("\nreplica SIGKILLed with 3 requests in flight: the other stopped counting them after %.2f s" % gone)
    for s in streams:
        s.call.cancel()


def test_drill_redis_that_stops_answering_costs_picks_nothing(replicas, redis):
    """A partition: the connection stays open but nothing answers (SIGSTOP). Rounds time out
    (--shared-state-timeout), picks go on at their usual speed, sharing resumes on SIGCONT."""
    a, b = replicas(1, "--shared-state-timeout", "200ms"), replicas(2, "--shared-state-timeout", "200ms")
    for s in (a, b):
        s.wait_metric("epp_shared_state_replicas", lambda v: v == 2)
    held = open_pick(a.channel(), conversation(400))
    b.wait_metric("epp_shared_state_remote_inflight_requests", lambda v: v == 1)
    redis.proc.send_signal(signal.SIGSTOP)
    try:
        stopped = time.monotonic()
        for s in (a, b):
            s.wait_metric("epp_shared_state_up", lambda v: v == 0, timeout=10)
        down_after = time.monotonic() - stopped
        assert b.metric("epp_shared_state_remote_inflight_requests") == 0  # stale counts dropped
        started = time.monotonic()
        for i in range(10):
            assert destination(pick(b.channel(), conversation(410 + i))[0]) in ENDPOINTS
        # Ten picks through a gRPC round trip each; nothing waited on the silent Redis.
        took = time.monotonic() - started
        assert took < 5
        print("\nredis SIGSTOPped: both down after %.2f s; 10 picks took %.3f s" % (down_after, took))
    finally:
        redis.proc.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    for s in (a, b):
        s.wait_metric("epp_shared_state_up", lambda v: v == 1, timeout=15)
    b.wait_metric("epp_shared_state_remote_inflight_requests", lambda v: v == 1, timeout=10)
    print("redis SIGCONT: counts shared again after %.2f s" % (time.monotonic() - resumed))
    held.call.cancel()


def test_precise_index_copy_in_redis_makes_a_new_replica_warm(serve, redis, tmp_path):
    """llm-d's redisConfig: the first replica's precise index is copied to Redis; a replica started
    later, whose servers offer no replay, knows their blocks at once from the copy (a replica
    without the copy knows none) and routes the prompt where its blocks are."""
    from test_eppctl_serve_kv import PRECISE_CONFIG, SYSTEM, KvSim, request_body
    sims = [KvSim("--seed", "5"), KvSim("--seed", "6")]
    try:
        with_copy = tmp_path / "precise-redis.yaml"
        with_copy.write_text(PRECISE_CONFIG.replace(
            "    tokenProcessorConfig: {blockSize: 16}\n",
            "    tokenProcessorConfig: {blockSize: 16}\n"
            "    indexerConfig: {kvBlockIndexConfig: {redisConfig: {address: '%s'}}}\n" % redis.url))
        without = tmp_path / "precise.yaml"
        without.write_text(PRECISE_CONFIG)
        endpoints = tmp_path / "endpoints-no-replay.yaml"  # no replay: a late replica cannot catch up
        endpoints.write_text("endpoints:\n" + "".join(
            "  - {address: %s, kvEvents: '%s'}\n" % (s.address, s.kv) for s in sims))
        first = serve("--config", with_copy, "--endpoints", endpoints)
        first.wait_metric("epp_kv_redis_up", lambda v: v == 1)
        time.sleep(0.3)  # the SUB sockets finish connecting
        sims[0].chat(SYSTEM, "warm the first server")
        first.wait_metric("epp_endpoint_kv_blocks", lambda v: v is not None and v >= 20, endpoint=sims[0].address)
        first.wait_metric("epp_kv_redis_written_total", lambda v: v is not None and v >= 20)
        late = serve("--config", with_copy, "--endpoints", endpoints)
        cold = serve("--config", without, "--endpoints", endpoints)
        assert late.metric("epp_kv_redis_loaded_holders") >= 20
        assert late.metric("epp_endpoint_kv_blocks", endpoint=sims[0].address) >= 20
        assert cold.metric("epp_endpoint_kv_blocks", endpoint=sims[0].address) in (None, 0)
        for i in range(4):
            assert destination(pick(late.channel(), request_body("late question %d" % i))[0]) == sims[0].address
        assert "holders restored from" in late.log()
    finally:
        for s in sims:
            s.stop()
