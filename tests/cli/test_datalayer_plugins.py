"""llm-d's data-layer types under `eppctl serve`, against simulators on their own loopback
addresses: llm-d-router's GPU-utilization config (dcgm-data-source + dcgm-extractor feeding
endpoint-attribute-filter/-scorer), read from each simulator's DCGM exporter (`eppctl sim
--dcgm-port`) by the pool's scrape loop. Every process is stopped by its own handle; every wait is
bounded.
"""
import json
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("grpc")

from conftest import _eppctl_path  # noqa: E402
from test_eppctl_serve import MODEL, chat_body, destination, pick, serve  # noqa: E402,F401


class DcgmSim:
    """`eppctl sim` on HOST with a DCGM exporter; `.address` serves, `.dcgm_port` exports."""

    def __init__(self, host, dcgm_port, *args):
        self.proc = subprocess.Popen([_eppctl_path(), "sim", "--host", host, "--port", "0", "--dcgm-port", str(dcgm_port),
                                      *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://(\S+) dcgm http://[^:]+:(\d+)/metrics", line)
        if not m:
            self.stop()
            raise RuntimeError("eppctl sim: %r" % line)
        self.address, self.dcgm_port = m.group(1), int(m.group(2))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def gpu_sims():
    started = []
    try:
        a = DcgmSim("127.0.0.2", 0, "--max-running", "2")
        started.append(a)
        # The second exporter on the same port at its own address, as every Pod's sidecar is on 9400.
        started.append(DcgmSim("127.0.0.3", a.dcgm_port, "--max-running", "2"))
        yield started
    finally:
        for s in started:
            s.stop()


def gpu_config(port):
    """llm-d-router's deploy/config/sim-epp-gpu-config.yaml, the exporter's port made a parameter."""
    return """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: dcgm-data-source
  name: dcgm-source
  parameters:
    port: %d
    interval: "1s"
- type: dcgm-extractor
  name: dcgm-extractor
- type: endpoint-attribute-filter
  name: gpu-utilization-filter
  parameters:
    attribute: "GPUUtilization"
    producer: "dcgm-extractor"
    onMissing: "Pass"
    fallbackOnEmpty: true
    algorithm:
      type: "threshold"
      threshold:
        operator: "LessThanOrEqual"
        value: 0.90
- type: endpoint-attribute-scorer
  name: gpu-utilization-scorer
  parameters:
    attributeKey: "GPUUtilization"
    producer: "dcgm-extractor"
    algorithm:
      type: "linear_lower_is_better"
      normalization:
        fixedRange:
          min: 0.0
          max: 1.0
- type: kv-cache-utilization-scorer
- type: max-score-picker
- type: single-profile-handler
- type: decode-filter
dataLayer:
  sources:
  - pluginRef: dcgm-source
    extractors:
    - pluginRef: dcgm-extractor
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: gpu-utilization-filter
  - pluginRef: gpu-utilization-scorer
    weight: 2.0
  - pluginRef: kv-cache-utilization-scorer
    weight: 1.0
  - pluginRef: max-score-picker
""" % port


def load(address, n):
    """n long completions on `address`, each on its own thread; they end when the sim stops."""
    def one():
        body = json.dumps({"model": MODEL, "prompt": "busy", "max_tokens": 20000}).encode()
        req = urllib.request.Request("http://%s/v1/completions" % address, data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                r.read()
        except (urllib.error.URLError, OSError):
            pass
    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


def dcgm_util(address, port):
    host = address.rsplit(":", 1)[0]
    with urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=5) as r:
        text = r.read().decode()
    return float(re.search(r"^DCGM_FI_DEV_GPU_UTIL\{[^}]*\} (\S+)$", text, re.M).group(1))


def test_gpu_utilization_config_routes_away_from_the_busy_gpu(serve, gpu_sims, tmp_path):
    a, b = gpu_sims
    config = tmp_path / "gpu.yaml"
    config.write_text(gpu_config(a.dcgm_port))
    pool = tmp_path / "endpoints.yaml"
    pool.write_text("endpoints:\n  - address: %s\n  - address: %s\n" % (a.address, b.address))
    s = serve("--config", config, "--endpoints", pool, "--decision-log", "100")
    assert "dataLayer" not in s.log(), s.log()  # the section is implemented: no "not implemented" warning
    ch = s.channel()
    text = ""

    # a's batch of 2 fills: its exporter reports 100%, b's 0.
    load(a.address, 2)
    deadline = time.monotonic() + 10
    while dcgm_util(a.address, a.dcgm_port) < 100:
        assert time.monotonic() < deadline, "the simulator's exporter never showed the load"
        time.sleep(0.05)
    assert dcgm_util(b.address, b.dcgm_port) == 0

    # The dcgm source reads every 1 s: within a few seconds the filter removes a (its kv-cache
    # score alone would also favour b, so the decision log is what shows the filter at work).
    deadline = time.monotonic() + 8
    while True:
        assert time.monotonic() < deadline, "the filter never removed the busy GPU\n" + text + s.log()
        first, _ = pick(ch, chat_body("where to?"))
        _, listing = s.http("/debug/decisions?limit=1")
        last = json.loads(listing)["decisions"][0]["id"]
        _, one = s.http("/debug/decisions?id=%d" % last)
        text = json.loads(one)["decision"]["explain_text"]
        if "gpu-utilization-filter (endpoint-attribute-filter): kept 1, removed 1" in text:
            break
        time.sleep(0.1)
    assert destination(first) == b.address
    # a left at the filter on the exporter's 100%; b was scored on its 0%, alone.
    assert "- %s  GPUUtilization = 1, not <= 0.9" % a.address in text, text
    assert "%s  gpu-utilization-scorer: GPUUtilization = 0 (lower is better" % b.address in text, text
    assert "runner-up" not in text, text
    for _ in range(5):
        first, _ = pick(ch, chat_body("and now?"))
        assert destination(first) == b.address


def test_file_discovery_lists_the_endpoints_for_serve_and_follows_the_file(serve, gpu_sims, tmp_path):
    a, b = gpu_sims
    listing = tmp_path / "endpoints.yaml"

    def write(*sims):
        text = "endpoints:\n" + "".join(
            '- name: vllm-%d\n  address: "%s"\n  port: "%s"\n' % ((i,) + tuple(s.address.rsplit(":", 1)))
            for i, s in enumerate(sims))
        tmp = tmp_path / "endpoints.tmp"
        tmp.write_text(text)
        tmp.rename(listing)  # atomic, as an editor's safe write

    write(a, b)
    config = tmp_path / "discovery.yaml"
    config.write_text("""apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: file-discovery
  parameters:
    path: %s
    watchFile: true
- type: queue-scorer
- type: max-score-picker
dataLayer:
  discovery:
    pluginRef: file-discovery
""" % listing)
    s = serve("--config", config)  # no --endpoints: the configuration lists them
    ch = s.channel()
    seen = set()
    for i in range(20):
        first, _ = pick(ch, chat_body("hello %d" % i))
        seen.add(destination(first))
    assert seen <= {a.address, b.address} and seen, seen

    write(b)  # a leaves the file: it leaves the pool
    deadline = time.monotonic() + 8
    streak = 0
    while streak < 10:
        assert time.monotonic() < deadline, "the pool never followed the file\n" + s.log()
        first, _ = pick(ch, chat_body("again"))
        streak = streak + 1 if destination(first) == b.address else 0
    assert "file-discovery %s: endpoints file changed, reloading" % listing in s.log(), s.log()
