"""``eppctl check`` from Python: does a model server expose what an Endpoint Picker needs?"""

from __future__ import annotations

import datetime
import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

from ._native import lib
from .errors import ConfigError
from .metrics import _metric_overrides

__all__ = ["check"]

Target = Union[str, "os.PathLike[str]"]


def _targets(targets: Union[Target, Iterable[Target]]) -> List[str]:
    if isinstance(targets, (str, os.PathLike)):
        return [os.fspath(targets)]
    out = []
    for t in targets:
        if not isinstance(t, (str, os.PathLike)):
            raise TypeError(f"targets must be str or path-like, not {type(t).__name__}")
        out.append(os.fspath(t))
    return out


def _headers(headers: Union[Mapping[str, str], Iterable[str]]) -> List[str]:
    if isinstance(headers, str):
        raise TypeError("headers must be a mapping or a list of 'Name: value' strings, not one str")
    pairs = []
    if isinstance(headers, Mapping):
        pairs = [(str(k), str(v)) for k, v in headers.items()]
    else:
        for h in headers:
            name, colon, value = str(h).partition(":")
            if not colon:
                raise ConfigError(f"header '{h}': expected 'Name: value'")
            pairs.append((name, value))
    out = []
    for name, value in pairs:
        name, value = name.strip(), value.strip()
        if not name or any(c in name or c in value for c in "\r\n") or ":" in name:
            raise ConfigError(f"header '{name}: {value}': expected 'Name: value' on one line")
        out.append(f"{name}: {value}")
    return out


def _timeout(timeout: Union[float, datetime.timedelta]) -> datetime.timedelta:
    if isinstance(timeout, datetime.timedelta):
        delta = timeout
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        if timeout != timeout or timeout in (float("inf"), float("-inf")):
            raise ConfigError(f"timeout must be a finite number of seconds, got {timeout}")
        delta = datetime.timedelta(seconds=timeout)
    else:
        raise TypeError("timeout must be seconds (int or float) or a datetime.timedelta")
    # libepp counts whole milliseconds and libcurl reads 0 as "no timeout".
    if delta < datetime.timedelta(milliseconds=1):
        raise ConfigError(f"timeout must be at least 1 ms, got {delta.total_seconds()} s")
    return delta


def check(
    targets: Union[Target, Iterable[Target]],
    *,
    engine: Optional[str] = None,
    metrics: Optional[Mapping[str, str]] = None,
    metrics_config: Optional[Target] = None,
    metrics_path: Optional[str] = None,
    timeout: Union[float, datetime.timedelta, None] = None,
    insecure: Optional[bool] = None,
    bearer_token: Optional[str] = None,
    headers: Union[Mapping[str, str], Iterable[str], None] = None,
    model: Optional[str] = None,
    lenient: Optional[bool] = None,
    api: Optional[bool] = None,
    max_body_bytes: Optional[int] = None,
) -> Dict[str, Any]:
    """Checks model servers (base URLs such as ``http://10.0.0.7:8000``) or captured ``/metrics``
    files, exactly as ``eppctl check --output json`` does, and returns that JSON as a dict::

        {"status": "pass" | "warn" | "fail",
         "targets": [{"target", "engine", "status",
                      "metrics": {"waiting_queue_size", "running_requests", "kv_cache_usage",
                                  "lora", "cache_block_size", "cache_num_blocks"},
                      "checks": [{"id", "status", "message"}], "elapsed_ms"}]}

    Every option left at None takes libepp's default. Options, with those defaults:

    - ``engine``: ``"auto"`` (detect) or an engine name (built-in or from ``metrics_config``).
    - ``metrics``: per-field overrides ``{field: spec}``, as ``--metric FIELD=SPEC``.
    - ``metrics_config``: path of a YAML file of engine mappings (GIE ``engineConfigs``).
    - ``metrics_path``: ``"/metrics"``; a missing leading ``/`` is added.
    - ``timeout``: 2 seconds per request (seconds or a ``timedelta``, at least 1 ms).
    - ``insecure``: False (True skips TLS verification). ``bearer_token``: none.
    - ``headers``: extra request headers, a dict or a list of ``"Name: value"`` strings.
    - ``model``: model for the API probes; default the first of ``/v1/models``.
    - ``lenient``: False (True skips malformed metric lines). ``api``: True (probe the OpenAI APIs
      of URL targets). ``max_body_bytes``: 16 MiB per response.

    A problem of a target (unreachable, bad metrics) is a failed check in the result, never an
    exception. Bad options raise :class:`pyepp.ConfigError` or, for an unknown engine,
    :class:`pyepp.NotFoundError`. The network work runs without holding the GIL.
    """
    for option, value in (("engine", engine), ("metrics_path", metrics_path), ("bearer_token", bearer_token),
                          ("model", model)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{option} must be a str, not {type(value).__name__}")
    options = lib.CheckOptions()
    if engine is not None:
        options.engine = engine
    if metrics is not None:
        options.metric_overrides = _metric_overrides(metrics)
    if metrics_config is not None:
        path = os.fspath(metrics_config)
        try:
            with open(path, encoding="utf-8") as f:
                yaml_text = f.read()
        except OSError as error:
            raise ConfigError(f"metrics_config: cannot read {path}: {error.strerror}") from error
        options.custom_mappings = lib.load_metric_mappings_yaml(yaml_text, path)
    if metrics_path is not None:
        options.metrics_path = metrics_path if metrics_path.startswith("/") else "/" + metrics_path
    if timeout is not None:
        options.timeout = _timeout(timeout)
    if insecure is not None:
        options.insecure = bool(insecure)
    if bearer_token is not None:
        options.bearer_token = bearer_token.strip()
    if headers is not None:
        options.headers = _headers(headers)
    if model is not None:
        options.model = model
    if lenient is not None:
        options.lenient = bool(lenient)
    if api is not None:
        options.api = bool(api)
    if max_body_bytes is not None:
        if isinstance(max_body_bytes, bool) or not isinstance(max_body_bytes, int) or max_body_bytes <= 0:
            raise ConfigError(f"max_body_bytes must be a positive int, got {max_body_bytes!r}")
        options.max_body_bytes = max_body_bytes
    return json.loads(lib.run_checks_json(_targets(targets), options))
