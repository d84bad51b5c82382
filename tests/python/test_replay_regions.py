"""pyepp.replay_regions: the multi-region replay through the binding (the engine's exact cases are
in tests/cpp/replay/multiregion_test.cc): both input forms, the report's shape, trace regions,
determinism, errors and the text rendering; and replay(server_speeds=) for mixed-speed pools."""

from __future__ import annotations

from pathlib import Path

import pytest

import pyepp

TINY = pyepp.SharedPrefix(groups=3, prompts_per_group=6, system_len=200, question_len=20, output_len=8, rate=40)
MODE_KEYS = ["mode", "completed", "shed", "failed", "ttft_s", "e2e_s", "block_hit_rate", "cross_region_share",
             "arrivals_per_region", "served_per_region", "ttft_p90_per_origin_s", "load_max_over_mean", "wall_s"]


def _strip(report):
    for m in report["modes"]:
        m.pop("wall_s")
    return report


def test_string_and_structured_forms_give_the_same_report():
    a = pyepp.replay_regions(TINY, "least-queue", "east:2:0.6:20,west:2:0.4", "east/west=40", seed=5)
    b = pyepp.replay_regions(TINY, "least-queue",
                             [{"name": "east", "servers": 2, "share": 0.6, "capacity_rps": 20},
                              {"name": "west", "servers": 2, "share": 0.4}],
                             {("west", "east"): 40}, seed=5)
    assert set(a) == {"arrivals_from_trace", "modes", "policy", "regions"}
    assert [m["mode"] for m in a["modes"]] == ["global", "hierarchical", "local"]
    assert sorted(a["modes"][0]) == sorted(MODE_KEYS)
    assert a["regions"][0] == {"name": "east", "servers": 2, "arrival_share": 0.6, "capacity_rps": 20.0}
    assert _strip(a) == _strip(b)
    n = 3 * 6
    for m in a["modes"]:
        assert sum(m["arrivals_per_region"]) == n
        assert m["completed"] + m["shed"] + m["failed"] == n
        assert sum(m["served_per_region"]) == m["completed"] + m["failed"]
    # Local only never leaves its region while nothing is saturated (rate 40 on 4 idle servers).
    assert a["modes"][2]["cross_region_share"] == 0.0


def test_trace_regions_and_text(tmp_path: Path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        f'{{"timestamp": {i * 20}, "input_length": 700, "output_length": 4, "hash_ids": [{i % 3}, {100 + i}], '
        f'"region": "{"west" if i % 4 == 0 else "east"}"}}\n' for i in range(12)))
    r = pyepp.replay_regions(trace, "gie-default", "east:1,west:1", "east/west=25")
    assert r["arrivals_from_trace"] == 12
    assert r["modes"][0]["arrivals_per_region"] == [9, 3]
    text = pyepp.replay_regions_text(trace, "gie-default", "east:1,west:1", "east/west=25")
    assert "12 arrival regions from the trace" in text
    assert "hierarchical" in text and "TTFT p90 by arrival region" in text


def test_errors_name_the_problem():
    with pytest.raises(pyepp.ConfigError, match=r"no RTT between a and c \(give a/c=MS\)"):
        pyepp.replay_regions(TINY, "round-robin", "a:1,b:1,c:1", "a/b=1,b/c=1")
    with pytest.raises(pyepp.ConfigError, match=r"--regions 'a': expected 2 to 4 fields"):
        pyepp.replay_regions(TINY, "round-robin", "a,b:1", "a/b=1")
    with pytest.raises(pyepp.ConfigError, match=r"regions\[1\]: unknown key\(s\) 'capacity'"):
        pyepp.replay_regions(TINY, "round-robin", [{"name": "a"}, {"name": "b", "capacity": 3}], "a/b=1")
    with pytest.raises(pyepp.ConfigError, match=r"rtt_ms key 'ab'"):
        pyepp.replay_regions(TINY, "round-robin", "a:1,b:1", {"ab": 1})
    with pytest.raises(pyepp.ConfigError, match="one local policy"):
        pyepp.replay_regions(TINY, ["round-robin", "least-queue"], "a:1,b:1", "a/b=1")
    with pytest.raises(pyepp.ConfigError, match="global region 'z' is not a region"):
        pyepp.replay_regions(TINY, "round-robin", "a:1,b:1", "a/b=1", global_region="z")
    with pytest.raises(pyepp.NotFoundError):
        pyepp.replay_regions(TINY, "no-such-policy", "a:1,b:1", "a/b=1")


def test_server_speeds_make_a_mixed_pool():
    same = pyepp.replay(TINY, "round-robin", servers=2)
    mixed = pyepp.replay(TINY, "round-robin", servers=2, server_speeds=[4, 0.25])
    assert mixed["policies"][0]["ttft_s"] != same["policies"][0]["ttft_s"]
    with pytest.raises(pyepp.ConfigError, match=r"server speeds\[0\]: must be in \(0, 100\]"):
        pyepp.replay(TINY, "round-robin", servers=2, server_speeds=[0])
    with pytest.raises(pyepp.ConfigError, match="server_speeds must be a list of numbers"):
        pyepp.replay(TINY, "round-robin", servers=2, server_speeds="fast")
