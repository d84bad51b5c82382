"""Replay: routing quality at cluster scale, in virtual time (``eppctl replay``).

:func:`replay` drives simulated model servers (the cost model of docs/sim.md) with a trace or a
generated workload, routing every request through a real scheduler built from each policy, and
returns the report of docs/routing.md as a dict. Everything runs in integer-microsecond virtual
time: the same inputs and seed give the same report (except ``wall_s``, the real time a policy
took). :func:`replay_text` and :func:`replay_html` render a report.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ._native import lib
from .errors import ConfigError, NotFoundError
from .tables import RegionsReport, ReplayReport

__all__ = ["SharedPrefix", "replay", "replay_text", "replay_html", "replay_regions", "replay_regions_text", "named_policies",
           "gie_workloads"]

PathLike = Union[str, "os.PathLike[str]"]

_GIE_WORKLOADS = (
    "short-questions__many-system-prompts",
    "long-questions__many-system-prompts",
    "short-questions__few-system-prompts__multi-chat",
    "long-questions__few-system-prompts__multi-chat",
)


@dataclasses.dataclass(frozen=True)
class SharedPrefix:
    """inference-perf's shared_prefix workload: ``groups`` system prompts of ``system_len``
    tokens, each with ``prompts_per_group`` questions of ``question_len`` tokens, answers of
    ``output_len`` tokens; with ``multi_turn`` each group is one conversation whose turns
    accumulate; with ``shared_system_prompt`` every group starts with the same system prompt.
    Arrivals: ``rate`` per second, ``arrivals`` ``"poisson"`` or ``"constant"``;
    ``duration_s`` 0 sends every (group, prompt) once, else ``rate * duration_s`` requests.
    ``seed`` defaults to the replay's seed. A field left at None takes libepp's default
    (docs/routing.md).
    """

    groups: Optional[int] = None
    prompts_per_group: Optional[int] = None
    system_len: Optional[int] = None
    question_len: Optional[int] = None
    output_len: Optional[int] = None
    multi_turn: Optional[bool] = None
    shared_system_prompt: Optional[bool] = None
    rate: Optional[float] = None
    arrivals: Optional[str] = None
    duration_s: Optional[float] = None
    seed: Optional[int] = None
    model: Optional[str] = None
    gie: Optional[str] = None  # start from a GIE benchmark configuration (see gie_workloads())

    @classmethod
    def from_gie(cls, name: str, **overrides: Any) -> "SharedPrefix":
        """A GIE prefix-cache benchmark configuration (:func:`gie_workloads`), fields in
        ``overrides`` replacing its values."""
        return cls(gie=name, **overrides)

    def _native(self, default_seed: int) -> Any:
        w = lib.gie_benchmark_workload(self.gie) if self.gie is not None else lib.SharedPrefixWorkload()
        for field in ("groups", "prompts_per_group", "system_len", "question_len", "output_len"):
            value = getattr(self, field)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"shared-prefix: {field} must be an int, got {value!r}")
                setattr(w, field, value)
        for field in ("rate", "duration_s"):
            value = getattr(self, field)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise ConfigError(f"shared-prefix: {field} must be a finite number, got {value!r}")
                setattr(w, field, float(value))
        if self.multi_turn is not None:
            w.multi_turn = bool(self.multi_turn)
        if self.shared_system_prompt is not None:
            w.shared_system_prompt = bool(self.shared_system_prompt)
        if self.arrivals is not None:
            if self.arrivals not in ("poisson", "constant"):
                raise ConfigError(f"shared-prefix: arrivals must be 'poisson' or 'constant', got {self.arrivals!r}")
            w.poisson = self.arrivals == "poisson"
        if self.model is not None:
            w.model = str(self.model)
        w.seed = _uint64(self.seed if self.seed is not None else default_seed, "shared-prefix: seed")
        return w


def named_policies() -> List[str]:
    """The named baseline policies: round-robin, random, least-queue, least-inflight,
    gie-default, sglang-cache-aware."""
    return list(lib.named_replay_policies())


def gie_workloads() -> List[str]:
    """The four GIE prefix-cache benchmark configurations :func:`replay` accepts by name."""
    return list(_GIE_WORKLOADS)


def _uint64(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise ConfigError(f"{what} must be an int in [0, 2**64), got {value!r}")
    return value


def _trace(trace: Any, trace_format: Optional[str], time_scale: float, seed: int, rate: Optional[float] = None,
           arrivals: str = "poisson") -> Any:
    if rate is not None and not (isinstance(trace, (str, os.PathLike)) and os.path.exists(os.fspath(trace))):
        raise ConfigError("rate applies to a trace file (a workload has its own rate)")
    if isinstance(trace, SharedPrefix):
        return lib.generate_shared_prefix(trace._native(seed))
    if isinstance(trace, Mapping):
        fields = {f.name for f in dataclasses.fields(SharedPrefix)}
        unknown = sorted(set(trace) - fields)
        if unknown:
            raise ConfigError(f"unknown workload field(s) {', '.join(map(repr, unknown))} "
                              f"(known: {', '.join(sorted(fields))})")
        return lib.generate_shared_prefix(SharedPrefix(**trace)._native(seed))
    if isinstance(trace, os.PathLike) or isinstance(trace, str):
        path = os.fspath(trace)
        if isinstance(trace, str) and path in _GIE_WORKLOADS and not os.path.exists(path):
            return lib.generate_shared_prefix(SharedPrefix(gie=path)._native(seed))
        if not os.path.exists(path) and os.sep not in path and not path.endswith((".jsonl", ".json")):
            raise NotFoundError(f"trace '{path}' is neither a file nor a GIE workload "
                                f"(known: {', '.join(_GIE_WORKLOADS)})")
        if trace_format is not None and trace_format not in ("mooncake", "openai", "azure", "burstgpt"):
            raise ConfigError(f"trace_format must be 'mooncake', 'openai', 'azure', 'burstgpt' or None, got {trace_format!r}")
        # None: libepp detects the format from the first line, as eppctl replay does.
        if rate is not None:
            if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < math.inf:
                raise ConfigError(f"rate must be a number of requests per second > 0, got {rate!r}")
            if arrivals not in ("poisson", "constant"):
                raise ConfigError(f"arrivals must be 'poisson' or 'constant', got {arrivals!r}")
            return lib.load_replay_trace_at_rate(trace_format or "auto", path, time_scale, float(rate),
                                                 arrivals == "poisson", seed)
        return lib.load_replay_trace(trace_format or "auto", path, time_scale)
    raise TypeError("trace must be a file path, a GIE workload name, a pyepp.SharedPrefix or a dict of its fields, "
                    f"not {type(trace).__name__}")


def _policy(spec: Any, index: int) -> Any:
    name: Optional[str] = None
    if isinstance(spec, tuple):
        if len(spec) != 2 or not isinstance(spec[0], str):
            raise TypeError("a policy pair must be (name, spec)")
        name, spec = spec
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise TypeError(f"a policy must be a name, YAML text or a config file path, not {type(spec).__name__}")
    policy = lib.resolve_replay_policy(spec, index)  # libepp's rule, as eppctl replay --policy
    if name is not None:
        policy.name = name
    return policy


def _policies(policies: Union[str, Sequence[Any]]) -> List[Any]:
    if isinstance(policies, (str, os.PathLike)):
        policies = [policies]
    elif not isinstance(policies, Sequence):
        raise TypeError(f"policies must be a list of policies or one policy, not {type(policies).__name__}")
    out = [_policy(spec, i) for i, spec in enumerate(policies)]
    if not out:
        raise ConfigError("policies: give at least one policy")
    return lib.unique_policy_names(out)


def _sim_params(sim: Optional[Mapping[str, Any]], server_kv_tokens: Optional[int], seed: int) -> Any:
    params = lib.SimParams()
    params.seed = seed
    known = [k for k in dir(params) if not k.startswith("_")]
    for key, value in (sim or {}).items():
        if key not in known:
            raise ConfigError(f"unknown simulator parameter {key!r} (known: {', '.join(sorted(known))})")
        try:
            setattr(params, key, list(value) if key in ("models", "loras") else value)
        except TypeError:
            raise ConfigError(f"simulator parameter {key}: wrong type {type(value).__name__}") from None
    if server_kv_tokens is not None:
        if isinstance(server_kv_tokens, bool) or not isinstance(server_kv_tokens, int) or server_kv_tokens <= 0:
            raise ConfigError(f"server_kv_tokens must be an int > 0, got {server_kv_tokens!r}")
        params.kv_blocks = server_kv_tokens // params.block_size
        if params.kv_blocks < 1:
            raise ConfigError(f"server_kv_tokens: less than one {params.block_size}-token block")
    return params


def _run(trace: Any, policies: Any, servers: int, server_kv_tokens: Optional[int], sim: Optional[Mapping[str, Any]],
         refresh_interval_s: float, seed: int, trace_format: Optional[str], time_scale: float,
         prefill_servers: int = 0, decode_servers: int = 0, kv_link_gbytes_per_s: float = 25.0,
         kv_bytes_per_token: int = 131072, epp_replicas: int = 1, kv_event_delay_s: float = 0.0,
         server_speeds: Optional[Sequence[float]] = None, tenants: Any = None,
         priority_mix: Optional[Mapping[int, float]] = None, slo_ttft_ms: Optional[int] = None,
         slo_tpot_ms: Optional[int] = None, rate: Optional[float] = None, arrivals: str = "poisson",
         shared_state_delay_s: Optional[float] = None) -> Any:
    seed = _uint64(seed, "seed")
    if isinstance(servers, bool) or not isinstance(servers, int) or servers <= 0:
        raise ConfigError(f"servers must be an int > 0, got {servers!r}")
    if isinstance(refresh_interval_s, bool) or not isinstance(refresh_interval_s, (int, float)) or not (
            0 < refresh_interval_s < math.inf):
        raise ConfigError(f"refresh_interval_s must be a number of seconds > 0, got {refresh_interval_s!r}")
    if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or not 0 < time_scale < math.inf:
        raise ConfigError(f"time_scale must be a number > 0, got {time_scale!r}")
    native_policies = _policies(policies)
    options = lib.ReplayOptions()
    options.servers = servers
    options.server = _sim_params(sim, server_kv_tokens, seed)
    options.scrape_interval_us = max(1, round(refresh_interval_s * 1e6))
    options.seed = seed
    for name, v in (("prefill_servers", prefill_servers), ("decode_servers", decode_servers),
                    ("kv_bytes_per_token", kv_bytes_per_token)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ConfigError(f"{name} must be an int >= 0, got {v!r}")
        setattr(options, name, v)
    if isinstance(kv_link_gbytes_per_s, bool) or not isinstance(kv_link_gbytes_per_s, (int, float)) or \
            not 0 < kv_link_gbytes_per_s < math.inf:
        raise ConfigError(f"kv_link_gbytes_per_s must be a number > 0, got {kv_link_gbytes_per_s!r}")
    options.kv_link_gbytes_per_s = float(kv_link_gbytes_per_s)
    if isinstance(epp_replicas, bool) or not isinstance(epp_replicas, int) or not 1 <= epp_replicas <= 64:
        raise ConfigError(f"epp_replicas must be an int in [1, 64], got {epp_replicas!r}")
    options.epp_replicas = epp_replicas
    if isinstance(kv_event_delay_s, bool) or not isinstance(kv_event_delay_s, (int, float)) or \
            not 0 <= kv_event_delay_s < math.inf:
        raise ConfigError(f"kv_event_delay_s must be a number of seconds >= 0, got {kv_event_delay_s!r}")
    options.kv_event_delay_us = round(kv_event_delay_s * 1e6)
    if shared_state_delay_s is not None:
        if isinstance(shared_state_delay_s, bool) or not isinstance(shared_state_delay_s, (int, float)) or \
                not 0 <= shared_state_delay_s < math.inf:
            raise ConfigError(f"shared_state_delay_s must be a number of seconds >= 0, got {shared_state_delay_s!r}")
        options.shared_state = True
        options.shared_state_delay_us = round(shared_state_delay_s * 1e6)
    if server_speeds is not None:
        if isinstance(server_speeds, (str, bytes)) or not isinstance(server_speeds, Sequence) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in server_speeds):
            raise ConfigError(f"server_speeds must be a list of numbers, got {server_speeds!r}")
        count = prefill_servers + decode_servers if prefill_servers + decode_servers > 0 else servers
        options.per_server = lib.mixed_speed_servers(options.server, count, [float(v) for v in server_speeds])
    native_trace = _trace(trace, trace_format, float(time_scale), seed, rate, arrivals)
    tenant_spec, priority_spec = _mix_specs(tenants, priority_mix)
    if tenant_spec or priority_spec:
        lib.mix_tenants(native_trace, tenant_spec, priority_spec, seed)
    for name, v in (("slo_ttft_ms", slo_ttft_ms), ("slo_tpot_ms", slo_tpot_ms)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ConfigError(f"{name} must be an int >= 0 (milliseconds) or None, got {v!r}")
    if slo_ttft_ms is not None or slo_tpot_ms is not None:
        lib.attach_slos(native_trace, -1 if slo_ttft_ms is None else slo_ttft_ms, -1 if slo_tpot_ms is None else slo_tpot_ms)
    return lib.run_replay(native_trace, native_policies, options)


def _mix_specs(tenants: Any, priority_mix: Optional[Mapping[int, float]]) -> Tuple[str, str]:
    """``eppctl replay --tenants/--priority-mix`` texts of replay()'s arguments."""
    tenant_spec = ""
    if tenants is None:
        pass
    elif isinstance(tenants, int) and not isinstance(tenants, bool):
        tenant_spec = str(tenants)
    elif isinstance(tenants, Mapping):
        tenant_spec = ",".join(f"{k}={float(v)!r}" for k, v in tenants.items())
    elif isinstance(tenants, Sequence) and not isinstance(tenants, (str, bytes)):
        tenant_spec = ",".join(str(k) for k in tenants)
    else:
        raise ConfigError(f"tenants must be a count, a list of names or a dict of name: weight, got {tenants!r}")
    if tenant_spec == "" and tenants not in (None,):
        raise ConfigError("tenants: give at least one tenant")
    priority_spec = ""
    if priority_mix is not None:
        if not isinstance(priority_mix, Mapping) or not priority_mix:
            raise ConfigError(f"priority_mix must be a dict of priority: share, got {priority_mix!r}")
        for k, v in priority_mix.items():
            if isinstance(k, bool) or not isinstance(k, int) or isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"priority_mix: {k!r}: {v!r}: expected an int priority and a numeric share")
        priority_spec = ",".join(f"{k}={float(v)!r}" for k, v in priority_mix.items())
    return tenant_spec, priority_spec


def replay(trace: Union[PathLike, SharedPrefix, Mapping[str, Any]], policies: Union[str, Sequence[Any]],
           servers: int = 8, *, server_kv_tokens: Optional[int] = None, sim: Optional[Mapping[str, Any]] = None,
           refresh_interval_s: float = 0.05, seed: int = 0, trace_format: Optional[str] = None,
           time_scale: float = 1.0, prefill_servers: int = 0, decode_servers: int = 0,
           kv_link_gbytes_per_s: float = 25.0, kv_bytes_per_token: int = 131072, epp_replicas: int = 1,
           kv_event_delay_s: float = 0.0, server_speeds: Optional[Sequence[float]] = None, tenants: Any = None,
           priority_mix: Optional[Mapping[int, float]] = None, slo_ttft_ms: Optional[int] = None,
           slo_tpot_ms: Optional[int] = None, rate: Optional[float] = None, arrivals: str = "poisson",
           shared_state_delay_s: Optional[float] = None) -> ReplayReport:
    """Replays ``trace`` once per policy over ``servers`` simulated model servers; returns the
    report (``eppctl replay --output json``) as a dict: ``trace`` (requests, blocks,
    prompt_tokens, duration_s and the two block hit-rate bounds) and ``policies`` (per policy:
    completed, failed, shed, block/token hit rates, TTFT / E2E / queue percentiles, throughput,
    load balance, prediction error rate (None without a prefix producer), per-server figures,
    TTFT samples, the hit rate over time and ``wall_s``). The dict is a :class:`ReplayReport`,
    whose ``rows(table)`` / ``to_pandas(table)`` give it as tables (:mod:`pyepp.plots` draws it).

    ``trace``: a JSONL file (Mooncake lines with ``hash_ids``, or captured OpenAI requests with
    ``timestamp`` / ``arrival_s``; the format is read from the first line unless
    ``trace_format`` says ``"mooncake"``, ``"openai"``, ``"azure"`` or ``"burstgpt"``), a GIE benchmark workload name
    (:func:`gie_workloads`), or a :class:`SharedPrefix` (or a dict of its fields).
    ``time_scale`` multiplies arrival times of files (0.5 = twice as fast).

    ``policies``: a list (or one) of named baselines (:func:`named_policies`),
    EndpointPickerConfig YAML texts (named ``policy<N>``), config file paths (named after their
    stem) or ``(name, spec)`` pairs; repeated names get ``#2``, ``#3``. An unknown name raises
    :class:`pyepp.NotFoundError` listing the named ones. Replays build schedulers from the
    built-in plugins only (no Python plugins).

    Servers: ``sim`` sets :class:`SimParams` fields (``max_running``, ``kv_blocks``,
    ``prefill_tokens_per_s``, ``decode_step_ms``, ...; docs/sim.md), ``server_kv_tokens`` the
    KV-cache capacity in tokens. The scheduler sees metrics scraped every
    ``refresh_interval_s`` (virtual) seconds. ``seed`` drives the workload, tie-breaks and
    random pickers. Runs without the GIL.

    P/D: with ``prefill_servers`` and ``decode_servers`` (both > 0, replacing ``servers``) the pool
    is disaggregated (``eppctl replay --prefill-servers/--decode-servers``): multi-profile policies
    run on it with role labels, the others on as many unlabelled servers; the KV transfer costs
    ``kv_bytes_per_token`` per uncached token over ``kv_link_gbytes_per_s``. Each policy then also
    reports ``disaggregated_pool``, ``disaggregated``, ``kv_transfer_s_mean``, ``server_roles``
    and ``itl_s``.

    ``epp_replicas`` (``eppctl replay --epp-replicas``) spreads requests round robin over that many
    independent EPPs. A policy with a ``precise-prefix-cache-producer`` (``"gie-precise"``) has its
    servers publish KV events, which reach every replica ``kv_event_delay_s`` after the cache
    changed; such policies report ``precise: true``. ``shared_state_delay_s`` (``eppctl replay
    --shared-state --shared-state-delay``) makes the replicas share their prefix updates and
    in-flight counts that long after they happen, as ``eppctl serve --shared-state`` does
    (None: each replica knows only its own picks).

    ``server_speeds`` (``eppctl replay --server-speed``) makes a pool of mixed GPUs: server i runs
    at ``server_speeds[i % len]`` times the prefill rate, its decode steps that much shorter.

    Flow control: a policy whose config has ``featureGates: [flowControl]`` runs llm-d's
    flow-control layer in virtual time (requests wait in the EPP while the pool is saturated).
    ``tenants`` (a count, a list of names or a dict of name: weight) and ``priority_mix`` (a dict
    of priority: share) give every request a fairness id and a priority (``eppctl replay
    --tenants/--priority-mix``). Each policy then reports ``flow_control``, ``flow_wait_s``,
    ``drops`` (by x-llm-d-request-dropped-reason), ``bands`` and ``tenants`` (requests, completed,
    dropped, TTFT and time queued percentiles, served and demanded requests per second) and
    ``jain_fairness`` (None with fewer than two tenants).

    SLOs: ``slo_ttft_ms`` / ``slo_tpot_ms`` give every request without its own (OpenAI trace lines
    may carry ``slo_ttft_ms`` / ``slo_tpot_ms`` or the ``x-llm-d-slo-*`` headers) a TTFT / TPOT SLO,
    sent to the EPP as llm-d's headers; each policy then reports ``slo`` (``requests``,
    ``ttft_attainment``, ``tpot_attainment``, ``attainment``, ``goodput_rps``), None without SLOs.

    ``rate`` (``eppctl replay --trace F --rate QPS``): a trace file's requests arrive at this rate
    in their order, ``arrivals`` ``"poisson"`` (seeded) or ``"constant"``; captured requests
    without timestamps can then be replayed.
    """
    report = _run(trace, policies, servers, server_kv_tokens, sim, refresh_interval_s, seed, trace_format, time_scale,
                  prefill_servers, decode_servers, kv_link_gbytes_per_s, kv_bytes_per_token, epp_replicas,
                  kv_event_delay_s, server_speeds, tenants, priority_mix, slo_ttft_ms, slo_tpot_ms, rate, arrivals,
                  shared_state_delay_s)
    return ReplayReport(json.loads(lib.replay_report_to_json(report, -1)))


def _percentiles(d: Mapping[str, Any]) -> Any:
    p = lib.Percentiles()
    for k in ("p50", "p90", "p99", "mean"):
        setattr(p, k, float(d.get(k, 0.0)))
    return p


def _group_from_dict(d: Mapping[str, Any]) -> Any:
    g = lib.ReplayGroupReport()
    g.name = str(d["name"])
    for k in ("requests", "completed", "dropped"):
        setattr(g, k, int(d[k]))
    g.ttft_s = _percentiles(d["ttft_s"])
    g.wait_s = _percentiles(d["wait_s"])
    g.served_rps = float(d["served_rps"])
    g.demand_rps = float(d["demand_rps"])
    return g


def _report_from_dict(report: Mapping[str, Any]) -> Any:
    """The native report of a dict :func:`replay` returned."""
    try:
        native = lib.ReplayReport()
        t = lib.ReplayTraceInfo()
        for k in ("requests", "blocks", "prompt_tokens"):
            setattr(t, k, int(report["trace"][k]))
        for k in ("duration_s", "upper_bound_block_hit_rate", "pooled_cache_bound_block_hit_rate"):
            setattr(t, k, float(report["trace"][k]))
        if "ttft_bound_s" in report["trace"]:
            t.ttft_bound_s = _percentiles(report["trace"]["ttft_bound_s"])
        native.trace = t
        policies = []
        for p in report["policies"]:
            n = lib.ReplayPolicyReport()
            n.name = str(p["name"])
            for k in ("completed", "failed", "shed"):
                setattr(n, k, int(p[k]))
            for k in ("block_hit_rate", "token_hit_rate", "throughput_rps", "load_max_over_mean", "wall_s"):
                setattr(n, k, float(p[k]))
            per = p.get("prediction_error_rate")
            n.prediction_error_rate = math.nan if per is None else float(per)
            for k in ("ttft_s", "e2e_s", "queue_s"):
                setattr(n, k, _percentiles(p[k]))
            if "itl_s" in p:  # reports written before P/D replay lack these
                n.itl_s = _percentiles(p["itl_s"])
                n.disaggregated_pool = bool(p["disaggregated_pool"])
                n.disaggregated = int(p["disaggregated"])
                n.kv_transfer_s_mean = float(p["kv_transfer_s_mean"])
                n.server_roles = [str(x) for x in p["server_roles"]]
            if "ttft_over_bound" in p:
                n.ttft_over_bound = _percentiles(p["ttft_over_bound"])
            flags = []
            for f in p.get("flags", []):
                flag = lib.ReplayFlag()
                flag.code, flag.message = str(f["code"]), str(f["message"])
                flags.append(flag)
            n.flags = flags
            if "flow_control" in p:  # reports written before flow-control replay lack these
                n.flow_control = bool(p["flow_control"])
                n.flow_wait_s = _percentiles(p["flow_wait_s"])
                n.drops = {str(k): int(v) for k, v in p["drops"].items()}
                n.bands = [_group_from_dict(g) for g in p["bands"]]
                n.tenants = [_group_from_dict(g) for g in p["tenants"]]
                jain = p.get("jain_fairness")
                n.jain_fairness = math.nan if jain is None else float(jain)
            slo = p.get("slo")
            if slo:
                n.slo_requests = int(slo["requests"])
                for k in ("ttft_attainment", "tpot_attainment", "attainment"):
                    setattr(n, "slo_" + k, math.nan if slo[k] is None else float(slo[k]))
                n.goodput_rps = float(slo["goodput_rps"])
            n.requests_per_server = [int(x) for x in p["requests_per_server"]]
            for k in ("kv_usage_mean_per_server", "ttft_samples_s", "hit_rate_timeline"):
                setattr(n, k, [float(x) for x in p[k]])
            policies.append(n)
        native.policies = policies
        return native
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"not a replay report (as pyepp.replay returns it): {type(e).__name__}: {e}") from None


def _report(report_or_args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    if len(report_or_args) == 1 and not kwargs and isinstance(report_or_args[0], Mapping) and \
            "policies" in report_or_args[0] and isinstance(report_or_args[0].get("trace"), Mapping):
        return _report_from_dict(report_or_args[0])
    return _run(*_bind_replay_args(report_or_args, kwargs))


def _bind_replay_args(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[Any, ...]:
    bound = inspect.signature(replay).bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    return (a["trace"], a["policies"], a["servers"], a["server_kv_tokens"], a["sim"], a["refresh_interval_s"], a["seed"],
            a["trace_format"], a["time_scale"], a["prefill_servers"], a["decode_servers"], a["kv_link_gbytes_per_s"],
            a["kv_bytes_per_token"], a["epp_replicas"], a["kv_event_delay_s"], a["server_speeds"], a["tenants"],
            a["priority_mix"], a["slo_ttft_ms"], a["slo_tpot_ms"], a["rate"], a["arrivals"], a["shared_state_delay_s"])


def replay_text(*report_or_args: Any, **kwargs: Any) -> str:
    """The report as ``eppctl replay`` prints it (a table). Give a report :func:`replay`
    returned, or :func:`replay`'s arguments to run one."""
    return lib.replay_report_to_text(_report(report_or_args, kwargs))


def replay_html(*report_or_args: Any, title: str = "pyepp replay", **kwargs: Any) -> str:
    """The report as a self-contained HTML page (``eppctl replay --report``): the results table
    and inline SVG charts (TTFT distribution, block hit rate over time against the bounds,
    requests and KV usage per server), no scripts, opens offline. Give a report :func:`replay`
    returned, or :func:`replay`'s arguments to run one."""
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, not {type(title).__name__}")
    return lib.replay_report_to_html(_report(report_or_args, kwargs), title)


def _regions(regions: Any) -> List[Any]:
    if isinstance(regions, str):
        return list(lib.parse_replay_regions(regions))  # libepp's --regions syntax
    if not isinstance(regions, Sequence):
        raise TypeError(f"regions must be 'NAME:SERVERS[:SHARE[:CAPACITY_RPS]],...' or a list of dicts, "
                        f"not {type(regions).__name__}")
    out = []
    known = ("name", "servers", "share", "capacity_rps")
    for i, r in enumerate(regions):
        if not isinstance(r, Mapping):
            raise TypeError(f"regions[{i}] must be a dict with {', '.join(known)}, not {type(r).__name__}")
        unknown = sorted(set(r) - set(known))
        if unknown:
            raise ConfigError(f"regions[{i}]: unknown key(s) {', '.join(map(repr, unknown))} (known: {', '.join(known)})")
        n = lib.ReplayRegion()
        if not isinstance(r.get("name"), str):
            raise ConfigError(f"regions[{i}].name: expected a string, got {r.get('name')!r}")
        n.name = r["name"]
        servers = r.get("servers", 4)
        if isinstance(servers, bool) or not isinstance(servers, int):
            raise ConfigError(f"regions[{i}].servers: expected an int, got {servers!r}")
        n.servers = servers
        for key, field in (("share", "arrival_share"), ("capacity_rps", "capacity_rps")):
            v = r.get(key, getattr(n, field))
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"regions[{i}].{key}: expected a number, got {v!r}")
            setattr(n, field, float(v))
        out.append(n)
    return out


def _rtt(rtt_ms: Any) -> Dict[Tuple[str, str], float]:
    if isinstance(rtt_ms, str):
        return dict(lib.parse_rtt_matrix(rtt_ms))  # libepp's --rtt syntax
    if not isinstance(rtt_ms, Mapping):
        raise TypeError(f"rtt_ms must be 'A/B=MS,...' or a dict, not {type(rtt_ms).__name__}")
    out: Dict[Tuple[str, str], float] = {}
    for key, ms in rtt_ms.items():
        pair = tuple(key.split("/", 1)) if isinstance(key, str) else key
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise ConfigError(f"rtt_ms key {key!r}: expected 'A/B' or a pair of region names")
        if isinstance(ms, bool) or not isinstance(ms, (int, float)):
            raise ConfigError(f"rtt_ms[{key!r}]: expected a number of milliseconds, got {ms!r}")
        out[(pair[0], pair[1])] = float(ms)
    return out


def _run_regions(trace: Any, policy: Any, regions: Any, rtt_ms: Any, global_region: Optional[str],
                 saturation_queue: float, saturation_kv: float, server_kv_tokens: Optional[int],
                 sim: Optional[Mapping[str, Any]], refresh_interval_s: float, seed: int, trace_format: Optional[str],
                 time_scale: float) -> Any:
    seed = _uint64(seed, "seed")
    if isinstance(refresh_interval_s, bool) or not isinstance(refresh_interval_s, (int, float)) or not (
            0 < refresh_interval_s < math.inf):
        raise ConfigError(f"refresh_interval_s must be a number of seconds > 0, got {refresh_interval_s!r}")
    if isinstance(time_scale, bool) or not isinstance(time_scale, (int, float)) or not 0 < time_scale < math.inf:
        raise ConfigError(f"time_scale must be a number > 0, got {time_scale!r}")
    if isinstance(policy, Sequence) and not isinstance(policy, (str, tuple)):
        raise ConfigError("a multi-region replay compares routing shapes with one local policy: give one policy")
    options = lib.MultiRegionOptions()
    options.regions = _regions(regions)
    options.rtt_ms = _rtt(rtt_ms)
    options.server = _sim_params(sim, server_kv_tokens, seed)
    options.scrape_interval_us = max(1, round(refresh_interval_s * 1e6))
    options.seed = seed
    if global_region is not None:
        if not isinstance(global_region, str):
            raise ConfigError(f"global_region must be a region name, got {global_region!r}")
        options.global_region = global_region
    for name, v in (("saturation_queue", saturation_queue), ("saturation_kv", saturation_kv)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
            raise ConfigError(f"{name} must be a number >= 0, got {v!r}")
        setattr(options, name, float(v))
    native_policy = _policy(policy, 0)
    native_trace = _trace(trace, trace_format, float(time_scale), seed)
    return lib.run_multi_region_replay(native_trace, native_policy, options)


def replay_regions(trace: Union[PathLike, SharedPrefix, Mapping[str, Any]], policy: Any, regions: Any, rtt_ms: Any, *,
                   global_region: Optional[str] = None, saturation_queue: float = 5, saturation_kv: float = 0.8,
                   server_kv_tokens: Optional[int] = None, sim: Optional[Mapping[str, Any]] = None,
                   refresh_interval_s: float = 0.05, seed: int = 0, trace_format: Optional[str] = None,
                   time_scale: float = 1.0) -> RegionsReport:
    """The multi-region replay (``eppctl replay --regions ... --rtt ...``; docs/routing.md,
    "Several regions"): ``trace`` routed three ways with one local ``policy`` over regions of
    simulated servers, returned as the JSON report's dict: ``policy``, ``regions``,
    ``arrivals_from_trace`` and ``modes`` (``global``, ``hierarchical``, ``local``; each with
    completed, shed, failed, ``ttft_s`` / ``e2e_s`` percentiles including network time,
    block_hit_rate, cross_region_share, arrivals_per_region, served_per_region,
    ttft_p90_per_origin_s, load_max_over_mean, wall_s), a :class:`RegionsReport` (``rows()`` /
    ``to_pandas()``).

    ``regions``: ``"NAME:SERVERS[:SHARE[:CAPACITY_RPS]],..."`` or a list of dicts with ``name``,
    ``servers`` (4), ``share`` (1) and ``capacity_rps`` (0: none; the pool's ceiling in the
    region-level EPPs). ``rtt_ms``: ``"A/B=MS,..."`` or a dict keyed ``"A/B"`` or ``(A, B)``, one
    entry for every pair. Requests arrive in the region their trace line names (``"region"``),
    else in one drawn by share. ``global_region`` (default: the first) hosts the global EPP; a
    region counts as saturated when all its servers show ``saturation_queue`` waiting requests or
    ``saturation_kv`` KV-cache use. The other arguments are :func:`replay`'s.
    """
    report = _run_regions(trace, policy, regions, rtt_ms, global_region, saturation_queue, saturation_kv,
                          server_kv_tokens, sim, refresh_interval_s, seed, trace_format, time_scale)
    return RegionsReport(json.loads(lib.multi_region_report_to_json(report, -1)))


def replay_regions_text(*args: Any, **kwargs: Any) -> str:
    """:func:`replay_regions` run with these arguments, as ``eppctl replay --regions`` prints it."""
    bound = inspect.signature(replay_regions).bind(*args, **kwargs)
    bound.apply_defaults()
    return lib.multi_region_report_to_text(_run_regions(*bound.arguments.values()))
