"""eppctl lint: every rule fires on a bundle written to break it and stays quiet on the same
bundle wired correctly; deploy/ passes; exit codes and the text, JSON and SARIF outputs.

The good bundle is written here: an InferencePool, its model-server Deployment, the EPP (in
eppctl's and in the reference EPP's flag style), its Service, ServiceAccount and RBAC, its
configuration in a ConfigMap, and an HTTPRoute. Each case edits one thing and names the rule that
must report it.
"""
import copy
import json

import pytest
import yaml

from conftest import ROOT

EPP_LABELS = {"app": "epp"}
MODEL_LABELS = {"app": "vllm-llama3"}


def good_bundle(style="eppctl"):
    if style == "eppctl":
        container = {"name": "epp", "image": "ghcr.io/example/epp:latest", "command": ["/usr/local/bin/eppctl"],
                     "args": ["serve", "--config", "/etc/epp/config.yaml", "--pool-name=pool", "--pool-namespace=$(NAMESPACE)",
                              "--grpc-port=9002", "--grpc-health-port=9003"]}
    else:  # the reference EPP (GIE / llm-d-router image and flags)
        container = {"name": "epp", "image": "registry.k8s.io/gateway-api-inference-extension/epp:v1.5.0",
                     "args": ["--pool-name", "pool", "--pool-namespace", "inference", "--config-file", "/etc/epp/config.yaml",
                              "--secure-serving=true"]}
    container.update({
        "ports": [{"name": "grpc", "containerPort": 9002}, {"name": "grpc-health", "containerPort": 9003}],
        "livenessProbe": {"grpc": {"port": 9003, "service": "liveness"}},
        "readinessProbe": {"grpc": {"port": 9003, "service": "readiness"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/epp"}],
    })
    ns = "inference"
    return [
        {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "pool", "namespace": ns},
         "spec": {"selector": {"matchLabels": dict(MODEL_LABELS)}, "targetPorts": [{"number": 8000}],
                  "endpointPickerRef": {"name": "epp", "port": {"number": 9002}, "failureMode": "FailClose"}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "vllm", "namespace": ns},
         "spec": {"selector": {"matchLabels": dict(MODEL_LABELS)},
                  "template": {"metadata": {"labels": dict(MODEL_LABELS)},
                               "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:latest",
                                                        "ports": [{"containerPort": 8000}]}]}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "epp", "namespace": ns},
         "spec": {"selector": {"matchLabels": dict(EPP_LABELS)},
                  "template": {"metadata": {"labels": dict(EPP_LABELS)},
                               "spec": {"serviceAccountName": "epp", "containers": [container],
                                        "volumes": [{"name": "config", "configMap": {"name": "epp-config"}}]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "epp", "namespace": ns},
         "spec": {"selector": dict(EPP_LABELS), "ports": [{"name": "grpc-ext-proc", "port": 9002, "targetPort": "grpc"}]}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "epp", "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "epp", "namespace": ns},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                   {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "epp", "namespace": ns},
         "subjects": [{"kind": "ServiceAccount", "name": "epp"}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "epp"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "epp-config", "namespace": ns},
         "data": {"config.yaml": "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                                 "- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n"}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "llm", "namespace": ns},
         "spec": {"parentRefs": [{"name": "inference-gateway"}],
                  "rules": [{"backendRefs": [{"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "pool"}]}]}},
    ]


def by_kind(docs, kind, name=None):
    return next(d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name))


def epp_container(docs):
    return by_kind(docs, "Deployment", "epp")["spec"]["template"]["spec"]["containers"][0]


def lint(eppctl, tmp_path, docs, *args, name="bundle.yaml"):
    f = tmp_path / name
    f.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return eppctl("lint", f, *args)


def findings(eppctl, tmp_path, docs):
    r = lint(eppctl, tmp_path, docs, "-o", "json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)["findings"]


@pytest.mark.parametrize("style", ["eppctl", "reference"])
def test_the_good_bundle_passes(eppctl, tmp_path, style):
    r = lint(eppctl, tmp_path, good_bundle(style))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s), 0 warning(s)" in r.stdout


def test_deploy_passes(eppctl):
    r = eppctl("lint", ROOT / "deploy", ROOT / "examples" / "envoy")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s), 0 warning(s)" in r.stdout


def _set(path, value):
    def edit(docs):
        obj = docs
        for key in path[:-1]:
            obj = obj[key] if not callable(key) else key(obj)
        obj[path[-1]] = value
    return edit


def _pool(d):
    return by_kind(d, "InferencePool")


def _eref(d):
    return _pool(d)["spec"]["endpointPickerRef"]


CASES = {
    "IP001": lambda d: _pool(d).update({"apiVersion": "inference.networking.x-k8s.io/v1alpha2",
                                        "spec": {"selector": dict(MODEL_LABELS), "targetPortNumber": 8000,
                                                 "extensionRef": {"name": "epp", "failureMode": "FailClose"}}}),
    "IP002": lambda d: _pool(d)["spec"].update({"selector": dict(MODEL_LABELS)}),
    "IP003": lambda d: _pool(d)["spec"].update({"targetPorts": [{"number": 8000}, {"number": 8000}]}),
    "IP004": lambda d: _eref(d).pop("port"),
    "IP005": lambda d: _eref(d).pop("failureMode"),
    "IP006": lambda d: _pool(d)["spec"]["selector"]["matchLabels"].update({"app": "vllm-llama3-typo"}),
    "IP007": lambda d: _pool(d)["spec"].update({"targetPorts": [{"number": 8080}]}),
    "IP008": lambda d: d.append({**copy.deepcopy(_pool(d)), "metadata": {"name": "pool-2", "namespace": "inference"}}),
    "IP009": lambda d: _eref(d)["port"].update({"number": 9003}),
    "EPP001": lambda d: epp_container(d)["args"].__setitem__(3, "--pool-name=other-pool"),
    "EPP002": lambda d: by_kind(d, "Service", "epp")["spec"]["ports"][0].update({"targetPort": 9090}),
    "EPP003": lambda d: epp_container(d)["readinessProbe"]["grpc"].update({"port": 9002}),
    "EPP004": lambda d: epp_container(d)["args"].extend(["--secure-serving", "false"]),
    "EPP005": lambda d: by_kind(d, "Service", "epp")["spec"]["ports"][0].update({"appProtocol": "kubernetes.io/h2c"}),
    "EPP006": lambda d: by_kind(d, "ConfigMap", "epp-config")["data"].update(
        {"config.yaml": "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
                        "- type: no-such-scorer\n"}),
    "RBAC001": lambda d: by_kind(d, "Role")["rules"].pop(1),
    "RT001": lambda d: by_kind(d, "HTTPRoute")["spec"]["rules"][0]["backendRefs"][0].update({"group": "inference.networking.x-k8s.io"}),
    "RT002": lambda d: by_kind(d, "HTTPRoute")["spec"]["rules"][0]["backendRefs"][0].update({"port": 8000}),
    "GW001": lambda d: d.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "envoy-gateway-config", "namespace": "envoy-gateway-system"},
                                 "data": {"envoy-gateway.yaml": "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: EnvoyGateway\n"
                                                                "provider: {type: Kubernetes}\n"}}),
    "GW002": lambda d: d.append({"apiVersion": "gateway.envoyproxy.io/v1alpha1", "kind": "EnvoyExtensionPolicy",
                                 "metadata": {"name": "epp", "namespace": "inference"},
                                 "spec": {"extProc": [{"backendRefs": [{"name": "epp", "port": 9002}], "failOpen": True,
                                                       "processingMode": {"request": {"body": "FullDuplexStreamed"}}}]}}),
}

# The message each case must carry (a phrase of it), beside the rule id.
WANT = {
    "IP001": "v1alpha2", "IP002": "no matchLabels", "IP003": "listed twice", "IP004": "port.number is missing",
    "IP005": "left to its default", "IP006": "matches no Pod template", "IP007": "not a containerPort",
    "IP008": "same EPP Service", "IP009": "is not a port of Service 'epp'", "EPP001": "names no InferencePool", "EPP002": "leads to container port 9090",
    "EPP003": "probes gRPC port 9002", "EPP004": "--secure-serving is followed by a separate value",
    "EPP005": "appProtocol kubernetes.io/h2c", "EPP006": "no-such-scorer", "RBAC001": "inferencepools",
    "RT001": "backendRef group inference.networking.x-k8s.io", "RT002": "is ignored",
    "GW001": "extensionManager.backendResources", "GW002": "FullDuplexStreamed",
}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_each_rule_reports_its_pitfall(eppctl, tmp_path, rule):
    docs = good_bundle()
    CASES[rule](docs)
    got = findings(eppctl, tmp_path, docs)
    mine = [f for f in got if f["rule"] == rule]
    assert mine, f"{rule} not reported; got {[(f['rule'], f['message']) for f in got]}"
    f = mine[0]
    assert WANT[rule] in f["message"], f
    assert f["file"].endswith("bundle.yaml") and f["line"] > 0 and f["fix"]
    assert f["severity"] in ("error", "warning")


def test_every_rule_has_a_case_and_a_doc_row(eppctl, tmp_path):
    sarif = json.loads(lint(eppctl, tmp_path, good_bundle(), "-o", "sarif").stdout)
    assert {x["id"] for x in sarif["runs"][0]["tool"]["driver"]["rules"]} == set(CASES) | {"LINT001"}
    documented = (ROOT / "docs" / "lint.md").read_text()
    ids = [line.split("|")[1].strip().strip("`") for line in documented.splitlines()
           if line.startswith("| `") and line.count("|") >= 4]
    assert set(CASES) | {"LINT001"} == set(ids)


def test_exit_codes_and_formats(eppctl, tmp_path):
    docs = good_bundle()
    CASES["IP005"](docs)  # a warning only
    r = lint(eppctl, tmp_path, docs)
    assert r.returncode == 0 and "warning IP005" in r.stdout and "fix:" in r.stdout
    assert lint(eppctl, tmp_path, docs, "--strict").returncode == 1
    CASES["EPP001"](docs)  # an error
    r = lint(eppctl, tmp_path, docs, "-o", "sarif")
    assert r.returncode == 1
    sarif = json.loads(r.stdout)
    assert sarif["version"] == "2.1.0"
    run = sarif["runs"][0]
    assert {x["id"] for x in run["tool"]["driver"]["rules"]} >= set(CASES)
    levels = {res["ruleId"]: res["level"] for res in run["results"]}
    assert levels["EPP001"] == "error" and levels["IP005"] == "warning"
    loc = run["results"][0]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"].endswith("bundle.yaml") and loc["region"]["startLine"] > 0
    j = json.loads(lint(eppctl, tmp_path, docs, "-o", "json").stdout)
    assert j["summary"]["errors"] >= 1 and j["summary"]["warnings"] >= 1 and j["objects"] == len(docs)
    # Bad input: a missing path is a usage error, broken YAML a finding naming the line.
    assert eppctl("lint", tmp_path / "absent.yaml").returncode == 2
    broken = tmp_path / "broken.yaml"
    broken.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x\n")
    r = eppctl("lint", broken)
    assert r.returncode == 1 and "broken.yaml:" in r.stdout and "LINT001" in r.stdout


def test_failopen_warning_names_the_gateways(eppctl, tmp_path):
    docs = good_bundle()
    _eref(docs)["failureMode"] = "FailOpen"
    f = [x for x in findings(eppctl, tmp_path, docs) if x["rule"] == "IP005"][0]
    assert f["severity"] == "warning" and "Envoy Gateway" in f["gateways"]


def test_region_level_epp_rbac_is_for_inference_pool_imports(eppctl, tmp_path, root):
    """deploy/multicluster: --pool-import needs inferencepoolimports, an endpoints file nothing."""
    import yaml
    docs = list(yaml.safe_load_all((root / "deploy/multicluster/region-epp-import.yaml").read_text()))
    role = next(d for d in docs if d and d["kind"] == "Role")
    role["rules"][0]["resources"] = ["inferencepools"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([d for d in docs if d]))
    r = eppctl("lint", bad)
    assert r.returncode == 1, r.stdout
    assert "RBAC001" in r.stdout and "inference.networking.x-k8s.io inferencepoolimports" in r.stdout, r.stdout
    assert "EPP001" not in r.stdout, r.stdout
    r = eppctl("lint", root / "deploy/multicluster/region-epp-file.yaml")
    assert r.returncode == 0, r.stdout


def _line_of(tmp_path, text, name="bundle.yaml"):
    """The 1-based line of the first line of the bundle file containing `text`."""
    lines = (tmp_path / name).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)


def test_pool_port_missing_from_the_service_is_reported_at_the_pool(eppctl, tmp_path):
    """The pool names a port its EPP Service lacks: one finding, at the pool's port line, naming the
    Service's ports and the port to name instead; nothing blamed on the Service's targetPort."""
    docs = good_bundle()
    by_kind(docs, "Service", "epp")["spec"]["ports"].append({"name": "metrics", "port": 9090, "targetPort": 9090})
    CASES["IP009"](docs)
    got = findings(eppctl, tmp_path, docs)
    assert [f["rule"] for f in got] == ["IP009"], got
    (f,) = got
    assert f["object"] == "InferencePool inference/pool" and f["severity"] == "error"
    assert f["line"] == _line_of(tmp_path, "number: 9003")
    assert "endpointPickerRef.port.number 9003 is not a port of Service 'epp'" in f["message"], f
    assert "bundle.yaml:%d" % (_line_of(tmp_path, "kind: Service") - 1) in f["message"], f  # its apiVersion line
    assert "9002 (grpc-ext-proc -> targetPort grpc), 9090 (metrics -> targetPort 9090)" in f["message"], f
    assert f["fix"].startswith("endpointPickerRef.port: {number: 9002}"), f
    assert "container port" not in f["message"], f


def test_service_target_port_not_a_container_port_is_reported_at_the_service(eppctl, tmp_path):
    """The Service's targetPort names no container port of the EPP: reported at the Service's
    targetPort line, naming the EPP and the ports it declares; the fix is the gRPC port's name."""
    docs = good_bundle()
    by_kind(docs, "Service", "epp")["spec"]["ports"][0]["targetPort"] = "grpc-typo"
    got = findings(eppctl, tmp_path, docs)
    assert [f["rule"] for f in got] == ["EPP002"], got
    (f,) = got
    assert f["object"] == "Service inference/epp"
    assert f["line"] == _line_of(tmp_path, "targetPort: grpc-typo")
    assert "targetPort 'grpc-typo', which names no container port of the EPP Deployment inference/epp" in f["message"], f
    assert "declares grpc=9002, grpc-health=9003" in f["message"], f
    assert f["fix"].startswith("targetPort: grpc "), f
    # Without named container ports the fix is the number.
    for p in epp_container(docs)["ports"]:
        p.pop("name")
    (f,) = [x for x in findings(eppctl, tmp_path, docs) if x["rule"] == "EPP002"]
    assert f["fix"].startswith("targetPort: 9002"), f


def test_v1alpha2_pool_port_is_checked_with_its_inferred_default(eppctl, tmp_path):
    """extensionRef without portNumber means 9002: a Service without 9002 is named at the pool."""
    docs = good_bundle()
    CASES["IP001"](docs)
    by_kind(docs, "Service", "epp")["spec"]["ports"][0]["port"] = 9000
    f = [x for x in findings(eppctl, tmp_path, docs) if x["rule"] == "IP009"]
    assert len(f) == 1 and "the port 9002 inferred for an absent extensionRef.portNumber is not a port" in f[0]["message"], f
    assert f[0]["fix"].startswith("extensionRef.portNumber: 9000"), f
