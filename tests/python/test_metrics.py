"""The pyepp binding surface: construction, error translation, round-trips and threads.

The algorithms (parsing, extraction, checks) are tested in C++ (tests/cpp); these tests make
sure their results and errors cross into Python intact.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import json
import math
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

import pyepp
import pyepp.errors

METRIC_KEYS = ["waiting_queue_size", "running_requests", "kv_cache_usage", "lora", "cache_block_size",
               "cache_num_blocks"]


# --- package surface -------------------------------------------------------------------------


def test_all_names_exist_and_native_module_stays_private() -> None:
    for name in pyepp.__all__:
        assert hasattr(pyepp, name), name
    assert not any("pyepp" in name.lower() for name in pyepp.__all__)
    assert "check" in pyepp.__all__ and callable(pyepp.check)


def test_version_matches_cmake_and_pyproject(source_dir: Path) -> None:
    cmake = (source_dir / "CMakeLists.txt").read_text(encoding="utf-8")
    cmake_version = re.search(r"project\(epp VERSION ([0-9.]+)", cmake).group(1)  # type: ignore[union-attr]
    pyproject = (source_dir / "pyproject.toml").read_text(encoding="utf-8")
    pyproject_version = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)  # type: ignore[union-attr]
    assert pyepp.__version__ == cmake_version == pyproject_version


def test_builtin_engines() -> None:
    engines = pyepp.builtin_engines()
    assert engines[:2] == ["vllm", "sglang"]
    assert {"trtllm-serve", "triton-tensorrt-llm"} <= set(engines)


# --- parse_prometheus ------------------------------------------------------------------------

SIMPLE = """\
# HELP requests_total Requests \\\\ served.\\nSecond line.
# TYPE requests_total counter
requests_total{code="200",path="/v1/chat"} 1027 1395066363000
requests_total{code="500",path="/v1/chat"} 3
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.5"} 1
latency_seconds_bucket{le="+Inf"} 2
latency_seconds_sum 0.75
latency_seconds_count 2
untyped_thing{q="x\\"y"} NaN
"""


def test_parse_returns_plain_python_values() -> None:
    families = pyepp.parse_prometheus(SIMPLE)
    assert isinstance(families, list) and isinstance(families, pyepp.ParseResult)
    assert [(f.name, f.type) for f in families] == [
        ("requests", "counter"), ("latency_seconds", "histogram"), ("untyped_thing", "unknown")]
    requests = families[0]
    assert isinstance(requests, pyepp.MetricFamily)
    assert requests.help == "Requests \\ served.\nSecond line."
    assert requests.documentation == requests.help
    first = requests.samples[0]
    assert isinstance(first, pyepp.Sample)
    assert first == pyepp.Sample("requests_total", {"code": "200", "path": "/v1/chat"}, 1027.0, 1395066363.0)
    assert type(first.labels) is dict and type(first.value) is float and type(first.timestamp) is float
    assert requests.samples[1].timestamp is None
    assert [s.name for s in families[1].samples] == [
        "latency_seconds_bucket", "latency_seconds_bucket", "latency_seconds_sum", "latency_seconds_count"]
    assert families[1].samples[1].labels == {"le": "+Inf"}
    nan_sample = families[2].samples[0]
    assert nan_sample.labels == {"q": 'x"y'} and math.isnan(nan_sample.value)
    assert families.skipped == [] and families.skipped_lines == 0


def test_parse_special_values_and_timestamps() -> None:
    (family,) = pyepp.parse_prometheus("# TYPE g gauge\ng{a=\"1\"} +Inf -5\ng{a=\"2\"} -Inf 1700000000123\n")
    assert family.samples[0].value == math.inf and family.samples[0].timestamp == -0.005
    assert family.samples[1].value == -math.inf and family.samples[1].timestamp == 1700000000.123


def test_parse_accepts_bytes_like_and_rejects_other_types() -> None:
    text = SIMPLE.replace("NaN", "1")  # NaN != NaN would defeat the comparison
    expected = pyepp.parse_prometheus(text)
    assert pyepp.parse_prometheus(text.encode()) == expected
    assert pyepp.parse_prometheus(bytearray(text.encode())) == expected
    assert pyepp.parse_prometheus(memoryview(text.encode())) == expected
    with pytest.raises(UnicodeDecodeError):
        pyepp.parse_prometheus(b"m{a=\"\xff\"} 1\n")
    with pytest.raises(TypeError):
        pyepp.parse_prometheus(42)  # type: ignore[arg-type]
    assert pyepp.parse_prometheus("") == []


def test_parse_keeps_unicode_intact() -> None:
    (family,) = pyepp.parse_prometheus('# HELP u Grüße 🙂\nu{name="日本語"} 1\n')
    assert family.help == "Grüße 🙂"
    assert family.samples[0].labels == {"name": "日本語"}


@pytest.mark.parametrize(
    "text, line, column",
    [
        ("m{a=1} 1\n", 1, 5),
        ("# TYPE m gauge\nm 1\nm{a=\"x\" 2\n", 3, 9),
        ("ok 1\n...\n", 2, 1),
        ("m abc\n", 1, 3),
        ("m 1 2.5\n", 1, 5),
        ("# TYPE m nonsense\n", 1, 10),
        ("m{a=\"\\t\"} 1\n", 1, 6),
    ],
)
def test_parse_errors_are_config_errors_with_line_and_column(text: str, line: int, column: int) -> None:
    with pytest.raises(pyepp.ConfigError) as info:
        pyepp.parse_prometheus(text)
    error = info.value
    assert isinstance(error, ValueError) and isinstance(error, pyepp.EppError)
    assert str(error).startswith(f"line {line}, column {column}: ")
    assert error.code == "INVALID_ARGUMENT"


def test_lenient_parse_reports_skipped_lines() -> None:
    text = "# TYPE a gauge\na 1\n...\na{ 2\n# TYPE b gauge\nb 3\nnot a sample\n"
    families = pyepp.parse_prometheus(text, lenient=True)
    assert [(f.name, [s.value for s in f.samples]) for f in families] == [("a", [1.0]), ("b", [3.0])]
    assert families.skipped_lines == 3
    assert [line for line, _ in families.skipped] == [3, 4, 7]
    assert all(isinstance(reason, str) and reason for _, reason in families.skipped)
    with pytest.raises(pyepp.ConfigError, match="^line 3, column 1: "):
        pyepp.parse_prometheus(text)


def test_parse_result_round_trips_through_json_and_pickle() -> None:
    families = pyepp.parse_prometheus(SIMPLE.replace("NaN", "1"), lenient=True)
    rebuilt = [pyepp.MetricFamily(f[0], f[1], f[2], [pyepp.Sample(*s) for s in f[3]])
               for f in json.loads(json.dumps(families))]
    assert rebuilt == list(families)
    again = pickle.loads(pickle.dumps(families))
    assert again == families and again.skipped_lines == 0


# --- extract_metrics -------------------------------------------------------------------------


def test_extract_metrics_auto_detects_and_reads_every_field(vllm_metrics: str) -> None:
    m = pyepp.extract_metrics(vllm_metrics)
    assert isinstance(m, pyepp.EndpointMetrics)
    assert m.engine == "vllm"
    assert (m.waiting_queue_size, m.running_requests, m.kv_cache_usage) == (2.0, 7.0, 0.25)
    assert m.lora == pyepp.LoraInfo(max_lora=2, running=["a-lora", "b-lora"], waiting=["c-lora"])
    assert (m.cache_block_size, m.cache_num_blocks) == (16, 4096)
    assert type(m.cache_block_size) is int and type(m.waiting_queue_size) is float
    assert [c["id"] for c in m.checks] == [
        "metrics.queue", "metrics.running", "metrics.kv_cache", "metrics.lora", "metrics.cache_info"]
    assert all(c["status"] == "pass" and c["message"] for c in m.checks)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.engine = "sglang"  # type: ignore[misc]


def test_extract_metrics_missing_values_are_none_with_a_check() -> None:
    m = pyepp.extract_metrics("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n")
    assert m.engine == "vllm" and m.running_requests == 1.0
    assert m.waiting_queue_size is None and m.kv_cache_usage is None and m.lora is None
    statuses = {c["id"]: c["status"] for c in m.checks}
    assert statuses["metrics.running"] == "pass"
    assert statuses["metrics.queue"] == "fail" and statuses["metrics.kv_cache"] == "fail"
    assert statuses["metrics.lora"] == "warn"


def test_extract_metrics_explicit_engine_and_overrides() -> None:
    text = "# TYPE my_queue gauge\nmy_queue{pool=\"a\"} 4\nmy_queue{pool=\"b\"} 9\n"
    m = pyepp.extract_metrics(text, "sglang", metrics={"queue": 'my_queue{pool="b"}'})
    assert m.engine == "sglang" and m.waiting_queue_size == 9.0
    # Overrides count for detection too, as in eppctl check.
    assert pyepp.extract_metrics(text, metrics={"queue": "my_queue"}).engine == "vllm"


def test_extract_metrics_errors() -> None:
    with pytest.raises(pyepp.NotFoundError) as info:
        pyepp.extract_metrics("vllm:num_requests_running 1\n", engine="no-such-engine")
    error = info.value
    assert isinstance(error, KeyError) and isinstance(error, pyepp.EppError)
    assert error.code == "NOT_FOUND"
    assert str(error).startswith("unknown engine 'no-such-engine'")  # not KeyError's quoted repr
    with pytest.raises(pyepp.NotFoundError, match="no known engine's metrics found"):
        pyepp.extract_metrics("# TYPE something_else gauge\nsomething_else 1\n")
    with pytest.raises(pyepp.ConfigError, match="unknown metric field 'bogus'"):
        pyepp.extract_metrics("vllm:num_requests_running 1\n", metrics={"bogus": "x"})
    with pytest.raises(pyepp.ConfigError, match="^line 1, column"):
        pyepp.extract_metrics("vllm:num_requests_running{ 1\n")
    with pytest.raises(TypeError):
        pyepp.extract_metrics("x 1\n", metrics=["queue=x"])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pyepp.extract_metrics("x 1\n", engine=None)  # type: ignore[arg-type]


def test_extract_metrics_lenient(vllm_metrics: str) -> None:
    text = vllm_metrics + "...\n"
    with pytest.raises(pyepp.ConfigError):
        pyepp.extract_metrics(text)
    assert pyepp.extract_metrics(text, lenient=True) == pyepp.extract_metrics(vllm_metrics)


def test_endpoint_metrics_to_dict_round_trip(vllm_metrics: str, tmp_path: Path) -> None:
    m = pyepp.extract_metrics(vllm_metrics)
    d = m.to_dict()
    assert json.loads(json.dumps(d)) == d
    lora_dict = d.pop("lora")
    assert lora_dict.pop("slots_in_use") == 3  # derived: the distinct adapters of running and waiting
    lora = pyepp.LoraInfo(**lora_dict)
    assert pyepp.EndpointMetrics(lora=lora, **d) == m
    # The metric keys and values are those `check` reports for the same text.
    path = tmp_path / "vllm.prom"
    path.write_text(vllm_metrics, encoding="utf-8")
    target = pyepp.check(path)["targets"][0]
    assert {k: m.to_dict()[k] for k in METRIC_KEYS} == target["metrics"]
    assert list(target["metrics"]) == METRIC_KEYS
    assert m.engine == target["engine"]
    assert m.checks == [c for c in target["checks"] if c["id"] in {x["id"] for x in m.checks}]


# --- check -----------------------------------------------------------------------------------


def _statuses(target: Dict[str, Any]) -> Dict[str, str]:
    return {c["id"]: c["status"] for c in target["checks"]}


def test_check_file_targets_match_the_documented_json_shape(vllm_metrics: str, tmp_path: Path) -> None:
    good = tmp_path / "good.prom"
    good.write_text(vllm_metrics, encoding="utf-8")
    missing = tmp_path / "missing.prom"
    report = pyepp.check([good, str(missing)])
    assert set(report) == {"status", "targets"}
    assert report["status"] == "fail"
    first, second = report["targets"]
    assert list(first) == ["target", "engine", "status", "metrics", "checks", "elapsed_ms"]
    assert first["target"] == str(good) and first["engine"] == "vllm" and first["status"] == "pass"
    assert _statuses(first)["api.models"] == "skip"
    assert second["status"] == "fail" and second["engine"] is None
    assert _statuses(second)["metrics.reachable"] == "fail"
    assert all(v is None for v in second["metrics"].values())


def test_check_against_a_live_server(fake_server: Any) -> None:
    report = pyepp.check(fake_server.url, bearer_token="s3cret ", headers={"X-Pool": "a"}, timeout=5)
    (target,) = report["targets"]
    assert report["status"] == "pass", target["checks"]
    assert set(_statuses(target).values()) == {"pass"}
    assert target["metrics"]["running_requests"] == 7.0
    assert sorted(set(fake_server.paths())) == ["/metrics", "/v1/chat/completions", "/v1/completions", "/v1/models"]
    for request in fake_server.requests:
        assert request["headers"]["Authorization"] == "Bearer s3cret"
        assert request["headers"]["X-Pool"] == "a"


def test_check_options_reach_the_library(make_fake_server: Any) -> None:
    server = make_fake_server(metrics_path="/custom/metrics")
    report = pyepp.check([server.url + "/"], metrics_path="custom/metrics", api=False, model="m",
                         headers=["X-One: 1", "X-Two:2"], timeout=datetime.timedelta(seconds=3),
                         insecure=True, lenient=True, max_body_bytes=1 << 20, engine="vllm")
    (target,) = report["targets"]
    assert report["status"] == "pass", target["checks"]
    assert server.paths() == ["/custom/metrics"]  # api=False: no API probes
    assert _statuses(target)["metrics.engine"] == "pass"
    assert "set with --engine" in next(c["message"] for c in target["checks"] if c["id"] == "metrics.engine")
    assert server.requests[0]["headers"]["X-One"] == "1" and server.requests[0]["headers"]["X-Two"] == "2"
    # A body over max_body_bytes fails the scrape rather than raising.
    small = pyepp.check(server.url, metrics_path="/custom/metrics", api=False, max_body_bytes=16)
    assert _statuses(small["targets"][0])["metrics.reachable"] == "fail"


def test_check_unreachable_server_is_a_failed_check_not_an_exception(closed_port_url: str) -> None:
    report = pyepp.check(closed_port_url, timeout=2)
    (target,) = report["targets"]
    assert report["status"] == "fail"
    assert _statuses(target)["metrics.reachable"] == "fail"
    assert _statuses(target)["api.models"] == "fail"


def test_check_custom_mappings_from_yaml(tmp_path: Path) -> None:
    config = tmp_path / "engines.yaml"
    config.write_text(
        "- name: my-engine\n"
        "  queuedRequestsSpec: my_waiting\n"
        "  runningRequestsSpec: my_running\n"
        "  kvUsageSpec: my_kv\n",
        encoding="utf-8",
    )
    metrics = tmp_path / "m.prom"
    metrics.write_text("# TYPE my_waiting gauge\nmy_waiting 1\n# TYPE my_running gauge\nmy_running 2\n"
                       "# TYPE my_kv gauge\nmy_kv 0.5\n", encoding="utf-8")
    report = pyepp.check(metrics, metrics_config=config)
    (target,) = report["targets"]
    assert target["engine"] == "my-engine"
    assert target["metrics"]["kv_cache_usage"] == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text("- name: x\n  kvUsageSpec: 'a{'\n", encoding="utf-8")
    with pytest.raises(pyepp.ConfigError, match=re.escape(str(bad))):
        pyepp.check(metrics, metrics_config=bad)
    with pytest.raises(pyepp.ConfigError, match="cannot read"):
        pyepp.check(metrics, metrics_config=tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"engine": "no-such-engine"}, pyepp.NotFoundError, "unknown engine 'no-such-engine'"),
        ({"metrics": {"bogus": "x"}}, pyepp.ConfigError, "unknown metric field 'bogus'"),
        ({"metrics": {"queue": "a{"}}, pyepp.ConfigError, ""),
        ({"headers": ["no colon here"]}, pyepp.ConfigError, "expected 'Name: value'"),
        ({"headers": {"X-Bad": "a\r\nInjected: 1"}}, pyepp.ConfigError, "on one line"),
        ({"headers": {"": "v"}}, pyepp.ConfigError, "expected"),
        ({"timeout": 0}, pyepp.ConfigError, "at least 1 ms"),
        ({"timeout": -1.5}, pyepp.ConfigError, "at least 1 ms"),
        ({"timeout": float("nan")}, pyepp.ConfigError, "finite"),
        ({"max_body_bytes": 0}, pyepp.ConfigError, "positive int"),
        ({"max_body_bytes": -1}, pyepp.ConfigError, "positive int"),
        ({"timeout": "2"}, TypeError, ""),
        ({"headers": "X-A: 1"}, TypeError, ""),
        ({"bearer_token": 123}, TypeError, "bearer_token must be a str"),
        ({"metrics_path": b"/metrics"}, TypeError, "metrics_path must be a str"),
    ],
)
def test_check_bad_options_raise(tmp_path: Path, kwargs: Dict[str, Any], error: type, message: str) -> None:
    target = tmp_path / "m.prom"
    target.write_text("x 1\n", encoding="utf-8")
    with pytest.raises(error, match=re.escape(message)):
        pyepp.check(target, **kwargs)


def test_check_bad_targets_raise() -> None:
    with pytest.raises(pyepp.ConfigError, match="no targets given"):
        pyepp.check([])
    with pytest.raises(pyepp.ConfigError, match="only http:// and https://"):
        pyepp.check("ftp://example.invalid/metrics")
    with pytest.raises(TypeError):
        pyepp.check([1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        pyepp.check("x", bogus_option=1)  # type: ignore[call-arg]


# --- errors ----------------------------------------------------------------------------------


def test_error_hierarchy() -> None:
    assert issubclass(pyepp.ConfigError, pyepp.EppError) and issubclass(pyepp.ConfigError, ValueError)
    assert issubclass(pyepp.NotFoundError, pyepp.EppError) and issubclass(pyepp.NotFoundError, KeyError)
    assert issubclass(pyepp.UnavailableError, pyepp.EppError)
    assert issubclass(pyepp.EppError, Exception)
    assert pyepp.errors.EppError is pyepp.EppError
    error = pickle.loads(pickle.dumps(pyepp.NotFoundError("gone")))
    assert type(error) is pyepp.NotFoundError and str(error) == "gone"


# --- threads ---------------------------------------------------------------------------------


def test_parse_and_extract_from_many_threads(vllm_metrics: str) -> None:
    big = "".join(f'# TYPE g{i} gauge\ng{i}{{a="{i}"}} {i}\n' for i in range(2000))
    expected_big = pyepp.parse_prometheus(big)
    expected_metrics = pyepp.extract_metrics(vllm_metrics)

    def work(i: int) -> bool:
        if i % 2:
            return pyepp.parse_prometheus(big) == expected_big
        return pyepp.extract_metrics(vllm_metrics) == expected_metrics

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        assert all(pool.map(work, range(64)))


def test_check_from_many_threads_against_a_python_server(fake_server: Any) -> None:
    # The server answers on a Python thread: each check completes only if check() releases the GIL.
    def work(_: int) -> str:
        return pyepp.check(fake_server.url, timeout=10)["status"]

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(work, range(8))) == ["pass"] * 8


# --- examples --------------------------------------------------------------------------------


def _example_scripts() -> List[Any]:
    folder = Path(os.environ.get("EPP_SOURCE_DIR", Path(__file__).resolve().parents[2])) / "examples" / "python"
    scripts = sorted(folder.glob("*.py")) if folder.is_dir() else []
    if not scripts:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no example scripts in {folder}"), id="none")]
    return [pytest.param(p, id=p.name) for p in scripts]


@pytest.mark.parametrize("script", _example_scripts())
def test_example_scripts_run(script: Path, source_dir: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    result = subprocess.run([sys.executable, str(script)], cwd=source_dir, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
