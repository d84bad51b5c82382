"""Results as tables (rows(), to_pandas()) and pyepp.plots.

pandas and matplotlib are optional: the absent paths are tested by hiding the package
(sys.modules[name] = None makes its import fail as if it were not installed), and, where it is
really absent, as it is. The present path of to_pandas runs against pandas when installed, and
against a stand-in DataFrame otherwise. The plots need matplotlib (skipped without it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
from typing import Any, Dict, Iterator, List

import pytest

import pyepp
from pyepp import plots

HAVE_PANDAS = importlib.util.find_spec("pandas") is not None
HAVE_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
needs_matplotlib = pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="pyepp.plots needs matplotlib "
                                      "(Debian: python3-matplotlib, or bash scripts/setup)")

POLICIES = ["round-robin", "gie-default", "sglang-cache-aware"]
WORKLOAD = pyepp.SharedPrefix(groups=4, prompts_per_group=8, system_len=400, question_len=20, output_len=8,
                              rate=40)


@pytest.fixture(scope="module")
def report() -> pyepp.ReplayReport:
    return pyepp.replay(WORKLOAD, POLICIES, servers=3, server_kv_tokens=1200, seed=5)


@pytest.fixture(scope="module")
def pick() -> pyepp.PickResult:
    scheduler = pyepp.Scheduler.default(seed=1)
    endpoints = [pyepp.Endpoint("10.0.0.1:8000", {"waiting_queue_size": 4, "running_requests": 20,
                                                  "kv_cache_usage": 0.6}),
                 pyepp.Endpoint("10.0.0.2:8000", {"waiting_queue_size": 0, "running_requests": 2,
                                                  "kv_cache_usage": 0.1}),
                 pyepp.Endpoint("10.0.0.3:8000", {"waiting_queue_size": 1, "running_requests": 8,
                                                  "kv_cache_usage": 0.3})]
    request = pyepp.Request.from_openai({"model": "m", "messages": [{"role": "user", "content": "hello " * 200}]},
                                        path="/v1/chat/completions")
    return scheduler.pick(request, endpoints)


@pytest.fixture
def no_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now fails as if not installed


@pytest.fixture
def fake_pandas(monkeypatch: pytest.MonkeyPatch) -> List[Dict[str, Any]]:
    """A stand-in pandas whose DataFrame.from_records records what it was given."""
    calls: List[Dict[str, Any]] = []

    class DataFrame:
        @classmethod
        def from_records(cls, rows: List[Dict[str, Any]], columns: List[str]) -> "DataFrame":
            calls.append({"rows": rows, "columns": columns})
            frame = cls()
            frame.rows, frame.columns = rows, columns  # type: ignore[attr-defined]
            return frame

    monkeypatch.setitem(sys.modules, "pandas", types.SimpleNamespace(DataFrame=DataFrame))
    return calls


@pytest.fixture
def close_figures() -> Iterator[None]:
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


# --- reports and rows ----------------------------------------------------------------------------


def test_replay_returns_a_report_dict(report: pyepp.ReplayReport) -> None:
    assert isinstance(report, pyepp.ReplayReport) and isinstance(report, dict)
    assert json.loads(json.dumps(report)) == report  # still plain JSON data
    assert pyepp.replay_text(report) == pyepp.replay_text(dict(report))
    assert pyepp.ReplayReport.tables() == ["policies", "servers", "ttft", "hit_rate", "tenants", "bands", "flags"]


def test_policy_rows_flatten_nested_fields(report: pyepp.ReplayReport) -> None:
    rows = report.rows()
    assert [r["name"] for r in rows] == POLICIES
    for row, p in zip(rows, report["policies"]):
        assert row["completed"] == p["completed"] and row["block_hit_rate"] == p["block_hit_rate"]
        for k in ("p50", "p90", "p99", "mean"):
            assert row[f"ttft_s.{k}"] == p["ttft_s"][k] and row[f"e2e_s.{k}"] == p["e2e_s"][k]
        assert "ttft_samples_s" not in row and "requests_per_server" not in row  # lists have their own tables
        assert all(not isinstance(v, (list, dict)) for v in row.values())


def test_server_ttft_and_hit_rate_rows(report: pyepp.ReplayReport) -> None:
    servers = report.rows("servers")
    assert len(servers) == len(POLICIES) * 3
    for p in report["policies"]:
        mine = [r for r in servers if r["policy"] == p["name"]]
        assert [r["server"] for r in mine] == [0, 1, 2]
        assert [r["requests"] for r in mine] == p["requests_per_server"]
        assert [r["kv_usage_mean"] for r in mine] == p["kv_usage_mean_per_server"]
    assert sum(r["requests"] for r in servers) == len(POLICIES) * report["trace"]["requests"]

    ttft = report.rows("ttft")
    for p in report["policies"]:
        mine = [r for r in ttft if r["policy"] == p["name"]]
        assert [r["ttft_s"] for r in mine] == p["ttft_samples_s"]
        assert mine[-1]["quantile"] == 1.0 and mine[0]["quantile"] == pytest.approx(1 / len(mine))

    hits = report.rows("hit_rate")
    duration = report["trace"]["duration_s"]
    for p in report["policies"]:
        mine = [r for r in hits if r["policy"] == p["name"]]
        assert [r["block_hit_rate"] for r in mine] == p["hit_rate_timeline"] and mine
        assert mine[0]["start_s"] == 0 and mine[-1]["end_s"] == pytest.approx(duration)
        assert all(a["end_s"] == pytest.approx(b["start_s"]) for a, b in zip(mine, mine[1:]))
    assert report.rows("tenants") == [] and report.rows("bands") == []  # no flow control here
    with pytest.raises(ValueError, match="unknown table 'nope'.*policies"):
        report.rows("nope")


def test_regions_report_rows() -> None:
    r = pyepp.replay_regions(WORKLOAD, "gie-default", "east:2:0.5,west:2:0.5", {"east/west": 40}, seed=2)
    assert isinstance(r, pyepp.RegionsReport)
    modes = r.rows()
    assert [m["mode"] for m in modes] == [m["mode"] for m in r["modes"]]
    assert modes[0]["ttft_s.p90"] == r["modes"][0]["ttft_s"]["p90"]
    regions = r.rows("regions")
    assert len(regions) == len(r["modes"]) * 2
    for row in regions:
        mode = next(m for m in r["modes"] if m["mode"] == row["mode"])
        i = ["east", "west"].index(row["region"])
        assert (row["arrivals"], row["served"], row["ttft_p90_s"]) == (
            mode["arrivals_per_region"][i], mode["served_per_region"][i], mode["ttft_p90_per_origin_s"][i])


def test_explain_rows_of_a_pick(pick: pyepp.PickResult) -> None:
    rows = pyepp.explain_rows(pick)
    assert rows == pyepp.explain_rows(pick.explain())
    assert {r["endpoint"] for r in rows} == {"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}
    assert {r["endpoint"] for r in rows if r["picked"]} == {pick.endpoint}
    for endpoint in {r["endpoint"] for r in rows}:
        mine = [r for r in rows if r["endpoint"] == endpoint]
        assert {r["scorer"] for r in mine} == {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer"}
        assert sum(r["weighted"] for r in mine) == pytest.approx(mine[0]["total"])
        for r in mine:
            assert r["weighted"] == pytest.approx(r["raw"] * r["weight"])
    assert pyepp.explain_rows(pick, "filters") == []  # the default profile has no filter
    with pytest.raises(ValueError, match="unknown table"):
        pyepp.explain_rows(pick, "nope")
    with pytest.raises(TypeError, match="PickResult"):
        pyepp.explain_rows(42)


def test_explain_filter_rows() -> None:
    class OnlyEven:
        def __init__(self, name: str, params: Dict[str, Any]) -> None:
            pass

        def filter(self, request: Any, endpoints: List[Any]) -> List[bool]:
            return [int(e.address.split(":")[1]) % 2 == 0 for e in endpoints]

        def why_removed(self, request: Any, endpoint: Any) -> str:
            return "odd port"

    registry = pyepp.PluginRegistry()
    registry.register_filter("only-even", OnlyEven)
    scheduler = pyepp.Scheduler.from_yaml("""
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins: [{type: only-even}, {type: queue-scorer}]
schedulingProfiles:
- name: default
  plugins: [{pluginRef: only-even}, {pluginRef: queue-scorer}]
""", registry=registry)
    endpoints = [pyepp.Endpoint(f"10.0.0.1:{port}", {"waiting_queue_size": 0}) for port in (8000, 8001, 8002)]
    result = scheduler.pick(pyepp.Request.from_openai({"model": "m", "prompt": "hi"}), endpoints)
    rows = pyepp.explain_rows(result, "filters")
    assert sorted((r["endpoint"], r["kept"], r["reason"]) for r in rows) == [
        ("10.0.0.1:8000", True, ""), ("10.0.0.1:8001", False, "odd port"), ("10.0.0.1:8002", True, "")]
    assert {r["filter"] for r in rows} == {"only-even"}
    assert {r["endpoint"] for r in pyepp.explain_rows(result)} == {"10.0.0.1:8000", "10.0.0.1:8002"}


# --- to_pandas -----------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_pandas")
def test_to_pandas_without_pandas_says_so(report: pyepp.ReplayReport, pick: pyepp.PickResult) -> None:
    for call in (report.to_pandas, lambda: report.to_pandas("servers"), lambda: pyepp.to_pandas(pick),
                 lambda: pyepp.to_pandas(report), lambda: pyepp.to_pandas([{"a": 1}])):
        with pytest.raises(pyepp.MissingDependencyError) as info:
            call()
        assert isinstance(info.value, ImportError) and info.value.name == "pandas"
        assert "needs pandas, which is not installed" in str(info.value) and "pip install pandas" in str(info.value)
    assert "ReplayReport.to_pandas()" in str(pytest.raises(ImportError, report.to_pandas).value)
    assert report.rows("servers")  # rows never need pandas


@pytest.mark.skipif(HAVE_PANDAS, reason="pandas is installed here")
def test_to_pandas_where_pandas_is_really_absent(report: pyepp.ReplayReport) -> None:
    with pytest.raises(ImportError, match="needs pandas"):
        report.to_pandas()


def test_to_pandas_builds_frames_from_the_rows(report: pyepp.ReplayReport, pick: pyepp.PickResult,
                                               fake_pandas: List[Dict[str, Any]]) -> None:
    frame = report.to_pandas("servers")
    assert fake_pandas[-1] == {"rows": report.rows("servers"),
                               "columns": ["policy", "server", "role", "requests", "kv_usage_mean"]}
    assert frame.rows == report.rows("servers")
    report.to_pandas()
    assert fake_pandas[-1]["columns"][:3] == ["name", "completed", "failed"]
    pyepp.to_pandas(dict(report), "ttft")  # a plain report dict, e.g. eppctl replay --output json loaded
    assert fake_pandas[-1]["rows"] == report.rows("ttft")
    pyepp.to_pandas(pick)
    assert fake_pandas[-1]["rows"] == pyepp.explain_rows(pick) and "weighted" in fake_pandas[-1]["columns"]
    pyepp.to_pandas([{"a": 1}, {"b": 2}])
    assert fake_pandas[-1] == {"rows": [{"a": 1}, {"b": 2}], "columns": ["a", "b"]}
    with pytest.raises(TypeError):
        pyepp.to_pandas(3.5)
    with pytest.raises(ValueError, match="unknown table"):
        report.to_pandas("nope")


@pytest.mark.skipif(not HAVE_PANDAS, reason="pandas is not installed (optional)")
def test_to_pandas_with_pandas(report: pyepp.ReplayReport) -> None:
    import pandas as pd

    df = report.to_pandas()
    assert isinstance(df, pd.DataFrame) and list(df["name"]) == POLICIES
    assert list(df["ttft_s.p90"]) == [p["ttft_s"]["p90"] for p in report["policies"]]
    servers = report.to_pandas("servers")
    assert servers.groupby("policy")["requests"].sum().to_dict() == {p: report["trace"]["requests"] for p in POLICIES}


# --- plots ---------------------------------------------------------------------------------------


@needs_matplotlib
@pytest.mark.usefixtures("close_figures")
def test_ttft_cdf(report: pyepp.ReplayReport) -> None:
    from matplotlib.figure import Figure

    fig = plots.ttft_cdf(report)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == POLICIES
    for line, p in zip(ax.lines, report["policies"]):
        xs, ys = line.get_data()
        assert list(xs[1:]) == p["ttft_samples_s"] and ys[-1] == 1.0 and ys[0] == 0.0
    assert ax.get_xscale() == "log"
    fig = plots.ttft_cdf(report, policies=["gie-default"], log_x=False)
    assert [line.get_label() for line in fig.axes[0].lines] == ["gie-default"]
    assert fig.axes[0].lines[0].get_color() == "C1"  # a policy keeps its report color
    assert fig.axes[0].get_xscale() == "linear"
    fig = plots.ttft_cdf({"measured": [0.3, 0.1, 0.2]})  # a dict of samples, unsorted
    assert list(fig.axes[0].lines[0].get_data()[0]) == [0.1, 0.1, 0.2, 0.3]
    with pytest.raises(ValueError, match="no policy 'nope'.*round-robin"):
        plots.ttft_cdf(report, policies=["nope"])


@needs_matplotlib
@pytest.mark.usefixtures("close_figures")
def test_hit_rate_over_time(report: pyepp.ReplayReport) -> None:
    fig = plots.hit_rate_over_time(report)
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines][:3] == POLICIES and len(ax.lines) == 5  # + two bounds
    for line, p in zip(ax.lines, report["policies"]):
        xs, ys = line.get_data()
        assert list(ys) == p["hit_rate_timeline"]
        assert 0 < xs[0] < xs[-1] < report["trace"]["duration_s"]
    assert list(ax.lines[3].get_ydata()) == [report["trace"]["upper_bound_block_hit_rate"]] * 2
    assert len(plots.hit_rate_over_time(report, bounds=False).axes[0].lines) == 3


@needs_matplotlib
@pytest.mark.usefixtures("close_figures")
def test_load_per_server(report: pyepp.ReplayReport) -> None:
    fig = plots.load_per_server(report)
    requests, kv = fig.axes
    assert len(requests.patches) == len(POLICIES) * 3 and len(kv.patches) == len(POLICIES) * 3
    heights = [round(b.get_height()) for b in requests.patches]
    assert heights == [n for p in report["policies"] for n in p["requests_per_server"]]
    (even,) = requests.lines  # every policy routed every request: one even share
    assert even.get_ydata()[0] == pytest.approx(report["trace"]["requests"] / 3)
    assert [round(b.get_height(), 9) for b in kv.patches] == [
        round(x, 9) for p in report["policies"] for x in p["kv_usage_mean_per_server"]]
    fig = plots.load_per_server({"live": [5, 3, 1], "other": [1, 1, 1]}, servers=["a", "b", "c"])
    (only,) = fig.axes
    assert [t.get_text() for t in only.get_xticklabels()] == ["a", "b", "c"]
    assert [b.get_height() for b in only.patches] == [5, 3, 1, 1, 1, 1]
    assert sorted(line.get_ydata()[0] for line in only.lines) == [1, 3]  # different totals: one line each


@needs_matplotlib
@pytest.mark.usefixtures("close_figures")
def test_overview_and_given_axes(report: pyepp.ReplayReport) -> None:
    import matplotlib.pyplot as plt

    fig = plots.replay_overview(report, title="overview")
    assert len(fig.axes) == 4 and all(ax.lines for ax in fig.axes[:3]) and fig.axes[3].patches
    mine, axes = plt.subplots(1, 3)
    assert plots.ttft_cdf(report, ax=axes[0]) is mine
    assert plots.load_per_server(report, ax=axes[1:]) is mine
    assert axes[0].lines and axes[1].patches and axes[2].patches
    with pytest.raises(ValueError, match="2 server names for 3 servers"):
        plots.load_per_server(report, servers=["a", "b"])
    with pytest.raises(ValueError, match="give 2 axes"):
        plots.load_per_server(report, ax=axes[0])


@needs_matplotlib
@pytest.mark.usefixtures("close_figures")
def test_pick_scores(pick: pyepp.PickResult) -> None:
    fig = plots.pick_scores(pick)
    (ax,) = fig.axes
    rows = pyepp.explain_rows(pick)
    assert len(ax.patches) == len(rows)  # one bar segment per endpoint and scorer
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert f"* {pick.endpoint}" in labels and len(labels) == 3
    top = max(zip(ax.get_yticks(), labels))[1]  # the highest total is drawn on top
    assert top.lstrip("* ") == max(rows, key=lambda r: r["total"])["endpoint"]
    totals = {}
    for bar in ax.patches:
        totals[bar.get_y()] = max(totals.get(bar.get_y(), 0), bar.get_x() + bar.get_width())
    assert sorted(totals.values()) == pytest.approx(sorted({r["endpoint"]: r["total"] for r in rows}.values()))
    untraced = pyepp.Scheduler.default().pick(pick.request, [pyepp.Endpoint("10.0.0.1:8000", {})], trace=False)
    with pytest.raises(ValueError, match="no score trace"):
        plots.pick_scores(untraced)


def test_plots_without_matplotlib_say_so(report: pyepp.ReplayReport, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(pyepp.MissingDependencyError, match=r"pyepp.plots.ttft_cdf\(\) needs matplotlib") as info:
        plots.ttft_cdf(report)
    assert isinstance(info.value, ImportError) and info.value.name == "matplotlib"


@needs_matplotlib
def test_headless_plots_use_agg(report: pyepp.ReplayReport, tmp_path: Any) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MPLBACKEND")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")
    code = ("import json, sys, matplotlib; from pyepp import plots; "
            "fig = plots.replay_overview(json.load(open(sys.argv[1]))); fig.savefig(sys.argv[2]); "
            "print(matplotlib.get_backend())")
    out = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / "o.png")], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().lower() == "agg"
    assert (tmp_path / "o.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
