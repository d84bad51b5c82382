"""Prefill/decode disaggregation end to end: `eppctl serve` with llm-d's disagg-profile-handler over
real gRPC, a prefill and a decode simulator (`eppctl sim --role`), and the decode side's prefill hop
driven the way Envoy would forward the request. Also: every real config of ../shared/fixtures that
loads answers a real ext_proc stream from `eppctl serve`.
"""
import json
import pathlib
import urllib.request

import pytest

grpc = pytest.importorskip("grpc")

from test_eppctl_serve import MODEL, ROOT, destination, pick, serve, write_pool  # noqa: E402,F401
import extproc_wire as wire  # noqa: E402
from sim_metrics import counter  # noqa: E402  (tests/helpers)


def body(content):
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 4}).encode()


def forward(url, payload, headers):
    """What Envoy does after the EPP's answer: the request, with the EPP's headers, to the endpoint."""
    req = urllib.request.Request(url + "/v1/chat/completions", data=payload, method="POST",
                                 headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, json.loads(r.read())


def test_long_uncached_prompt_gets_the_prefill_server_and_the_decode_sim_runs_the_hop(serve, sim, tmp_path):
    prefill = sim("--role", "prefill", "--time-scale", "0.05")
    decode = sim("--role", "decode", "--time-scale", "0.05")
    p_addr, d_addr = prefill.url[len("http://"):], decode.url[len("http://"):]
    pool = tmp_path / "pd-pool.yaml"
    pool.write_text("endpoints:\n"
                    "  - address: %s\n    labels: {llm-d.ai/role: prefill}\n"
                    "  - address: %s\n    labels: {llm-d.ai/role: decode}\n" % (p_addr, d_addr))
    s = serve("--config", ROOT / "examples" / "configs" / "pd-disagg.yaml", "--endpoints", pool,
              "--refresh-metrics-interval", "50ms")
    s.wait_metric("epp_endpoint_metrics_fresh", lambda v: v == 1, endpoint=d_addr)
    ch = s.channel()

    long_prompt = body("Summarise this report. " + "The quarterly figures rose. " * 80)
    first, _ = pick(ch, long_prompt)
    assert destination(first) == d_addr
    assert wire.header(first["common"], "x-prefiller-host-port") == p_addr

    # Envoy forwards to the decode pod with the header; its sidecar runs the prefill hop.
    assert counter(decode.url, "epp_sim_prefill_hops_total") == 0
    status, answer = forward(decode.url, long_prompt, {"x-prefiller-host-port": p_addr})
    assert status == 200 and answer["usage"]["completion_tokens"] == 4
    assert counter(decode.url, "epp_sim_prefill_hops_total") == 1
    assert counter(decode.url, "epp_sim_kv_transfer_bytes_total") > 0
    assert counter(prefill.url, "epp_sim_remote_prefills_total") == 1

    # A short prompt is decode only, and a client's own x-prefiller-host-port is removed.
    first, _ = pick(ch, body("hi"), extra_headers=[("x-prefiller-host-port", "6.6.6.6:1")])
    assert destination(first) == d_addr
    assert wire.header(first["common"], "x-prefiller-host-port") is None
    mutation = first["common"]["header_mutation"]
    assert "x-prefiller-host-port" in mutation["remove_headers"]

    # The same long prompt again: the decode server now holds it (the EPP's prefix index learned
    # the pick), so the uncached part is below nonCachedTokens and prefill is skipped.
    first, _ = pick(ch, long_prompt)
    assert destination(first) == d_addr
    assert wire.header(first["common"], "x-prefiller-host-port") is None


FIXTURE_CONFIGS = ROOT.parent / "shared" / "fixtures" / "configs"


def test_every_fixture_config_that_loads_answers_an_ext_proc_stream(eppctl, serve, tmp_path):
    if not FIXTURE_CONFIGS.is_dir():
        pytest.skip("shared fixtures not found at %s" % FIXTURE_CONFIGS)
    pool = write_pool(tmp_path / "pool", [("10.0.0.1:8000", 0, 1, 0.1), ("10.0.0.2:8000", 2, 3, 0.3)])
    served, refused = [], {}
    for config in sorted(FIXTURE_CONFIGS.iterdir()):
        check = eppctl("config", "validate", config)
        if check.returncode != 0:
            refused[config.name] = check.stderr.strip().splitlines()[-1]
            continue
        s = serve("--config", config, "--endpoints", pool)
        first, _ = pick(s.channel(), body("hello from " + config.name))
        assert destination(first) in ("10.0.0.1:8000", "10.0.0.2:8000"), (config.name, first)
        s.close()
        served.append(config.name)
    assert "llm-d-router__deploy_config_pd-epp-config.yaml" in served
    # Precise prefix caching: its token-producer's server (localhost:8000) is not there, so the
    # tokens are estimated, and the stream is still answered.
    assert "llm-d-router__deploy_config_epp-precise-prefix-cache-config.yaml" in served
    # What still fails names only types epp does not implement yet (or test doubles).
    for name, message in refused.items():
        assert "unsupported plugin types" in message, (name, message)
    assert len(served) >= 5, (served, refused)


def test_emit_endpoint_scores_adds_every_candidates_score(serve, tmp_path):
    pool = write_pool(tmp_path / "pool", [("10.0.0.1:8000", 0, 1, 0.1), ("10.0.0.2:8000", 4, 3, 0.6)])
    plain = serve("--endpoints", pool)
    first, _ = pick(plain.channel(), body("no scores"))
    assert "x-gateway-destination-endpoint-scores" not in first["dynamic_metadata"]["envoy.lb"]
    s = serve("--endpoints", pool, "--emit-endpoint-scores")
    first, _ = pick(s.channel(), body("scores"))
    lb = first["dynamic_metadata"]["envoy.lb"]
    scores = lb["x-gateway-destination-endpoint-scores"]
    assert set(scores) == {"10.0.0.1:8000", "10.0.0.2:8000"}
    assert lb["x-gateway-destination-endpoint"] == "10.0.0.1:8000"
    assert scores["10.0.0.1:8000"] > scores["10.0.0.2:8000"]
