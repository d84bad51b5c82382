"""Lint for InferencePool deployment manifests (libepp's epp/tools/lint.h, the same as ``eppctl lint``).

    report = pyepp.lint("deploy/", "overlays/prod/out.yaml")
    report["summary"]            # {"errors": 0, "warnings": 1, "notes": 0}
    for f in report["findings"]: print(f["file"], f["line"], f["rule"], f["message"], f["fix"])
    pyepp.lint_text(yaml_text, file="rendered.yaml")

Rules and the facts behind them: docs/lint.md. A path that does not exist raises
:class:`pyepp.NotFoundError`; invalid YAML is a finding (LINT001).
"""
import json
from typing import Any, Dict

from ._native import lib


def lint(*paths: str, format: str = "dict") -> Any:
    """Files or directories. ``format`` is "dict" (the JSON report as a dict), "text" or "sarif"
    (strings, as ``eppctl lint -o``)."""
    if format not in ("dict", "text", "sarif"):
        raise ValueError("format must be dict, text or sarif")
    out = lib.lint_paths([str(p) for p in paths], "json" if format == "dict" else format)
    return json.loads(out) if format == "dict" else out


def lint_text(yaml: str, file: str = "<text>") -> Dict[str, Any]:
    """One YAML document stream; ``file`` names it in the findings."""
    return json.loads(lib.lint_text(yaml, file))
