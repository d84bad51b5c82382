"""`eppctl replay` with llm-d's flow-control layer (featureGates: [flowControl]) in virtual time:
per-band and per-tenant reports, drops by reason, Jain's index, --tenants / --priority-mix, and
tenants and priorities read from OpenAI trace lines."""
import json

import pytest

from conftest import ROOT

FC = ROOT / "examples" / "configs" / "flow-control.yaml"
STRICT = ROOT / "examples" / "configs" / "flow-control-strict.yaml"
# Two servers, far over what they sustain (about 120 req/s) for 10 s.
OVERLOAD = ["--workload", "shared-prefix", "--groups", "8", "--prompts-per-group", "16", "--system-len", "800",
            "--question-len", "200", "--output-len", "100", "--servers", "2", "--duration", "10", "--rate", "300"]


def replay_json(eppctl, *args):
    r = eppctl("replay", "-o", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def by_name(groups):
    return {g["name"]: g for g in groups}


def test_flow_control_holds_sheddable_traffic_and_protects_priority_zero(eppctl):
    d = replay_json(eppctl, *OVERLOAD, "--tenants", "3", "--priority-mix", "0=0.1,-1=0.9",
                    "--policy", "gie-default", "--policy", FC)
    shed, fc = d["policies"]
    assert (shed["flow_control"], fc["flow_control"]) == (False, True)
    requests = d["trace"]["requests"]
    for p in (shed, fc):
        assert p["completed"] + p["shed"] + p["failed"] == requests
        bands = by_name(p["bands"])
        assert set(bands) == {"0", "-1"}
        assert [b["name"] for b in p["bands"]] == ["0", "-1"]  # highest priority first
        assert sum(b["requests"] for b in p["bands"]) == requests
        assert bands["0"]["dropped"] == 0
        assert sum(p["drops"].values()) == p["shed"]
        assert set(by_name(p["tenants"])) == {"t1", "t2", "t3"}
        assert 0 < p["jain_fairness"] <= 1
    # Under flow control priority 0 mostly finds the room the holdback keeps for it and waits far
    # less than sheddable traffic, whose TTFT counts its time queued in the EPP.
    bands = by_name(fc["bands"])
    assert bands["0"]["wait_s"]["p50"] == 0
    assert bands["-1"]["wait_s"]["p50"] > 0
    assert bands["0"]["wait_s"]["p99"] < bands["-1"]["wait_s"]["p50"]
    assert bands["-1"]["ttft_s"]["p50"] >= bands["-1"]["wait_s"]["p50"]
    assert fc["flow_wait_s"]["p99"] >= bands["-1"]["wait_s"]["p50"]
    # Sheddable traffic is served at the layer's pace, below what it asks; 429 shedding serves more.
    assert bands["-1"]["served_rps"] < bands["-1"]["demand_rps"]
    assert by_name(shed["bands"])["-1"]["served_rps"] > bands["-1"]["served_rps"]
    # Without flow control nothing waits in the EPP.
    assert all(b["wait_s"]["p99"] == 0 for b in shed["bands"])


def test_text_report_has_band_and_tenant_tables(eppctl):
    r = eppctl("replay", *OVERLOAD, "--tenants", "a=3,b", "--priority-mix", "0=0.2,-1=0.8", "--policy", STRICT)
    assert r.returncode == 0, r.stderr
    assert "flow-control-strict: flow control, time queued in the EPP p50 " in r.stdout
    assert "Jain's fairness index " in r.stdout
    lines = r.stdout.splitlines()
    header = [i for i, l in enumerate(lines) if l.split()[:2] == ["band", "requests"]]
    assert len(header) == 1, r.stdout
    assert lines[header[0] + 1].split()[0] == "0" and lines[header[0] + 2].split()[0] == "-1"
    tenants = [l.split()[0] for l in lines if l.startswith("  a ") or l.startswith("  b ")]
    assert tenants == ["a", "b"], r.stdout


def test_no_tenants_no_groups_and_jain_is_null(eppctl):
    d = replay_json(eppctl, "--workload", "shared-prefix", "--groups", "2", "--prompts-per-group", "3",
                    "--servers", "2", "--policy", "gie-default")
    (p,) = d["policies"]
    assert p["bands"] == [] and p["tenants"] == []
    assert p["jain_fairness"] is None
    assert p["drops"] == {}


def test_openai_trace_lines_carry_tenant_and_priority(eppctl, tmp_path):
    trace = tmp_path / "t.jsonl"
    lines = []
    for i in range(12):
        line = {"arrival_s": i * 0.01, "body": {"model": "m", "prompt": "question %d " % i * 20, "max_tokens": 20},
                "priority": 1 if i % 4 == 0 else 0}
        if i % 2:
            line["tenant"] = "odd"
        else:
            line["headers"] = {"x-llm-d-inference-fairness-id": "even"}
        lines.append(json.dumps(line))
    trace.write_text("\n".join(lines) + "\n")
    d = replay_json(eppctl, "--trace", trace, "--servers", "2", "--policy", FC)
    (p,) = d["policies"]
    tenants = by_name(p["tenants"])
    assert {k: v["requests"] for k, v in tenants.items()} == {"even": 6, "odd": 6}
    assert {b["name"]: b["requests"] for b in p["bands"]} == {"1": 3, "0": 9}
    assert p["completed"] == 12 and p["shed"] == 0
    assert p["jain_fairness"] is not None


@pytest.mark.parametrize("args,message", [
    (["--tenants", "0"], "--tenants: '0'"),
    (["--tenants", "a=-1"], "--tenants: 'a=-1'"),
    (["--priority-mix", "high=1"], "--priority-mix: 'high=1'"),
    (["--priority-mix", "1=0.5,1=0.5"], "priority 1 given twice"),
])
def test_bad_mix_flags_exit_2_naming_the_item(eppctl, args, message):
    r = eppctl("replay", "--workload", "shared-prefix", *args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert message in r.stderr


def test_bad_tenant_in_trace_names_file_and_line(eppctl, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "body": {"model": "m", "prompt": "hi"}}\n'
                     '{"arrival_s": 1, "body": {"model": "m", "prompt": "hi"}, "tenant": 7}\n')
    r = eppctl("replay", "--trace", trace)
    assert r.returncode == 2
    assert "%s:2: tenant: " % trace in r.stderr


def test_slo_flags_report_attainment_and_goodput(eppctl, tmp_path):
    args = ["--workload", "shared-prefix", "--groups", "4", "--prompts-per-group", "8", "--servers", "2",
            "--policy", "round-robin", "--policy", "gie-default"]
    d = replay_json(eppctl, *args, "--slo-ttft-ms", "1000", "--slo-tpot-ms", "1000")
    for p in d["policies"]:
        slo = p["slo"]
        assert slo["requests"] == d["trace"]["requests"] == 32
        # Generous SLOs on a light load: everything served in time.
        assert slo["ttft_attainment"] == slo["tpot_attainment"] == slo["attainment"] == 1.0
        assert slo["goodput_rps"] == pytest.approx(p["throughput_rps"])
    tight = replay_json(eppctl, *args, "--slo-ttft-ms", "0")
    for p in tight["policies"]:
        assert p["slo"]["ttft_attainment"] == 0 and p["slo"]["tpot_attainment"] is None and p["slo"]["goodput_rps"] == 0
    r = eppctl("replay", *args, "--slo-ttft-ms", "1000")
    assert r.returncode == 0 and "SLO attainment" in r.stdout
    assert replay_json(eppctl, *args)["policies"][0]["slo"] is None
    r = eppctl("replay", *args, "--slo-ttft-ms", "-5")
    assert r.returncode == 2
    # A trace line's own SLO wins over the flag.
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(json.dumps({"arrival_s": i, "body": {"model": "m", "prompt": "q%d" % i, "max_tokens": 4},
                                           **({"slo_ttft_ms": 0} if i == 0 else {})}) for i in range(4)) + "\n")
    (p,) = replay_json(eppctl, "--trace", trace, "--servers", "1", "--policy", "round-robin",
                       "--slo-ttft-ms", "10000")["policies"]
    assert p["slo"]["requests"] == 4 and p["slo"]["ttft_attainment"] == 0.75


def test_llm_d_predicted_latency_runs_and_learns_the_slow_server(eppctl):
    # One fast and one very slow server: llm-d's predicted-latency configuration starts blind
    # (the composite fallback), learns both servers from the responses in the replay's virtual
    # time, and then keeps most requests with a TTFT SLO off the slow one; round robin cannot.
    args = ["--workload", "shared-prefix", "--groups", "16", "--prompts-per-group", "12", "--servers", "2",
            "--server-speed", "1,0.1", "--rate", "4", "--system-len", "1000", "--question-len", "1000",
            "--slo-ttft-ms", "400"]
    d = replay_json(eppctl, *args, "--policy", "round-robin", "--policy", "llm-d-predicted-latency")
    rr, pl = d["policies"]
    assert pl["name"] == "llm-d-predicted-latency"
    assert pl["slo"]["requests"] == rr["slo"]["requests"] == 192
    assert pl["slo"]["ttft_attainment"] > rr["slo"]["ttft_attainment"] + 0.3, (pl["slo"], rr["slo"])
    fast, slow = pl["requests_per_server"]
    assert slow < fast / 4, pl["requests_per_server"]
    # Seeded: the same run twice gives the same report.
    again = replay_json(eppctl, *args, "--policy", "llm-d-predicted-latency")["policies"][0]
    assert again["slo"] == pl["slo"]
