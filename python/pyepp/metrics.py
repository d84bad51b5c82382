"""Prometheus text parsing and Model Server Protocol extraction.

:func:`parse_prometheus` returns the families of a ``/metrics`` text in the shape
``prometheus_client.parser.text_string_to_metric_families`` gives them (same family names, types,
documentation, sample names, labels, values and timestamps), so the two can be swapped.
:func:`extract_metrics` reads what an Endpoint Picker needs from such a text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

from ._native import lib
from .errors import ConfigError

__all__ = [
    "Sample",
    "MetricFamily",
    "ParseResult",
    "LoraInfo",
    "EndpointMetrics",
    "parse_prometheus",
    "extract_metrics",
    "builtin_engines",
]

Text = Union[str, bytes, bytearray, memoryview]

# libepp spells an untyped family "untyped"; prometheus_client (and OpenMetrics) say "unknown".
_TYPE_NAMES = {"untyped": "unknown"}


class Sample(NamedTuple):
    """One sample line. ``timestamp`` is in seconds (the text's milliseconds / 1000) or None."""

    name: str
    labels: Dict[str, str]
    value: float
    timestamp: Optional[float] = None


class MetricFamily(NamedTuple):
    """A metric family: ``type`` is counter, gauge, histogram, summary or unknown.

    Counter families are named without ``_total``; their samples keep (or gain) it, as in
    prometheus_client. ``help`` is the unescaped HELP text ("" when absent); ``documentation``
    is the same value under prometheus_client's name.
    """

    name: str
    type: str
    help: str
    samples: List[Sample]

    @property
    def documentation(self) -> str:
        return self.help


class ParseResult(List[MetricFamily]):
    """The families of one text, in order; a list with two extra attributes.

    ``skipped`` lists the ``(line, reason)`` of every line lenient parsing skipped (1-based line
    numbers); ``skipped_lines`` is its length. Both are empty / 0 after strict parsing.
    """

    skipped: List[Tuple[int, str]]

    def __init__(
        self, families: Iterable[MetricFamily] = (), skipped: Iterable[Tuple[int, str]] = ()
    ) -> None:
        super().__init__(families)
        self.skipped = list(skipped)

    @property
    def skipped_lines(self) -> int:
        return len(self.skipped)


@dataclass(frozen=True)
class LoraInfo:
    """LoRA adapter state: how many fit in a batch (0: unknown), which have requests running or
    waiting, and -- where the server publishes ``vllm:lora_adapter_loaded`` -- which are resident on
    the GPU (``loaded``) or held in CPU memory (``loaded_cpu``)."""

    max_lora: int
    running: List[str]
    waiting: List[str]
    loaded: List[str] = field(default_factory=list)
    loaded_cpu: List[str] = field(default_factory=list)

    @property
    def slots_in_use(self) -> int:
        """Distinct adapters of running, waiting and loaded: the slots lora-affinity-scorer counts
        (vLLM names an adapter with running and waiting requests in both lists)."""
        return len(set(self.running) | set(self.waiting) | set(self.loaded))


@dataclass(frozen=True)
class EndpointMetrics:
    """What a model server's metrics tell an Endpoint Picker.

    A value is None when the server does not expose it or it failed validation; ``checks`` says
    which (dicts with ``id``, ``status`` -- pass, warn, fail or skip -- and ``message``, ids
    ``metrics.queue``, ``metrics.running``, ``metrics.kv_cache``, ``metrics.lora`` and
    ``metrics.cache_info``).
    """

    engine: str
    waiting_queue_size: Optional[float] = None
    running_requests: Optional[float] = None
    kv_cache_usage: Optional[float] = None
    lora: Optional[LoraInfo] = None
    cache_block_size: Optional[int] = None
    cache_num_blocks: Optional[int] = None
    checks: List[Dict[str, str]] = field(default_factory=list)
    #: Scalar endpoint attributes from an engine mapping's ``customMetrics`` (llm-d's
    #: core-metrics-extractor), e.g. ``{"custom.queue_depth": 3.0}``; what
    #: endpoint-attribute-filter and endpoint-attribute-scorer read.
    attributes: Dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "EndpointMetrics":
        """Metrics given by hand, e.g. for :class:`pyepp.Endpoint`::

            EndpointMetrics.from_dict({"waiting_queue_size": 3, "running_requests": 12,
                                       "kv_cache_usage": 0.44,
                                       "lora": {"max_lora": 2, "running": ["a"], "waiting": []},
                                       "cache_block_size": 16, "cache_num_blocks": 4096,
                                       "attributes": {"gpu.util": 0.7}})

        Every key is optional (absent or None: not exposed, as when a server lacks the metric);
        ``engine`` and ``checks`` are accepted too, so ``from_dict(m.to_dict())`` round-trips.
        ``kv_cache_usage`` is a fraction in [0, 1] (not a percentage). Raises
        :class:`pyepp.ConfigError` for an unknown key or a value of the wrong type or range.
        """
        if not isinstance(values, Mapping):
            raise TypeError(f"metrics must be a mapping, not {type(values).__name__}")
        unknown = [k for k in values if k not in _DICT_KEYS]
        if unknown:
            raise ConfigError(f"unknown metrics key {unknown[0]!r} (known: {', '.join(_DICT_KEYS)})")

        # Python types are checked here; ranges (counts >= 0, kv_cache_usage a fraction, ...)
        # by libepp's ValidateEndpointMetrics below, the one definition of a valid snapshot.
        def number(key: str, integer: bool = False) -> Any:
            v = values.get(key)
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
                kind = "an int" if integer else "a number"
                raise ConfigError(f"metrics.{key}: expected {kind}, got {v!r}")
            if integer and not -2**63 <= v < 2**63:
                raise ConfigError(f"metrics.{key}: out of the 64-bit range, got {v!r}")
            return int(v) if integer else float(v)

        lora = values.get("lora")
        if lora is not None:
            if isinstance(lora, LoraInfo):
                lora = {"max_lora": lora.max_lora, "running": lora.running, "waiting": lora.waiting,
                        "loaded": lora.loaded, "loaded_cpu": lora.loaded_cpu}
            if not isinstance(lora, Mapping):
                raise ConfigError(f"metrics.lora: expected a mapping, got {lora!r}")
            # slots_in_use is derived (check's JSON carries it); it is read back only as a check.
            known = ("max_lora", "running", "waiting", "loaded", "loaded_cpu", "slots_in_use")
            extra = [k for k in lora if k not in known]
            if extra:
                raise ConfigError(f"metrics.lora: unknown key {extra[0]!r} (known: {', '.join(known)})")
            max_lora = lora.get("max_lora", 0)
            if isinstance(max_lora, bool) or not isinstance(max_lora, int) or not -2**63 <= max_lora < 2**63:
                raise ConfigError(f"metrics.lora.max_lora: expected an int, got {max_lora!r}")
            lists = []
            for key in ("running", "waiting", "loaded", "loaded_cpu"):
                names = lora.get(key) or []
                if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                    raise ConfigError(f"metrics.lora.{key}: expected a list of adapter names, got {names!r}")
                lists.append(list(names))
            given = lora.get("slots_in_use")
            lora = LoraInfo(max_lora, *lists)
            if given is not None and given != lora.slots_in_use:
                raise ConfigError(f"metrics.lora.slots_in_use: {given!r} is not the {lora.slots_in_use} distinct "
                                  "adapters of running, waiting and loaded")
        attributes = values.get("attributes") or {}
        if not isinstance(attributes, Mapping):
            raise ConfigError(f"metrics.attributes: expected a mapping of name to number, got {attributes!r}")
        for k, v in attributes.items():
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"metrics.attributes: expected str -> number, got {k!r}: {v!r}")
        engine = values.get("engine") or ""
        if not isinstance(engine, str):
            raise ConfigError(f"metrics.engine: expected a str, got {engine!r}")
        result = cls(
            engine=engine,
            waiting_queue_size=number("waiting_queue_size"),
            running_requests=number("running_requests"),
            kv_cache_usage=number("kv_cache_usage"),
            lora=lora,
            cache_block_size=number("cache_block_size", integer=True),
            cache_num_blocks=number("cache_num_blocks", integer=True),
            checks=[dict(c) for c in values.get("checks") or []],
            attributes={k: float(v) for k, v in attributes.items()},
        )
        lib.validate_endpoint_metrics(_to_native(result))
        return result

    @classmethod
    def from_text(cls, text: "Text", engine: str = "auto", *, lenient: bool = False,
                  metrics: Optional[Mapping[str, str]] = None) -> "EndpointMetrics":
        """The metrics of a ``/metrics`` text: the same as :func:`pyepp.extract_metrics`."""
        return extract_metrics(text, engine, lenient=lenient, metrics=metrics)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of every attribute. Its metric keys and values are those of a
        target's ``"metrics"`` object in :func:`pyepp.check` (``eppctl check --output json``)."""
        lora = None
        if self.lora is not None:
            lora = {"max_lora": self.lora.max_lora, "running": list(self.lora.running), "waiting": list(self.lora.waiting),
                    "slots_in_use": self.lora.slots_in_use}
            if self.lora.loaded or self.lora.loaded_cpu:
                lora["loaded"], lora["loaded_cpu"] = list(self.lora.loaded), list(self.lora.loaded_cpu)
        return {
            "engine": self.engine,
            "waiting_queue_size": self.waiting_queue_size,
            "running_requests": self.running_requests,
            "kv_cache_usage": self.kv_cache_usage,
            "lora": lora,
            "cache_block_size": self.cache_block_size,
            "cache_num_blocks": self.cache_num_blocks,
            "checks": [dict(c) for c in self.checks],
            "attributes": dict(self.attributes),
        }


_DICT_KEYS = ("waiting_queue_size", "running_requests", "kv_cache_usage", "lora", "cache_block_size",
              "cache_num_blocks", "engine", "checks", "attributes")


def _to_native(m: EndpointMetrics) -> Any:
    """The native EndpointMetrics of ``m`` (for pyepp.Endpoint)."""
    native = lib.EndpointMetrics()
    native.waiting_queue_size = m.waiting_queue_size
    native.running_requests = m.running_requests
    native.kv_cache_usage = m.kv_cache_usage
    if m.lora is not None:
        lora = lib.LoraInfo()
        lora.max_lora = m.lora.max_lora
        lora.running = list(m.lora.running)
        lora.waiting = list(m.lora.waiting)
        lora.loaded = list(m.lora.loaded)
        lora.loaded_cpu = list(m.lora.loaded_cpu)
        native.lora = lora
    native.cache_block_size = m.cache_block_size
    native.cache_num_blocks = m.cache_num_blocks
    native.custom = list(m.attributes.items())
    return native


def _as_str(text: Text) -> str:
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text).decode("utf-8")
    raise TypeError(f"text must be str or bytes, not {type(text).__name__}")


def parse_prometheus(text: Text, lenient: bool = False) -> ParseResult:
    """Parses Prometheus text exposition (format 0.0.4, plus a final ``# EOF``).

    Returns a :class:`ParseResult`, a list of :class:`MetricFamily`. Strict parsing raises
    :class:`pyepp.ConfigError` (a ValueError) on the first malformed line, with a message
    starting ``line L, column C:``. With ``lenient=True`` malformed lines are skipped and
    reported in ``skipped`` / ``skipped_lines``. ``bytes`` are decoded as UTF-8.
    """
    families, skipped = lib.parse_prometheus(_as_str(text), bool(lenient))
    return ParseResult(
        [
            MetricFamily(
                name,
                _TYPE_NAMES.get(type_name, type_name),
                help_text,
                [Sample(n, labels, value, None if ts is None else ts / 1000) for n, labels, value, ts in samples],
            )
            for name, type_name, help_text, samples in families
        ],
        skipped,
    )


def _metric_overrides(metrics: Optional[Mapping[str, str]]) -> List[Tuple[str, str]]:
    if metrics is None:
        return []
    if not isinstance(metrics, Mapping):
        raise TypeError("metrics must be a mapping of field to spec, e.g. {'queue': 'my_queue{pool=\"a\"}'}")
    out = []
    for key, spec in metrics.items():
        if not isinstance(key, str) or not isinstance(spec, str):
            raise TypeError("metrics keys and specs must be str")
        out.append((key, spec))
    return out


def _endpoint_metrics(engine: str, native: Any, checks: Any) -> EndpointMetrics:
    lora = None
    if native.lora is not None:
        lora = LoraInfo(native.lora.max_lora, list(native.lora.running), list(native.lora.waiting),
                        list(native.lora.loaded), list(native.lora.loaded_cpu))
    return EndpointMetrics(
        engine=engine,
        waiting_queue_size=native.waiting_queue_size,
        running_requests=native.running_requests,
        kv_cache_usage=native.kv_cache_usage,
        lora=lora,
        cache_block_size=native.cache_block_size,
        cache_num_blocks=native.cache_num_blocks,
        checks=[{"id": c.id, "status": c.status, "message": c.message} for c in checks],
        attributes=dict(native.custom),
    )


def extract_metrics(
    text: Text,
    engine: str = "auto",
    *,
    lenient: bool = False,
    metrics: Optional[Mapping[str, str]] = None,
) -> EndpointMetrics:
    """Reads the Model Server Protocol values from a ``/metrics`` text.

    ``engine`` is ``"auto"`` (detect from the metric names) or a name from
    :func:`builtin_engines`. ``metrics`` overrides single fields of the engine's mapping, e.g.
    ``{"queue": "my_queue{pool=\\"a\\"}"}`` (fields: queue, running, kv, lora, cache-info,
    cache-block-size, cache-num-blocks).

    Raises :class:`pyepp.ConfigError` for text that does not parse or a bad override, and
    :class:`pyepp.NotFoundError` for an unknown engine name or when ``"auto"`` finds no known
    engine's metrics. Validation problems of the values themselves are not errors: they are in
    ``checks`` and the value is None.
    """
    if not isinstance(engine, str):
        raise TypeError("engine must be a str")
    name, native, checks = lib.extract_metrics(_as_str(text), engine, bool(lenient), _metric_overrides(metrics))
    return _endpoint_metrics(name, native, checks)


def builtin_engines() -> List[str]:
    """Names of the built-in engine mappings, in detection order."""
    return list(lib.builtin_engines())
