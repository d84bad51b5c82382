"""`eppctl config validate | effective | plugins` end to end, on examples/configs, on invalid
configs written here and on the production configs in ../shared/fixtures/configs."""
import json
import os
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(os.environ.get("EPP_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
FIXTURES = pathlib.Path(os.environ.get("EPP_SHARED_FIXTURES", ROOT.parent / "shared" / "fixtures"))

CONFIGS = ROOT / "examples" / "configs"
EXAMPLE_CONFIGS = sorted(CONFIGS.glob("*.yaml"))
HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"


def write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(HEADER + body)
    return p


def effective(eppctl, *args):
    r = eppctl("config", "effective", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout, yaml.safe_load(r.stdout)


def known_types(eppctl):
    r = eppctl("config", "plugins")
    assert r.returncode == 0, r.stderr
    # One type per line; its parameters are indented below it.
    return [line for line in r.stdout.splitlines() if line and not line.startswith(" ")]


def by_name(doc):
    return {p["name"]: p for p in doc["plugins"]}


def test_examples_exist():
    names = {p.name for p in EXAMPLE_CONFIGS}
    assert {"gie-default.yaml", "prefix-heavy.yaml", "cache-aware.yaml", "label-selector.yaml", "shed.yaml",
            "llm-d-style.yaml", "weighted-random.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLE_CONFIGS, ids=lambda p: p.name)
def test_every_example_config_validates(eppctl, path):
    r = eppctl("config", "validate", path)
    assert r.returncode == 0, r.stderr
    profiles = [p["name"] for p in yaml.safe_load(path.read_text())["schedulingProfiles"]]
    assert r.stdout == "%s: valid (profiles: %s)\n" % (path, ", ".join(profiles))


@pytest.mark.parametrize("path", EXAMPLE_CONFIGS, ids=lambda p: p.name)
def test_effective_config_of_every_example_is_complete_and_stable(eppctl, path, tmp_path):
    text, doc = effective(eppctl, path)
    src = yaml.safe_load(path.read_text())
    assert doc["kind"] == "EndpointPickerConfig" and doc["apiVersion"] == src["apiVersion"]
    plugins = by_name(doc)
    types = [p["type"] for p in doc["plugins"]]
    # Defaulting: exactly one profile handler, a picker in every profile, a saturation detector.
    handlers = ("single-profile-handler", "disagg-profile-handler")
    assert sum(types.count(h) for h in handlers) == 1
    if len(doc["schedulingProfiles"]) == 1:
        assert types.count("single-profile-handler") == 1
    detector = plugins[doc["saturationDetector"]["pluginRef"]]["type"]
    # The default one, unless the config names its own (the flow-control examples: concurrency-detector).
    named = (src.get("flowControl") or {}).get("saturationDetector", {}).get("pluginRef") or \
        (src.get("saturationDetector") or {}).get("pluginRef")
    assert detector == (plugins[named]["type"] if named else "utilization-detector")
    for prof in doc["schedulingProfiles"]:
        refs = [plugins[r["pluginRef"]] for r in prof["plugins"]]
        assert refs[-1]["type"].endswith("-picker")
        for r in prof["plugins"]:
            is_scorer = plugins[r["pluginRef"]]["type"].endswith("-scorer")
            assert ("weight" in r) == is_scorer, r  # every scorer has an explicit weight, nothing else does
    # Every configured plugin is still there, under its (defaulted) name.
    for p in src["plugins"]:
        assert plugins[p.get("name", p["type"])]["type"] == p["type"]
    # A prefix consumer gets its producer.
    if "prefix-cache-scorer" in types:
        assert types.count("approx-prefix-cache-producer") == 1
    # The effective document is itself valid and a fixed point.
    again = tmp_path / "effective.yaml"
    again.write_text(text)
    r = eppctl("config", "validate", again)
    assert r.returncode == 0, r.stderr
    assert effective(eppctl, again)[0] == text


def test_effective_without_a_file_is_gie_default(eppctl):
    text, doc = effective(eppctl)
    plugins = by_name(doc)
    assert set(plugins) >= {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "max-score-picker",
                            "single-profile-handler", "utilization-detector", "approx-prefix-cache-producer"}
    (prof,) = doc["schedulingProfiles"]
    assert prof["name"] == "default"
    assert prof["plugins"] == [{"pluginRef": "queue-scorer", "weight": 2},
                               {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
                               {"pluginRef": "prefix-cache-scorer", "weight": 3},
                               {"pluginRef": "max-score-picker"}]
    assert plugins["max-score-picker"]["parameters"] == {"maxNumOfEndpoints": 1}
    det = plugins["utilization-detector"]["parameters"]
    assert (det["queueDepthThreshold"], det["kvCacheUtilThreshold"], det["metricsStalenessThreshold"]) == (5, 0.8, "200ms")
    assert doc["saturationDetector"] == {"pluginRef": "utilization-detector"}
    # examples/configs/gie-default.yaml is that configuration, written out.
    r = eppctl("config", "effective", CONFIGS / "gie-default.yaml")
    assert r.returncode == 0 and r.stdout == text
    # Its dataLayer section (metrics-data-source, core-metrics-extractor) is what epp does anyway.
    assert "dataLayer" not in r.stderr, r.stderr


def test_effective_shows_injected_and_configured_parameters(eppctl):
    _, doc = effective(eppctl, CONFIGS / "shed.yaml")
    plugins = by_name(doc)
    assert doc["saturationDetector"] == {"pluginRef": "low-thresholds"}
    assert "utilization-detector" not in plugins  # the configured detector replaces the default one
    p = plugins["low-thresholds"]["parameters"]
    assert (p["queueDepthThreshold"], p["kvCacheUtilThreshold"], p["metricsStalenessThreshold"]) == (1, 0.2, "2000ms")
    assert plugins["max-score-picker"]["parameters"] == {"maxNumOfEndpoints": 1}  # injected
    assert "single-profile-handler" in plugins  # injected

    _, doc = effective(eppctl, CONFIGS / "prefix-heavy.yaml")
    prod = by_name(doc)["approx-prefix-cache-producer"]["parameters"]
    assert (prod["blockSizeTokens"], prod["maxPrefixBlocksToMatch"], prod["lruCapacityPerServer"]) == (16, 512, 65536)
    assert by_name(doc)["prefix-cache-scorer"]["parameters"]["matchLengthWeight"] == 0.3

    _, doc = effective(eppctl, CONFIGS / "weighted-random.yaml")
    assert by_name(doc)["weighted-random-picker"]["parameters"] == {"maxNumOfEndpoints": 2}
    assert "max-score-picker" not in by_name(doc)  # the configured picker is the profile's picker

    _, doc = effective(eppctl, CONFIGS / "cache-aware.yaml")
    assert "approx-prefix-cache-producer" not in by_name(doc)  # nothing consumes prefix data
    assert by_name(doc)["cache-aware-scorer"]["parameters"]["cache_threshold"] == 0.3


def test_effective_yaml_keeps_booleans_boolean(eppctl):
    _, doc = effective(eppctl)
    assert by_name(doc)["approx-prefix-cache-producer"]["parameters"]["autoTune"] is True


def test_plugins_lists_the_known_types(eppctl):
    types = known_types(eppctl)
    assert types == sorted(types) and len(types) == len(set(types))
    assert {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "lora-affinity-scorer",
            "running-requests-size-scorer", "token-load-scorer", "cache-aware-scorer", "max-score-picker",
            "random-picker", "weighted-random-picker", "single-profile-handler", "utilization-detector",
            "approx-prefix-cache-producer", "label-selector-filter", "decode-filter", "prefill-filter",
            "prefix-cache-affinity-filter"} <= set(types)
    used = {p["type"] for f in EXAMPLE_CONFIGS for p in yaml.safe_load(f.read_text())["plugins"]}
    assert used <= set(types)


def test_plugins_shows_each_types_parameters(eppctl):
    r = eppctl("config", "plugins", "approx-prefix-cache-producer", "queue-scorer")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "approx-prefix-cache-producer"
    assert "  blockSizeTokens (int, default 16, [1, 65536]): tokens per hashed block" in r.stdout
    assert "  blockSize (int; deprecated): characters per block; use blockSizeTokens" in lines
    assert lines[-1] == "queue-scorer"  # no parameters: nothing below it
    bad = eppctl("config", "plugins", "frobnicate-scorer")
    assert bad.returncode == 2 and "unknown plugin type 'frobnicate-scorer'" in bad.stderr


def test_plugins_json_carries_every_types_schema(eppctl):
    r = eppctl("config", "plugins", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert sorted(doc) == known_types(eppctl)
    assert all(s["declared"] for s in doc.values())
    assert doc["queue-scorer"] == {"declared": True, "params": []}
    params = {p["name"]: p for p in doc["dynamo-kv-cost-scorer"]["params"]}
    assert params["prefillLoadModel"] == {
        "name": "prefillLoadModel", "type": "string", "default": "drain", "choices": ["drain", "firstToken"],
        "doc": params["prefillLoadModel"]["doc"]}
    assert params["blockSize"]["range"] == "[1, 4096]"
    disagg = {p["name"]: p for p in doc["disagg-profile-handler"]["params"]}
    assert disagg["prefillDeciderPluginName"]["aliases"] == ["deciderPluginName"]
    assert disagg["prefillDeciderPluginName"]["deprecated"] is True
    assert "otherKeys" in doc["metrics-data-source"]


def test_plugins_markdown_is_the_committed_doc(eppctl):
    r = eppctl("config", "plugins", "--markdown")
    assert r.returncode == 0, r.stderr
    doc = (ROOT / "docs" / "plugin-parameters.md").read_text()
    marker = "<!-- generated: eppctl config plugins --markdown -->\n"
    assert doc.split(marker, 1)[1] == r.stdout, "regenerate docs/plugin-parameters.md"
    assert eppctl("config", "plugins", "--json", "--markdown").returncode != 0


@pytest.mark.parametrize("name,body,needle", [
    ("unknown-key.yaml", "plugins:\n- type: queue-scorer\n  parameterz: {}\n",
     "unknown-key.yaml:5: plugins[0]: unknown key 'parameterz'"),
    ("undefined-ref.yaml", "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n"
     "  - pluginRef: nope\n", "undefined-ref.yaml:8: schedulingProfiles[0].plugins[0]: references undefined plugin 'nope'"),
    ("bad-param.yaml", "plugins:\n- type: max-score-picker\n  parameters:\n    maxNumOfEndpoints: lots\n",
     "maxNumOfEndpoints: expected an integer, got 'lots'"),
    ("unknown-param.yaml", "plugins:\n- type: queue-scorer\n  parameters: {threshold: 3}\n", "threshold"),
    ("two-pickers.yaml", "plugins:\n- type: max-score-picker\n- type: random-picker\nschedulingProfiles:\n"
     "- name: default\n  plugins:\n  - pluginRef: max-score-picker\n  - pluginRef: random-picker\n", "two pickers"),
    ("duplicate.yaml", "plugins:\n- type: queue-scorer\n- type: queue-scorer\n", "duplicate plugin name 'queue-scorer'"),
    ("unknown-type.yaml", "plugins:\n- type: queue-scorer\n- type: frobnicate-scorer\n- name: x\n  type: wobble-filter\n",
     "unknown-type.yaml:5: unsupported plugin types: frobnicate-scorer (plugins[1], line 5), wobble-filter "
     "(plugins[2], line 6)"),
    ("bad-threshold.yaml", "plugins:\n- type: utilization-detector\n  parameters: {kvCacheUtilThreshold: 80}\n",
     "kvCacheUtilThreshold: must be in (0, 1]"),
    # A typo in a type: its own line and the known type it is closest to.
    ("typo-type.yaml", "plugins:\n- type: queue-scorrer\n",
     "typo-type.yaml:4: unsupported plugin types: queue-scorrer (plugins[0], line 4: did you mean 'queue-scorer'?)"),
    # ... which a profile referring to the intended name meets first: the typo's line is named.
    ("typo-ref.yaml", "plugins:\n- type: queue-scorrer\n- type: max-score-picker\nschedulingProfiles:\n- name: default\n"
     "  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n",
     "typo-ref.yaml:9: schedulingProfiles[0].plugins[0]: references undefined plugin 'queue-scorer'; the closest "
     "defined is 'queue-scorrer' (plugins[0], line 4): a typo in its type?"),
])
def test_invalid_configs_exit_2_with_a_precise_message(eppctl, tmp_path, name, body, needle):
    path = write(tmp_path, name, body)
    for sub in ("validate", "effective"):
        r = eppctl("config", sub, path)
        assert r.returncode == 2, (sub, r.stdout, r.stderr)
        assert r.stdout == ""
        assert r.stderr.startswith("error: ") and needle in r.stderr, r.stderr


def test_unknown_type_error_does_not_list_every_type(eppctl, tmp_path):
    r = eppctl("config", "validate", write(tmp_path, "t.yaml", "plugins:\n- type: queue-scorrer\n"))
    assert r.returncode == 2
    assert "active-request-scorer" not in r.stderr and len(r.stderr) < 300, r.stderr


def test_usage_errors_exit_2(eppctl, tmp_path):
    for args, needle in [(["validate", tmp_path / "missing.yaml"], "cannot read config file"),
                         (["validate"], "file"),
                         ([], "subcommand"),
                         (["lint", "x.yaml"], "subcommand")]:
        r = eppctl("config", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr, (args, r.stderr)


# --- production configs (../shared/fixtures/configs) -------------------------------------------


def shared_configs():
    d = FIXTURES / "configs"
    return sorted(d.glob("*.yaml")) if d.is_dir() else []


def embedded_configs(node):
    """EndpointPickerConfig documents: the file itself, or strings embedding one (Helm values)."""
    if isinstance(node, dict):
        if node.get("kind") == "EndpointPickerConfig":
            yield node
        for v in node.values():
            yield from embedded_configs(v)
    elif isinstance(node, list):
        for v in node:
            yield from embedded_configs(v)
    elif isinstance(node, str) and "kind: EndpointPickerConfig" in node:
        yield from embedded_configs(yaml.safe_load(node))


@pytest.mark.parametrize("path", shared_configs() or [None], ids=lambda p: p.name if p else "none")
def test_shared_fixture_configs_validate_or_name_only_test_doubles(eppctl, path):
    if path is None:
        pytest.skip("no shared fixture configs at %s (set EPP_SHARED_FIXTURES)" % (FIXTURES / "configs"))
    r = eppctl("config", "validate", path)
    if r.returncode == 0:
        assert "valid (profiles:" in r.stdout
        return
    assert r.returncode == 2, (r.returncode, r.stderr)
    m = re.search(r"unsupported plugin types: (.*?); `eppctl config plugins` lists the \d+ known types", r.stderr)
    assert m, "exit 2 for another reason than unsupported plugin types: " + r.stderr
    named = re.findall(r"([\w.-]+) \(plugins\[(\d+)\]", m.group(1))
    assert named, m.group(1)
    (doc,) = list(embedded_configs(yaml.safe_load(path.read_text())))
    known = set(known_types(eppctl))
    for t, i in named:
        assert doc["plugins"][int(i)]["type"] == t, (t, i)
        assert t not in known
        # Every type llm-d Router registers is known: only the reference's test doubles may be missing.
        assert t.startswith("test-"), "a real plugin type is unknown: " + t
    # ... and every unsupported type of the file is named, at once.
    missing = {(p["type"], str(i)) for i, p in enumerate(doc["plugins"]) if p["type"] not in known}
    assert missing == set(named)


def test_validate_warns_about_inputs_the_engine_or_endpoints_lack(eppctl, tmp_path):
    cfg = write(tmp_path, "lora.yaml", "plugins:\n- type: lora-affinity-scorer\n- type: queue-scorer\n")
    r = eppctl("config", "validate", cfg, "--engine", "sglang")
    assert r.returncode == 0, r.stderr
    assert ("warning: plugin 'lora-affinity-scorer' (lora-affinity-scorer) reads lora, but engine sglang has no "
            "metric for lora: it cannot use it") in r.stderr
    assert "1 input warning(s)" in r.stdout
    r = eppctl("config", "validate", cfg, "--engine", "vllm")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    r = eppctl("config", "validate", cfg, "--engine", "tgi")
    assert r.returncode == 2 and "--engine" in r.stderr
    # Endpoints whose metrics are read: a metrics file with a queue but no LoRA info.
    metrics = tmp_path / "m.prom"
    metrics.write_text("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n"
                       "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
                       "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.5\n")
    r = eppctl("config", "validate", cfg, "--endpoint", "10.0.0.1:8000=%s" % metrics)
    assert r.returncode == 0, r.stderr
    assert "reads lora, but the endpoint did not report lora" in r.stderr
    assert "queue" not in r.stderr.replace("valid", "")
