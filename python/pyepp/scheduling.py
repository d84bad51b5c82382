"""Scheduling: pick an endpoint for a request, and explain the choice.

:class:`Scheduler` is libepp's scheduler (the same code as ``eppctl explain`` / ``eppctl pick``),
built from an EndpointPickerConfig. It picks among :class:`Endpoint` values (an address, labels
and an :class:`EndpointMetrics` snapshot) for a :class:`Request` parsed from an OpenAI body, and
returns a :class:`PickResult` whose :meth:`PickResult.explain` is ``eppctl explain --output
json``. Scorers and filters written in Python join through a :class:`PluginRegistry`.

Time: an Endpoint's metrics are ``metrics_age_s`` seconds old *at every pick* (default 0, fresh),
however long ago the object was built; an Endpoint without metrics has stale metrics. Rebuild the
endpoints to feed new metrics.
"""

from __future__ import annotations

import json
import math
import os
import types
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._native import lib
from .checks import _timeout
from .errors import ConfigError
from .metrics import EndpointMetrics, _endpoint_metrics, _to_native

__all__ = ["Request", "Endpoint", "PickResult", "Scheduler", "PluginRegistry", "load_endpoints"]

Text = Union[str, bytes, bytearray, memoryview]
PathLike = Union[str, "os.PathLike[str]"]


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")
    raise TypeError(f"{what} must be str or bytes, not {type(value).__name__}")


class Request:
    """An inference request as the scheduler sees it, parsed from a request body.

    Build one with :meth:`from_openai`, :meth:`parse` (any API llm-d Router's parsers read) or
    :meth:`from_capture`. Attributes (read-only except ``priority``): ``model``, ``path``,
    ``api`` (``"completions"``, ``"chat_completions"``, ``"responses"``, ``"embeddings"``,
    ``"messages"``, ``"generate"``, ``"sglang_generate"``, ``"grpc_generate"``, ``"grpc_embed"``,
    ``"other"``), ``parser``, ``token_ids``, ``media_parts``, ``prompt`` (the canonical prompt text that prefix
    hashing reads, see docs/scheduling.md), ``prompt_tokens`` (estimate), ``stream``,
    ``cache_salt``, ``headers`` (list of ``(name, value)``, names lower-cased) and ``priority``
    (int; negative means sheddable: it is rejected with 429 when the pool is saturated).
    """

    __slots__ = ("_native", "_body")

    def __init__(self, native: Any, body: str = "") -> None:
        if not isinstance(native, lib.InferenceRequest):
            raise TypeError("use Request.from_openai(body, path) or Request.from_capture(text)")
        self._native = native
        self._body = body  # JSON text, sent on by a token-producer's vllm backend

    @classmethod
    def from_openai(cls, body: Union[Mapping[str, Any], Text], path: Optional[str] = None) -> "Request":
        """Parses an OpenAI request body (a dict, or JSON text) sent to ``path``.

        The path selects the API (``/v1/chat/completions``, ``/v1/completions``,
        ``/v1/responses``, ``/v1/embeddings``); without one, the body's members imply it
        (``messages``: chat, ``input``: responses, ``prompt``: completions), as
        :meth:`infer_path` says. Raises :class:`pyepp.ConfigError` naming the JSON
        path of the problem (``messages[0].content: ...``): such a request gets HTTP 400 from a
        gateway, and never reaches the scheduler.
        """
        if isinstance(body, Mapping):
            body = json.dumps(body)
        if path is not None and not isinstance(path, str):
            raise TypeError(f"path must be a str, not {type(path).__name__}")
        text = _text(body, "body")
        if path is None:
            path = lib.infer_request_path(text)
        return cls(lib.parse_openai_request(path, text), text)

    @staticmethod
    def infer_path(body: Union[Mapping[str, Any], Text]) -> str:
        """The path a request body implies when it comes without one: ``messages`` ->
        ``/v1/chat/completions`` (``/v1/messages`` with Anthropic's top-level ``system``,
        ``anthropic_version`` or ``stop_sequences``), ``input`` -> ``/v1/responses``
        (``/v1/embeddings`` with ``encoding_format`` or ``dimensions``), else ``/v1/completions``."""
        if isinstance(body, Mapping):
            body = json.dumps(body)
        return lib.infer_request_path(_text(body, "body"))

    @classmethod
    def parse(cls, path: str, body: Union[Mapping[str, Any], Text], parsers: Optional[List[str]] = None) -> "Request":
        """Parses a request body sent to ``path`` with the parser the path resolves to, as
        ``eppctl serve`` does: among ``parsers`` (plugin types such as ``"anthropic-parser"``;
        None means llm-d's default list: openai, anthropic, vllmhttp, passthrough) the one
        claiming the longest suffix of the path. Reads OpenAI bodies, Anthropic Messages
        (``/v1/messages``), vLLM's ``/inference/v1/generate``, SGLang's ``/generate`` and, as
        bytes, the gRPC frames of Vertex AI and vLLM's gRPC API. Raises :class:`pyepp.ConfigError`
        naming the JSON path of the problem, or when no parser claims the path.
        """
        if isinstance(body, Mapping):
            body = json.dumps(body)
        if not isinstance(path, str):
            raise TypeError(f"path must be a str, not {type(path).__name__}")
        if isinstance(body, str):
            raw = body.encode("utf-8")
        elif isinstance(body, (bytes, bytearray, memoryview)):
            raw = bytes(body)
        else:
            raise TypeError(f"body must be a mapping, str or bytes, not {type(body).__name__}")
        native = lib.parse_request(path, raw, list(parsers or []))
        text = "" if native.parser in ("vertexai-parser", "vllmgrpc-parser") else raw.decode("utf-8", "replace")
        return cls(native, text)

    @classmethod
    def from_capture(cls, text: Union[Mapping[str, Any], Text], path: Optional[str] = None) -> "Request":
        """Parses a captured request, the input of ``eppctl explain``: an envelope
        ``{"path", "headers", "body"}`` or a bare body with an optional ``"path"``. A given
        ``path`` overrides the capture's. Raises :class:`pyepp.ConfigError`."""
        if isinstance(text, Mapping):
            text = json.dumps(text)
        if path is not None and not isinstance(path, str):
            raise TypeError(f"path must be a str, not {type(path).__name__}")
        native, body = lib.parse_capture_envelope_with_body(_text(text, "text"), path or "")
        return cls(native, body)

    @property
    def model(self) -> str:
        return self._native.model

    @property
    def path(self) -> str:
        return self._native.path

    @property
    def api(self) -> str:
        return self._native.api

    @property
    def prompt(self) -> str:
        return self._native.prompt

    @property
    def prompt_tokens(self) -> int:
        return self._native.prompt_tokens

    @property
    def stream(self) -> bool:
        return self._native.stream

    @property
    def cache_salt(self) -> str:
        return self._native.cache_salt

    @property
    def headers(self) -> List[Tuple[str, str]]:
        return list(self._native.headers)

    @property
    def parser(self) -> str:
        """The parser plugin type that read the request (``"openai-parser"``, ...)."""
        return self._native.parser

    @property
    def token_ids(self) -> List[int]:
        """The request's own token ids (generate APIs, vLLM gRPC), else an empty list."""
        return list(self._native.token_ids)

    @property
    def media_parts(self) -> int:
        return self._native.media_parts

    def response_usage(self, body: Union[Text, bytes], event_stream: bool = False) -> Optional[Dict[str, Any]]:
        """The token usage a model server's response to this request reports, read as
        ``eppctl serve`` reads it for its API (``event_stream``: a text/event-stream response):
        ``{"prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens"}`` (cached
        None when not reported), or None."""
        raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
        u = lib.parse_response_usage(self._native, raw, bool(event_stream))
        if u is None:
            return None
        return {"prompt_tokens": u[0], "completion_tokens": u[1], "total_tokens": u[2], "cached_tokens": u[3]}

    def header(self, name: str) -> Optional[str]:
        """The first header called ``name`` (any case), or None."""
        lower = name.lower()
        return next((v for k, v in self._native.headers if k == lower), None)

    @property
    def priority(self) -> int:
        return self._native.priority

    @priority.setter
    def priority(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"priority must be an int, not {type(value).__name__}")
        if not -(2**31) <= value < 2**31:
            raise ConfigError(f"priority must fit in 32 bits, got {value}")
        self._native.priority = value

    def __repr__(self) -> str:
        return (f"Request(model={self.model!r}, path={self.path!r}, api={self.api!r}, "
                f"prompt_tokens={self.prompt_tokens}, priority={self.priority})")


class Endpoint:
    """One model server: ``address`` (``"ip:port"``, ``"[v6]:port"`` or ``"host:port"``), its
    metrics, ``labels`` (str -> str) and ``engine``.

    ``metrics`` is an :class:`EndpointMetrics` (or a dict for :meth:`EndpointMetrics.from_dict`)
    or None: an endpoint without metrics counts as stale (the utilization detector treats it as
    saturated, load scorers as unknown). ``metrics_age_s`` makes the metrics that many seconds old
    at each pick (libepp's staleness threshold is 200 ms). ``engine`` defaults to the metrics'.
    ``unreachable=True`` is what a refused scrape sets: picks pass the endpoint over while any
    other candidate remains.
    Endpoints are immutable values.
    """

    __slots__ = ("_native", "_metrics")

    def __init__(self, address: str, metrics: Union[EndpointMetrics, Mapping[str, Any], None] = None,
                 labels: Optional[Mapping[str, str]] = None, engine: str = "", *, metrics_age_s: float = 0.0,
                 unreachable: bool = False, capacity: Optional[Mapping[str, float]] = None) -> None:
        if not isinstance(address, str):
            raise TypeError(f"address must be a str, not {type(address).__name__}")
        lib.validate_endpoint_address(address)
        if not isinstance(engine, str):
            raise TypeError(f"engine must be a str, not {type(engine).__name__}")
        native = lib.Endpoint()
        native.address = address
        if labels is not None:
            if not isinstance(labels, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                          for k, v in labels.items()):
                raise TypeError("labels must be a mapping of str to str")
            if "" in labels:
                raise ConfigError("labels: a label name must not be empty")
            native.labels = dict(labels)
        if metrics is not None:
            if isinstance(metrics, Mapping):
                metrics = EndpointMetrics.from_dict(metrics)
            if not isinstance(metrics, EndpointMetrics):
                raise TypeError(f"metrics must be EndpointMetrics, a dict or None, not {type(metrics).__name__}")
            if isinstance(metrics_age_s, bool) or not isinstance(metrics_age_s, (int, float)) or not (
                    0 <= metrics_age_s < math.inf):
                raise ConfigError(f"metrics_age_s must be a finite number of seconds >= 0, got {metrics_age_s!r}")
            native.metrics = _to_native(metrics)
            lib.validate_endpoint_metrics(native.metrics)  # also for EndpointMetrics built directly
            # Relative to the pick (see python/src/shims.h): 0 = fresh.
            native.metrics_time_us = -round(metrics_age_s * 1e6)
            engine = engine or metrics.engine
        native.engine = engine
        native.unreachable = bool(unreachable)
        if capacity is not None:
            native.capacity = _capacity(capacity)
        self._native = native
        self._metrics = metrics

    @classmethod
    def _wrap(cls, native: Any) -> "Endpoint":
        self = cls.__new__(cls)
        self._native = native
        self._metrics = None
        return self

    @property
    def address(self) -> str:
        return self._native.address

    @property
    def labels(self) -> Mapping[str, str]:
        """A read-only mapping."""
        return types.MappingProxyType(self._native.labels)

    @property
    def engine(self) -> str:
        return self._native.engine

    @property
    def capacity(self) -> Mapping[str, float]:
        """The configured ceilings, as given: ``{"requests_per_second": N, "tokens_per_second": M}``
        (absent keys are unlimited)."""
        c = self._native.capacity
        out = {}
        if c.requests_per_second is not None:
            out["requests_per_second"] = c.requests_per_second
        if c.tokens_per_second is not None:
            out["tokens_per_second"] = c.tokens_per_second
        return types.MappingProxyType(out)

    @property
    def metrics(self) -> Optional[EndpointMetrics]:
        if self._metrics is None and self._native.metrics_time_us is not None:
            self._metrics = _endpoint_metrics(self._native.engine, self._native.metrics, [])
        return self._metrics if self._native.metrics_time_us is not None else None

    @property
    def metrics_age_s(self) -> Optional[float]:
        """How old the metrics are at each pick; None without metrics."""
        t = self._native.metrics_time_us
        return None if t is None else -t / 1e6

    @property
    def metrics_error(self) -> str:
        """Why metrics could not be read or validated (:func:`load_endpoints`); "" when fine."""
        return self._native.metrics_error

    @property
    def unreachable(self) -> bool:
        """The last scrape of this address was refused (the server is gone): picks pass it over
        while any other candidate remains."""
        return self._native.unreachable

    def __repr__(self) -> str:
        m = self.metrics
        state = "no metrics" if m is None else (
            f"queue={m.waiting_queue_size}, running={m.running_requests}, kv={m.kv_cache_usage}")
        return f"Endpoint({self.address!r}, {state})"


class PickResult:
    """The outcome of :meth:`Scheduler.pick`.

    ``status``: 200 (picked), 429 (sheddable request shed: the pool is saturated) or 503 (no
    eligible endpoint); a request that does not parse never gets here (400 is the
    :class:`pyepp.ConfigError` of :meth:`Request.from_openai`). ``endpoint`` is the chosen
    address (None unless 200), ``fallbacks`` the others the picker returned, ``endpoints`` both
    (primary first), ``reason`` one line saying why.
    """

    __slots__ = ("_outcome", "_result")

    def __init__(self, outcome: Any) -> None:
        self._outcome = outcome
        self._result = outcome.result

    @property
    def status(self) -> int:
        return self._result.status

    @property
    def ok(self) -> bool:
        return self._result.status == 200

    @property
    def endpoints(self) -> List[str]:
        return list(self._result.endpoints)

    @property
    def endpoint(self) -> Optional[str]:
        eps = self._result.endpoints
        return eps[0] if eps else None

    @property
    def fallbacks(self) -> List[str]:
        return list(self._result.endpoints[1:])

    @property
    def reason(self) -> str:
        return self._result.reason

    @property
    def primary_profile(self) -> str:
        return self._result.primary_profile

    @property
    def profile_picks(self) -> List[Dict[str, Any]]:
        """Every profile the handler ran or skipped, in order: dicts with ``profile``, ``ran``,
        ``endpoints``, ``reason`` (the handler's, e.g. the P/D decider's) and ``error``."""
        return [{"profile": p.profile, "ran": p.ran, "endpoints": list(p.endpoints), "reason": p.reason,
                 "error": p.error} for p in self._result.profile_picks]

    @property
    def headers(self) -> Dict[str, str]:
        """Request headers for the upstream besides the destination, e.g. ``x-prefiller-host-port``."""
        return dict(self._result.headers)

    @property
    def response_headers(self) -> Dict[str, str]:
        """Headers for the client's response, e.g. ``x-session-token`` (session-affinity-scorer)."""
        return dict(self._result.response_headers)

    @property
    def profiles_reason(self) -> str:
        """The profile handler's account of the cycle (``"prefill-decode"``); "" for one profile."""
        return self._result.profiles_reason

    @property
    def saturation(self) -> float:
        """The saturation detector's figure over the candidates (>= 1.0: saturated)."""
        return self._result.saturation

    @property
    def candidates(self) -> int:
        """Endpoints left after the subset hint and the unreachable ones."""
        return self._result.candidates

    @property
    def unreachable(self) -> List[str]:
        """Endpoints passed over because their last scrape was refused."""
        return list(self._result.unreachable)

    @property
    def prefix_blocks(self) -> int:
        return self._result.prefix_blocks

    @property
    def prefix_match_blocks(self) -> int:
        """Prompt blocks the prefix index says the chosen endpoint already holds."""
        return self._result.prefix_match_blocks

    @property
    def tokens(self) -> int:
        """Token ids a token-producer made for the request (-1 without one)."""
        return self._result.tokens

    @property
    def tokens_source(self) -> str:
        """Where they came from: ``"estimate"``, ``"vllm"`` (the server rendered the request),
        ``"vllm-cache"``, ``"estimate-fallback"`` (see :attr:`tokens_note`); "" without one."""
        return self._result.tokens_source

    @property
    def tokens_note(self) -> str:
        """Why a fallback happened (``"timeout: ..."``), else ""."""
        return self._result.tokens_note

    @property
    def predicted_ttft_ms(self) -> Optional[float]:
        """``predicted-latency-producer``'s TTFT prediction for the chosen endpoint in
        milliseconds (its upper estimate), or None (no such producer, or no model yet)."""
        v = self._result.predicted_ttft_ms
        return None if v < 0 else v

    @property
    def predicted_tpot_ms(self) -> Optional[float]:
        """The TPOT prediction for the chosen endpoint in milliseconds, or None."""
        v = self._result.predicted_tpot_ms
        return None if v < 0 else v

    @property
    def slo(self) -> Dict[str, float]:
        """The request's SLOs the producer read (``x-llm-d-slo-ttft-ms`` / ``-tpot-ms``), in
        milliseconds: ``{"ttft_ms": ..., "tpot_ms": ...}`` with the ones it carried."""
        out: Dict[str, float] = {}
        if self._result.slo_ttft_ms > 0:
            out["ttft_ms"] = self._result.slo_ttft_ms
        if self._result.slo_tpot_ms > 0:
            out["tpot_ms"] = self._result.slo_tpot_ms
        return out

    @property
    def load_tokens(self) -> int:
        """Token load recorded on the chosen endpoint until :meth:`Scheduler.release`."""
        return self._result.load_tokens

    @property
    def request(self) -> Optional[Request]:
        """The request as it was when picked; None for an ext_proc decision made without one
        (:class:`pyepp.extproc.Session`: a 400, or a request without a body)."""
        if not self._outcome.has_request:
            return None
        return Request(self._outcome.request)

    def explain(self) -> Dict[str, Any]:
        """``eppctl explain --output json`` as a dict: ``request``, ``profiles`` (filters with
        kept/removed endpoints and reasons, scores per endpoint and scorer, picker, picked),
        ``result`` and ``decision`` (what the gateway receives). ``profiles`` is empty when the
        pick ran with ``trace=False``."""
        return json.loads(self._outcome.to_json(-1))

    def explain_text(self, color: bool = False) -> str:
        """``eppctl explain`` as text: filters, score table, winner vs runner-up, decision."""
        return self._outcome.to_text(bool(color))

    def __repr__(self) -> str:
        return f"PickResult(status={self.status}, endpoint={self.endpoint!r}, reason={self.reason!r})"


class _ScorerAdapter:
    """What the native plugin calls: wraps native arguments for the user's scorer."""

    __slots__ = ("plugin",)

    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin

    def score(self, request: Any, endpoints: List[Any]) -> List[float]:
        return list(self.plugin.score(Request(request), [Endpoint._wrap(e) for e in endpoints]))

    def explain(self, request: Any, endpoint: Any) -> str:
        explain = getattr(self.plugin, "explain", None)
        return "" if explain is None else str(explain(Request(request), Endpoint._wrap(endpoint)))


class _FilterAdapter:
    __slots__ = ("plugin",)

    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin

    def filter(self, request: Any, endpoints: List[Any]) -> List[bool]:
        wrapped = [Endpoint._wrap(e) for e in endpoints]
        out = list(self.plugin.filter(Request(request), wrapped))
        if all(isinstance(x, (Endpoint, str)) for x in out):  # the kept endpoints ([] = none)
            kept = {x.address if isinstance(x, Endpoint) else x for x in out}
            return [e.address in kept for e in wrapped]
        if len(out) != len(wrapped):
            raise ValueError(f"filter() must return one bool per endpoint ({len(wrapped)}) or the kept endpoints")
        return [bool(x) for x in out]

    def why_removed(self, request: Any, endpoint: Any) -> str:
        why = getattr(self.plugin, "why_removed", None)
        return "" if why is None else str(why(Request(request), Endpoint._wrap(endpoint)))


PluginFactory = Callable[[str, Dict[str, Any]], Any]


class PluginRegistry:
    """Plugin types a :class:`Scheduler` can be built from: every built-in type, plus scorers and
    filters written in Python.

    A factory is called once per plugin in the configuration, as ``factory(name, params)`` where
    ``params`` is the plugin's ``parameters`` as a dict (``{}`` when absent), and returns:

    - for a scorer, an object with ``score(request, endpoints) -> list[float]`` (one score per
      endpoint, same order, nominally in [0, 1]; clamped, then multiplied by the profile weight)
      and optionally ``explain(request, endpoint) -> str`` (the explain detail);
    - for a filter, an object with ``filter(request, endpoints)`` returning one bool per endpoint
      (True keeps it) or the list of kept endpoints, and optionally
      ``why_removed(request, endpoint) -> str``.

    A factory that raises makes the Scheduler construction raise :class:`pyepp.ConfigError`. An
    exception (or a result of the wrong length or type) during a pick never propagates: a
    failing scorer scores 0 for every endpoint and its explain detail reads ``"python error:
    <Type>: <message>"``; a failing filter keeps every endpoint. The first failure of each plugin
    is logged as a warning on the ``"pyepp"`` logger. Python plugins run holding the GIL, so they
    serialize concurrent picks while they run.
    """

    __slots__ = ("_native",)

    def __init__(self) -> None:
        self._native = lib.PluginRegistry()

    def types(self) -> List[str]:
        """Every registered type, sorted."""
        return list(self._native.types())

    def __contains__(self, type_name: object) -> bool:
        return isinstance(type_name, str) and self._native.has(type_name)

    def schema(self, type_name: str) -> Dict[str, Any]:
        """The parameters ``type_name`` declares (see :func:`plugin_schema`). Raises
        :class:`pyepp.NotFoundError` for an unknown type."""
        if not isinstance(type_name, str):
            raise TypeError(f"type must be a str, not {type(type_name).__name__}")
        return json.loads(self._native.schema_json(type_name))

    def register_scorer(self, type_name: str, factory: PluginFactory) -> None:
        """Registers a scorer type. Raises :class:`pyepp.EppError` (code ``ALREADY_EXISTS``) when
        the type is taken."""
        self._register(type_name, "scorer", factory, _ScorerAdapter)

    def register_filter(self, type_name: str, factory: PluginFactory) -> None:
        """Registers a filter type (see the class documentation)."""
        self._register(type_name, "filter", factory, _FilterAdapter)

    def _register(self, type_name: str, kind: str, factory: PluginFactory, adapter: Any) -> None:
        if not isinstance(type_name, str):
            raise TypeError(f"type must be a str, not {type(type_name).__name__}")
        if not callable(factory):
            raise TypeError("factory must be callable as factory(name, params)")
        method = "score" if kind == "scorer" else "filter"

        def native_factory(name: str, params_json: str) -> Any:
            plugin = factory(name, json.loads(params_json))
            if not callable(getattr(plugin, method, None)):
                raise TypeError(f"the factory of {type_name!r} returned {type(plugin).__name__}, which has no "
                                f"{method}() method")
            return adapter(plugin)

        self._native.register_python(type_name, kind, native_factory)


_default_registry: Optional[PluginRegistry] = None


def _registry(registry: Optional[PluginRegistry]) -> Any:
    if registry is None:
        registry = _default()
    if not isinstance(registry, PluginRegistry):
        raise TypeError(f"registry must be a pyepp.PluginRegistry, not {type(registry).__name__}")
    return registry._native


def plugin_schema(type_name: str, *, registry: Optional[PluginRegistry] = None) -> Dict[str, Any]:
    """The parameters a plugin type declares, as ``eppctl config plugins --json`` and
    docs/plugin-parameters.md show them::

        {"declared": True, "params": [{"name": "blockSizeTokens", "type": "int", "default": "16",
          "range": "[1, 65536]", "aliases": [...], "deprecated": True, "doc": "..."}, ...],
         "otherKeys": "..."}

    Members that do not apply are left out; ``default`` is the YAML spelling of the value.
    ``declared`` is False for Python plugin types (nothing is known about their parameters).
    ``registry`` defaults to the built-ins. Raises :class:`pyepp.NotFoundError` for an unknown type.
    """
    if registry is not None and not isinstance(registry, PluginRegistry):
        raise TypeError(f"registry must be a pyepp.PluginRegistry, not {type(registry).__name__}")
    return (registry if registry is not None else _default()).schema(type_name)


def _default() -> PluginRegistry:
    global _default_registry
    if _default_registry is None:
        _default_registry = PluginRegistry()
    return _default_registry


def _seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ConfigError(f"seed must be an int in [0, 2**64), got {seed!r}")
    return seed


def _capacity(capacity: Mapping[str, float]) -> Any:
    if not isinstance(capacity, Mapping):
        raise TypeError("capacity must be a mapping with requests_per_second and/or tokens_per_second")
    native = lib.EndpointCapacity()
    for key, value in capacity.items():
        if key not in ("requests_per_second", "tokens_per_second"):
            raise ConfigError(f"capacity.{key}: unknown key (expected requests_per_second or tokens_per_second)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
            raise ConfigError(f"capacity.{key}: must be a finite number > 0, got {value!r}")
        setattr(native, key, float(value))
    return native


def _where(region: str, zone: str) -> Tuple[str, str]:
    for name, v in (("region", region), ("zone", zone)):
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a str, not {type(v).__name__}")
    return region, zone


class Scheduler:
    """libepp's scheduler: filters, weighted scorers and a picker per profile, as configured by a
    GIE EndpointPickerConfig (docs/scheduling.md).

    Build one with :meth:`from_yaml`, :meth:`from_file` or :meth:`default` (GIE's default profile:
    queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3). ``seed`` drives
    tie-breaks and random pickers, so the same seed and the same picks give the same answers.
    ``registry`` adds Python plugin types (default: the built-ins). Configuration errors raise
    :class:`pyepp.ConfigError` with the file, line and config path.

    A scheduler keeps state between picks: the prefix index learns where each recorded prompt
    went, and each recorded pick adds an in-flight load estimate to its endpoint until
    :meth:`release`. Methods may be called from several threads at once; picks run without the
    GIL (except inside Python plugins).
    """

    __slots__ = ("_native",)

    def __init__(self, native: Any) -> None:
        if not isinstance(native, lib.Scheduler):
            raise TypeError("use Scheduler.from_yaml(text), Scheduler.from_file(path) or Scheduler.default()")
        self._native = native

    @classmethod
    def from_yaml(cls, text: Text, *, seed: int = 0, registry: Optional[PluginRegistry] = None,
                  source: str = "<yaml>", region: str = "", zone: str = "") -> "Scheduler":
        """A scheduler from EndpointPickerConfig YAML text; ``source`` names it in errors.
        ``region`` and ``zone`` say where the EPP runs (``eppctl serve --region / --zone``): the
        home region and gateway zone of the locality plugins."""
        config = lib.parse_config(_text(text, "text"), source)
        return cls(lib.Scheduler(config, _registry(registry), _seed(seed), *_where(region, zone)))

    @classmethod
    def from_file(cls, path: PathLike, *, seed: int = 0, registry: Optional[PluginRegistry] = None, region: str = "",
                  zone: str = "") -> "Scheduler":
        """A scheduler from an EndpointPickerConfig file (or a Helm values file / ConfigMap that
        embeds one). Raises :class:`pyepp.NotFoundError` when the file cannot be read."""
        config = lib.load_config_file(os.fspath(path))
        return cls(lib.Scheduler(config, _registry(registry), _seed(seed), *_where(region, zone)))

    @classmethod
    def default(cls, *, seed: int = 0, registry: Optional[PluginRegistry] = None) -> "Scheduler":
        """GIE's default configuration."""
        return cls(lib.Scheduler(lib.default_config(), _registry(registry), _seed(seed)))

    def pick(self, request: Request, endpoints: Iterable[Endpoint], subset: Union[Sequence[str], str, None] = None,
             record: bool = True, *, trace: bool = True) -> PickResult:
        """Schedules ``request`` over ``endpoints``.

        ``subset`` is the gateway's subset hint (entries ``"ip:port"``, or a bare ``"ip"`` for
        every port; a str is one entry): None means every endpoint is a candidate, an empty list
        none (503). ``record=False`` makes a pure what-if: the prefix index and in-flight load
        are left unchanged. ``trace`` (default True) records every filter's and scorer's view for
        :meth:`PickResult.explain`. It makes a pick about 3x slower with 4 endpoints and 5-6x
        with 32 (docs/python.md), so pass ``trace=False`` in loops that only need the decision;
        ``explain()`` then has no ``profiles``.
        """
        if not isinstance(request, Request):
            raise TypeError(f"request must be a pyepp.Request, not {type(request).__name__}")
        natives = []
        for e in endpoints:
            if not isinstance(e, Endpoint):
                raise TypeError(f"endpoints must be pyepp.Endpoint values, not {type(e).__name__}")
            natives.append(e._native)
        entries: Optional[List[str]] = None
        if subset is not None:
            entries = [subset] if isinstance(subset, str) else list(subset)
            if not all(isinstance(s, str) for s in entries):
                raise TypeError("subset entries must be str")
        return PickResult(self._native.pick(request._native, natives, entries, bool(record), bool(trace),
                                            request._body))

    def release(self, result: PickResult) -> None:
        """Ends a recorded request: removes its load from its endpoint. Harmless for results that
        recorded nothing (not 200, or ``record=False``)."""
        if not isinstance(result, PickResult):
            raise TypeError(f"result must be a pyepp.PickResult, not {type(result).__name__}")
        self._native.release(result._outcome)

    def observe_first_token(self, result: PickResult) -> None:
        """The first token of a recorded pick has arrived (call it when your response path sees
        it, e.g. the first chunk of a streamed answer): plugins that learn from the response
        path's timing use it, such as the ``estimated-ttft-scorer`` with
        ``calibratePrefillRate``. Harmless for results that recorded nothing."""
        if not isinstance(result, PickResult):
            raise TypeError(f"result must be a pyepp.PickResult, not {type(result).__name__}")
        self._native.observe_first_token(result._outcome)

    def observe_completion(self, result: PickResult, completion_tokens: int = 0, prompt_tokens: int = 0,
                           chunks: Optional[int] = None, streamed: bool = True) -> None:
        """The response of a recorded pick has ended (call it after its last chunk): plugins that
        learn from whole responses use it, such as ``predicted-latency-producer``, which trains
        its TTFT and TPOT models from the time since the pick, the first token
        (:meth:`observe_first_token`) and ``completion_tokens`` (else ``chunks``, the streamed
        chunks seen). Harmless for results that recorded nothing."""
        if not isinstance(result, PickResult):
            raise TypeError(f"result must be a pyepp.PickResult, not {type(result).__name__}")
        for name, v in (("completion_tokens", completion_tokens), ("prompt_tokens", prompt_tokens)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")
        n = completion_tokens if chunks is None else chunks
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"chunks must be an int >= 0, got {chunks!r}")
        self._native.observe_completion(result._outcome, float(prompt_tokens), float(completion_tokens), n, bool(streamed))

    def effective_config(self) -> str:
        """The configuration after defaults, as YAML (``eppctl config effective``)."""
        return self._native.effective_config_yaml()

    @property
    def warnings(self) -> List[str]:
        """Configuration notes: sections loaded but not implemented, ignored weights, defaults."""
        return list(self._native.warnings)

    @property
    def profile_names(self) -> List[str]:
        return list(self._native.profile_names)

    @property
    def prefix_index_entries(self) -> int:
        """(endpoint, block) entries in the prefix index."""
        return self._native.prefix_index_entries()

    def inflight(self, address: str) -> Tuple[int, int]:
        """(requests, estimated tokens) recorded on ``address`` and not yet released."""
        return tuple(self._native.inflight(address))  # type: ignore[return-value]

    def plugin_timings(self) -> List[Dict[str, Any]]:
        """Time spent in each plugin since the scheduler was built, one dict per extension point
        and plugin instance the configuration uses (zero-call entries included), in call order::

            {"extension_point": "Scorer", "plugin_type": "queue-scorer", "plugin_name": "queue",
             "count": 12, "sum_seconds": 4.1e-05,
             "buckets": [(1e-06, 0), (2.5e-06, 9), ..., (0.1, 12), (inf, 12)]}

        ``extension_point`` is one of ``DataProducer``, ``SaturationDetector``, ``ProfilePicker``
        (called at least twice per pick), ``Filter``, ``Scorer``, ``Picker``,
        ``ProcessProfilesResults`` and ``PreRequest`` (recorded picks only). ``buckets`` are
        cumulative ``(upper bound in seconds, calls that took at most that long)`` pairs, as a
        Prometheus histogram's ``le`` buckets; the last bound is ``math.inf`` with ``count``.
        What ``eppctl serve`` exports as ``inference_extension_plugin_duration_seconds``.
        """
        out = []
        for t in self._native.plugin_timings():
            out.append({"extension_point": t.extension_point, "plugin_type": t.plugin_type,
                        "plugin_name": t.plugin_name, "count": t.count, "sum_seconds": t.sum_seconds,
                        "buckets": _buckets(t.bucket_counts, t.count)})
        return out

    def missing_inputs(self, *, engine: Optional[str] = None,
                       endpoints: Optional[Iterable["Endpoint"]] = None) -> List[Dict[str, str]]:
        """Plugins that read a metric the ``engine``'s mapping has no metric for, or that none of
        ``endpoints`` reported (give one of the two): such a plugin degrades silently (a scorer
        scores 0 everywhere). One dict per (plugin, input): ``{"plugin", "type", "input", "why",
        "message"}``, as ``eppctl config validate --engine/--endpoint`` prints them."""
        if (engine is None) == (endpoints is None):
            raise TypeError("missing_inputs: give engine= or endpoints=")
        if engine is not None:
            if not isinstance(engine, str):
                raise TypeError("engine must be a str")
            return list(self._native.missing_inputs_for_engine(engine))
        natives = []
        for e in endpoints:  # type: ignore[union-attr]
            if not isinstance(e, Endpoint):
                raise TypeError(f"endpoints must be pyepp.Endpoint values, not {type(e).__name__}")
            natives.append(e._native)
        return list(self._native.missing_inputs_for_endpoints(natives))

    def cycle_timing(self) -> Dict[str, Any]:
        """Duration of whole :meth:`pick` calls (every outcome) since the scheduler was built:
        ``{"count", "sum_seconds", "buckets"}`` as in :meth:`plugin_timings`."""
        h = self._native.cycle_timing()
        return {"count": h.count, "sum_seconds": h.sum_seconds, "buckets": _buckets(h.bucket_counts, h.count)}


def _buckets(cumulative: Sequence[int], count: int) -> List[Tuple[float, int]]:
    bounds = list(lib.timing_bucket_bounds_seconds) + [math.inf]
    return list(zip(bounds, list(cumulative) + [count]))


def load_endpoints(path: PathLike, *, scheduler: Optional["Scheduler"] = None, engine: Optional[str] = None,
                   timeout: Optional[float] = None, insecure: Optional[bool] = None,
                   fail_on_metrics_error: bool = False) -> List[Endpoint]:
    """Reads an endpoints file (``eppctl --endpoints``; YAML or JSON, see docs/cli.md) and each
    endpoint's metrics: from files (relative to the endpoints file), URLs, or by scraping
    ``http://ADDRESS/metrics``, without holding the GIL.

    Options left at None take libepp's defaults, as in :func:`pyepp.check`: ``engine``
    (``"auto"``, detect; applies to endpoints that name none), ``timeout`` (2 s per scrape,
    seconds or a ``timedelta``), ``insecure`` (False). Metrics that were read are fresh at every
    pick. With ``scheduler``, metrics are read the way its configuration says (a
    ``core-metrics-extractor``'s ``engineConfigs``, ``engineLabelKey`` and ``defaultEngine``), as
    ``eppctl pick --config`` and ``eppctl serve`` read them. An endpoint whose metrics cannot be
    read has ``metrics`` None and the reason in
    ``metrics_error``, unless ``fail_on_metrics_error`` makes that the call's exception. Raises
    :class:`pyepp.NotFoundError` when a file cannot be read and :class:`pyepp.ConfigError`
    naming file, line and entry when the file is invalid.
    """
    options = lib.CheckOptions()
    if engine is not None:
        if not isinstance(engine, str):
            raise TypeError(f"engine must be a str, not {type(engine).__name__}")
        options.engine = engine
    if timeout is not None:
        options.timeout = _timeout(timeout)
    if insecure is not None:
        options.insecure = bool(insecure)
    if scheduler is not None and not isinstance(scheduler, Scheduler):
        raise TypeError(f"scheduler must be a pyepp.Scheduler, not {type(scheduler).__name__}")
    natives = lib.load_endpoints(os.fspath(path), options, bool(fail_on_metrics_error),
                                 None if scheduler is None else scheduler._native)
    return [Endpoint._wrap(n) for n in natives]
