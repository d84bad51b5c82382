"""`eppctl replay` end to end: text and JSON output, the HTML report, usage errors."""
import json
import re

import pytest

SMALL = ["--workload", "shared-prefix", "--groups", "4", "--prompts-per-group", "5", "--rate", "20", "--servers", "3"]
POLICY_KEYS = ["name", "block_hit_rate", "token_hit_rate", "ttft_s", "e2e_s", "throughput_rps", "load_max_over_mean",
               "prediction_error_rate", "failed"]


def replay_json(eppctl, *args):
    r = eppctl("replay", "-o", "json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_text_table_names_every_policy(eppctl):
    r = eppctl("replay", *SMALL)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^trace: 20 requests over ", r.stdout, re.M), r.stdout
    assert re.search(r"^round-robin\s+[\d.]+", r.stdout, re.M), r.stdout
    assert re.search(r"^gie-default\s+[\d.]+", r.stdout, re.M), r.stdout
    assert "simulated time" in r.stdout
    assert r.stderr == ""  # no progress bar when stderr is not a terminal


def test_json_shape(eppctl):
    d = replay_json(eppctl, *SMALL, "--policy", "least-queue", "--policy", "sglang-cache-aware")
    for k in ["requests", "blocks", "upper_bound_block_hit_rate", "pooled_cache_bound_block_hit_rate"]:
        assert k in d["trace"], k
    assert d["trace"]["requests"] == 20
    assert [p["name"] for p in d["policies"]] == ["least-queue", "sglang-cache-aware"]
    for p in d["policies"]:
        for k in POLICY_KEYS:
            assert k in p, k
        for part in ["ttft_s", "e2e_s"]:
            assert set(p[part]) >= {"p50", "p90", "p99"}
            assert p[part]["p50"] <= p[part]["p90"] <= p[part]["p99"]
        assert p["completed"] == 20 and p["failed"] == 0
        assert len(p["requests_per_server"]) == 3 and sum(p["requests_per_server"]) == 20
        assert 0 <= p["block_hit_rate"] <= d["trace"]["upper_bound_block_hit_rate"] + 1e-9


def test_same_seed_same_figures(eppctl):
    def figures(seed):
        d = replay_json(eppctl, *SMALL, "--policy", "random", "--seed", seed)
        for p in d["policies"]:
            p.pop("wall_s")
        return d

    assert figures(4) == figures(4)


def test_gie_workload_and_simulator_flags(eppctl):
    d = replay_json(eppctl, "--gie-workload", "long-questions__many-system-prompts", "--groups", "3", "--prompts-per-group",
                    "2", "--rate", "5", "--servers", "2", "--server-kv-tokens", "200000", "--max-running", "8",
                    "--prefill-tokens-per-s", "40000", "--decode-step-ms", "5", "--decode-ms-per-seq", "0.1",
                    "--engine", "sglang", "--refresh-metrics-interval", "100ms", "--policy", "round-robin")
    # 3 groups x 2 prompts; 1000 + 6200 prompt tokens each (the GIE file's lengths).
    assert d["trace"]["requests"] == 6
    assert d["trace"]["prompt_tokens"] == 6 * 7200


def test_mooncake_trace_with_duration(eppctl, fixtures_dir):
    trace = fixtures_dir / "traces" / "mooncake-fast25-synthetic_trace.jsonl"
    if not trace.exists():
        pytest.skip("no Mooncake trace in the shared fixtures")
    d = replay_json(eppctl, "--trace", trace, "--duration", "20", "--policy", "round-robin")
    assert 0 < d["trace"]["requests"] < 3993
    assert d["trace"]["duration_s"] <= 20


def test_html_report_is_self_contained(eppctl, tmp_path):
    out = tmp_path / "report.html"
    r = eppctl("replay", *SMALL, "--report", out)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert html.rstrip().endswith("</html>")
    assert html.count("<svg") == html.count("</svg>") >= 3
    assert "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    for name in ["round-robin", "gie-default", "upper bound", "pooled cache"]:
        assert name in html, name
    # Wide tables scroll inside the page instead of overflowing it.
    assert re.search(r"table\{[^}]*overflow-x:auto", html)


def test_html_legend_fits_long_policy_names(eppctl, tmp_path):
    out = tmp_path / "report.html"
    r = eppctl("replay", *SMALL, "--policy", "round-robin", "--policy", "llm-d-predicted-latency", "--report", out)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    # A legend entry longer than the legend column is squeezed to it (and keeps its full name as
    # a tooltip); a short one is drawn as it is.
    long_entries = re.findall(r'<text [^>]*textLength="[0-9.]+"[^>]*><title>llm-d-predicted-latency</title>', html)
    assert long_entries, "the long name is not fitted to the legend"
    assert re.search(r'<text x="[0-9.]+" y="[0-9.]+"><title>round-robin</title>round-robin</text>', html)


def test_html_escapes_policy_names_from_files(eppctl, tmp_path):
    cfg = tmp_path / "a&b<c>.yaml"
    cfg.write_text("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
                   "plugins:\n- type: queue-scorer\n")
    out = tmp_path / "r.html"
    r = eppctl("replay", *SMALL, "--policy", cfg, "--report", out)
    assert r.returncode == 0, r.stderr
    html = out.read_text()
    assert "a&amp;b&lt;c&gt;" in html
    assert "a&b<c>" not in html


@pytest.mark.parametrize("args", [
    [],                                                     # nothing to replay
    ["--workload", "nope"],
    ["--workload", "shared-prefix", "--trace", "x.jsonl"],  # both inputs
    ["--workload", "shared-prefix", "--rate", "0"],
    ["--workload", "shared-prefix", "--servers", "0"],
    ["--workload", "shared-prefix", "--output", "yaml"],
    ["--workload", "shared-prefix", "--arrivals", "bursty"],
    ["--workload", "shared-prefix", "--refresh-metrics-interval", "soon"],
    ["--workload", "shared-prefix", "--server-kv-tokens", "8"],
    ["--workload", "shared-prefix", "--bogus"],
    ["--gie-workload", "nope"],
    ["--trace", "/nonexistent/trace.jsonl"],
])
def test_bad_flags_exit_2(eppctl, args):
    r = eppctl("replay", *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert r.stdout == ""


def test_workload_flags_do_not_apply_to_traces(eppctl, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n')
    r = eppctl("replay", "--trace", trace, "--groups", "5")
    assert r.returncode == 2
    assert "--groups" in r.stderr
    # --arrivals only with --rate (which a trace does take: see the rate test below).
    r = eppctl("replay", "--trace", trace, "--arrivals", "constant")
    assert r.returncode == 2 and "--arrivals applies to a trace only with --rate" in r.stderr


def test_rate_replays_a_trace_without_timestamps(eppctl, root, tmp_path):
    trace = root / "examples" / "traces" / "shared-prefix.jsonl"  # captured requests, no arrival times
    r = eppctl("replay", "--trace", trace)
    assert r.returncode == 2 and ":1: no arrival time" in r.stderr and "--rate" in r.stderr
    d = replay_json(eppctl, "--trace", trace, "--rate", "50", "--arrivals", "constant", "--servers", "2")
    assert d["trace"]["requests"] == 200
    assert d["trace"]["duration_s"] == pytest.approx(199 / 50)  # constant spacing from 0
    assert all(p["completed"] == 200 for p in d["policies"])
    poisson = replay_json(eppctl, "--trace", trace, "--rate", "50", "--servers", "2", "--seed", "3")
    assert poisson["trace"]["duration_s"] != pytest.approx(199 / 50)
    again = replay_json(eppctl, "--trace", trace, "--rate", "50", "--servers", "2", "--seed", "3")
    assert again["trace"] == poisson["trace"]  # seeded
    # A trace with timestamps is re-timed in its order.
    timed = tmp_path / "t.jsonl"
    timed.write_text("\n".join(json.dumps({"arrival_s": 100 - i, "body": {"model": "m", "prompt": "q%d" % i}})
                               for i in range(5)) + "\n")
    d = replay_json(eppctl, "--trace", timed, "--rate", "10", "--arrivals", "constant", "--servers", "1")
    assert d["trace"]["duration_s"] == pytest.approx(0.4)
    r = eppctl("replay", "--trace", timed, "--rate", "0")
    assert r.returncode == 2


def test_bad_trace_line_names_file_and_line(eppctl, tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n{"timestamp": 1}\n')
    r = eppctl("replay", "--trace", trace)
    assert r.returncode == 2
    assert "%s:2: " % trace in r.stderr


def test_unknown_policy_lists_the_named_ones(eppctl):
    r = eppctl("replay", *SMALL, "--policy", "fastest-possible")
    assert r.returncode == 2
    assert "unknown policy 'fastest-possible'" in r.stderr
    for name in ["round-robin", "random", "least-queue", "least-inflight", "gie-default", "sglang-cache-aware"]:
        assert name in r.stderr, name


def test_unwritable_report_fails_before_running(eppctl):
    r = eppctl("replay", *SMALL, "--report", "/nonexistent/dir/r.html")
    assert r.returncode == 2
    assert "--report" in r.stderr
    assert r.stdout == ""


def test_pd_pool_compares_aggregated_and_disaggregated(eppctl, root):
    pd = root / "examples" / "configs" / "pd-disagg.yaml"
    args = ["--workload", "shared-prefix", "--groups", "3", "--prompts-per-group", "4", "--system-len", "0",
            "--question-len", "3000", "--rate", "5", "--prefill-servers", "2", "--decode-servers", "2"]
    d = replay_json(eppctl, *args, "--policy", "gie-default", "--policy", pd)
    agg, dis = d["policies"]
    assert agg["disaggregated_pool"] is False and agg["disaggregated"] == 0 and len(agg["requests_per_server"]) == 4
    assert dis["disaggregated_pool"] is True and dis["server_roles"] == ["prefill", "prefill", "decode", "decode"]
    assert dis["disaggregated"] == dis["completed"] == 12
    assert sum(dis["requests_per_server"][:2]) == 12 and sum(dis["requests_per_server"][2:]) == 12
    text = eppctl("replay", *args, "--policy", "gie-default", "--policy", pd)
    assert "pd-disagg: P/D pool (2 prefill + 2 decode servers): 12 of 12 requests prefilled remotely" in text.stdout, text.stdout
    bad = eppctl("replay", *args[:-2], "--policy", pd)  # prefill servers without decode servers
    assert bad.returncode == 2 and "at least one prefill and one decode server" in bad.stderr, bad.stderr


def test_precise_prefix_keeps_its_hit_rate_across_epp_replicas(eppctl):
    """Approximate prefix routing learns only from each replica's own picks; the precise producer
    reads every server's KV events, so splitting requests over replicas costs it nothing."""
    args = ["--workload", "shared-prefix", "--servers", "8", "--policy", "gie-default", "--policy", "gie-precise",
            "--seed", "1", "--kv-event-delay", "20ms"]
    one = {p["name"]: p for p in replay_json(eppctl, *args, "--epp-replicas", "1")["policies"]}
    four = {p["name"]: p for p in replay_json(eppctl, *args, "--epp-replicas", "4")["policies"]}
    assert one["gie-precise"]["precise"] and not one["gie-default"]["precise"]
    assert four["gie-precise"]["prediction_error_rate"] == 0
    assert four["gie-default"]["prediction_error_rate"] > 0
    assert four["gie-default"]["block_hit_rate"] < one["gie-default"]["block_hit_rate"] - 0.05
    assert four["gie-precise"]["block_hit_rate"] >= one["gie-precise"]["block_hit_rate"] - 0.01
    assert four["gie-precise"]["block_hit_rate"] > four["gie-default"]["block_hit_rate"] + 0.05
    r = eppctl("replay", "--workload", "shared-prefix", "--epp-replicas", "0")
    assert r.returncode == 2


def test_shared_state_gives_replicas_the_hit_rate_of_one_epp(eppctl):
    """Four replicas that learn only from their own picks lose prefix hits; sharing their updates
    (--shared-state, 100 ms late as serve's default) brings the hit rate back near one EPP's."""
    args = ["--workload", "shared-prefix", "--servers", "8", "--policy", "gie-default", "--seed", "1"]
    one = replay_json(eppctl, *args, "--epp-replicas", "1")["policies"][0]
    four = replay_json(eppctl, *args, "--epp-replicas", "4")["policies"][0]
    shared = replay_json(eppctl, *args, "--epp-replicas", "4", "--shared-state")["policies"][0]
    assert four["block_hit_rate"] < one["block_hit_rate"] - 0.05
    assert shared["block_hit_rate"] > four["block_hit_rate"] + 0.03
    assert shared["block_hit_rate"] >= one["block_hit_rate"] - 0.02
    # A delay as long as the trace: nothing arrives in time, as without sharing.
    late = replay_json(eppctl, *args, "--epp-replicas", "4", "--shared-state", "--shared-state-delay", "1h")["policies"][0]
    assert late["block_hit_rate"] == four["block_hit_rate"]
    bad = eppctl("replay", *args, "--epp-replicas", "2", "--shared-state", "--shared-state-delay", "-1s")
    assert bad.returncode == 2 and "--shared-state-delay" in bad.stderr, bad.stderr


def test_speculative_entries_cover_the_event_delay(eppctl):
    """With events a second late, followers of a new prompt miss its blocks under precise routing
    alone; speculativeIndexing enters them at pick time, and its predictions stay right."""
    args = ["--workload", "shared-prefix", "--servers", "8", "--policy", "gie-precise", "--policy",
            "gie-precise-speculative", "--seed", "1", "--kv-event-delay", "1s"]
    late = {p["name"]: p for p in replay_json(eppctl, *args)["policies"]}
    assert late["gie-precise-speculative"]["precise"]
    assert late["gie-precise-speculative"]["block_hit_rate"] > late["gie-precise"]["block_hit_rate"] + 0.03
    assert late["gie-precise-speculative"]["prediction_error_rate"] <= late["gie-precise"]["prediction_error_rate"]
    # Events in time: speculation changes nothing there.
    prompt = {p["name"]: p for p in replay_json(eppctl, *args[:-2], "--kv-event-delay", "0s")["policies"]}
    assert abs(prompt["gie-precise-speculative"]["block_hit_rate"] - prompt["gie-precise"]["block_hit_rate"]) < 0.02


def test_shared_system_prompt_conversations_flag_gie_defaults_idle_servers_and_epp_spreads(eppctl):
    # The pathology the TTFT bound and the flags were built to show: behind one shared system
    # prompt GIE's default never sends a first request to an idle server; epp's policy does.
    r = eppctl("replay", "--workload", "shared-prefix", "--multi-turn", "--shared-system-prompt", "--groups", "32",
               "--prompts-per-group", "8", "--system-len", "300", "--question-len", "100", "--output-len", "200",
               "--rate", "40", "--duration", "20", "--policy", "gie-default", "--policy", "epp", "--no-progress",
               "-o", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    gie, epp = d["policies"]
    assert "idle-servers" in [f["code"] for f in gie["flags"]]
    assert epp["flags"] == [] and epp["load_max_over_mean"] < 1.5
    assert epp["ttft_s"]["p90"] < gie["ttft_s"]["p90"]
    assert epp["ttft_over_bound"]["p90"] >= 1.0


REGIONS = ["--workload", "shared-prefix", "--groups", "4", "--prompts-per-group", "6", "--rate", "30"]


def test_regions_compare_three_routing_shapes(eppctl, tmp_path):
    d = replay_json(eppctl, *REGIONS, "--policy", "gie-default", "--regions", "east:2:0.7:10,west:2:0.3",
                    "--rtt", "east/west=50", "--global-region", "west")
    assert d["policy"] == "gie-default"
    assert [r["name"] for r in d["regions"]] == ["east", "west"]
    assert d["regions"][0]["capacity_rps"] == 10
    assert [m["mode"] for m in d["modes"]] == ["global", "hierarchical", "local"]
    for m in d["modes"]:
        assert sum(m["arrivals_per_region"]) == 24
        assert m["completed"] + m["shed"] + m["failed"] == 24
        assert 0 <= m["cross_region_share"] <= 1
        assert m["ttft_s"]["p50"] <= m["ttft_s"]["p90"] <= m["ttft_s"]["p99"]
    # The global EPP sits in west: every east arrival pays the 50 ms callout, so no east request
    # can be faster than 50 ms there; local EPPs add no network time to a request served at home.
    east_p90 = d["modes"][0]["ttft_p90_per_origin_s"][0]
    assert east_p90 >= 0.05
    # The text table: one row per mode, per-origin p90s.
    r = eppctl("replay", *REGIONS, "--policy", "gie-default", "--regions", "east:2:0.7:10,west:2:0.3", "--rtt",
               "east/west=50")
    assert r.returncode == 0, r.stderr
    for mode in ("global", "hierarchical", "local"):
        assert re.search(rf"^{mode}\s+\d+\s+\d+\s+[\d.]+s", r.stdout, re.M), r.stdout
    assert "capacity 10 req/s" in r.stdout and "TTFT p90 by arrival region" in r.stdout


@pytest.mark.parametrize("args,message", [
    (["--regions", "a:1,b:1"], "no RTT between a and b (give a/b=MS)"),
    (["--regions", "a:1,b:1", "--rtt", "a/c=5"], "RTT a/c: unknown region"),
    (["--regions", "a:1,b:1", "--rtt", "a/b=5", "--policy", "random", "--policy", "round-robin"], "give one --policy"),
    (["--regions", "a:1,b:1", "--rtt", "a/b=5", "--epp-replicas", "2"], "--epp-replicas and --server-speed do not apply"),
    (["--regions", "a:x", "--rtt", "a/b=5"], "--regions 'a:x': SERVERS must be a whole number >= 1"),
    (["--rtt", "a/b=5"], "--rtt and --global-region go with --regions"),
    (["--regions", "a:1,b:1", "--rtt", "a/b=5", "--report", "REPORT"], "--report is not available with --regions"),
])
def test_regions_usage_errors(eppctl, tmp_path, args, message):
    report = tmp_path / "r.html"
    r = eppctl("replay", *REGIONS, *[str(report) if a == "REPORT" else a for a in args])
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert message in r.stderr, r.stderr
    assert not report.exists()  # refused before the report file is opened


def test_server_speed_makes_a_mixed_pool(eppctl):
    args = ["--workload", "shared-prefix", "--groups", "4", "--prompts-per-group", "6", "--rate", "30", "--servers", "4",
            "--policy", "least-queue"]
    fast = replay_json(eppctl, *args, "--server-speed", "4")
    slow = replay_json(eppctl, *args, "--server-speed", "0.25")
    assert fast["policies"][0]["ttft_s"]["p50"] < slow["policies"][0]["ttft_s"]["p50"]
    r = eppctl("replay", *args, "--server-speed", "1,0")
    assert r.returncode == 2
    assert "--server-speed '0': expected a speed in (0, 100]" in r.stderr


# Every named policy of issue #15 on every trace format, with --time-scale: all requests served,
# the durations scaled exactly, and the bound beside each policy's TTFT. Arrivals are at 0, 0.3,
# 0.5, 1.0 and 2.0 s in each file.
NAMED = ["round-robin", "random", "least-queue", "least-inflight", "gie-default", "sglang-cache-aware",
         "llm-d-default", "llm-d-legacy-blend", "vllm-loadaware", "dynamo-kv", "orca-wrr", "llm-d-predicted-latency", "epp", "epp-static"]
ARRIVALS_MS = [0, 300, 500, 1000, 2000]
LENGTHS = [(1200, 40), (300, 20), (2500, 80), (40, 5), (900, 30)]


def trace_lines(fmt):
    if fmt == "azure":
        return ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [
            f"2023-11-16 18:15:{46.68059 + ms / 1000:.7f},{p},{o}" for ms, (p, o) in zip(ARRIVALS_MS, LENGTHS)]
    if fmt == "burstgpt":
        return ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"] + [
            f"{ms / 1000},ChatGPT,{p},{o},{p + o},Conversation log" for ms, (p, o) in zip(ARRIVALS_MS, LENGTHS)]
    if fmt == "mooncake":  # 512-token blocks; the first two requests share a block
        ids = [[1, 2, 3], [1], [4, 5, 6, 7, 8], [9], [1, 2]]
        return [json.dumps({"timestamp": ms, "input_length": p, "output_length": o, "hash_ids": h})
                for ms, (p, o), h in zip(ARRIVALS_MS, LENGTHS, ids)]
    return [json.dumps({"timestamp": ms, "output_tokens": o, "path": "/v1/chat/completions",
                        "body": {"model": "m", "messages": [{"role": "system", "content": "Be brief. " * 20},
                                                            {"role": "user", "content": "question %d " % i * (p // 40)}]}})
            for i, (ms, (p, o)) in enumerate(zip(ARRIVALS_MS, LENGTHS))]


@pytest.mark.parametrize("fmt", ["azure", "burstgpt", "mooncake", "openai"])
def test_every_named_policy_on_every_trace_format_with_time_scale(eppctl, tmp_path, fmt):
    trace = tmp_path / f"{fmt}.trace"
    trace.write_text("\n".join(trace_lines(fmt)) + "\n")
    policies = [a for name in NAMED for a in ("--policy", name)]
    runs = {}
    for scale in ("1", "2.5"):
        d = replay_json(eppctl, "--trace", trace, "--trace-format", fmt, "--time-scale", scale, "--servers", "3", *policies)
        runs[scale] = d
        assert d["trace"]["requests"] == 5
        if fmt != "openai":  # captured requests: the tokens are estimated from the text
            assert d["trace"]["prompt_tokens"] == sum(p for p, _ in LENGTHS)
        assert [p["name"] for p in d["policies"]] == NAMED
        for p in d["policies"]:
            assert p["completed"] == 5 and p["failed"] == 0, p["name"]
            if fmt in ("azure", "burstgpt"):
                assert p["block_hit_rate"] == 0, p["name"]  # no prefix information in these formats
            assert p["ttft_s"]["p50"] >= d["trace"]["ttft_bound_s"]["p50"] - 1e-9, p["name"]
            assert p["ttft_over_bound"]["p90"] == pytest.approx(p["ttft_s"]["p90"] / d["trace"]["ttft_bound_s"]["p90"],
                                                                rel=1e-6), p["name"]
    assert runs["1"]["trace"]["duration_s"] == pytest.approx(2.0, abs=1e-6)
    assert runs["2.5"]["trace"]["duration_s"] == pytest.approx(5.0, abs=1e-6)
