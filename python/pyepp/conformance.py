"""The black-box ext_proc conformance suite (libepp's epp/tools/conformance.h, as ``eppctl conformance``).

    report = pyepp.conformance(launch="eppctl serve --endpoints {endpoints_file} "
                                      "--grpc-port {grpc_port} --grpc-health-port {health_port} "
                                      "--metrics-port {metrics_port} --secure-serving=false")
    report["passed"], report["counts"]       # True, {"pass": 17, "fail": 0, "skip": 1}
    for c in report["checks"]: print(c["id"], c["outcome"], c["detail"])

    # An EPP already running (in this process too: pyepp.serve), reading /tmp/pool.yaml:
    report = pyepp.conformance(target="127.0.0.1:9002", endpoints_out="/tmp/pool.yaml")
    report["endpoints_file_after"]           # "restored to what it held before (57 bytes)"

The suite starts its model-server simulators, writes the endpoints file, then drives real
ext_proc streams. ``endpoints_out`` (with ``target`` only) is lent to the run: it holds the
suite's pool while the checks run and is given back at the end, whatever the outcome (what it
held before, written in place; removed if the suite created it; left alone if something else
changed it meanwhile). It raises :class:`pyepp.UnavailableError` when the EPP under test never
answers a pick, :class:`pyepp.ConfigError` for bad options, and at once when the EPP speaks the
other transport ("the target speaks TLS; add --tls": pass ``tls=True``; "... plaintext; drop
--tls": ``tls=False``). Checks and what they cite: :func:`conformance_checks`, docs/conformance.md.
"""
import json
from typing import Any, Dict, List, Optional, Sequence

from ._native import lib


def conformance_checks() -> List[Dict[str, str]]:
    """Every check, in run order: ``{"id", "asserts", "cites"}``."""
    return [{"id": i, "asserts": t, "cites": c} for i, t, c in lib.conformance_checks()]


def conformance(launch: Optional[str] = None, *, target: Optional[str] = None, endpoints_out: Optional[str] = None,
                health: Optional[str] = None, tls: bool = False, simulators: int = 3,
                sheddable_objective: Optional[str] = None, only: Sequence[str] = (), skip: Sequence[str] = (),
                startup_timeout_s: float = 30.0, stream_timeout_s: float = 5.0, work_dir: Optional[str] = None,
                format: str = "dict") -> Any:
    """Runs the suite. ``format``: "dict" (the JSON report as a dict), "text" or "junit" (strings,
    as ``eppctl conformance -o``)."""
    if format not in ("dict", "text", "junit"):
        raise ValueError("format must be dict, text or junit")
    for name, v in (("startup_timeout_s", startup_timeout_s), ("stream_timeout_s", stream_timeout_s)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 3600:
            raise ValueError(f"{name} must be a number of seconds in (0, 3600], got {v!r}")
    if isinstance(only, str) or isinstance(skip, str):
        raise TypeError("only and skip are sequences of check ids, not one string")
    j, text, junit = lib.conformance_run(launch or "", target or "", endpoints_out or "", health or "", bool(tls),
                                         int(simulators), sheddable_objective or "", list(only), list(skip),
                                         float(startup_timeout_s), float(stream_timeout_s), work_dir or "")
    if format == "text":
        return text
    if format == "junit":
        return junit
    return json.loads(j)
