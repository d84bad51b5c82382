"""pyepp.lint: the same linter as `eppctl lint` (tests/cli/test_eppctl_lint.py has the rules)."""
import json

import pytest

import pyepp
from conftest import SOURCE_DIR


def test_lint_deploy_has_no_findings() -> None:
    r = pyepp.lint(str(SOURCE_DIR / "deploy"))
    assert r["summary"] == {"errors": 0, "warnings": 0, "notes": 0}
    assert r["objects"] >= 6 and any(f.endswith("inferencepool.yaml") for f in r["files"])


def test_lint_text_names_file_line_and_fix() -> None:
    r = pyepp.lint_text("apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata: {name: p}\n"
                        "spec:\n  selector: {matchLabels: {app: m}}\n  targetPorts: [{number: 8000}]\n"
                        "  endpointPickerRef: {name: epp, failureMode: FailClose}\n", file="pool.yaml")
    (f,) = [x for x in r["findings"] if x["rule"] == "IP004"]
    assert f["file"] == "pool.yaml" and f["line"] == 7 and "port.number is missing" in f["message"] and f["fix"]
    assert r["summary"]["errors"] == 1


def test_lint_formats_and_errors(tmp_path) -> None:
    sarif = json.loads(pyepp.lint(str(SOURCE_DIR / "deploy"), format="sarif"))
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["results"] == []
    assert "0 error(s)" in pyepp.lint(str(SOURCE_DIR / "deploy"), format="text")
    with pytest.raises(pyepp.NotFoundError):
        pyepp.lint(str(tmp_path / "absent"))
    with pytest.raises(ValueError):
        pyepp.lint(str(tmp_path), format="xml")
    broken = pyepp.lint_text("a: [1,\n", file="b.yaml")
    assert broken["findings"][0]["rule"] == "LINT001"


def test_a_token_no_document_can_start_with_is_reported_not_looped_on() -> None:
    # yaml-cpp 0.7 alone loops forever, allocating, on these (fuzz_lint found it in a manifest).
    for text, line in [(",a: 1\n", 1), ("apiVersion: v1\nkind: Service\n---\n,a: 1\n", 4)]:
        r = pyepp.lint_text(text, file="s.yaml")
        (f,) = r["findings"]
        assert f["rule"] == "LINT001" and f["line"] == line and "unexpected ','" in f["message"], f


def test_alias_expansion_is_reported_not_walked() -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        levels.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    bomb = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: laughs}\ndata:\n" + "\n".join("  " + x for x in levels) + "\n"
    r = pyepp.lint_text(bomb, file="bomb.yaml")
    (f,) = r["findings"]
    assert f["rule"] == "LINT001" and "expands to more than" in f["message"]
    assert r["objects"] == 0


EPP_BUNDLE = """apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: pool}
spec:
  selector: {matchLabels: {app: m}}
  targetPorts: [{number: 8000}]
  endpointPickerRef:
    name: epp
    port: {number: PORT}
    failureMode: FailClose
---
apiVersion: v1
kind: Service
metadata: {name: epp}
spec:
  selector: {app: epp}
  ports:
  - name: grpc
    port: 9002
    targetPort: TARGET
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: epp}
spec:
  selector: {matchLabels: {app: epp}}
  template:
    metadata: {labels: {app: epp}}
    spec:
      containers:
      - name: epp
        image: ghcr.io/example/epp
        args: [serve, --pool-name=pool]
        ports: [{name: grpc, containerPort: 9002}]
"""


def test_lint_pool_port_and_service_target_port_are_separate_findings() -> None:
    """A pool port the Service lacks is IP009 at the pool's line (9); a targetPort naming no
    container port is EPP002 at the Service's targetPort line (20). Each names the other object."""
    ok = pyepp.lint_text(EPP_BUNDLE.replace("PORT", "9002").replace("TARGET", "grpc"), file="b.yaml")
    assert ok["summary"]["errors"] == 0, ok["findings"]
    r = pyepp.lint_text(EPP_BUNDLE.replace("PORT", "9003").replace("TARGET", "grpc"), file="b.yaml")
    assert [(f["rule"], f["line"], f["object"]) for f in r["findings"]] == [("IP009", 9, "InferencePool pool")]
    assert "Service 'epp' (b.yaml:12), whose ports are 9002 (grpc -> targetPort grpc)" in r["findings"][0]["message"]
    assert r["findings"][0]["fix"].startswith("endpointPickerRef.port: {number: 9002}")
    r = pyepp.lint_text(EPP_BUNDLE.replace("PORT", "9002").replace("TARGET", "grcp"), file="b.yaml")
    assert [(f["rule"], f["line"], f["object"]) for f in r["findings"]] == [("EPP002", 20, "Service epp")]
    assert "'grcp', which names no container port of the EPP Deployment epp (it declares grpc=9002)" in r["findings"][0]["message"]
    assert r["findings"][0]["fix"].startswith("targetPort: grpc ")
