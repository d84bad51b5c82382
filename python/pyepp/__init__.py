"""pyepp: Python bindings of libepp, the Endpoint Picker toolkit for LLM inference gateways.

- :func:`parse_prometheus`: Prometheus text exposition -> metric families, in the shape
  ``prometheus_client`` uses.
- :func:`extract_metrics`: the Model Server Protocol values (queue, running, KV cache, LoRA,
  cache geometry) of a vLLM, SGLang or TensorRT-LLM ``/metrics`` text.
- :func:`check`: ``eppctl check`` (scrape, validate, probe the OpenAI APIs) as a dict.
- :class:`Simulator` / :class:`SimServer`: the model-server simulator over HTTP, and its cost
  model in virtual time.
- :class:`Scheduler`: libepp's scheduler built from an EndpointPickerConfig; ``pick()`` a
  :class:`Request` over :class:`Endpoint` values, ``explain()`` the :class:`PickResult`. Python
  scorers and filters join through a :class:`PluginRegistry`; :func:`plugin_schema` describes a
  plugin type's parameters; :func:`load_endpoints` reads an endpoints file.
- :mod:`pyepp.extproc` / :func:`serve`: the ext_proc protocol (the Endpoint Picker a gateway
  calls): message streams from captures, a transport-free :class:`~pyepp.extproc.Session`, and
  an in-process gRPC server.
- :func:`replay`: routing policies compared over simulated servers in virtual time, on a trace
  or a :class:`SharedPrefix` workload (:func:`replay_html` renders the report);
  :func:`replay_regions` compares a global, a hierarchical and local-only routing over regions.
- Results as tables and plots: replay reports are :class:`ReplayReport` / :class:`RegionsReport`
  dicts with ``rows()`` and ``to_pandas()``; :func:`explain_rows` and :func:`to_pandas` read a
  pick's trace; :mod:`pyepp.plots` draws reports and picks with matplotlib. pandas and
  matplotlib are optional (:class:`MissingDependencyError`, an ``ImportError``, without them).

Errors are :class:`EppError` subclasses (see :mod:`pyepp.errors`).
"""

from ._native import lib as _lib
from . import extproc
from .checks import check
from .errors import ConfigError, EppError, NotFoundError, UnavailableError
from .metrics import (
    EndpointMetrics,
    LoraInfo,
    MetricFamily,
    ParseResult,
    Sample,
    builtin_engines,
    extract_metrics,
    parse_prometheus,
)
from .scheduling import Endpoint, PickResult, PluginRegistry, Request, Scheduler, load_endpoints, plugin_schema
from .extproc import ServeHandle, serve
from .routing import (SharedPrefix, gie_workloads, named_policies, replay, replay_html, replay_regions, replay_regions_text,
                      replay_text)
from .sim import SimServer, Simulator
from .lint import lint, lint_text
from .conformance import conformance, conformance_checks
from .tokenizer import ChatTemplate, Tokenizer
from ._optional import MissingDependencyError
from .tables import RegionsReport, ReplayReport, explain_rows, to_pandas
from . import plots, tables  # plots imports matplotlib only when it draws

__version__: str = _lib.__version__

__all__ = [
    "EppError",
    "ConfigError",
    "NotFoundError",
    "UnavailableError",
    "Sample",
    "MetricFamily",
    "ParseResult",
    "LoraInfo",
    "EndpointMetrics",
    "parse_prometheus",
    "extract_metrics",
    "check",
    "builtin_engines",
    "Simulator",
    "ChatTemplate",
    "lint",
    "lint_text",
    "conformance",
    "conformance_checks",
    "Tokenizer",
    "SimServer",
    "Request",
    "Endpoint",
    "PickResult",
    "Scheduler",
    "PluginRegistry",
    "plugin_schema",
    "load_endpoints",
    "extproc",
    "serve",
    "ServeHandle",
    "replay",
    "replay_text",
    "replay_html",
    "replay_regions",
    "replay_regions_text",
    "SharedPrefix",
    "named_policies",
    "gie_workloads",
    "ReplayReport",
    "RegionsReport",
    "explain_rows",
    "to_pandas",
    "MissingDependencyError",
    "tables",
    "plots",
]
