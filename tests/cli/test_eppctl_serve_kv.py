"""`eppctl serve` with the precise prefix producer, fed by the KV-cache events `eppctl sim`
publishes over real ZeroMQ sockets on 127.0.0.1 (issue #13).

A prompt sent to simulator A directly (not through the EPP) makes A store its blocks and publish
them; the EPP then sends the next request sharing that prefix to A. When A evicts those blocks,
the preference goes. Two serve replicas subscribed to the same simulators pick alike.
"""
import json
import os
import pathlib
import re
import subprocess
import time
import urllib.request

import pytest

from conftest import _eppctl_path
from test_eppctl_serve import Serve, chat_body, destination, pick, serve  # noqa: F401

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SYSTEM = ("You are the support assistant of ACME Corp. Answer briefly, cite the manual, never invent part "
          "numbers, and keep every answer under one hundred words. ") * 12

PRECISE_CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: endpoint-notification-source
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSize: 16}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: prefix-cache-scorer, weight: 3}
  - {pluginRef: queue-scorer, weight: 1}
  - pluginRef: max-score-picker
"""


class KvSim:
    """`eppctl sim` publishing KV events (and serving replays) on free loopback ports."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([_eppctl_path(), "sim", "--port", "0", "--kv-events", "tcp://127.0.0.1:0",
                                      "--kv-events-replay", "tcp://127.0.0.1:0", *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://\S+) kv-events (tcp://\S+) kv-events-replay (tcp://\S+)", line)
        if not m:
            self.stop()
            raise RuntimeError("eppctl sim did not start with KV events: %r" % line)
        self.url, self.kv, self.replay = m.groups()
        self.address = self.url[len("http://"):]

    def chat(self, system, question, max_tokens=4):
        body = json.dumps({"model": MODEL, "max_tokens": max_tokens,
                           "messages": [{"role": "system", "content": system},
                                        {"role": "user", "content": question}]}).encode()
        req = urllib.request.Request(self.url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def complete(self, prompt, max_tokens=4):
        body = json.dumps({"model": MODEL, "max_tokens": max_tokens, "prompt": prompt}).encode()
        req = urllib.request.Request(self.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def kv_sims():
    started = []

    def start(*args):
        s = KvSim(*args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def precise_files(tmp_path, sims):
    config = tmp_path / "precise.yaml"
    config.write_text(PRECISE_CONFIG)
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints:\n" + "".join(
        "  - {address: %s, kvEvents: '%s', kvEventsReplay: '%s'}\n" % (s.address, s.kv, s.replay) for s in sims))
    return config, endpoints


def request_body(question):
    return json.dumps({"model": MODEL, "max_tokens": 4,
                       "messages": [{"role": "system", "content": SYSTEM},
                                    {"role": "user", "content": question}]}).encode()


def wait_blocks(s, endpoint, pred, timeout=15):
    return s.wait_metric("epp_endpoint_kv_blocks", pred, timeout=timeout, endpoint=endpoint)


def test_a_prompt_sent_directly_to_a_server_steers_the_next_pick_there(serve, kv_sims, tmp_path):  # noqa: F811
    # Small caches, so that other prompts evict the first one's blocks.
    a = kv_sims("--kv-blocks", "96", "--seed", "1")
    b = kv_sims("--kv-blocks", "96", "--seed", "2")
    config, endpoints = precise_files(tmp_path, [a, b])
    s = serve("--config", config, "--endpoints", endpoints, "--refresh-metrics-interval", "50ms")
    # Subscribed and caught up (the replay of an empty history) before anything is sent.
    for sim in (a, b):
        s.wait_metric("epp_endpoint_kv_replays_total", lambda v: v is not None and v >= 1, endpoint=sim.address)
    time.sleep(0.2)  # the SUB sockets finish connecting
    a.chat(SYSTEM, "first question, sent to A directly")
    blocks = wait_blocks(s, a.address, lambda v: v is not None and v >= 20)
    assert s.metric("epp_endpoint_kv_blocks", endpoint=b.address) in (None, 0)
    for i in range(6):
        first, _ = pick(s.channel(), request_body("question %d through the EPP" % i))
        assert destination(first) == a.address
    # A evicts the system prompt's blocks (96 blocks hold little more than one such prompt).
    for i in range(4):
        a.chat(("Unrelated context number %d. " % i) * 60, "something else %d" % i)
    s.wait_metric("epp_endpoint_kv_events_total", lambda v: v is not None and v > 4, endpoint=a.address)
    time.sleep(0.3)
    dests = [destination(pick(s.channel(), request_body("after eviction %d" % i))[0]) for i in range(24)]
    assert set(dests) == {a.address, b.address}, dests  # no preference left: ties split
    assert s.metric("epp_endpoint_kv_malformed_total", endpoint=a.address) == 0
    assert blocks >= 20


def test_two_replicas_pick_alike(serve, kv_sims, tmp_path):  # noqa: F811
    a = kv_sims("--seed", "3")
    b = kv_sims("--seed", "4")
    config, endpoints = precise_files(tmp_path, [a, b])
    # The servers are warmed before the second replica starts: it learns their blocks by replay.
    r1 = serve("--config", config, "--endpoints", endpoints, "--seed", "7")
    for sim in (a, b):
        r1.wait_metric("epp_endpoint_kv_replays_total", lambda v: v is not None and v >= 1, endpoint=sim.address)
    time.sleep(0.2)
    a.chat(SYSTEM, "warm A")
    b.chat(SYSTEM.replace("ACME", "Globex"), "warm B")
    r2 = serve("--config", config, "--endpoints", endpoints, "--seed", "7")
    for r in (r1, r2):
        wait_blocks(r, a.address, lambda v: v is not None and v >= 20)
        wait_blocks(r, b.address, lambda v: v is not None and v >= 20)
    prompts = [(SYSTEM if i % 3 else SYSTEM.replace("ACME", "Globex"), "q%d" % i) for i in range(12)]

    def body(p):
        return json.dumps({"model": MODEL, "max_tokens": 4, "messages": [
            {"role": "system", "content": p[0]}, {"role": "user", "content": p[1]}]}).encode()

    picks1 = [destination(pick(r1.channel(), body(p))[0]) for p in prompts]
    picks2 = [destination(pick(r2.channel(), body(p))[0]) for p in prompts]
    assert picks1 == picks2
    assert picks1.count(a.address) == 8 and picks1.count(b.address) == 4, picks1


def test_explain_shows_the_blocks_each_server_really_holds(eppctl, kv_sims, tmp_path):
    a = kv_sims("--seed", "5")
    b = kv_sims("--seed", "6")
    config, endpoints = precise_files(tmp_path, [a, b])
    a.chat(SYSTEM, "sent to A directly")  # before explain runs: it learns this by replay
    req = tmp_path / "request.json"
    req.write_text(json.dumps({"path": "/v1/chat/completions",
                               "body": json.loads(request_body("does A hold my prefix?"))}))
    r = eppctl("explain", "--config", config, "--endpoints", endpoints, "-r", req)
    assert r.returncode == 0, r.stderr
    assert "x-gateway-destination-endpoint: %s" % a.address in r.stdout or a.address in r.stdout
    line = next(l for l in r.stdout.splitlines() if l.startswith("kv events  %s" % a.address))
    held = int(re.search(r"  (\d+) blocks", line).group(1))
    assert held >= 20, line
    assert "GPU %d" % held in line and "replay" in line, line
    other = next(l for l in r.stdout.splitlines() if l.startswith("kv events  %s" % b.address))
    assert "  0 blocks" in other, other
    j = eppctl("explain", "--config", config, "--endpoints", endpoints, "-o", "json", "-r", req)
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    assert doc["decision"]["header"]["x-gateway-destination-endpoint"] == a.address
    rows = {row["endpoint"]: row for row in doc["kv_events"]}
    assert rows[a.address]["blocks"] == held and rows[a.address]["replays"] >= 1
    assert rows[b.address]["blocks"] == 0


def test_vllm_token_backend_asks_the_server_for_its_tokens(serve, eppctl, kv_sims, tmp_path):  # noqa: F811
    # Servers whose tokenizer is not the estimate: their KV events carry word tokens, which only
    # an EPP that asks a server to render the request (token-producer's vllm backend) computes.
    a = kv_sims("--tokenizer", "words", "--seed", "8")
    b = kv_sims("--tokenizer", "words", "--seed", "9")
    _, endpoints = precise_files(tmp_path, [a, b])
    vllm = tmp_path / "vllm.yaml"
    vllm.write_text(PRECISE_CONFIG.replace("- type: token-producer\n", "- type: token-producer\n  parameters:\n"
                                           "    vllm: {url: '%s', timeout: 2s}\n" % a.url))
    estimate = tmp_path / "estimate.yaml"
    estimate.write_text(PRECISE_CONFIG)
    s = serve("--config", vllm, "--endpoints", endpoints, "--refresh-metrics-interval", "50ms")
    for sim in (a, b):
        s.wait_metric("epp_endpoint_kv_replays_total", lambda v: v is not None and v >= 1, endpoint=sim.address)
    time.sleep(0.2)
    b.chat(SYSTEM, "sent to B directly")
    wait_blocks(s, b.address, lambda v: v is not None and v >= 5)
    for i in range(6):
        first, _ = pick(s.channel(), request_body("question %d through the EPP" % i))
        assert destination(first) == b.address
    assert s.metric("epp_tokenizer_calls_total", plugin="token-producer") == 6
    assert s.metric("epp_tokenizer_requests_total", plugin="token-producer", backend="vllm") == 6
    assert s.metric("epp_tokenizer_fallbacks_total", plugin="token-producer", reason="timeout") == 0

    req = tmp_path / "request.json"
    req.write_text(json.dumps({"path": "/v1/chat/completions",
                               "body": json.loads(request_body("does B hold my prefix?"))}))
    j = eppctl("explain", "--config", vllm, "--endpoints", endpoints, "-o", "json", "-r", req)
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    assert doc["request"]["tokens"]["source"] == "vllm", doc["request"]
    assert doc["decision"]["header"]["x-gateway-destination-endpoint"] == b.address
    t = eppctl("explain", "--config", vllm, "--endpoints", endpoints, "-r", req)
    assert re.search(r"^tokens +\d+ from vllm$", t.stdout, re.M), t.stdout
    # The estimate's ids match nothing these servers hold.
    e = eppctl("explain", "--config", estimate, "--endpoints", endpoints, "-o", "json", "-r", req)
    assert e.returncode == 0, e.stderr
    edoc = json.loads(e.stdout)
    assert edoc["request"]["tokens"]["source"] == "estimate"
    assert edoc["request"]["tokens"]["count"] != doc["request"]["tokens"]["count"]


LLAMA = pathlib.Path(os.environ.get("EPP_NPM_CACHE", pathlib.Path.home() / ".cache" / "epp-npm")) / \
    "node_modules" / "@lenml" / "tokenizer-llama3_1" / "models"


def test_local_token_backend_routes_as_vllm_does_without_asking_the_server(serve, eppctl, kv_sims, tmp_path):  # noqa: F811
    # Servers tokenizing with the real Llama 3.1 tokenizer (their KV events carry its ids): epp's
    # in-process tokenizer (token-producer's local backend) computes the same blocks as asking the
    # server (the vllm backend), without a single call to it.
    if not (LLAMA / "tokenizer.json").exists():
        pytest.skip(f"no {LLAMA} (scripts/setup installs the npm test data)")
    a = kv_sims("--tokenizer", LLAMA, "--seed", "8")
    b = kv_sims("--tokenizer", LLAMA, "--seed", "9")
    _, endpoints = precise_files(tmp_path, [a, b])
    local = tmp_path / "local.yaml"
    local.write_text(PRECISE_CONFIG.replace("- type: token-producer\n", "- type: token-producer\n  parameters:\n"
                                            "    local: {tokenizer: '%s'}\n" % LLAMA))
    vllm = tmp_path / "vllm.yaml"
    vllm.write_text(PRECISE_CONFIG.replace("- type: token-producer\n", "- type: token-producer\n  parameters:\n"
                                           "    vllm: {url: '%s', timeout: 2s}\n" % a.url))
    servers = {"local": serve("--config", local, "--endpoints", endpoints, "--refresh-metrics-interval", "50ms"),
               "vllm": serve("--config", vllm, "--endpoints", endpoints, "--refresh-metrics-interval", "50ms")}
    for s in servers.values():
        for sim in (a, b):
            s.wait_metric("epp_endpoint_kv_replays_total", lambda v: v is not None and v >= 1, endpoint=sim.address)
    time.sleep(0.2)
    b.complete(SYSTEM + "Question sent to B directly.")
    for s in servers.values():
        wait_blocks(s, b.address, lambda v: v is not None and v >= 5)
    for i in range(4):
        body = json.dumps({"model": MODEL, "max_tokens": 4, "prompt": SYSTEM + "Question %d through the EPP." % i}).encode()
        for name, s in servers.items():
            first, _ = pick(s.channel(), body, path="/v1/completions")
            assert destination(first) == b.address, name
    # Chat requests: the servers render them with Llama 3.1's chat template (beside its
    # tokenizer.json) and so does epp's local backend; A holds a conversation's blocks.
    chat_system = "Chat mode. " + SYSTEM
    a.chat(chat_system, "Sent to A directly.")
    for s in servers.values():
        wait_blocks(s, a.address, lambda v: v is not None and v >= 5)
    for i in range(3):
        body = json.dumps({"model": MODEL, "max_tokens": 4, "messages": [
            {"role": "system", "content": chat_system}, {"role": "user", "content": "Chat question %d." % i}]}).encode()
        for name, s in servers.items():
            first, _ = pick(s.channel(), body, path="/v1/chat/completions")
            assert destination(first) == a.address, name
    s = servers["local"]
    assert s.metric("epp_tokenizer_requests_total", plugin="token-producer", backend="local") == 7
    assert s.metric("epp_tokenizer_calls_total", plugin="token-producer") == 0
    for reason in ("model", "template", "answer", "no-body", "api"):
        assert s.metric("epp_tokenizer_fallbacks_total", plugin="token-producer", reason=reason) == 0, reason
    assert servers["vllm"].metric("epp_tokenizer_calls_total", plugin="token-producer") == 7
    # explain agrees: the same number of ids from both backends, and B's blocks matched.
    req = tmp_path / "request.json"
    req.write_text(json.dumps({"path": "/v1/completions",
                               "body": {"model": MODEL, "max_tokens": 4, "prompt": SYSTEM + "Does B hold my prefix?"}}))
    docs = {}
    for name, config in (("local", local), ("vllm", vllm)):
        j = eppctl("explain", "--config", config, "--endpoints", endpoints, "-o", "json", "-r", req)
        assert j.returncode == 0, j.stderr
        docs[name] = json.loads(j.stdout)
        assert docs[name]["decision"]["header"]["x-gateway-destination-endpoint"] == b.address
    assert docs["local"]["request"]["tokens"]["source"] == "local"
    assert docs["vllm"]["request"]["tokens"]["source"] == "vllm"
    assert docs["local"]["request"]["tokens"]["count"] == docs["vllm"]["request"]["tokens"]["count"] > 100


def test_central_socket_the_servers_connect_to(serve, tmp_path):  # noqa: F811
    # llm-d's central mode (kvEventsConfig.zmqEndpoint): epp binds one SUB socket, the servers
    # connect their PUB sockets to it, and each message's topic names the endpoint it is from.
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "central.yaml"
    config.write_text(PRECISE_CONFIG.replace(
        "    tokenProcessorConfig: {blockSize: 16}\n",
        "    tokenProcessorConfig: {blockSize: 16}\n    kvEventsConfig: {zmqEndpoint: 'tcp://127.0.0.1:%d'}\n" % port))
    sims = [subprocess.Popen([_eppctl_path(), "sim", "--port", "0", "--seed", str(10 + i), "--kv-events",
                              "tcp://127.0.0.1:%d" % port, "--kv-events-connect"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    try:
        urls = []
        for p in sims:
            m = re.search(r"listening on (http://\S+)", p.stdout.readline())
            assert m, "eppctl sim did not start"
            urls.append(m.group(1))
        a, b = (u[len("http://"):] for u in urls)
        endpoints = tmp_path / "endpoints.yaml"
        endpoints.write_text("endpoints:\n  - {address: %s}\n  - {address: %s}\n" % (a, b))
        s = serve("--config", config, "--endpoints", endpoints, "--refresh-metrics-interval", "50ms")
        def chat(system, question):
            body = json.dumps({"model": MODEL, "max_tokens": 4, "messages": [
                {"role": "system", "content": system}, {"role": "user", "content": question}]}).encode()
            req = urllib.request.Request(urls[1] + "/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=30).read()

        # The PUB sockets reach the EPP's once it is bound (libzmq reconnects), and a PUB drops
        # what it sends before that: small distinct prompts until one batch arrives.
        deadline = time.time() + 20
        i = 0
        while time.time() < deadline and not s.metric("epp_endpoint_kv_batches_total", endpoint=b):
            chat("warm-up %d " % i * 20, "x")
            i += 1
            time.sleep(0.2)
        assert s.metric("epp_endpoint_kv_batches_total", endpoint=b) >= 1
        chat(SYSTEM, "to B directly")
        wait_blocks(s, b, lambda v: v is not None and v >= 20)
        assert s.metric("epp_endpoint_kv_blocks", endpoint=a) in (None, 0)
        for i in range(4):
            first, _ = pick(s.channel(), request_body("through the EPP %d" % i))
            assert destination(first) == b
    finally:
        for p in sims:
            p.terminate()
            p.wait(timeout=10)
            p.stdout.close()
            p.stderr.close()
