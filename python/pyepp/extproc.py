"""ext_proc: libepp as an Envoy external processor (the Endpoint Picker protocol), from Python.

A gateway opens one gRPC stream (``/envoy.service.ext_proc.v3.ExternalProcessor/Process``) per
HTTP request and sends serialized ``ProcessingRequest`` messages; the EPP answers with
``ProcessingResponse`` messages (docs/serve.md). This module works on those bytes:

- :func:`requests_from_capture` turns a captured HTTP request (the ``eppctl explain`` envelope)
  into the stream a gateway would send; :func:`response_messages` does the same for a model
  server's answer on the response path; :func:`encode_request` builds one message from its
  protobuf JSON.
- :func:`decode_request` / :func:`decode_response` give a message's protobuf JSON as a dict
  (field names as in the .proto; ``bytes`` fields such as bodies and header ``raw_value`` are
  base64, as protobuf JSON spells them).
- :class:`Session` is one stream's state machine without any transport;
  :func:`serve` runs a gRPC server in this process (:class:`ServeHandle`).
"""

from __future__ import annotations

import base64
import json
import math
import os
import weakref
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._native import lib
from .errors import ConfigError, NotFoundError
from .scheduling import Endpoint, PickResult, Scheduler

__all__ = [
    "requests_from_capture",
    "response_messages",
    "decode_request",
    "decode_response",
    "encode_request",
    "header_value",
    "Session",
    "ServeHandle",
    "serve",
]

Bytes = Union[bytes, bytearray, memoryview]
Headers = Union[Mapping[str, Union[str, Sequence[str]]], Iterable[Tuple[str, str]], None]



def _header_pairs(headers: Headers, what: str) -> List[Tuple[str, str]]:
    if headers is None:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: List[Tuple[str, str]] = []
    for item in items:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise TypeError(f"{what} must be a mapping or (name, value) pairs") from None
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if not isinstance(name, str) or not isinstance(v, str):
                raise TypeError(f"{what}: names and values must be str, got {name!r}: {v!r}")
            out.append((name, v))
    return out


def _capture_text(capture: Any) -> str:
    """The JSON text of a capture given as a dict, JSON text or a file."""
    if isinstance(capture, Mapping):
        return json.dumps(capture, separators=(",", ":"))
    if isinstance(capture, (bytes, bytearray, memoryview)):
        return bytes(capture).decode("utf-8")
    if isinstance(capture, str) and capture.lstrip().startswith("{"):
        return capture
    if isinstance(capture, (str, os.PathLike)):
        try:
            with open(capture, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise NotFoundError(f"cannot read capture '{os.fspath(capture)}': {e.strerror}") from None
    raise TypeError(f"capture must be a dict, JSON text or a file path, not {type(capture).__name__}")


def requests_from_capture(capture: Union[Mapping[str, Any], str, bytes, "os.PathLike[str]"], *, chunk_bytes: int = 0,
                          subset: Union[Sequence[str], str, None] = None, subset_as_string: bool = False,
                          path: Optional[str] = None) -> List[bytes]:
    """The serialized ``ProcessingRequest`` stream a gateway sends for a captured HTTP request.

    ``capture`` is what ``eppctl explain`` reads, as a dict, JSON text or a file path: an
    envelope ``{"path", "headers", "body"}`` (headers a dict of str, or of lists of str for
    repeated headers; body a dict or the body text), or a bare body (with an optional
    top-level ``"path"``). Without a path the headers ``:path``, ``x-original-path`` and
    ``x-forwarded-path`` are read, else libepp's default (``/v1/completions``); ``path``
    overrides all of them.

    The stream: request headers (``:method``, ``:path``, the capture's headers;
    ``end_of_stream`` when the body is empty), then the body in chunks of ``chunk_bytes`` (0:
    one chunk), the last with ``end_of_stream``. ``subset`` (entries ``"ip:port"`` or ``"ip"``)
    is attached to every message as the gateway's subset hint, as a list, or as one
    comma-separated string with ``subset_as_string``. The body is not validated here: a body
    that does not parse gets its 400 from the EPP.
    """
    text = _capture_text(capture)
    if path is not None and not isinstance(path, str):
        raise TypeError(f"path must be a str, not {type(path).__name__}")
    entries: Optional[List[str]] = None
    if subset is not None:
        entries = [subset] if isinstance(subset, str) else list(subset)
        if not all(isinstance(e, str) for e in entries):
            raise TypeError("subset entries must be str")
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 0:
        raise ConfigError(f"chunk_bytes must be an int >= 0, got {chunk_bytes!r}")
    # libepp reads the envelope (CaptureToHttpRequest): the same rules as eppctl explain.
    return lib.requests_from_capture(text, path or "", entries, bool(subset_as_string), chunk_bytes)


def response_messages(status: int, headers: Headers = None, body: Union[str, Bytes] = b"",
                      served_endpoint: Optional[str] = None) -> List[bytes]:
    """The serialized ``ProcessingRequest`` messages of a model server's answer on the response
    path: response headers (``:status`` and ``headers``; ``end_of_stream`` when the body is
    empty, with the served endpoint in the ``envoy.lb`` metadata when given), then the body."""
    if isinstance(status, bool) or not isinstance(status, int):
        raise TypeError(f"status must be an int, not {type(status).__name__}")
    if isinstance(body, str):
        body = body.encode("utf-8")
    elif isinstance(body, (bytearray, memoryview)):
        body = bytes(body)
    elif not isinstance(body, bytes):
        raise TypeError(f"body must be str or bytes, not {type(body).__name__}")
    return lib.build_response_messages(status, _header_pairs(headers, "headers"), body, served_endpoint or "")


def _bytes(message: Any, what: str) -> bytes:
    if isinstance(message, bytes):
        return message
    if isinstance(message, (bytearray, memoryview)):
        return bytes(message)
    raise TypeError(f"{what} must be bytes, not {type(message).__name__}")


def decode_request(message: Bytes) -> Dict[str, Any]:
    """A serialized ``ProcessingRequest`` as its protobuf JSON (a dict). Raises
    :class:`pyepp.ConfigError` when the bytes are not one."""
    return json.loads(lib.processing_request_to_json(_bytes(message, "message")))


def decode_response(message: Bytes) -> Dict[str, Any]:
    """A serialized ``ProcessingResponse`` as its protobuf JSON (a dict), e.g.
    ``{"request_headers": {"response": {"header_mutation": ...}}, "dynamic_metadata": ...}`` or
    ``{"immediate_response": {"status": {"code": "ServiceUnavailable"}, "body": ...}}``."""
    return json.loads(lib.processing_response_to_json(_bytes(message, "message")))


def encode_request(message: Mapping[str, Any]) -> bytes:
    """A ``ProcessingRequest`` from its protobuf JSON (a dict, as :func:`decode_request` returns
    it), serialized. Unknown fields are ignored; a value of the wrong type raises
    :class:`pyepp.ConfigError`."""
    if not isinstance(message, Mapping):
        raise TypeError(f"message must be a dict, not {type(message).__name__}")
    return lib.processing_request_from_json(json.dumps(message))


def header_value(mutation: Mapping[str, Any], name: str) -> Optional[str]:
    """The value a decoded ``header_mutation`` (or ``ImmediateResponse.headers``) sets for
    ``name``, decoded from ``raw_value``; None when it sets none."""
    for h in mutation.get("set_headers", []):
        header = h.get("header", {})
        if header.get("key", "").lower() == name.lower():
            if "raw_value" in header:
                return base64.b64decode(header["raw_value"]).decode("utf-8")
            return header.get("value", "")
    return None


def _native_endpoints(endpoints: Iterable[Endpoint]) -> List[Any]:
    natives = []
    for e in endpoints:
        if not isinstance(e, Endpoint):
            raise TypeError(f"endpoints must be pyepp.Endpoint values, not {type(e).__name__}")
        natives.append(e._native)
    return natives


def _options(max_request_bytes: Optional[int], objective_priorities: Optional[Mapping[str, int]],
             ignore_subset_hint: bool, trace: bool) -> Any:
    options = lib.ExtProcOptions()
    if max_request_bytes is not None:
        if isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int) or max_request_bytes <= 0:
            raise ConfigError(f"max_request_bytes must be an int > 0, got {max_request_bytes!r}")
        options.max_request_bytes = max_request_bytes
    if objective_priorities is not None:
        if not isinstance(objective_priorities, Mapping) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                for k, v in objective_priorities.items()):
            raise TypeError("objective_priorities must map objective names (str) to priorities (int)")
        options.objective_priorities = dict(objective_priorities)
    options.ignore_subset_hint = bool(ignore_subset_hint)
    options.trace = bool(trace)
    return options


def _go_duration(seconds: Any, name: str, allow_zero: bool = False) -> str:
    """Seconds as the Go duration text libepp's settings take; the library checks the range."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
            or seconds < 0 or (seconds == 0 and not allow_zero):
        raise ConfigError(f"{name} must be a finite number of seconds {'>= 0 (0: no limit)' if allow_zero else '> 0'}, "
                          f"got {seconds!r}")
    text = repr(float(seconds))
    return (f"{seconds:.9f}" if "e" in text else text) + "s"


def _c_int(value: Any, name: str) -> int:
    """An int for a C++ int setting; the library checks its range (a value no C++ int holds is
    refused here, naming the keyword)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not -2**31 <= value < 2**31:
        raise ConfigError(f"{name}: {value} is out of range")
    return value


def _int_list(values: Any, name: str) -> List[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of int, not {type(values).__name__}")
    return [_c_int(v, name) for v in values]


def _byte_quantity(value: Any, name: str) -> str:
    """A size setting as libepp takes it: a Kubernetes quantity ("10MiB", "4194304"); "" unset."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{name} must be an int of bytes, a quantity str ('10MiB') or None, not {type(value).__name__}")
    return str(value)


def _scheduler(scheduler: Scheduler) -> Any:
    if not isinstance(scheduler, Scheduler):
        raise TypeError(f"scheduler must be a pyepp.Scheduler, not {type(scheduler).__name__}")
    return scheduler._native


class Session:
    """One ext_proc stream's state machine (libepp's ExtProcSession), without a transport.

    Feed the gateway's messages in order with :meth:`send`; each call returns the responses to
    send back (often none: the headers response waits for the whole body). The request path ends
    with the pick: a headers response carrying ``x-gateway-destination-endpoint`` and the
    ``envoy.lb`` metadata followed by the body chunks, or an ImmediateResponse (400, 413, 429,
    503) after which :attr:`finished` is True. The response path is echoed; its end releases the
    request's load from the scheduler (so does dropping the session).

    ``endpoints`` are :class:`pyepp.Endpoint` values, fresh or as old as their ``metrics_age_s``
    at the pick. Options: ``max_request_bytes`` (larger bodies get 413), ``objective_priorities``
    (header ``x-gateway-inference-objective`` -> priority), ``ignore_subset_hint``, ``trace``
    (keep the explain trace for ``result.explain()``).
    """

    __slots__ = ("_native", "_scheduler")

    def __init__(self, scheduler: Scheduler, endpoints: Iterable[Endpoint], *, max_request_bytes: Optional[int] = None,
                 objective_priorities: Optional[Mapping[str, int]] = None, ignore_subset_hint: bool = False,
                 trace: bool = False) -> None:
        self._scheduler = scheduler
        self._native = lib.ExtProcSession(_scheduler(scheduler), _native_endpoints(endpoints),
                                          _options(max_request_bytes, objective_priorities, ignore_subset_hint, trace))

    def send(self, message: Bytes) -> List[bytes]:
        """Processes one serialized ``ProcessingRequest``; returns the serialized responses.
        Raises :class:`pyepp.ConfigError` for bytes that are not a ProcessingRequest or a
        message out of protocol order (a server would end the stream with that error). Picks
        run without the GIL."""
        return self._native.send(_bytes(message, "message"))

    @property
    def finished(self) -> bool:
        """True once an ImmediateResponse was produced: nothing more will be answered."""
        return self._native.finished

    @property
    def result(self) -> Optional[PickResult]:
        """The decision once the request body ended (a copy, taken now); None before. Its
        ``request`` is None when no request was parsed (a 400, or a request without a body)."""
        outcome = self._native.result
        return None if outcome is None else PickResult(outcome)

    @property
    def served(self) -> str:
        """The endpoint the gateway reported serving the request (response path), or ""."""
        return self._native.served

    def __repr__(self) -> str:
        return f"Session(finished={self.finished}, result={self.result!r})"


def _port(port: Any, what: str, optional: bool = False) -> Optional[int]:
    if optional and port is None:
        return None
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"{what} must be an int in [0, 65535]{' or None' if optional else ''}, got {port!r}")
    return port


def _optional_port(port: Any, what: str) -> int:
    """A port or None; None is libepp's -1 (no such server)."""
    return -1 if port is None else _port(port, what)


def _path(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path (str or os.PathLike), not {type(value).__name__}")
    return os.fspath(value)


class ServeHandle:
    """A running in-process EPP (see :func:`serve`): libepp's ``EppServer``, the runtime ``eppctl
    serve`` runs. Use it as a context manager, or call :meth:`close`; closing is idempotent and
    also happens at interpreter exit.

    ``port`` is the ext_proc port, ``health_port`` the grpc.health.v1 port and ``metrics_port``
    the Prometheus ``/metrics`` port (None without such a server), ``cert_pem`` the server's
    certificate (bytes, for ``grpc.ssl_channel_credentials``) when serving TLS, else None.
    """

    def __init__(self, native: Any, scheduler: Optional[Scheduler]) -> None:
        self._native = native
        self._scheduler = scheduler  # keep_alive: the server schedules with it until closed
        self._closed = False
        # Close at interpreter exit too: gRPC threads must not outlive Python.
        self._finalizer = weakref.finalize(self, native.close, 0.0)

    @property
    def port(self) -> int:
        return self._native.port

    @property
    def health_port(self) -> Optional[int]:
        return self._native.health_port

    @property
    def metrics_port(self) -> Optional[int]:
        return self._native.metrics_port

    @property
    def cert_pem(self) -> Optional[bytes]:
        return self._native.cert_pem or None

    @property
    def leading(self) -> bool:
        """With ``ha_enable_leader_election``: whether this replica holds the Lease now (only the
        leader reports ready). True without leader election."""
        return self._native.leading

    @property
    def scheduler(self) -> Optional[Scheduler]:
        """The Python :class:`Scheduler` given to :func:`serve`; None when the server builds its
        own from a configuration."""
        return self._scheduler

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> Dict[str, Any]:
        """The server's counters: ``streams_total``, ``streams_active``,
        ``requests_in_flight``, ``outcome_200`` / ``_400`` / ``_413`` / ``_429`` / ``_503`` /
        ``_500``, ``served_mismatch``, ``timeouts_request`` / ``timeouts_idle`` (streams ended
        for ``request_timeout_s`` / ``idle_timeout_s``), ``prompt_tokens``, ``completion_tokens``,
        ``cached_tokens`` (from response usage), ``prefix_blocks``, ``prefix_match_blocks``, and
        the pick latency histogram: ``latency_bucket_bounds_us``, ``latency_bucket_counts`` (per
        bucket, one more than the bounds: the last is above every bound), ``latency_count``,
        ``latency_sum_us``. Still readable after :meth:`close`."""
        return self._native.stats()

    def metrics_text(self) -> str:
        """The Prometheus exposition ``/metrics`` serves (also without a metrics server)."""
        return self._native.metrics_text()

    def endpoints(self) -> List[Endpoint]:
        """The pool as the server sees it now (with the metrics last read)."""
        return [Endpoint._wrap(e) for e in self._native.endpoints()]

    def reload_config(self) -> None:
        """Re-reads the configuration file now, as a change on disk does. Raises (and counts)
        when it does not build; the running scheduler then stays."""
        self._native.reload_config()

    def config_reloads(self) -> Dict[str, Any]:
        """``{"ok": int, "failed": int, "last_error": str}`` (``last_error`` "" after a
        success)."""
        return self._native.config_reloads()

    def decisions(self, limit: int = 50, after: int = 0) -> Dict[str, Any]:
        """The decision log (``serve(..., decision_log=N)``), as ``/debug/decisions`` serves it:
        ``{"capacity", "max_per_second", "seen", "kept", "decisions": [...]}``, up to ``limit`` of
        the newest decisions with an id above ``after``, oldest first. Raises :class:`EppError`
        when the log is off."""
        return json.loads(self._native.decisions(int(limit), int(after), 0))

    def decision(self, id: int) -> Optional[Dict[str, Any]]:
        """One logged decision with its ``explain`` trace and ``explain_text``; None when it is
        not (or no longer) in the log."""
        text = self._native.decisions(0, 0, int(id))
        return json.loads(text)["decision"] if text else None

    def describe(self) -> str:
        """The start-up line of ``eppctl serve``: ports, endpoints and where they come from,
        the configuration."""
        return self._native.describe()

    def set_endpoints(self, endpoints: Iterable[Endpoint]) -> None:
        """Replaces the pool of a server started with ``endpoints``; streams whose pick has not
        started yet use the new one. Raises :class:`pyepp.EppError` on a server that reads its
        endpoints itself."""
        self._native.set_endpoints(_native_endpoints(endpoints))

    def set_ready(self, ready: bool) -> None:
        """Sets the health server's readiness (``readiness``, ``inference-extension``, the
        ext_proc service and ""; ``liveness`` always serves). Raises :class:`pyepp.EppError`
        without a health server."""
        self._native.set_ready(bool(ready))

    def close(self, drain_s: float = 0) -> None:
        """Stops accepting streams, lets open ones finish for up to ``drain_s`` seconds, then
        cancels the rest and stops the other servers and the pool. Runs without the GIL."""
        if isinstance(drain_s, bool) or not isinstance(drain_s, (int, float)) or not 0 <= drain_s < math.inf:
            raise ConfigError(f"drain_s must be a finite number of seconds >= 0, got {drain_s!r}")
        self._native.close(float(drain_s))
        self._closed = True

    def __enter__(self) -> "ServeHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return (f"ServeHandle(port={self.port}, health_port={self.health_port}, metrics_port={self.metrics_port}, "
                f"tls={self.cert_pem is not None}, {state})")


def serve(scheduler: Optional[Scheduler] = None, endpoints: Optional[Iterable[Endpoint]] = None, *,
          config: Union[str, "os.PathLike[str]", None] = None, endpoints_file: Union[str, "os.PathLike[str]", None] = None,
          endpoint: Sequence[str] = (), pool_name: Optional[str] = None, pool_namespace: Optional[str] = None,
          pool_group: Optional[str] = None, pool_resync_interval_s: Optional[float] = None, pool_import: Optional[str] = None,
          clusters_file: Union[str, "os.PathLike[str]", None] = None, cluster_label: Optional[str] = None,
          kube_api_server: Optional[str] = None,
          kube_token_file: Union[str, "os.PathLike[str]", None] = None,
          kube_ca_file: Union[str, "os.PathLike[str]", None] = None, kube_insecure_skip_verify: bool = False,
          engine: Optional[str] = None, refresh_interval_s: Optional[float] = None, scrape_timeout_s: Optional[float] = None,
          scrape_gzip: bool = False, staleness_s: Optional[float] = None, detector_staleness_s: Optional[float] = None, watch_config: bool = True,
          metrics_pool_name: Optional[str] = None, seed: int = 0, log_level: str = "warn",
          port: int = 0, host: str = "127.0.0.1", tls: bool = False, health_port: Optional[int] = None,
          metrics_port: Optional[int] = None, max_request_bytes: Optional[int] = None,
          max_buffered_request_bytes: Union[int, str, None] = None, max_streams: Optional[int] = None,
          max_streams_per_connection: Optional[int] = None,
          objective_priorities: Optional[Mapping[str, int]] = None, ignore_subset_hint: bool = False,
          trust_objective_header: bool = True, trust_model_rewrite_header: bool = True,
          emit_endpoint_scores: bool = False, request_timeout_s: Optional[float] = None,
          idle_timeout_s: Optional[float] = None, handshake_timeout_s: Optional[float] = None, decision_log: int = 0,
          decision_log_rate: Optional[int] = None, decision_log_prompts: bool = False, region: str = "",
          zone: str = "", pool_watch: bool = True, endpoint_selector: Optional[str] = None,
          endpoint_target_ports: Sequence[int] = (), model_server_metrics_scheme: Optional[str] = None,
          model_server_metrics_path: Optional[str] = None, model_server_metrics_port: Optional[int] = None,
          model_server_metrics_https_insecure_skip_verify: bool = True,
          total_queued_requests_metric: Optional[str] = None, total_running_requests_metric: Optional[str] = None,
          kv_cache_usage_percentage_metric: Optional[str] = None, lora_info_metric: Optional[str] = None,
          cache_info_metric: Optional[str] = None, health_checking: bool = False,
          grpc_max_recv_msg_size: Union[int, str, None] = None, grpc_max_send_msg_size: Union[int, str, None] = None,
          config_text: Optional[str] = None, ha_enable_leader_election: bool = False,
          leader_election_id: Optional[str] = None, leader_election_namespace: Optional[str] = None,
          leader_election_identity: Optional[str] = None, leader_election_lease_duration_s: Optional[float] = None,
          leader_election_renew_deadline_s: Optional[float] = None,
          leader_election_retry_period_s: Optional[float] = None, watch_objectives: bool = True,
          metrics_endpoint_auth: Optional[bool] = None, shared_state: Optional[str] = None,
          shared_state_password_file: Optional[str] = None, shared_state_ca_file: Optional[str] = None,
          shared_state_key_prefix: Optional[str] = None, shared_state_replica_id: Optional[str] = None,
          shared_state_interval_s: Optional[float] = None,
          shared_state_timeout_s: Optional[float] = None,
          client_ca: Union[str, "os.PathLike[str]", None] = None,
          cert_path: Union[str, "os.PathLike[str]", None] = None) -> ServeHandle:
    """Runs the Endpoint Picker in this process: libepp's ``EppServer``, what ``eppctl serve``
    runs, with its ext_proc server, grpc.health.v1 server and Prometheus ``/metrics``.

    Two ways to give it endpoints and a scheduler:

    - ``serve(scheduler, endpoints)``: a :class:`Scheduler` built in Python (custom Python
      plugins included) over a static pool of :class:`pyepp.Endpoint` values, replaced with
      :meth:`ServeHandle.set_endpoints`; each endpoint's metrics are as old as its
      ``metrics_age_s`` at every pick. The handle keeps the scheduler alive while it serves.
    - ``serve(config=..., endpoints_file=... | endpoint=[...] | pool_name=...)``: the server
      builds its scheduler from an EndpointPickerConfig file (None: GIE's default profile) and
      re-reads it when it changes (``watch_config``); endpoints come from an endpoints file
      (watched), ``ADDR[=METRICS]`` specs as ``--endpoint`` takes them, or the Ready Pods of the
      InferencePool ``pool_name`` (``pool_namespace``, ``pool_group``, ``kube_*``, listed every
      ``pool_resync_interval_s``), or the exporting clusters of the InferencePoolImport
      ``pool_import`` (with the cluster directory ``clusters_file`` and its ``cluster_label``, as
      ``eppctl serve --pool-import --clusters`` takes them). Metrics are read every
      ``refresh_interval_s``; log lines go to stderr from ``log_level`` up.
      ``detector_staleness_s`` is ``eppctl serve``'s explicit ``--metrics-staleness-threshold``.

    Both forms fill the one settings record ``eppctl serve`` fills (libepp's ``ServeArgs`` and
    ``BuildServeConfig``): a keyword left None takes the same default as the matching flag (refresh
    every 50 ms, scrape timeout 100 ms, staleness 200 ms, pool resync 2 s, stream request timeout
    60 s, idle timeout 15 min, handshake 10 s, 50 decisions a second), and limits and errors are the
    library's, named by these keywords.

    ``port`` 0 picks a free port. ``tls=True`` serves TLS with a fresh self-signed certificate
    (CN epp, SANs localhost and 127.0.0.1, a new one at every start) in
    :attr:`ServeHandle.cert_pem`; ``cert_path`` (with ``tls=True``; ``eppctl serve --cert-path``): a
    directory holding ``tls.crt`` and ``tls.key`` (a mounted ``kubernetes.io/tls`` Secret) served
    instead, re-read when they change. ``client_ca`` (with ``tls=True``; ``eppctl serve --client-ca``):
    a PEM file of CA certificates; every connection must then present a client certificate one of
    them signed (the gateway's), or its TLS handshake is refused. The file is re-read when it
    changes (new connections use the new bundle). ``health_port`` and
    ``metrics_port`` (0: a free one; None: no such server) add the health and metrics servers on
    ``host``; readiness is reported at once (:meth:`ServeHandle.set_ready`). Raises
    :class:`pyepp.UnavailableError` when a port cannot be bound, :class:`pyepp.ConfigError` for
    a bad configuration or endpoints. ``emit_endpoint_scores`` is llm-d's ``--emit-endpoint-scores``:
    every candidate's total score in ``envoy.lb`` as ``x-gateway-destination-endpoint-scores``.
    A stream whose request body has not ended ``request_timeout_s`` after it opened, or that
    gets no message for ``idle_timeout_s`` after its pick, is ended with DEADLINE_EXCEEDED and
    its load released (``eppctl serve --stream-request-timeout / --stream-idle-timeout``; 0
    disables a limit). A connection whose TLS / HTTP/2 handshake is not done ``handshake_timeout_s``
    after it was accepted is closed.

    ``decision_log=N`` (the configuration form) keeps the last N decisions with their explain
    trace, at most ``decision_log_rate`` a second, as ``eppctl serve --decision-log``: read them
    with :meth:`ServeHandle.decisions` and :meth:`ServeHandle.decision`, or from
    ``/debug/decisions`` on the metrics port. They hold request metadata, never prompt text
    unless ``decision_log_prompts``.

    ``region`` and ``zone`` (the configuration form) are ``eppctl serve --region / --zone``: where
    the EPP runs, for the locality plugins (docs/multicluster.md).

    The reference EPP's Kubernetes settings (``eppctl serve``'s flags of the same names,
    docs/serve.md), for the configuration form:

    - ``pool_watch`` (default True): list the InferencePool and its Pods once, then watch them;
      False lists them every ``pool_resync_interval_s`` instead. ``watch_objectives`` (default
      True; with ``pool_name`` and ``pool_watch``): also watch the pool's InferenceObjectives and
      InferenceModelRewrites (priorities by objective name, weighted model rewrites).
    - ``endpoint_selector`` / ``endpoint_target_ports``: standalone mode, no InferencePool: the
      Pods of ``pool_namespace`` that the label selector (``"app=vllm,env in (a,b)"``) matches
      are the endpoints, one per target port (1 to 8 ports).
    - ``model_server_metrics_scheme`` (``"http"`` or ``"https"``), ``model_server_metrics_path``
      (``"/metrics"``), ``model_server_metrics_port`` (0: the endpoint's target port) and
      ``model_server_metrics_https_insecure_skip_verify`` (default True): where discovered Pods'
      metrics are read.
    - ``total_queued_requests_metric``, ``total_running_requests_metric``,
      ``kv_cache_usage_percentage_metric``, ``lora_info_metric``, ``cache_info_metric``: metric
      specs (``"name{label=value}"``) overriding that field of every engine's mapping.
    - ``config_text``: the EndpointPickerConfig as YAML text instead of a ``config`` file.
    - ``ha_enable_leader_election``: of the replicas sharing a coordination.k8s.io Lease, only
      the leader reports ready (:attr:`ServeHandle.leading`); the others keep their pool and
      scheduler warm. The Lease is ``leader_election_id`` (default ``epp-NS-POOL.llm-d.ai``) in
      ``leader_election_namespace`` (default the pool's); this replica is
      ``leader_election_identity`` (default ``$POD_NAME``, else the host name). Timing:
      ``leader_election_lease_duration_s`` (15), ``leader_election_renew_deadline_s`` (10),
      ``leader_election_retry_period_s`` (2). Closing the handle gives a held Lease up first.
    - ``shared_state``: a Redis or Valkey URL (``redis://HOST:PORT``, ``rediss://``,
      ``unix:///PATH``; ``eppctl serve --shared-state``): this replica shares its approximate
      prefix updates and in-flight counts with the other replicas using the same Redis and key
      prefix (``shared_state_key_prefix``, default ``epp:POOL:``), as ``shared_state_replica_id``;
      the password from ``shared_state_password_file`` (else ``$EPP_SHARED_STATE_PASSWORD``, else
      the URL), ``rediss://`` verified against ``shared_state_ca_file`` (else the system's CAs);
      one round trip every ``shared_state_interval_s`` (0.05), each bounded by
      ``shared_state_timeout_s`` (0.25). Picks never wait on Redis; ``/metrics`` has
      ``epp_shared_state_*``. With a Python-built scheduler only the in-flight counts are shared.

    ``metrics_endpoint_auth``: ``/metrics`` and ``/debug/decisions`` answer only a bearer token
    the API server authenticates and allows (TokenReview, SubjectAccessReview); None (the default)
    turns it on whenever the server uses a Kubernetes API (discovery, leader election), False
    serves them to anyone who reaches the port.

    ``trust_objective_header`` / ``trust_model_rewrite_header`` (default True, as the reference):
    False ignores the request's own objective headers (priority 0) / model-rewrite headers (only the
    cluster's InferenceModelRewrites rewrite), counted in ``epp_untrusted_headers_ignored_total``.

    Memory budgets of the ext_proc port: ``max_buffered_request_bytes`` (what all streams may
    hold buffered, bytes or a quantity, default ``"192Mi"``, 0: no limit; a body past it is
    answered 429), ``max_streams`` (open streams, default 10000, 0: no limit; past it 429) and
    ``max_streams_per_connection`` (HTTP/2 streams per gateway connection, 0: gRPC's default).

    For both forms: ``health_checking`` also answers grpc.health.v1 on the ext_proc port;
    ``grpc_max_recv_msg_size`` / ``grpc_max_send_msg_size`` bound the gRPC messages of the
    ext_proc port, in bytes (an int) or as a Kubernetes quantity (``"10MiB"``; default: the larger
    of 4 MiB and ``max_request_bytes`` + 1 MiB).
    """
    if not isinstance(host, str) or not host:
        raise TypeError("host must be a non-empty str")
    # One settings record for both modes: libepp's BuildServeConfig checks and completes it, as it
    # does for eppctl serve's flags (same defaults, limits and errors, named by these keywords).
    args = lib.ServeArgs()
    args.listen_address = host
    args.grpc_port = _port(port, "port")
    args.grpc_health_port = _optional_port(health_port, "health_port")
    args.metrics_port = _optional_port(metrics_port, "metrics_port")
    args.secure_serving = bool(tls)
    args.client_ca = _path(client_ca, "client_ca")
    args.cert_path = _path(cert_path, "cert_path")
    if max_request_bytes is not None:
        if isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int) or max_request_bytes <= 0:
            raise ConfigError(f"max_request_bytes must be an int > 0, got {max_request_bytes!r}")
        args.max_request_bytes = max_request_bytes
    if max_buffered_request_bytes is not None:
        args.max_buffered_request_bytes = _byte_quantity(max_buffered_request_bytes, "max_buffered_request_bytes")
    for name, value in (("max_streams", max_streams), ("max_streams_per_connection", max_streams_per_connection)):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be an int >= 0 (0: no limit), got {value!r}")
            setattr(args, name, value)
    if objective_priorities is not None:
        if not isinstance(objective_priorities, Mapping) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
                for k, v in objective_priorities.items()):
            raise TypeError("objective_priorities must map objective names (str) to priorities (int)")
        args.objective_flags = [f"{k}={v}" for k, v in objective_priorities.items()]
    args.disable_endpoint_subset_filter = bool(ignore_subset_hint)
    args.trust_objective_header = bool(trust_objective_header)
    args.trust_model_rewrite_header = bool(trust_model_rewrite_header)
    args.emit_endpoint_scores = bool(emit_endpoint_scores)
    args.health_checking = bool(health_checking)
    args.grpc_max_recv_msg_size = _byte_quantity(grpc_max_recv_msg_size, "grpc_max_recv_msg_size")
    args.grpc_max_send_msg_size = _byte_quantity(grpc_max_send_msg_size, "grpc_max_send_msg_size")
    if request_timeout_s is not None:
        args.stream_request_timeout = _go_duration(request_timeout_s, "request_timeout_s", allow_zero=True)
    if idle_timeout_s is not None:
        args.stream_idle_timeout = _go_duration(idle_timeout_s, "idle_timeout_s", allow_zero=True)
    if handshake_timeout_s is not None:
        args.handshake_timeout = _go_duration(handshake_timeout_s, "handshake_timeout_s")
    for name, v in (("decision_log", decision_log), ("decision_log_rate", decision_log_rate), ("seed", seed)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    args.decision_log = decision_log
    if decision_log_rate is not None:
        args.decision_log_rate = decision_log_rate
    args.decision_log_prompts = bool(decision_log_prompts)
    runtime = (config is not None or config_text is not None or endpoints_file is not None or bool(endpoint)
               or pool_name is not None or pool_import is not None or endpoint_selector is not None)
    if scheduler is not None or endpoints is not None:
        if scheduler is None or endpoints is None:
            raise TypeError("serve(scheduler, endpoints) needs both")
        if runtime:
            raise TypeError("give serve(scheduler, endpoints), or config / config_text / endpoints_file / endpoint / "
                            "pool_name / pool_import / endpoint_selector, not both")
        native = lib.ExtProcServer(_scheduler(scheduler), _native_endpoints(endpoints), args)
        return ServeHandle(native, scheduler)
    if not runtime:
        raise TypeError("serve() needs endpoints: serve(scheduler, endpoints), endpoints_file=, endpoint=, pool_name=, "
                        "pool_import= or endpoint_selector=")
    if isinstance(endpoint, str) or not all(isinstance(e, str) for e in endpoint):
        raise TypeError("endpoint must be a sequence of 'ADDR[=METRICS]' strings")
    args.config_file = _path(config, "config")
    if config_text is not None:
        if not isinstance(config_text, str):
            raise TypeError(f"config_text must be a str or None, not {type(config_text).__name__}")
        args.config_text = config_text
    args.watch_config = bool(watch_config)
    args.endpoints_file = _path(endpoints_file, "endpoints_file")
    args.endpoint_flags = list(endpoint)
    for name, v in (("pool_name", pool_name), ("pool_namespace", pool_namespace), ("pool_group", pool_group),
                    ("pool_import", pool_import), ("kube_api_server", kube_api_server)):
        if v is not None and not isinstance(v, str):
            raise TypeError(f"{name} must be a str or None, not {type(v).__name__}")
    metric_specs = (("total_queued_requests_metric", total_queued_requests_metric),
                    ("total_running_requests_metric", total_running_requests_metric),
                    ("kv_cache_usage_percentage_metric", kv_cache_usage_percentage_metric),
                    ("lora_info_metric", lora_info_metric), ("cache_info_metric", cache_info_metric))
    for name, v in (("engine", engine), ("metrics_pool_name", metrics_pool_name), ("cluster_label", cluster_label),
                    ("region", region), ("zone", zone), ("endpoint_selector", endpoint_selector),
                    ("leader_election_id", leader_election_id),
                    ("leader_election_namespace", leader_election_namespace),
                    ("leader_election_identity", leader_election_identity),
                    ("model_server_metrics_scheme", model_server_metrics_scheme),
                    ("model_server_metrics_path", model_server_metrics_path)) + metric_specs:
        if v is not None and not isinstance(v, str):
            raise TypeError(f"{name} must be a str or None, not {type(v).__name__}")
    args.pool_name = pool_name
    args.pool_namespace = pool_namespace or ""
    if pool_group is not None:
        args.pool_group = pool_group
    if pool_resync_interval_s is not None:
        args.pool_resync_interval = _go_duration(pool_resync_interval_s, "pool_resync_interval_s")
    args.pool_watch = bool(pool_watch)
    args.endpoint_selector = endpoint_selector or ""
    args.endpoint_target_ports = _int_list(endpoint_target_ports, "endpoint_target_ports")
    args.pool_import = pool_import or ""
    args.clusters_file = _path(clusters_file, "clusters_file")
    if cluster_label is not None:
        args.cluster_label = cluster_label
    args.kube_api_server = kube_api_server or ""
    args.kube_token_file = _path(kube_token_file, "kube_token_file")
    args.kube_ca_file = _path(kube_ca_file, "kube_ca_file")
    args.kube_insecure_skip_verify = bool(kube_insecure_skip_verify)
    if engine is not None:
        args.engine = engine
    if refresh_interval_s is not None:
        args.refresh_metrics_interval = _go_duration(refresh_interval_s, "refresh_interval_s")
    if scrape_timeout_s is not None:
        args.scrape_timeout = _go_duration(scrape_timeout_s, "scrape_timeout_s")
    args.scrape_gzip = bool(scrape_gzip)
    if staleness_s is not None:
        args.metrics_staleness_threshold = _go_duration(staleness_s, "staleness_s")
    if detector_staleness_s is not None:
        args.detector_staleness = _go_duration(detector_staleness_s, "detector_staleness_s")
    args.metrics_pool_name = metrics_pool_name or ""
    if model_server_metrics_scheme is not None:
        args.model_server_metrics_scheme = model_server_metrics_scheme
    if model_server_metrics_path is not None:
        args.model_server_metrics_path = model_server_metrics_path
    if model_server_metrics_port is not None:
        args.model_server_metrics_port = _c_int(model_server_metrics_port, "model_server_metrics_port")
    args.model_server_metrics_https_insecure_skip_verify = bool(model_server_metrics_https_insecure_skip_verify)
    for name, v in metric_specs:
        setattr(args, name, v or "")
    args.watch_objectives = bool(watch_objectives)
    if metrics_endpoint_auth is not None:
        args.metrics_endpoint_auth = bool(metrics_endpoint_auth)
    for name, v in (("shared_state", shared_state), ("shared_state_password_file", shared_state_password_file),
                    ("shared_state_ca_file", shared_state_ca_file), ("shared_state_key_prefix", shared_state_key_prefix),
                    ("shared_state_replica_id", shared_state_replica_id)):
        if v is not None:
            setattr(args, name, os.fspath(v) if name.endswith("_file") else v)
    for name, v in (("shared_state_interval", shared_state_interval_s), ("shared_state_timeout", shared_state_timeout_s)):
        if v is not None:
            setattr(args, name, _go_duration(v, name + "_s"))
    args.ha_enable_leader_election = bool(ha_enable_leader_election)
    args.leader_election_id = leader_election_id or ""
    args.leader_election_namespace = leader_election_namespace or ""
    args.leader_election_identity = leader_election_identity or ""
    for name, v in (("leader_election_lease_duration", leader_election_lease_duration_s),
                    ("leader_election_renew_deadline", leader_election_renew_deadline_s),
                    ("leader_election_retry_period", leader_election_retry_period_s)):
        if v is not None:
            setattr(args, name, _go_duration(v, name + "_s"))
    if seed < 0:
        raise ConfigError(f"seed must be an int >= 0, got {seed!r}")
    args.seed = seed
    args.region = region
    args.zone = zone
    if not isinstance(log_level, str):
        raise TypeError(f"log_level must be a str, not {type(log_level).__name__}")
    native = lib.ExtProcServer.start_runtime(args, log_level)
    return ServeHandle(native, None)
