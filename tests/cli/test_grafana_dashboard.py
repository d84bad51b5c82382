"""examples/grafana/epp-serve.json: a well-formed Grafana dashboard whose queries name only series
(and grouping labels) that a live `eppctl serve` over simulators exposes on /metrics."""
import json
import re

from test_eppctl_serve import Serve, Stream, chat_body, destination, parse_exposition, pick, serve  # noqa: F401
import extproc_wire as wire


def dashboard(root):
    return json.loads((root / "examples" / "grafana" / "epp-serve.json").read_text())


def test_dashboard_is_well_formed(root):
    d = dashboard(root)
    assert d["uid"] and d["title"] and d["schemaVersion"] >= 36
    names = {v["name"] for v in d["templating"]["list"]}
    assert {"datasource", "job"} <= names
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    graphs = [p for p in d["panels"] if p["type"] != "row"]
    assert len(graphs) >= 15
    for p in graphs:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        g = p["gridPos"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        assert p["targets"] and len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
        for t in p["targets"]:
            assert t["expr"].count("(") == t["expr"].count(")"), t["expr"]
            assert 'job=~"$job"' in t["expr"], t["expr"]  # every query follows the job variable


def test_every_queried_series_exists_on_a_live_metrics_port(root, serve, sim, tmp_path):
    sims = sim("--count", "2")
    pool = tmp_path / "pool.yaml"
    pool.write_text("endpoints:\n" + "".join("- address: %s\n" % u.split("//")[1] for u in sims.urls))
    s = serve("--endpoints", pool)
    s.wait_metric("epp_endpoint_waiting_queue_size", lambda v: v is not None, endpoint=sims.urls[0].split("//")[1])
    ch = s.channel()
    for i in range(3):
        destination(pick(ch, chat_body("dashboard %d" % i))[0])
    # A whole streamed response (the GIE request histograms fill at its end) and a 503 (an error
    # by code), so every panel's series is on /metrics.
    with Stream(ch) as st:
        body = chat_body("dashboard streamed", stream=True, stream_options={"include_usage": True})
        st.send(wire.chat_request(body), wire.request_body(body, end_of_stream=True))
        destination(st.recv())
        st.recv()
        st.send(wire.response_headers([(":status", "200"), ("content-type", "text/event-stream")]))
        st.recv()
        events = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n',
                  b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\n', b"data: [DONE]\n\n"]
        for i, e in enumerate(events):
            st.send(wire.response_body(e, end_of_stream=i == len(events) - 1))
        st.recv_n(3)
    assert pick(ch, chat_body("dashboard 503"), md=wire.subset_metadata(["10.9.9.9:1"]))[0]["immediate"]["status"] == 503
    _, text = s.http("/metrics")
    samples, families = parse_exposition(text)
    live = {name for name, _ in samples}
    labels = {}
    for name, lbls in samples:
        labels.setdefault(name, set()).update(k for k, _ in lbls)
    queried = set()
    for p in dashboard(root)["panels"]:
        for t in p.get("targets", []):
            expr = t["expr"]
            used = set(re.findall(r"\b((?:epp|inference)_[a-z0-9_]+)\b", expr))
            assert used, expr
            for m in used:
                assert m in live, "%s (panel %r) is not on a live /metrics" % (m, p["title"])
            queried |= used
            for group in re.findall(r"by \(([^)]*)\)", expr):
                for label in (x.strip() for x in group.split(",")):
                    assert any(label in labels[m] for m in used), "label %r of %r not on %s" % (label, expr, used)
    # The dashboard covers the per-endpoint view eppctl top shows, and the request outcomes.
    for must in ("inference_objective_request_total", "inference_objective_request_duration_seconds_bucket",
                 "inference_objective_running_requests"):
        assert must in queried  # GIE's request metrics, as GIE's dashboards and KEDA guides query them
    for must in ("epp_requests_total", "epp_endpoint_picks_total", "epp_endpoint_waiting_queue_size",
                 "epp_endpoint_kv_cache_usage", "epp_pick_duration_seconds_bucket", "epp_endpoint_metrics_age_seconds"):
        assert must in queried
