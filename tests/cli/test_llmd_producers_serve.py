"""llm-d's request-control producers and screener through `eppctl serve`: real ext_proc streams on
loopback, the reference's own deploy configs where it has one.

  - mm-embeddings-cache: an image sent again goes back to the server that encoded it, and the
    llm_d_epp_encoder_cache_* families are on /metrics;
  - burst-prefix-cache: concurrent streams with one prompt land on one server;
  - p2p-source-producer: x-kv-cache-source-host-port names the server holding the prompt, and a
    client's own copy is removed;
  - disaggregatedset-rollout-screener: a strict revision header pins the revision, the response
    is stamped with it, and a revision with no match answers 503.
"""
import json
import subprocess
import threading

import pytest

grpc = pytest.importorskip("grpc")

from test_eppctl_serve import MODEL, POOL, Stream, destination, pick, serve, write_pool  # noqa: E402,F401
import extproc_wire as wire  # noqa: E402

REFERENCE = "/work/.mirror/llm-d+llm-d-router/repo"


def reference_config(tmp_path, name):
    """The reference's deploy/config/NAME, or skip when the mirror is absent."""
    try:
        text = subprocess.run(["git", "-C", REFERENCE, "show", "HEAD:deploy/config/" + name], check=True,
                              capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("llm-d Router mirror not available")
    p = tmp_path / name
    p.write_text(text)
    return p


def chat(parts, **extra):
    return json.dumps({"model": MODEL, "messages": [{"role": "user", "content": parts}], "max_tokens": 4,
                       **extra}).encode()


def image(url):
    return {"type": "image_url", "image_url": {"url": url}}


def decode_pool(tmp_path):
    # Equal metrics everywhere: only the plugins under test break the tie.
    pool = write_pool(tmp_path / "pool", [(a, 0, 0, 0.1) for a in POOL])
    text = pool.read_text().replace("    metrics:", "    labels: {llm-d.ai/role: decode}\n    metrics:")
    pool.write_text(text)
    return pool


def test_mm_embeddings_deploy_config_returns_an_image_to_its_server(serve, tmp_path):
    cfg = reference_config(tmp_path, "epp-mm-embeddings-cache-config.yaml")
    s = serve("--config", cfg, "--endpoints", decode_pool(tmp_path))
    ch = s.channel()
    cat = chat([{"type": "text", "text": "what is this?"}, image("https://example.com/cat.png")])
    first = destination(pick(ch, cat)[0])
    for _ in range(4):
        assert destination(pick(ch, cat)[0]) == first
    m = s.metrics()
    queries = [v for (name, labels), v in m.items() if name == "llm_d_epp_encoder_cache_queries_total"]
    assert queries == [5]
    hits = {dict(labels)["pod"]: v for (name, labels), v in m.items() if name == "llm_d_epp_encoder_cache_hits_total"}
    assert hits == {first: 4}
    assert m[("llm_d_epp_encoder_cache_hit_ratio_count",
              (("plugin_name", "mm-embeddings-cache-producer"), ("plugin_type", "mm-embeddings-cache-producer")))] == 15


def test_burst_prefix_deploy_config_colocates_concurrent_samples(serve, tmp_path):
    cfg = reference_config(tmp_path, "epp-burst-prefix-cache-config.yaml")
    s = serve("--config", cfg, "--endpoints", decode_pool(tmp_path))
    prompt = chat("Solve step by step: " + "the rollout prompt is long enough to hash. " * 40)
    got, errors = [], []

    def one():
        try:
            got.append(destination(pick(s.channel(), prompt)[0]))
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and len(got) == 6
    assert len(set(got)) == 1, got


P2P_CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters: {autoTune: false, blockSizeTokens: 4}
- type: p2p-source-producer
  parameters: {minCachedTokenDelta: 1, prefillProfileName: prefill}
- type: prefix-cache-scorer
- type: round-robin-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
    weight: 0
  - pluginRef: round-robin-picker
"""


def test_p2p_source_names_the_peer_holding_the_prompt(serve, tmp_path):
    cfg = tmp_path / "p2p.yaml"
    cfg.write_text(P2P_CONFIG)
    s = serve("--config", cfg, "--endpoints", decode_pool(tmp_path))
    ch = s.channel()
    body = chat("a shared system prompt and a question " * 10)
    # Round robin: the first pick caches the prompt; the next goes elsewhere and is told to pull.
    first, _ = pick(ch, body, extra_headers=[("x-kv-cache-source-host-port", "6.6.6.6:1")])
    holder = destination(first)
    assert wire.header(first["common"], "x-kv-cache-source-host-port") is None
    assert "x-kv-cache-source-host-port" in first["common"]["header_mutation"]["remove_headers"]
    second, _ = pick(ch, body)
    assert destination(second) != holder
    assert wire.header(second["common"], "x-kv-cache-source-host-port") == holder


SCREENER_CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: disaggregatedset-rollout-screener
  name: rollout-screener
  parameters:
    scope:
      labelSelector: "disaggregatedset.x-k8s.io/name=my-set"
    headerSelectors:
    - name: revision
      headerName: x-disagg-revision
      labelKey: disaggregatedset.x-k8s.io/revision
      mode: strict
    revisionGating:
      mode: max-role
      requireRoles:
        values: [prefill, decode]
- type: random-picker
schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: random-picker
"""


def test_rollout_screener_pins_the_revision_and_stamps_the_response(serve, tmp_path):
    cfg = tmp_path / "screener.yaml"
    cfg.write_text(SCREENER_CONFIG)
    pool = write_pool(tmp_path / "pool", [(a, 0, 0, 0.1) for a in POOL] + [("10.0.0.4:8000", 0, 0, 0.1)])
    revs = {POOL[0]: ("A", "prefill"), POOL[1]: ("A", "decode"), POOL[2]: ("B", "prefill"), "10.0.0.4:8000": ("B", "decode")}
    text = pool.read_text()
    for addr, (rev, role) in revs.items():
        text = text.replace("  - address: %s\n" % addr,
                            "  - address: %s\n    labels: {disaggregatedset.x-k8s.io/name: my-set, "
                            "disaggregatedset.x-k8s.io/revision: %s, disaggregatedset.x-k8s.io/role: %s}\n"
                            % (addr, rev, role))
    pool.write_text(text)
    s = serve("--config", cfg, "--endpoints", pool)
    with Stream(s.channel()) as st:
        body = chat("hello")
        st.send(wire.chat_request(body, extra_headers=[("x-disagg-revision", "B")]),
                wire.request_body(body, end_of_stream=True))
        dest = destination(st.recv())
        assert dest in (POOL[2], "10.0.0.4:8000")
        st.recv()  # the body, echoed
        st.send(wire.response_headers([(":status", "200"), ("content-type", "application/json")]))
        rh = st.recv()
        assert rh["kind"] == "response_headers"
        assert wire.header(rh["common"], "x-disagg-revision") == "B"
    first, _ = pick(s.channel(), chat("hello"), extra_headers=[("x-disagg-revision", "Z")])
    assert first["kind"] == "immediate_response"
    m = s.metrics()
    assert m[("llm_d_epp_disaggregatedset_strict_header_no_match_total",
              (("plugin_name", "rollout-screener"), ("plugin_type", "disaggregatedset-rollout-screener"),
               ("selector", "revision")))] == 1
    shares = {dict(labels)["revision"]: v for (name, labels), v in m.items()
              if name == "llm_d_epp_disaggregatedset_revision_gating_share"}
    assert shares == {"A": 0.5, "B": 0.5}
