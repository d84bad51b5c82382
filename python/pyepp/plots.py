"""Plots of pyepp results with matplotlib, each returning a ``matplotlib.figure.Figure``.

matplotlib is optional and imported on the first call (:class:`~pyepp.MissingDependencyError`,
an ``ImportError``, without it). When nothing chose a backend (no ``MPLBACKEND``, pyplot not
yet imported) and there is no display, the non-interactive Agg backend is used, so the same code
runs in a notebook (inline figures), a script (``fig.savefig``) and a headless CI job.

Replay reports (:func:`pyepp.replay`, or ``eppctl replay --output json`` loaded):

- :func:`ttft_cdf`: the TTFT distribution of each policy (from ``ttft_samples_s``);
- :func:`hit_rate_over_time`: the prefix-cache block hit rate per arrival-time bucket
  (``hit_rate_timeline``) against the trace's bounds;
- :func:`load_per_server`: requests and mean KV-cache usage per server;
- :func:`replay_overview`: the three on one figure.

Picks: :func:`pick_scores` draws each endpoint's weighted scorer contributions from a
:class:`~pyepp.PickResult`'s explain trace.

Each but :func:`replay_overview` takes ``ax=`` to draw into existing axes (the figure of ``ax``
is returned), and a policy keeps its color (``C0``, ``C1``, ... by its place in the report) on
every plot. The figures are pyplot figures: close them (``matplotlib.pyplot.close(fig)``) when
making many outside a notebook.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ._optional import require
from .tables import explain_rows

__all__ = ["ttft_cdf", "hit_rate_over_time", "load_per_server", "replay_overview", "pick_scores"]


def _has_display() -> bool:
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _pyplot(what: str) -> Any:
    matplotlib = require("matplotlib", f"pyepp.plots.{what}()")
    if "matplotlib.pyplot" not in sys.modules and not os.environ.get("MPLBACKEND") and not _has_display():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _axes(what: str, ax: Any, ncols: int = 1, size: Tuple[float, float] = (6.4, 4.8)) -> Tuple[Any, List[Any]]:
    if ax is not None:
        axes = [ax] if hasattr(ax, "figure") else list(ax)  # one axes, or a list / array of them
        if len(axes) != ncols:
            raise ValueError(f"{what}: give {ncols} axes, got {len(axes)}")
        return axes[0].figure, axes
    plt = _pyplot(what)
    fig, made = plt.subplots(1, ncols, figsize=(size[0] * ncols, size[1]), squeeze=False)
    return fig, list(made[0])


def _legend_below(a: Any, entries: int, made: bool) -> None:
    """The legend under the axes' x label, in rows of three, clear of the data; ``made``: this
    call created the figure, so it may lay it out."""
    a.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(3, max(1, entries)), fontsize="small",
             frameon=False)
    if made:
        a.figure.tight_layout()


def _selected(report: Mapping[str, Any], policies: Optional[Sequence[str]],
              what: str) -> List[Tuple[str, Mapping[str, Any]]]:
    """(color, policy dict) of the chosen policies of a replay report."""
    if not isinstance(report, Mapping) or not isinstance(report.get("policies"), list):
        raise TypeError(f"{what}: expected a replay report (pyepp.replay's dict), not {type(report).__name__}")
    all_policies = report["policies"]
    names = [p["name"] for p in all_policies]
    if policies is None:
        chosen = names
    else:
        if isinstance(policies, str):
            policies = [policies]
        unknown = [n for n in policies if n not in names]
        if unknown:
            raise ValueError(f"{what}: no policy {', '.join(map(repr, unknown))} in the report "
                             f"(it has: {', '.join(names)})")
        chosen = list(policies)
    return [(f"C{names.index(n) % 10}", all_policies[names.index(n)]) for n in chosen]


def _named_series(data: Any, key: str, policies: Optional[Sequence[str]],
                  what: str) -> List[Tuple[str, str, List[float]]]:
    """(name, color, values) from a report's policies, or from a dict name -> values."""
    if isinstance(data, Mapping) and "policies" in data:
        return [(p["name"], color, [float(v) for v in p.get(key, [])]) for color, p in _selected(data, policies, what)]
    if isinstance(data, Mapping):
        names = list(data)
        chosen = names if policies is None else [policies] if isinstance(policies, str) else list(policies)
        missing = [n for n in chosen if n not in data]
        if missing:
            raise ValueError(f"{what}: no series {', '.join(map(repr, missing))} (have: {', '.join(map(str, names))})")
        return [(str(n), f"C{names.index(n) % 10}", [float(v) for v in data[n]]) for n in chosen]
    raise TypeError(f"{what}: expected a replay report or a dict of name -> values, not {type(data).__name__}")


def ttft_cdf(report: Any, *, ax: Any = None, policies: Optional[Sequence[str]] = None, log_x: bool = True,
             title: Optional[str] = "Time to first token") -> Any:
    """The empirical CDF of time to first token, one step line per policy.

    ``report``: a replay report (``ttft_samples_s``: sorted, at most 2,000 evenly spaced samples,
    so the curve is exact up to that resolution) or a dict name -> TTFT samples in seconds (e.g.
    measured in a live loop). ``log_x`` uses a log time axis when every sample is > 0."""
    fig, (a,) = _axes("ttft_cdf", ax)
    series = _named_series(report, "ttft_samples_s", policies, "ttft_cdf")
    positive = True
    for name, color, samples in series:
        samples = sorted(samples)
        if not samples:
            continue
        positive = positive and samples[0] > 0
        n = len(samples)
        a.step([samples[0]] + samples, [0.0] + [(i + 1) / n for i in range(n)], where="post", color=color,
               label=name)
    if log_x and positive and any(s for _, _, s in series):
        a.set_xscale("log")
    a.set_xlabel("time to first token (s)")
    a.set_ylabel("fraction of requests")
    a.set_ylim(0, 1.02)
    a.grid(True, alpha=0.3)
    if title:
        a.set_title(title)
    if series:
        _legend_below(a, len(series), ax is None)
    return fig


def hit_rate_over_time(report: Mapping[str, Any], *, ax: Any = None, policies: Optional[Sequence[str]] = None,
                       bounds: bool = True, title: Optional[str] = "Prefix-cache hits over time") -> Any:
    """Block hit rate per arrival-time bucket (``hit_rate_timeline``), one line per policy,
    plotted at each bucket's middle (seconds since the first arrival). ``bounds`` adds the
    trace's upper bound (every block cached everywhere) and pooled-cache bound as dashed lines.
    A bucket in which no request arrived reads 0."""
    fig, (a,) = _axes("hit_rate_over_time", ax)
    duration = float(report.get("trace", {}).get("duration_s", 0.0)) if isinstance(report, Mapping) else 0.0
    for color, p in _selected(report, policies, "hit_rate_over_time"):
        timeline = p.get("hit_rate_timeline", [])
        n = len(timeline)
        if n:
            a.plot([duration * (b + 0.5) / n for b in range(n)], timeline, color=color, marker=".", label=p["name"])
    if bounds:
        trace = report.get("trace", {})
        for key, label, style in (("upper_bound_block_hit_rate", "upper bound", "--"),
                                  ("pooled_cache_bound_block_hit_rate", "pooled-cache bound", ":")):
            if key in trace:
                a.axhline(float(trace[key]), color="grey", linestyle=style, label=f"{label} {float(trace[key]):.0%}")
    a.set_xlabel("arrival time (s since the first request)")
    a.set_ylabel("block hit rate")
    a.set_ylim(0, 1.02)
    a.grid(True, alpha=0.3)
    if title:
        a.set_title(title)
    _legend_below(a, len(a.get_legend_handles_labels()[0]), ax is None)
    return fig


def _bars(a: Any, groups: List[Tuple[str, str, List[float]]], names: Optional[Sequence[str]]) -> None:
    width = 0.8 / max(1, len(groups))
    for k, (name, color, values) in enumerate(groups):
        a.bar([i - 0.4 + width * (k + 0.5) for i in range(len(values))], values, width=width, color=color, label=name)
    servers = max((len(v) for _, _, v in groups), default=0)
    if names is not None and len(names) != servers:
        raise ValueError(f"load_per_server: {len(names)} server names for {servers} servers")
    a.set_xticks(list(range(servers)))
    a.set_xticklabels([str(n) for n in names] if names is not None else [str(i) for i in range(servers)])
    a.set_xlabel("server")


def load_per_server(report: Any, *, ax: Any = None, policies: Optional[Sequence[str]] = None,
                    kv_usage: bool = True, servers: Optional[Sequence[str]] = None,
                    title: Optional[str] = "Load per server") -> Any:
    """Requests per server as grouped bars (one bar per policy), with a dashed line at an even
    share (one per policy when their totals differ), and with ``kv_usage`` a second panel of the
    mean KV-cache usage per server (over the scheduler's scrapes). ``report``: a replay report,
    or a dict name -> requests per server (then only the requests panel). ``servers`` names the servers on the x axis (default: their
    index). ``ax``: one axes, or two with ``kv_usage``."""
    is_report = isinstance(report, Mapping) and "policies" in report
    kv_usage = kv_usage and is_report
    fig, axes = _axes("load_per_server", ax, 2 if kv_usage else 1)
    requests = _named_series(report, "requests_per_server", policies, "load_per_server")
    _bars(axes[0], requests, servers)
    shares = {name: (color, sum(values) / len(values)) for name, color, values in requests if values}
    if len({share for _, share in shares.values()}) == 1:  # the usual case: every policy routed every request
        axes[0].axhline(next(iter(shares.values()))[1], color="grey", linestyle="--", linewidth=1)
    else:
        for color, share in shares.values():
            axes[0].axhline(share, color=color, linestyle="--", linewidth=1)
    highest = max((max(v) for _, _, v in requests if v), default=0)
    axes[0].set_ylim(0, 1.35 * highest if highest > 0 else 1)  # room for the legend above the bars
    axes[0].set_ylabel("requests (dashed: an even share)")
    axes[0].set_title(title or "")
    axes[0].legend(loc="upper center", ncol=min(3, max(1, len(requests))), fontsize="small")
    if kv_usage:
        kv = _named_series(report, "kv_usage_mean_per_server", policies, "load_per_server")
        _bars(axes[1], kv, servers)
        axes[1].set_ylabel("mean KV-cache usage")
        axes[1].set_ylim(0, 1.0)
        axes[1].set_title("KV-cache usage per server")
    return fig


def replay_overview(report: Mapping[str, Any], *, policies: Optional[Sequence[str]] = None,
                    title: Optional[str] = None) -> Any:
    """One figure with :func:`ttft_cdf`, :func:`hit_rate_over_time` and :func:`load_per_server`
    (requests and KV usage) of a replay report: four panels, 2 x 2."""
    plt = _pyplot("replay_overview")
    fig, grid = plt.subplots(2, 2, figsize=(12.8, 9.6))
    ttft_cdf(report, ax=grid[0][0], policies=policies)
    hit_rate_over_time(report, ax=grid[0][1], policies=policies)
    load_per_server(report, ax=[grid[1][0], grid[1][1]], policies=policies, title="Requests per server")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def pick_scores(result: Any, *, ax: Any = None, profile: Optional[str] = None,
                title: Optional[str] = None) -> Any:
    """Why a pick went where it went: for each endpoint that passed the filters, its weighted
    scorer contributions stacked into its total score (one horizontal bar per endpoint, highest
    total on top; the picked endpoint is marked with ``*``). ``result``: a
    :class:`~pyepp.PickResult` picked with ``trace=True`` (the default) or its ``explain()``
    dict; ``profile``: which scheduling profile (default: the first that scored)."""
    rows = explain_rows(result)
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    if not profiles:
        raise ValueError("pick_scores: the pick has no score trace (picked with trace=False, or no endpoint passed "
                         "the filters)")
    if profile is None:
        profile = profiles[0]
    elif profile not in profiles:
        raise ValueError(f"pick_scores: no scores for profile {profile!r} (have: {', '.join(profiles)})")
    rows = [r for r in rows if r["profile"] == profile]
    endpoints = list(dict.fromkeys(r["endpoint"] for r in rows))  # the trace sorts by total, highest first
    scorers = list(dict.fromkeys(r["scorer"] for r in rows))
    weighted: Dict[Tuple[str, str], float] = {(r["endpoint"], r["scorer"]): float(r["weighted"]) for r in rows}
    picked = {r["endpoint"] for r in rows if r["picked"]}
    fig, (a,) = _axes("pick_scores", ax, size=(7.0, 0.5 * len(endpoints) + 2.0))
    y = list(range(len(endpoints)))[::-1]
    left = [0.0] * len(endpoints)
    for k, scorer in enumerate(scorers):
        widths = [weighted.get((e, scorer), 0.0) for e in endpoints]
        a.barh(y, widths, left=left, color=f"C{k % 10}", label=scorer)
        left = [l + w for l, w in zip(left, widths)]
    a.set_xlim(0, 1.05 * max(left) if max(left, default=0) > 0 else 1)
    a.set_yticks(y)
    a.set_yticklabels([("* " if e in picked else "") + e for e in endpoints])
    a.set_xlabel("weighted score (stacked by scorer)")
    a.set_title(title if title is not None else f"profile {profile}: * picked")
    _legend_below(a, len(scorers), ax is None)
    return fig
