"""Structural checks of the deployment examples: examples/envoy (a standalone Envoy in front of
`eppctl serve`) and deploy/ (Kubernetes manifests, Dockerfile).

These files are data, not code, so what can break is consistency: a port, a header name, a file
name or a label that one file changes and another still expects. Each test states one such fact.
Only PyYAML and the standard library are used; nothing touches the network.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
import yaml

SOURCE_DIR = Path(os.environ.get("EPP_SOURCE_DIR", Path(__file__).resolve().parents[2]))
ENVOY_DIR = SOURCE_DIR / "examples" / "envoy"
DEPLOY_DIR = SOURCE_DIR / "deploy"

DESTINATION_HEADER = "x-gateway-destination-endpoint"
EXT_PROC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
HCM_TYPE = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
TLS_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
RAW_BUFFER_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"
GRPC_PORT, HEALTH_PORT, METRICS_PORT = 9002, 9003, 9090


def yaml_files() -> List[Path]:
    files = [p for d in (ENVOY_DIR, DEPLOY_DIR) for p in sorted(d.rglob("*")) if p.suffix in (".yaml", ".yml")]
    assert files, "no YAML found under examples/envoy or deploy"
    return files


def load_all(path: Path) -> List[Dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(SOURCE_DIR)))
def test_every_yaml_file_parses(path: Path) -> None:
    docs = load_all(path)
    assert docs, f"{path} holds no document"
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: a document is not a mapping"


# ---------------------------------------------------------------------------------------------
# examples/envoy/envoy.yaml


@pytest.fixture(scope="module")
def envoy() -> Dict[str, Any]:
    (doc,) = load_all(ENVOY_DIR / "envoy.yaml")
    return doc


def clusters(envoy: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return {c["name"]: c for c in envoy["static_resources"]["clusters"]}


def hcm(envoy: Dict[str, Any]) -> Dict[str, Any]:
    (listener,) = envoy["static_resources"]["listeners"]
    found = [f["typed_config"] for chain in listener["filter_chains"] for f in chain["filters"]
             if f["typed_config"]["@type"] == HCM_TYPE]
    assert len(found) == 1
    return found[0]


def http_filters(envoy: Dict[str, Any]) -> List[Dict[str, Any]]:
    return hcm(envoy)["http_filters"]


def ext_proc(envoy: Dict[str, Any]) -> Dict[str, Any]:
    found = [f["typed_config"] for f in http_filters(envoy) if f["typed_config"]["@type"] == EXT_PROC_TYPE]
    assert len(found) == 1, "exactly one ext_proc filter"
    return found[0]


def test_envoy_listens_on_8081(envoy: Dict[str, Any]) -> None:
    (listener,) = envoy["static_resources"]["listeners"]
    assert listener["address"]["socket_address"]["port_value"] == 8081


def test_original_dst_cluster_routes_on_the_destination_header(envoy: Dict[str, Any]) -> None:
    c = clusters(envoy)["original_destination_cluster"]
    assert c["type"] == "ORIGINAL_DST"
    assert c["lb_policy"] == "CLUSTER_PROVIDED"
    assert c["original_dst_lb_config"] == {"use_http_header": True, "http_header_name": DESTINATION_HEADER}
    assert "load_assignment" not in c, "ORIGINAL_DST clusters take no endpoint list"


def test_every_route_goes_to_the_original_dst_cluster(envoy: Dict[str, Any]) -> None:
    routes = [r for vh in hcm(envoy)["route_config"]["virtual_hosts"] for r in vh["routes"]]
    assert routes
    for route in routes:
        assert route["route"]["cluster"] == "original_destination_cluster"


def test_ext_proc_uses_the_endpoint_picker_protocol_modes(envoy: Dict[str, Any]) -> None:
    cfg = ext_proc(envoy)
    assert cfg["processing_mode"] == {
        "request_header_mode": "SEND",
        "response_header_mode": "SEND",
        # FULL_DUPLEX_STREAMED requires the matching trailer mode to be SEND.
        "request_body_mode": "FULL_DUPLEX_STREAMED",
        "response_body_mode": "FULL_DUPLEX_STREAMED",
        "request_trailer_mode": "SEND",
        "response_trailer_mode": "SEND",
    }
    assert cfg["message_timeout"] == "1000s"
    assert cfg["failure_mode_allow"] is False  # FailClose
    assert cfg["allow_mode_override"] is False
    assert cfg["grpc_service"]["timeout"] == "10s"


def test_ext_proc_exchanges_the_protocol_metadata(envoy: Dict[str, Any]) -> None:
    options = ext_proc(envoy)["metadata_options"]
    assert options["forwarding_namespaces"]["untyped"] == ["envoy.lb.subset_hint"]
    assert options["receiving_namespaces"]["untyped"] == ["envoy.lb"]


def test_filter_order_strips_client_header_then_ext_proc_then_router(envoy: Dict[str, Any]) -> None:
    names = [f["name"] for f in http_filters(envoy)]
    assert names[-1] == "envoy.filters.http.router"
    assert names.index("envoy.filters.http.header_mutation") < names.index("envoy.filters.http.ext_proc")
    strip = next(f["typed_config"] for f in http_filters(envoy) if f["name"] == "envoy.filters.http.header_mutation")
    assert {"remove": DESTINATION_HEADER} in strip["mutations"]["request_mutations"]


def test_epp_cluster_serves_grpc_on_9002_and_health_checks_9003(envoy: Dict[str, Any]) -> None:
    all_clusters = clusters(envoy)
    cluster_name = ext_proc(envoy)["grpc_service"]["envoy_grpc"]["cluster_name"]
    assert cluster_name == "epp"
    c = all_clusters[cluster_name]
    options = c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in options["explicit_http_config"], "gRPC needs HTTP/2"
    (locality,) = c["load_assignment"]["endpoints"]
    (lb_endpoint,) = locality["lb_endpoints"]
    endpoint = lb_endpoint["endpoint"]
    assert endpoint["address"]["socket_address"]["port_value"] == GRPC_PORT
    assert endpoint["health_check_config"]["port_value"] == HEALTH_PORT
    (check,) = c["health_checks"]
    assert check["grpc_health_check"]["service_name"] == "envoy.service.ext_proc.v3.ExternalProcessor"


def test_epp_cluster_speaks_tls_but_health_checks_plaintext(envoy: Dict[str, Any]) -> None:
    c = clusters(envoy)["epp"]
    tls = c["transport_socket"]["typed_config"]
    assert tls["@type"] == TLS_TYPE
    assert tls["common_tls_context"]["alpn_protocols"] == ["h2"]
    assert tls["common_tls_context"]["validation_context"] == {}, "accepts serve's self-signed certificate"
    (check,) = c["health_checks"]
    criteria = check["transport_socket_match_criteria"]
    matching = [m for m in c["transport_socket_matches"] if m["match"] == criteria]
    assert len(matching) == 1
    assert matching[0]["transport_socket"]["typed_config"]["@type"] == RAW_BUFFER_TYPE


def test_plaintext_variant_from_the_readme_is_valid(envoy: Dict[str, Any]) -> None:
    # README: delete the lines from "# ---- TLS to the EPP" to "# ---- end of TLS to the EPP".
    lines = (ENVOY_DIR / "envoy.yaml").read_text().splitlines(keepends=True)
    start = [i for i, l in enumerate(lines) if "# ---- TLS to the EPP" in l]
    end = [i for i, l in enumerate(lines) if "# ---- end of TLS to the EPP" in l]
    assert len(start) == 1 and len(end) == 1 and start[0] < end[0]
    plain = yaml.safe_load("".join(lines[: start[0]] + lines[end[0] + 1:]))
    epp = clusters(plain)["epp"]
    assert "transport_socket" not in epp
    assert epp["transport_socket_matches"] == clusters(envoy)["epp"]["transport_socket_matches"]
    rest = dict(clusters(envoy)["epp"])
    del rest["transport_socket"]
    assert epp == rest, "the marked block must hold the transport socket and nothing else"
    assert "secure-serving=false" in (ENVOY_DIR / "README.md").read_text()


# ---------------------------------------------------------------------------------------------
# deploy/


@pytest.fixture(scope="module")
def manifests() -> Dict[Tuple[str, str], Dict[str, Any]]:
    """(kind, name) -> object, over every manifest in deploy/ except kustomization.yaml."""
    objects: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for path in sorted(DEPLOY_DIR.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in load_all(path):
            key = (doc["kind"], doc["metadata"]["name"])
            assert key not in objects, f"duplicate {key}"
            assert "namespace" not in doc["metadata"], f"{key}: keep manifests namespace-free for kustomize"
            objects[key] = doc
    return objects


def one(manifests: Dict[Tuple[str, str], Dict[str, Any]], kind: str) -> Dict[str, Any]:
    found = [o for (k, _), o in manifests.items() if k == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def epp_container(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> Dict[str, Any]:
    (container,) = [c for c in one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
                    if c["name"] == "epp"]
    return container


def flag_value(args: List[str], flag: str) -> Optional[str]:
    for i, arg in enumerate(args):
        if arg == flag:
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def configmap_files(manifests: Dict[Tuple[str, str], Dict[str, Any]], volume: Dict[str, Any]) -> Iterator[Tuple[str, str, str]]:
    """(path inside the volume, ConfigMap name, key) for a configMap or projected volume."""
    sources = [s["configMap"] for s in volume.get("projected", {}).get("sources", []) if "configMap" in s]
    if "configMap" in volume:
        sources.append(volume["configMap"])
    for source in sources:
        cm = manifests[("ConfigMap", source["name"])]
        items = source.get("items") or [{"key": k, "path": k} for k in cm["data"]]
        for item in items:
            yield item["path"], source["name"], item["key"]


def test_deployment_args_name_files_the_configmaps_provide(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    container = epp_container(manifests)
    args = container["args"]
    assert args[0] == "serve"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert flag_value(args, "--config"), "--config missing from the Deployment's args"
    for flag in ("--config", "--endpoints"):
        path = flag_value(args, flag)
        if path is None:
            continue
        mounts = [m for m in container["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
        assert len(mounts) == 1, f"{path} is under no (or several) volume mounts"
        assert "subPath" not in mounts[0], "subPath mounts never see ConfigMap updates"
        relative = path[len(mounts[0]["mountPath"].rstrip("/")) + 1:]
        provided = {p: (name, key) for p, name, key in configmap_files(manifests, volumes[mounts[0]["name"]])}
        assert relative in provided, f"{path}: no ConfigMap provides {relative}"
        name, key = provided[relative]
        assert key in manifests[("ConfigMap", name)]["data"], f"ConfigMap {name} has no key {key}"
    assert flag_value(args, "--config") == "/etc/epp/config.yaml"


def configmap_document(manifests: Dict[Tuple[str, str], Dict[str, Any]], flag: str) -> Dict[str, Any]:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    container = epp_container(manifests)
    path = flag_value(container["args"], flag)
    assert path
    for volume in pod["volumes"]:
        for mount in container["volumeMounts"]:
            if mount["name"] != volume["name"]:
                continue
            for inner, name, key in configmap_files(manifests, volume):
                if mount["mountPath"].rstrip("/") + "/" + inner == path:
                    return yaml.safe_load(manifests[("ConfigMap", name)]["data"][key])
    raise AssertionError(f"{path} not found")


def test_configmap_holds_an_endpoint_picker_config(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    config = configmap_document(manifests, "--config")
    assert config["kind"] == "EndpointPickerConfig"
    assert config["apiVersion"] in ("inference.networking.x-k8s.io/v1alpha1", "llm-d.ai/v1alpha1")
    names = {p.get("name", p["type"]) for p in config["plugins"]}
    for profile in config["schedulingProfiles"]:
        for ref in profile["plugins"]:
            assert ref["pluginRef"] in names


def test_pool_discovery_names_the_inference_pool(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    container = epp_container(manifests)
    args = container["args"]
    pool = one(manifests, "InferencePool")
    assert flag_value(args, "--pool-name") == pool["metadata"]["name"]
    # With --endpoints the pool would not be read (docs/serve.md).
    assert flag_value(args, "--endpoints") is None
    assert ("ConfigMap", "epp-endpoints") not in manifests
    group = pool["apiVersion"].split("/")[0]
    assert flag_value(args, "--pool-group") in (None, group)
    # The pool is in the picker's namespace: --pool-namespace from the downward API.
    assert flag_value(args, "--pool-namespace") == "$(NAMESPACE)"
    env = {e["name"]: e for e in container["env"]}
    assert env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # In-cluster API access: the ServiceAccount's token must be mounted.
    spec = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken", True) is True
    assert manifests[("ServiceAccount", spec["serviceAccountName"])].get("automountServiceAccountToken", True)
    binding = one(manifests, "RoleBinding")
    rules = {(g, r): set(rule["verbs"]) for rule in manifests[("Role", binding["roleRef"]["name"])]["rules"]
             for g in rule["apiGroups"] for r in rule["resources"]}
    assert {"get", "list"} <= rules[(group, "inferencepools")]
    assert {"get", "list"} <= rules[("", "pods")]


def test_deployment_flags_are_known_to_eppctl_serve(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    eppctl = Path(os.environ.get("EPPCTL") or Path(os.environ.get("EPP_BUILD_DIR", SOURCE_DIR / "build")) / "cli" / "eppctl")
    if not eppctl.is_file():
        pytest.skip(f"{eppctl} not built")
    help_text = subprocess.run([str(eppctl), "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    flags = {a.split("=", 1)[0] for a in epp_container(manifests)["args"] if a.startswith("--")}
    assert "--pool-name" in flags
    for flag in sorted(flags):
        assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", help_text), f"eppctl serve has no {flag}"


def test_configmap_config_is_valid_for_eppctl(manifests: Dict[Tuple[str, str], Dict[str, Any]], tmp_path: Path) -> None:
    eppctl = Path(os.environ.get("EPP_BUILD_DIR", SOURCE_DIR / "build")) / "cli" / "eppctl"
    if not eppctl.is_file():
        pytest.skip(f"{eppctl} not built")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(configmap_document(manifests, "--config")))
    result = subprocess.run([str(eppctl), "config", "validate", str(config)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_container_ports_and_probes(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    container = epp_container(manifests)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"grpc": GRPC_PORT, "grpc-health": HEALTH_PORT, "metrics": METRICS_PORT}
    args = container["args"]
    for flag, port in (("--grpc-port", GRPC_PORT), ("--grpc-health-port", HEALTH_PORT), ("--metrics-port", METRICS_PORT)):
        value = flag_value(args, flag)
        assert value is None or int(value) == port, f"{flag}={value} but the container port is {port}"
    assert container["livenessProbe"]["grpc"] == {"port": HEALTH_PORT, "service": "liveness"}
    assert container["readinessProbe"]["grpc"] == {"port": HEALTH_PORT, "service": "readiness"}


def test_pod_runs_as_non_root(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    sc = epp_container(manifests)["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "resources" in epp_container(manifests)


def test_labels_selectors_and_service_account_agree(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    deployment = one(manifests, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    for key, value in deployment["spec"]["selector"]["matchLabels"].items():
        assert pod_labels.get(key) == value
    service = manifests[("Service", "epp")]
    for key, value in service["spec"]["selector"].items():
        assert pod_labels.get(key) == value, "Service selects no epp Pod"
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert ("ServiceAccount", account) in manifests
    binding = one(manifests, "RoleBinding")
    assert ("Role", binding["roleRef"]["name"]) in manifests
    assert {"kind": "ServiceAccount", "name": account} in [
        {"kind": s["kind"], "name": s["name"]} for s in binding["subjects"]]
    rules = {(g, r): set(rule["verbs"]) for rule in manifests[("Role", binding["roleRef"]["name"])]["rules"]
             for g in rule["apiGroups"] for r in rule["resources"]}
    assert {"get", "list", "watch"} <= rules[("", "pods")]
    assert {"get", "list", "watch"} <= rules[("inference.networking.k8s.io", "inferencepools")]


def service_port_for(service: Dict[str, Any], container: Dict[str, Any], container_port: int) -> int:
    by_name = {p["name"]: p["containerPort"] for p in container["ports"]}
    found = [p["port"] for p in service["spec"]["ports"]
             if by_name.get(p.get("targetPort"), p.get("targetPort", p["port"])) == container_port]
    assert len(found) == 1, f"expected one Service port targeting container port {container_port}"
    return found[0]


def test_inference_pool_points_at_the_epp_service_grpc_port(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    pool = one(manifests, "InferencePool")
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    ref = pool["spec"]["endpointPickerRef"]
    assert ref.get("kind", "Service") == "Service" and ref.get("group", "") == ""
    service = manifests[("Service", ref["name"])]
    grpc_service_port = service_port_for(service, epp_container(manifests), GRPC_PORT)
    assert ref["port"]["number"] == grpc_service_port
    assert ref["failureMode"] == "FailClose"


def test_inference_pool_spec_is_within_the_api(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    spec = one(manifests, "InferencePool")["spec"]
    assert set(spec["selector"]) == {"matchLabels"} and spec["selector"]["matchLabels"]
    numbers = [p["number"] for p in spec["targetPorts"]]
    assert 1 <= len(numbers) <= 8 and len(set(numbers)) == len(numbers)
    assert spec.get("appProtocol", "http") in ("http", "kubernetes.io/h2c")


def test_epp_service_ports_have_no_h2c_app_protocol(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    # With --secure-serving (the default) port 9002 is HTTP/2 over TLS, not h2c.
    for port in manifests[("Service", "epp")]["spec"]["ports"]:
        assert port.get("appProtocol") != "kubernetes.io/h2c"


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((DEPLOY_DIR / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    present = {p.name for p in DEPLOY_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_network_policy_admits_the_gateway_to_ext_proc_and_a_namespace_to_metrics(
        manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    """deploy/networkpolicy/: ingress to the picker's Pods, ext_proc only from the gateway's Pods
    (namespace and pod selector in one peer: both must match), /metrics from one namespace, no
    rule for the health port (the kubelet's probes come from the Pod's node, always allowed)."""
    (policy,) = load_all(DEPLOY_DIR / "networkpolicy" / "networkpolicy.yaml")
    assert policy["kind"] == "NetworkPolicy" and "namespace" not in policy["metadata"]
    spec = policy["spec"]
    pod_labels = one(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert spec["policyTypes"] == ["Ingress"]
    args = epp_container(manifests)["args"]
    grpc, health, metrics = (int(flag_value(args, f) or 0) for f in ("--grpc-port", "--grpc-health-port", "--metrics-port"))
    assert all(len(rule["ports"]) == 1 and rule["ports"][0]["protocol"] == "TCP" for rule in spec["ingress"])
    rules = {rule["ports"][0]["port"]: rule for rule in spec["ingress"]}
    assert set(rules) == {grpc, metrics} and health not in rules
    (gateway,) = rules[grpc]["from"]
    assert set(gateway) == {"namespaceSelector", "podSelector"}
    assert gateway["namespaceSelector"]["matchLabels"] and gateway["podSelector"]["matchLabels"]
    (scraper,) = rules[metrics]["from"]
    assert set(scraper) == {"namespaceSelector"}
    # Opt-in: `kubectl apply -k deploy/` does not apply it before its selectors are edited.
    assert "networkpolicy" not in (DEPLOY_DIR / "kustomization.yaml").read_text()


def dockerfile_instructions() -> List[Tuple[str, str]]:
    text = (DEPLOY_DIR / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_builds_with_project_scripts_on_debian_12(manifests: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    instructions = dockerfile_instructions()
    stages = [rest for word, rest in instructions if word == "FROM"]
    assert len(stages) == 2
    assert all(re.match(r"debian:12(-slim)?\b", s) for s in stages), stages
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    assert "scripts/setup" in runs and "scripts/build" in runs
    assert "apt-get install" in runs
    for script in ("setup", "build"):
        assert (SOURCE_DIR / "scripts" / script).is_file()
    copies = [shlex.split(rest) for word, rest in instructions if word == "COPY" and rest.startswith("--from=")]
    (copy,) = copies
    assert copy[1:-1] == ["/src/build/cli/eppctl", "/src/build/cli/epp"]
    assert copy[-1] == "/usr/local/bin/"
    # The Deployment runs eppctl where the image puts it, as a non-root user.
    assert epp_container(manifests)["command"] == ["/usr/local/bin/eppctl"]
    # The entry point is `epp`, the reference's command line: manifests written for GIE's or
    # llm-d's image set args only (lwepp/, helm/).
    (entrypoint,) = [rest for word, rest in instructions if word == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["/usr/local/bin/epp"]
    runs = " ".join(rest for word, rest in instructions if word == "RUN")
    assert "strip build/cli/eppctl build/cli/epp" in runs
    assert "ldd /usr/local/bin/eppctl /usr/local/bin/epp" in runs
    (user,) = [rest for word, rest in instructions if word == "USER"]
    assert not user.startswith("0") and user != "root"
    exposed = {int(p) for word, rest in instructions if word == "EXPOSE" for p in rest.split()}
    assert exposed == {GRPC_PORT, HEALTH_PORT, METRICS_PORT}


def test_runtime_packages_exist_in_debian_12_names() -> None:
    # Sonames of Debian 12 runtime packages for the -dev packages scripts/setup installs.
    runs = " ".join(rest for word, rest in dockerfile_instructions() if word == "RUN")
    setup = (SOURCE_DIR / "scripts" / "setup").read_text()
    pairs = {
        "libabsl-dev": "libabsl20220623", "libyaml-cpp-dev": "libyaml-cpp0.7", "libcurl4-openssl-dev": "libcurl4",
        "libcpp-httplib-dev": "libcpp-httplib0.11", "libxxhash-dev": "libxxhash0", "libsimdjson-dev": "libsimdjson14",
        "libgrpc++-dev": "libgrpc++1.51", "libprotobuf-dev": "libprotobuf32", "libssl-dev": "libssl3",
    }
    for dev, runtime in pairs.items():
        if re.search(rf"(^|\s){re.escape(dev)}(\s|$)", setup):
            assert re.search(rf"(^|\s){re.escape(runtime)}(\s|$)", runs), f"{runtime} (for {dev}) not installed"


# ---------------------------------------------------------------------------------------------
# deploy/multicluster/


@pytest.mark.parametrize("name", ["region-epp-import.yaml", "region-epp-file.yaml"])
def test_multicluster_manifests_use_known_flags_and_valid_configs(name: str, tmp_path: Path) -> None:
    eppctl = Path(os.environ.get("EPPCTL") or Path(os.environ.get("EPP_BUILD_DIR", SOURCE_DIR / "build")) / "cli" / "eppctl")
    if not eppctl.is_file():
        pytest.skip(f"{eppctl} not built")
    docs = load_all(DEPLOY_DIR / "multicluster" / name)
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    help_text = subprocess.run([str(eppctl), "serve", "--help"], capture_output=True, text=True, timeout=60).stdout
    for flag in sorted({a.split("=", 1)[0] for a in args if a.startswith("--")}):
        assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", help_text), f"eppctl serve has no {flag}"
    # Every /etc/epp file an argument names is a key of the ConfigMap mounted there.
    for a in args:
        if a.startswith("--") and "=/etc/epp/" in a:
            key = a.split("=/etc/epp/", 1)[1]
            assert key in cm["data"], f"{a}: no key {key} in ConfigMap {cm['metadata']['name']}"
    config = tmp_path / "config.yaml"
    config.write_text(cm["data"]["config.yaml"])
    r = subprocess.run([str(eppctl), "config", "validate", str(config)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    # The cluster directory / pools file: pool gateways with engine epp, a region and a capacity.
    listed = yaml.safe_load(cm["data"].get("clusters.yaml") or cm["data"]["pools.yaml"])["endpoints"]
    for e in listed:
        assert e["engine"] == "epp" and "region" in e["labels"] and e["capacity"]["requestsPerSecond"] > 0
        if name == "region-epp-import.yaml":
            assert "cluster" in e["labels"], "--pool-import looks clusters up by their cluster label"


# ---------------------------------------------------------------------------------------------
# The reference's manifests: deploy/lwepp (LWEPP-shaped), deploy/helm (values for GIE's
# inferencepool chart), deploy/rbac (a Role per mode). They run the image's entry point `epp` with
# the reference EPP's command line, so what can break is a flag or value epp does not take.

OBJECTIVE_RESOURCES = ("inferenceobjectives", "inferencemodelrewrites")
OBJECTIVE_GROUPS = ("llm-d.ai", "inference.networking.x-k8s.io")
READ = {"get", "list", "watch"}


def epp_binary() -> Path:
    if os.environ.get("EPP"):
        return Path(os.environ["EPP"])
    if os.environ.get("EPPCTL"):
        return Path(os.environ["EPPCTL"]).parent / "epp"
    return Path(os.environ.get("EPP_BUILD_DIR", SOURCE_DIR / "build")) / "cli" / "epp"


@pytest.fixture(scope="module")
def epp() -> Path:
    path = epp_binary()
    if not path.is_file():
        pytest.skip(f"{path} not built")
    return path


@pytest.fixture(scope="module")
def epp_help(epp: Path) -> str:
    r = subprocess.run([str(epp), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def by_key(docs: List[Dict[str, Any]]) -> Dict[Tuple[str, str], Dict[str, Any]]:
    out: Dict[Tuple[str, str], Dict[str, Any]] = {}
    for doc in docs:
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in out, f"duplicate {key}"
        assert "namespace" not in doc["metadata"], f"{key}: keep manifests namespace-free"
        out[key] = doc
    return out


def role_rules(role: Dict[str, Any]) -> Dict[Tuple[str, str], set]:
    rules: Dict[Tuple[str, str], set] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    return rules


def bound_account(objects: Dict[Tuple[str, str], Dict[str, Any]], role: str) -> List[str]:
    return [s["name"] for (kind, _), b in objects.items() if kind == "RoleBinding" and b["roleRef"]["name"] == role
            for s in b["subjects"] if s["kind"] == "ServiceAccount"]


def flag_names(args: List[str]) -> List[str]:
    return sorted({a.split("=", 1)[0] for a in args if a.startswith("-")})


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_until_the_api_server(epp: Path, args: List[str], env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    """Runs epp with `args` against an API server that is not there: every flag and value must be
    accepted and the configuration must build, so the first failure is the connection (exit 1,
    where a bad flag, value or config exits 2 before any request)."""
    dead = "http://127.0.0.1:%d" % free_port()
    full = [*args, "--kube-api-server", dead, "--grpc-port=0", "--grpc-health-port=0", "--metrics-port=0"]
    run_env = {k: v for k, v in os.environ.items() if k not in ("NAMESPACE", "POD_NAME")}
    run_env.update(env or {})
    return subprocess.run([str(epp), *full], capture_output=True, text=True, timeout=60, env=run_env)


def expand(args: List[str], env: Dict[str, str]) -> List[str]:
    """The kubelet's $(VAR) expansion of a container's args."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


def assert_reached_the_api_server(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 1, f"exit {r.returncode}:\n{r.stderr}"
    assert "connection refused" in r.stderr, r.stderr


# ---- deploy/lwepp/lwepp.yaml


@pytest.fixture(scope="module")
def lwepp() -> Dict[Tuple[str, str], Dict[str, Any]]:
    return by_key(load_all(DEPLOY_DIR / "lwepp" / "lwepp.yaml"))


def lwepp_container(lwepp: Dict[Tuple[str, str], Dict[str, Any]]) -> Dict[str, Any]:
    (deployment,) = [o for (k, _), o in lwepp.items() if k == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_lwepp_runs_the_image_entry_point_with_lwepps_arguments(lwepp: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    container = lwepp_container(lwepp)
    assert "command" not in container, "LWEPP manifests set args only: the image's entry point (epp) runs"
    args = container["args"]
    assert "serve" not in args
    for flag in ("--pool-name", "--pool-namespace", "--endpoint-target-ports", "--health-checking"):
        assert flag in flag_names(args), flag
    (pool,) = [o for (k, _), o in lwepp.items() if k == "InferencePool"]
    assert flag_value(args, "--pool-name") == pool["metadata"]["name"]
    ref = pool["spec"]["endpointPickerRef"]
    service = lwepp[("Service", ref["name"])]
    assert ref["port"]["number"] == service_port_for(service, container, GRPC_PORT)
    assert flag_value(args, "--endpoint-target-ports") == str(pool["spec"]["targetPorts"][0]["number"])
    # LWEPP's probes: the inference-extension service on the health port.
    assert container["livenessProbe"]["grpc"] == {"port": HEALTH_PORT, "service": "inference-extension"}
    assert container["readinessProbe"]["grpc"] == {"port": HEALTH_PORT, "service": "inference-extension"}
    pod = [o for (k, _), o in lwepp.items() if k == "Deployment"][0]["spec"]["template"]
    for key, value in service["spec"]["selector"].items():
        assert pod["metadata"]["labels"].get(key) == value


def test_lwepp_flags_are_epps(lwepp: Dict[Tuple[str, str], Dict[str, Any]], epp_help: str) -> None:
    for flag in flag_names(lwepp_container(lwepp)["args"]):
        assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", epp_help), f"epp has no {flag}"


def test_lwepp_arguments_start_epp_in_both_modes(lwepp: Dict[Tuple[str, str], Dict[str, Any]], epp: Path) -> None:
    container = lwepp_container(lwepp)
    env = {"NAMESPACE": "default", "POD_NAME": "pool-a-epp-0"}
    args = expand(container["args"], env)
    r = run_until_the_api_server(epp, args, env)
    assert_reached_the_api_server(r)
    assert "--endpoint-target-ports is ignored with --pool-name" in r.stderr  # the notice, not silence
    assert "inferencepools" in r.stderr
    # Standalone mode, as the manifest's comment says: --endpoint-selector in place of --pool-name.
    text = (DEPLOY_DIR / "lwepp" / "lwepp.yaml").read_text()
    (selector,) = re.findall(r"#\s*- (--endpoint-selector=\S+)", text)
    standalone = [selector if a.startswith("--pool-name") else a for a in args]
    r = run_until_the_api_server(epp, standalone, env)
    assert_reached_the_api_server(r)
    assert "/api/v1/namespaces/default/pods" in r.stderr and "inferencepools" not in r.stderr


# ---- deploy/rbac and every Role's rules


def test_every_role_grants_what_its_mode_reads(manifests: Dict[Tuple[str, str], Dict[str, Any]],
                                               lwepp: Dict[Tuple[str, str], Dict[str, Any]]) -> None:
    # Pool mode (deploy/epp.yaml, deploy/lwepp/lwepp.yaml): Pods, InferencePools, and both
    # policy CRDs in both of their groups.
    for objects in (manifests, lwepp):
        (account,) = [name for (kind, name) in objects if kind == "ServiceAccount"]
        (role,) = [o for (kind, _), o in objects.items() if kind == "Role"]
        assert bound_account(objects, role["metadata"]["name"]) == [account]
        rules = role_rules(role)
        assert READ <= rules[("", "pods")]
        assert READ <= rules[("inference.networking.k8s.io", "inferencepools")]
        for group in OBJECTIVE_GROUPS:
            for resource in OBJECTIVE_RESOURCES:
                assert READ <= rules[(group, resource)], (group, resource)
    # Standalone mode: no InferencePool.
    standalone = by_key(load_all(DEPLOY_DIR / "rbac" / "standalone.yaml"))
    (role,) = [o for (kind, _), o in standalone.items() if kind == "Role"]
    rules = role_rules(role)
    assert READ <= rules[("", "pods")]
    assert not any(resource == "inferencepools" for _, resource in rules)
    for group in OBJECTIVE_GROUPS:
        for resource in OBJECTIVE_RESOURCES:
            assert READ <= rules[(group, resource)], (group, resource)
    assert bound_account(standalone, role["metadata"]["name"]) == ["epp"]
    # Leader election: the Lease is read, created, taken/renewed/released.
    election = by_key(load_all(DEPLOY_DIR / "rbac" / "leader-election.yaml"))
    (role,) = [o for (kind, _), o in election.items() if kind == "Role"]
    assert role_rules(role) == {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
    assert bound_account(election, role["metadata"]["name"]) == ["epp"]
    # deploy/epp.yaml's commented Lease rule says the same verbs.
    assert 'verbs: ["get", "create", "update"]' in (DEPLOY_DIR / "epp.yaml").read_text()


# ---- deploy/helm: values for GIE's inferencepool chart (v1.5.0)

# The chart's EndpointPickerConfig for modelServerType vllm with latencyPredictor off, as its
# epplib _config.yaml template renders it (the config the Deployment's --config-file names).
CHART_CONFIG = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
    "kind": "EndpointPickerConfig",
    "plugins": [
        {"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"}, {"type": "prefix-cache-scorer"},
        {"type": "metrics-data-source", "parameters": {"scheme": "http", "path": "/metrics", "insecureSkipVerify": True}},
        {"type": "core-metrics-extractor"},
    ],
    "schedulingProfiles": [{"name": "default", "plugins": [
        {"pluginRef": "queue-scorer", "weight": 2}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 2},
        {"pluginRef": "prefix-cache-scorer", "weight": 3}]}],
}


def chart_args(values: Dict[str, Any], release: str, namespace: str, config_file: str, key_value: bool) -> List[str]:
    """The epp container's args as the chart's epplib _deployment.yaml builds them for InferencePool
    mode: v1.5.0 passes inferenceExtension.flags as `--KEY VALUE`, later versions as `--KEY=VALUE`."""
    ext = values["inferenceExtension"]
    assert values["inferencePool"].get("modelServerType", "vllm") == "vllm", "other types add quoted metric flags"
    args = ["--pool-name", release, "--pool-namespace", namespace, "--pool-group", "inference.networking.k8s.io",
            "--zap-encoder", "json", "--config-file", config_file]
    if int(ext.get("replicas", 1)) > 1:
        args.append("--ha-enable-leader-election")
    for key, value in sorted((ext.get("flags") or {}).items()):
        args += ["--%s=%s" % (key, value)] if key_value else ["--" + key, str(value)]
    args.append("--tracing=true" if ext.get("tracing", {}).get("enabled") else "--tracing=false")
    if not ext.get("monitoring", {}).get("prometheus", {}).get("auth", {}).get("enabled", True):
        args.append("--metrics-endpoint-auth=false")
    return args


@pytest.fixture(scope="module")
def chart_values() -> Dict[str, Any]:
    (values,) = load_all(DEPLOY_DIR / "helm" / "inferencepool-values.yaml")
    return values


def test_helm_values_swap_the_image_only_where_the_chart_reads_it(chart_values: Dict[str, Any]) -> None:
    ext = chart_values["inferenceExtension"]
    assert set(ext["image"]) == {"registry", "repository", "tag", "pullPolicy"}
    image = "%s/%s:%s" % (ext["image"]["registry"], ext["image"]["repository"], ext["image"]["tag"])
    # The same placeholder image as the other manifests.
    assert image == [c for c in one_deployment_containers(DEPLOY_DIR / "epp.yaml")][0]["image"]
    assert chart_values["inferencePool"]["modelServers"]["matchLabels"]
    assert chart_values["inferencePool"]["modelServerType"] == "vllm"
    for key in ext.get("flags") or {}:
        assert not key.startswith("-"), "the chart adds the dashes"


def one_deployment_containers(path: Path) -> List[Dict[str, Any]]:
    (deployment,) = [d for d in load_all(path) if d["kind"] == "Deployment"]
    return deployment["spec"]["template"]["spec"]["containers"]


@pytest.mark.parametrize("replicas", [1, 3])
@pytest.mark.parametrize("key_value", [False, True], ids=["flags-v1.5.0", "flags-key=value"])
def test_helm_chart_arguments_start_epp(chart_values: Dict[str, Any], epp: Path, epp_help: str, tmp_path: Path,
                                        replicas: int, key_value: bool) -> None:
    values = yaml.safe_load(yaml.safe_dump(chart_values))
    values["inferenceExtension"]["replicas"] = replicas
    config = tmp_path / "default-plugins.yaml"
    config.write_text(yaml.safe_dump(CHART_CONFIG))
    args = chart_args(values, "vllm-llama3-8b-instruct", "inference", str(config), key_value)
    for flag in flag_names(args):
        assert re.search(rf"(^|[\s,]){re.escape(flag)}\b", epp_help), f"epp has no {flag}"
    # The chart sets NAMESPACE and POD_NAME from the downward API.
    r = run_until_the_api_server(epp, args, {"NAMESPACE": "inference", "POD_NAME": "vllm-llama3-8b-instruct-epp-0"})
    assert_reached_the_api_server(r)
    assert '"level":"error"' in r.stderr  # --zap-encoder json
    assert "accepted but not implemented" not in r.stderr  # --tracing=false asks for nothing


def test_helm_llm_d_rbac_binds_the_charts_service_account() -> None:
    objects = by_key(load_all(DEPLOY_DIR / "helm" / "rbac-llm-d-ai.yaml"))
    (role,) = [o for (kind, _), o in objects.items() if kind == "Role"]
    assert role_rules(role) == {("llm-d.ai", r): READ for r in OBJECTIVE_RESOURCES}
    # The chart names its ServiceAccount RELEASE-epp; the placeholder release is the pool's name.
    assert bound_account(objects, role["metadata"]["name"]) == ["vllm-llama3-8b-instruct-epp"]
