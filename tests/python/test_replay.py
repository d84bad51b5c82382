"""pyepp.replay: workloads, traces, policies, options, reports and the example.

The replay engine is tested in C++ (tests/cpp/replay) and through eppctl replay (tests/cli);
these tests check what crosses the binding: inputs of every kind, the report's shape,
determinism, errors and the HTML/text renderings.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

import pyepp

TINY = pyepp.SharedPrefix(groups=3, prompts_per_group=4, system_len=200, question_len=20, output_len=8, rate=50)

TRACE_KEYS = ["requests", "blocks", "prompt_tokens", "duration_s", "upper_bound_block_hit_rate",
              "pooled_cache_bound_block_hit_rate", "ttft_bound_s"]
POLICY_KEYS = ["name", "completed", "failed", "shed", "block_hit_rate", "token_hit_rate", "ttft_s", "ttft_over_bound", "e2e_s", "queue_s",
               "itl_s", "disaggregated_pool", "disaggregated", "kv_transfer_s_mean", "server_roles", "throughput_rps", "load_max_over_mean", "prediction_error_rate", "precise", "requests_per_server",
               "kv_usage_mean_per_server", "hit_rate_timeline", "ttft_samples_s", "flow_control", "flow_wait_s", "drops",
               "bands", "tenants", "jain_fairness", "slo", "flags", "wall_s"]

CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: prefix-cache-scorer
    weight: 3
"""


def without_wall_time(report: Dict[str, Any]) -> Dict[str, Any]:
    copy = json.loads(json.dumps(report))
    for p in copy["policies"]:
        del p["wall_s"]
    return copy


def test_named_policies_on_a_shared_prefix_workload() -> None:
    assert pyepp.named_policies() == ["round-robin", "random", "least-queue", "least-inflight", "gie-default",
                                      "gie-precise", "gie-precise-speculative", "sglang-cache-aware", "llm-d-default",
                                      "llm-d-legacy-blend", "vllm-loadaware", "dynamo-kv", "orca-wrr", "llm-d-predicted-latency", "epp", "epp-static"]
    report = pyepp.replay(TINY, ["round-robin", "gie-default", "sglang-cache-aware"], servers=3)
    assert list(report) == ["trace", "policies"]
    assert list(report["trace"]) == TRACE_KEYS
    assert report["trace"]["requests"] == 12
    assert [p["name"] for p in report["policies"]] == ["round-robin", "gie-default", "sglang-cache-aware"]
    for p in report["policies"]:
        assert list(p) == POLICY_KEYS
        assert p["completed"] == 12 and p["failed"] == 0 and p["shed"] == 0
        assert list(p["ttft_s"]) == ["p50", "p90", "p99", "mean"]
        assert len(p["requests_per_server"]) == 3 and sum(p["requests_per_server"]) == 12
        assert p["ttft_samples_s"] == sorted(p["ttft_samples_s"]) and len(p["ttft_samples_s"]) == 12
        assert 0 <= p["block_hit_rate"] <= report["trace"]["upper_bound_block_hit_rate"] + 1e-9
        assert p["wall_s"] >= 0
    rr, gie, _ = report["policies"]
    assert rr["prediction_error_rate"] is None  # no prefix producer: JSON null
    assert isinstance(gie["prediction_error_rate"], float)
    assert rr["requests_per_server"] == [4, 4, 4]


def test_determinism_and_seed() -> None:
    args = (TINY, ["random", "gie-default"])
    first = without_wall_time(pyepp.replay(*args, servers=4, seed=3))
    assert without_wall_time(pyepp.replay(*args, servers=4, seed=3)) == first
    assert without_wall_time(pyepp.replay(*args, servers=4, seed=4)) != first


def test_workload_forms_agree() -> None:
    as_dict = {"groups": 3, "prompts_per_group": 4, "system_len": 200, "question_len": 20, "output_len": 8,
               "rate": 50}
    a = without_wall_time(pyepp.replay(TINY, ["least-queue"], servers=2))
    b = without_wall_time(pyepp.replay(as_dict, ["least-queue"], servers=2))
    assert a == b
    constant = pyepp.replay({**as_dict, "arrivals": "constant"}, ["least-queue"], servers=2)
    assert constant["trace"]["duration_s"] == pytest.approx(11 / 50)
    timed = pyepp.replay({**as_dict, "duration_s": 1.0}, ["least-queue"], servers=2)
    assert timed["trace"]["requests"] == 50
    multi = pyepp.replay({**as_dict, "multi_turn": True}, ["least-queue"], servers=2)
    assert multi["trace"]["prompt_tokens"] > a["trace"]["prompt_tokens"]


def test_gie_workloads() -> None:
    assert pyepp.gie_workloads()[0] == "short-questions__many-system-prompts"
    small = pyepp.SharedPrefix.from_gie("long-questions__few-system-prompts__multi-chat", prompts_per_group=3,
                                        rate=100)
    report = pyepp.replay(small, "gie-default", servers=2)
    assert report["trace"]["requests"] == 6 * 3
    started = time.monotonic()
    report = pyepp.replay("short-questions__many-system-prompts", ["round-robin"], servers=2,
                          sim={"prefill_tokens_per_s": 1e6})
    assert report["trace"]["requests"] == 150 * 5 and time.monotonic() - started < 60
    with pytest.raises(pyepp.NotFoundError, match="unknown GIE workload"):
        pyepp.replay(pyepp.SharedPrefix.from_gie("no-such-workload"), ["round-robin"])
    with pytest.raises(pyepp.NotFoundError, match="neither a file nor a GIE workload"):
        pyepp.replay("no-such-workload", ["round-robin"])


def write_mooncake(path: Path) -> None:
    lines = [
        {"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
        {"timestamp": 50, "input_length": 1500, "output_length": 8, "hash_ids": [1, 2, 3]},
        {"timestamp": 120, "input_length": 700, "output_length": 4, "hash_ids": [4, 5]},
        {"timestamp": 200, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_mooncake_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "mooncake.jsonl"
    write_mooncake(trace)
    report = pyepp.replay(trace, ["round-robin", "gie-default"], servers=2)
    assert report["trace"]["requests"] == 4
    assert report["trace"]["duration_s"] == pytest.approx(0.2)
    assert report["trace"]["prompt_tokens"] == 1024 + 1500 + 700 + 1024
    assert report["trace"]["upper_bound_block_hit_rate"] > 0  # hash ids 1, 2 repeat
    assert without_wall_time(pyepp.replay(str(trace), ["round-robin", "gie-default"], servers=2,
                                          trace_format="mooncake")) == without_wall_time(report)
    faster = pyepp.replay(trace, ["round-robin"], servers=2, time_scale=0.5)
    assert faster["trace"]["duration_s"] == pytest.approx(0.1)
    with pytest.raises(pyepp.ConfigError):
        pyepp.replay(trace, ["round-robin"], trace_format="openai")  # no request bodies there
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [-1]}\n', encoding="utf-8")
    with pytest.raises(pyepp.ConfigError, match="hash_ids"):
        pyepp.replay(bad, ["round-robin"])
    with pytest.raises(pyepp.ConfigError, match="trace_format"):
        pyepp.replay(trace, ["round-robin"], trace_format="csv")
    with pytest.raises(pyepp.NotFoundError):
        pyepp.replay(tmp_path / "missing.jsonl", ["round-robin"])


def test_openai_trace_file(tmp_path: Path) -> None:
    trace = tmp_path / "openai.jsonl"
    system = "You are a careful assistant. " * 30
    lines = [{"timestamp": 100 * i, "path": "/v1/chat/completions",
              "body": {"model": "m", "max_tokens": 5,
                       "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"q{i}"}]}}
             for i in range(6)]
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    report = pyepp.replay(trace, ["gie-default"], servers=2)
    assert report["trace"]["requests"] == 6
    assert report["policies"][0]["completed"] == 6
    assert report["policies"][0]["block_hit_rate"] > 0


def test_policy_forms(tmp_path: Path) -> None:
    path = tmp_path / "queue-and-prefix.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    report = pyepp.replay(TINY, [CONFIG, str(path), path, ("mine", CONFIG), ("rr", "round-robin"), "round-robin",
                                 "round-robin"], servers=2)
    names = [p["name"] for p in report["policies"]]
    assert names == ["policy1", "queue-and-prefix", "queue-and-prefix#2", "mine", "rr", "round-robin",
                     "round-robin#2"]
    by_name = {p["name"]: without_wall_time({"trace": {}, "policies": [p]})["policies"][0] for p in report["policies"]}
    for n in ("queue-and-prefix", "mine"):
        assert {**by_name[n], "name": ""} == {**by_name["policy1"], "name": ""}
    single = pyepp.replay(TINY, "least-inflight", servers=2)
    assert [p["name"] for p in single["policies"]] == ["least-inflight"]
    pair = pyepp.replay(TINY, ("least-queue", "random"), servers=2)  # a tuple is a list of policies
    assert [p["name"] for p in pair["policies"]] == ["least-queue", "random"]
    with pytest.raises(TypeError):
        pyepp.replay(TINY, 5)  # type: ignore[arg-type]


def test_unknown_policy_names_the_named_ones() -> None:
    with pytest.raises(pyepp.NotFoundError) as e:
        pyepp.replay(TINY, ["round-robin", "no-such-policy"])
    message = str(e.value)
    assert "no-such-policy" in message
    for name in pyepp.named_policies():
        assert name in message
    assert isinstance(e.value, KeyError) and e.value.code == "NOT_FOUND"


def test_option_errors(tmp_path: Path) -> None:
    with pytest.raises(pyepp.ConfigError, match=r"policies\[0\]:1:10: this .\[. is never closed"):
        pyepp.replay(TINY, ["plugins: [oops\n"])
    missing = tmp_path / "nope.yaml"
    with pytest.raises(pyepp.NotFoundError):
        pyepp.replay(TINY, [str(missing)])
    with pytest.raises(pyepp.ConfigError, match="at least one policy"):
        pyepp.replay(TINY, [])
    with pytest.raises(pyepp.ConfigError, match="servers"):
        pyepp.replay(TINY, ["round-robin"], servers=0)
    with pytest.raises(pyepp.ConfigError, match="unknown simulator parameter 'gpus'"):
        pyepp.replay(TINY, ["round-robin"], sim={"gpus": 8})
    with pytest.raises(pyepp.ConfigError):
        pyepp.replay(TINY, ["round-robin"], sim={"max_running": 0})  # libepp validates the servers
    with pytest.raises(pyepp.ConfigError, match="refresh_interval_s"):
        pyepp.replay(TINY, ["round-robin"], refresh_interval_s=0)
    with pytest.raises(pyepp.ConfigError, match="server_kv_tokens"):
        pyepp.replay(TINY, ["round-robin"], server_kv_tokens=4)
    with pytest.raises(pyepp.ConfigError, match="unknown workload field"):
        pyepp.replay({"groupz": 3}, ["round-robin"])
    with pytest.raises(pyepp.ConfigError, match="groups"):
        pyepp.replay({"groups": 0}, ["round-robin"])
    with pytest.raises(pyepp.ConfigError, match="arrivals"):
        pyepp.replay({"arrivals": "bursty"}, ["round-robin"])
    with pytest.raises(pyepp.ConfigError, match="seed"):
        pyepp.replay(TINY, ["round-robin"], seed=-1)
    with pytest.raises(TypeError):
        pyepp.replay(42, ["round-robin"])  # type: ignore[arg-type]


def test_server_options_change_the_outcome() -> None:
    base = pyepp.replay(TINY, ["round-robin"], servers=2)["policies"][0]
    slow = pyepp.replay(TINY, ["round-robin"], servers=2, sim={"prefill_tokens_per_s": 500})["policies"][0]
    assert slow["ttft_s"]["p50"] > base["ttft_s"]["p50"]
    tiny_cache = pyepp.replay(TINY, ["round-robin"], servers=2, server_kv_tokens=64)["policies"][0]
    assert tiny_cache["failed"] == 12 and tiny_cache["completed"] == 0  # no prompt fits
    stale = pyepp.replay(TINY, ["least-queue"], servers=2, refresh_interval_s=10)
    assert stale["policies"][0]["completed"] == 12


def test_text_and_html_reports() -> None:
    report = pyepp.replay(TINY, ["round-robin", "gie-default"], servers=2)
    text = pyepp.replay_text(report)
    assert text.startswith("trace: 12 requests") and "gie-default" in text and "round-robin" in text
    html = pyepp.replay_html(report, title="tiny <replay>")
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html and "tiny &lt;replay&gt;" in html
    assert "<script" not in html
    # From replay's arguments directly: the same page.
    assert pyepp.replay_html(TINY, ["round-robin", "gie-default"], 2, title="tiny <replay>").count("<svg") == \
        html.count("<svg")
    assert pyepp.replay_text(TINY, ["round-robin", "gie-default"], servers=2).splitlines()[0] == text.splitlines()[0]
    # A report with a null prediction error rate survives the round trip.
    assert "n/a" in text
    with pytest.raises(pyepp.ConfigError, match="not a replay report"):
        pyepp.replay_html({"trace": {}, "policies": []})


def test_replays_from_threads() -> None:
    results: List[Any] = [None] * 4

    def run(i: int) -> None:
        results[i] = without_wall_time(pyepp.replay(TINY, ["gie-default"], servers=2, seed=1))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(r == results[0] for r in results) and results[0] is not None


def run_example(source_dir: Path, cwd: Path, extra_path: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [extra_path] + sys.path if p)
    return subprocess.run([sys.executable, str(source_dir / "examples" / "python" / "replay.py")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_example_replay_runs(source_dir: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    done = run_example(source_dir, tmp_path)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30
    lines = done.stdout.splitlines()
    assert lines[0].startswith("512 requests over")
    for name in ("round-robin", "gie-default", "sglang-cache-aware"):
        assert any(line.strip().startswith(f"{name}:") for line in lines), done.stdout


FAKE_PYPLOT = '''
calls = []
class _Recorder:
    def __init__(self, name):
        self._name = name
    def __getattr__(self, method):
        def call(*args, **kwargs):
            calls.append((self._name, method))
            if method == "savefig":
                open(args[0], "w").write("png")
        return call
def subplots(rows, cols, **kwargs):
    return _Recorder("figure"), (_Recorder("ttft"), _Recorder("hits"))
'''


def test_example_replay_plots_with_matplotlib(source_dir: Path, tmp_path: Path) -> None:
    """The plotting branch, against a stand-in for matplotlib (Debian's is not installed here)."""
    if importlib.util.find_spec("matplotlib") is not None:
        fake = ""
    else:
        package = tmp_path / "fake" / "matplotlib"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("def use(backend):\n    pass\n", encoding="utf-8")
        (package / "pyplot.py").write_text(FAKE_PYPLOT, encoding="utf-8")
        fake = str(tmp_path / "fake")
    done = run_example(source_dir, tmp_path, fake)
    assert done.returncode == 0, done.stderr
    assert "plots saved to replay.png" in done.stdout
    assert (tmp_path / "replay.png").exists()


def test_precise_policy_and_epp_replicas() -> None:
    one = pyepp.replay(TINY, ["gie-default", "gie-precise"], servers=4, seed=3)
    four = pyepp.replay(TINY, ["gie-default", "gie-precise"], servers=4, seed=3, epp_replicas=4, kv_event_delay_s=0.02)
    assert [p["precise"] for p in four["policies"]] == [False, True]
    assert four["policies"][1]["prediction_error_rate"] == 0
    assert four["policies"][1]["block_hit_rate"] >= one["policies"][1]["block_hit_rate"] - 0.01
    for bad in ({"epp_replicas": 0}, {"epp_replicas": 65}, {"kv_event_delay_s": -1}):
        with pytest.raises(pyepp.ConfigError):
            pyepp.replay(TINY, "gie-precise", servers=2, **bad)


def test_epp_replicas_with_shared_state() -> None:
    alone = pyepp.replay(TINY, "gie-default", servers=4, seed=3, epp_replicas=4)
    shared = pyepp.replay(TINY, "gie-default", servers=4, seed=3, epp_replicas=4, shared_state_delay_s=0.0)
    one = pyepp.replay(TINY, "gie-default", servers=4, seed=3)
    assert shared["policies"][0]["block_hit_rate"] >= alone["policies"][0]["block_hit_rate"]
    assert shared["policies"][0]["block_hit_rate"] >= one["policies"][0]["block_hit_rate"] - 0.02
    for bad in (-1, "1s", True):
        with pytest.raises(pyepp.ConfigError):
            pyepp.replay(TINY, "gie-default", servers=2, epp_replicas=2, shared_state_delay_s=bad)


def test_shared_system_prompt_conversations_and_the_epp_policy() -> None:
    # Conversations behind one system prompt: the TTFT bound, the flags and epp's policy from Python.
    w = pyepp.SharedPrefix(groups=8, prompts_per_group=4, system_len=160, question_len=32, output_len=16,
                           multi_turn=True, shared_system_prompt=True, rate=40, duration_s=4)
    report = pyepp.replay(w, ["gie-default", "epp"], servers=4)
    assert report["trace"]["ttft_bound_s"]["p50"] > 0
    for p in report["policies"]:
        assert p["completed"] == report["trace"]["requests"]
        assert p["ttft_over_bound"]["p50"] >= 1.0 - 1e-9  # no policy beats the bound
        assert all(set(f) == {"code", "message"} for f in p["flags"])


FLOW_CONTROL = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: 2}
- type: round-robin-fairness-policy
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
flowControl:
  saturationDetector: {pluginRef: concurrency-detector}
  priorityBands:
  - {priority: 1, fairnessPolicyRef: round-robin-fairness-policy}
  - {priority: 0, fairnessPolicyRef: round-robin-fairness-policy}
"""


def test_flow_control_tenants_and_priorities() -> None:
    workload = pyepp.SharedPrefix(groups=4, prompts_per_group=10, system_len=400, question_len=100, output_len=50, rate=400)
    report = pyepp.replay(workload, [("fc", FLOW_CONTROL), "gie-default"], servers=2, tenants={"a": 3, "b": 1},
                          priority_mix={1: 0.25, 0: 0.75})
    fc, plain = report["policies"]
    assert fc["flow_control"] is True and plain["flow_control"] is False
    for p in (fc, plain):
        assert sorted(t["name"] for t in p["tenants"]) == ["a", "b"]
        assert [b["name"] for b in p["bands"]] == ["1", "0"]
        assert sum(t["requests"] for t in p["tenants"]) == report["trace"]["requests"] == 40
        assert isinstance(p["jain_fairness"], float)
    # Two requests per server at most: the rest wait in the EPP, and the time counts in their TTFT.
    assert fc["flow_wait_s"]["p99"] > 0
    assert all(b["wait_s"]["p99"] == 0 for b in plain["bands"])
    # The same mix for the same seed; tenants as a count or a list.
    again = pyepp.replay(workload, [("fc", FLOW_CONTROL)], servers=2, tenants={"a": 3, "b": 1}, priority_mix={1: 0.25, 0: 0.75})
    assert again["policies"][0]["tenants"] == fc["tenants"]
    counted = pyepp.replay(workload, "gie-default", servers=2, tenants=3)
    assert sorted(t["name"] for t in counted["policies"][0]["tenants"]) == ["t1", "t2", "t3"]
    listed = pyepp.replay(workload, "gie-default", servers=2, tenants=["x", "y"])
    assert sorted(t["name"] for t in listed["policies"][0]["tenants"]) == ["x", "y"]
    # The text of the dict keeps the groups, the bound and the flags (the round trip loses nothing).
    text = pyepp.replay_text(report)
    assert "fc: flow control, time queued in the EPP" in text and "Jain's fairness index" in text
    assert "TTFT bound" in text
    slo = pyepp.replay(workload, "gie-default", servers=2, slo_ttft_ms=0, slo_tpot_ms=100000)["policies"][0]["slo"]
    assert slo["requests"] == 40 and slo["ttft_attainment"] == 0 and slo["tpot_attainment"] == 1.0
    assert "SLO attainment" in pyepp.replay_text(pyepp.replay(workload, "gie-default", servers=2, slo_ttft_ms=0))
    for bad, match in [({"slo_ttft_ms": -1}, "slo_ttft_ms"), ({"tenants": 0}, "--tenants"), ({"tenants": "a"}, "tenants must be"),
                       ({"priority_mix": {"high": 1}}, "priority_mix"), ({"priority_mix": {1: -1}}, "--priority-mix")]:
        with pytest.raises(pyepp.ConfigError, match=match):
            pyepp.replay(workload, "gie-default", servers=2, **bad)


def test_rate_replays_a_trace_file_without_timestamps(source_dir: Path) -> None:
    trace = source_dir / "examples" / "traces" / "shared-prefix.jsonl"  # captured requests, no arrival times
    with pytest.raises(pyepp.ConfigError, match="no arrival time"):
        pyepp.replay(trace, "gie-default", servers=2)
    report = pyepp.replay(trace, "gie-default", servers=2, rate=40, arrivals="constant")
    assert report["trace"]["requests"] == 200
    assert report["trace"]["duration_s"] == pytest.approx(199 / 40)
    seeded = pyepp.replay(trace, "gie-default", servers=2, rate=40, seed=5)
    assert seeded["trace"] == pyepp.replay(trace, "gie-default", servers=2, rate=40, seed=5)["trace"]
    for bad, match in [({"rate": 0}, "rate must be"), ({"rate": 10, "arrivals": "bursty"}, "arrivals must be")]:
        with pytest.raises(pyepp.ConfigError, match=match):
            pyepp.replay(trace, "gie-default", servers=2, **bad)
    with pytest.raises(pyepp.ConfigError, match="rate applies to a trace file"):
        pyepp.replay(TINY, "gie-default", servers=2, rate=10)
