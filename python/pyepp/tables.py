"""Results as tables: rows of plain dicts, and pandas DataFrames where pandas is installed.

:func:`pyepp.replay` returns a :class:`ReplayReport` and :func:`pyepp.replay_regions` a
:class:`RegionsReport`: the same dicts as before (``eppctl replay --output json``), with
``rows(table)`` and ``to_pandas(table)``. :func:`explain_rows` turns a pick's explain trace into
rows (one per profile, endpoint and scorer, or per filter decision). :func:`to_pandas` takes any
of these. pandas is optional: ``rows()`` never needs it, and ``to_pandas()`` without it raises
:class:`~pyepp.MissingDependencyError` (an ``ImportError``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ._optional import require

__all__ = ["ReplayReport", "RegionsReport", "explain_rows", "to_pandas"]

Row = Dict[str, Any]


def _flatten(d: Mapping[str, Any], prefix: str = "") -> Row:
    """Scalars as they are and nested dicts with dotted keys (``ttft_s.p50``, as
    ``pandas.json_normalize`` names them); lists are left to their own tables."""
    out: Row = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        elif not isinstance(v, (list, tuple)):
            out[key] = v
    return out


def _frame(rows: List[Row], columns: Optional[Sequence[str]], what: str) -> Any:
    pd = require("pandas", what)
    if columns is None:
        seen: Dict[str, None] = {}
        for r in rows:
            seen.update(dict.fromkeys(r))
        columns = list(seen)
    return pd.DataFrame.from_records(rows, columns=list(columns))


class _Tables(dict):  # type: ignore[type-arg]
    """A report dict with named row tables."""

    _TABLES: Dict[str, Optional[Sequence[str]]] = {}  # table -> its columns (None: the rows' keys)
    _DEFAULT = ""

    @classmethod
    def tables(cls) -> List[str]:
        """The names ``rows()`` and ``to_pandas()`` accept, the default first."""
        return list(cls._TABLES)

    def _check(self, table: Optional[str]) -> str:
        table = self._DEFAULT if table is None else table
        if table not in self._TABLES:
            raise ValueError(f"unknown table {table!r} (known: {', '.join(self._TABLES)})")
        return table

    def rows(self, table: Optional[str] = None) -> List[Row]:
        """The report as a list of dicts, one per row of ``table`` (see :meth:`tables`)."""
        return getattr(self, "_rows_" + self._check(table))()

    def to_pandas(self, table: Optional[str] = None) -> Any:
        """``rows(table)`` as a ``pandas.DataFrame``; :class:`~pyepp.MissingDependencyError`
        without pandas."""
        table = self._check(table)
        return _frame(self.rows(table), self._TABLES[table], f"{type(self).__name__}.to_pandas()")


class ReplayReport(_Tables):
    """What :func:`pyepp.replay` returns: the ``eppctl replay --output json`` dict (``trace``,
    ``policies``), plus tables of it:

    - ``"policies"`` (default): one row per policy, its scalar fields, nested ones dotted
      (``ttft_s.p50``, ``slo.attainment``, ``drops.<reason>``);
    - ``"servers"``: per policy and server: ``requests``, ``kv_usage_mean``, ``role``;
    - ``"ttft"``: per policy, the TTFT samples (sorted, at most 2,000 evenly spaced) with their
      ``quantile``, the empirical CDF;
    - ``"hit_rate"``: per policy and arrival-time bucket: ``start_s``, ``end_s`` (seconds since
      the first arrival) and the bucket's ``block_hit_rate`` (0 for a bucket without blocks);
    - ``"tenants"`` / ``"bands"``: the flow-control groups of each policy (none without tenants);
    - ``"flags"``: each policy's pathologies (``code``, ``message``).
    """

    _TABLES = {
        "policies": None,
        "servers": ("policy", "server", "role", "requests", "kv_usage_mean"),
        "ttft": ("policy", "ttft_s", "quantile"),
        "hit_rate": ("policy", "bucket", "start_s", "end_s", "block_hit_rate"),
        "tenants": None,
        "bands": None,
        "flags": ("policy", "code", "message"),
    }
    _DEFAULT = "policies"

    def _policies(self) -> List[Mapping[str, Any]]:
        return list(self.get("policies", []))

    def _rows_policies(self) -> List[Row]:
        return [_flatten(p) for p in self._policies()]

    def _rows_servers(self) -> List[Row]:
        rows = []
        for p in self._policies():
            requests = p.get("requests_per_server", [])
            kv = p.get("kv_usage_mean_per_server", [])
            roles = p.get("server_roles", [])
            for i in range(max(len(requests), len(kv))):
                rows.append({"policy": p["name"], "server": i, "role": roles[i] if i < len(roles) else "",
                             "requests": requests[i] if i < len(requests) else None,
                             "kv_usage_mean": kv[i] if i < len(kv) else None})
        return rows

    def _rows_ttft(self) -> List[Row]:
        rows = []
        for p in self._policies():
            samples = sorted(p.get("ttft_samples_s", []))
            rows.extend({"policy": p["name"], "ttft_s": s, "quantile": (i + 1) / len(samples)}
                        for i, s in enumerate(samples))
        return rows

    def _rows_hit_rate(self) -> List[Row]:
        duration = float(self.get("trace", {}).get("duration_s", 0.0))
        rows = []
        for p in self._policies():
            timeline = p.get("hit_rate_timeline", [])
            n = len(timeline)
            rows.extend({"policy": p["name"], "bucket": b, "start_s": duration * b / n,
                         "end_s": duration * (b + 1) / n, "block_hit_rate": h} for b, h in enumerate(timeline))
        return rows

    def _groups(self, key: str) -> List[Row]:
        return [{"policy": p["name"], **_flatten(g)} for p in self._policies() for g in p.get(key, [])]

    def _rows_tenants(self) -> List[Row]:
        return self._groups("tenants")

    def _rows_bands(self) -> List[Row]:
        return self._groups("bands")

    def _rows_flags(self) -> List[Row]:
        return [{"policy": p["name"], "code": f.get("code"), "message": f.get("message")}
                for p in self._policies() for f in p.get("flags", [])]


class RegionsReport(_Tables):
    """What :func:`pyepp.replay_regions` returns (``policy``, ``regions``,
    ``arrivals_from_trace``, ``modes``), plus tables of it: ``"modes"`` (default; one row per
    routing mode, percentiles dotted) and ``"regions"`` (per mode and region: ``arrivals``,
    ``served``, ``ttft_p90_s`` of the requests arriving there)."""

    _TABLES = {
        "modes": None,
        "regions": ("mode", "region", "arrivals", "served", "ttft_p90_s"),
    }
    _DEFAULT = "modes"

    def _rows_modes(self) -> List[Row]:
        return [_flatten(m) for m in self.get("modes", [])]

    def _rows_regions(self) -> List[Row]:
        names = [r["name"] for r in self.get("regions", [])]
        rows = []
        for m in self.get("modes", []):
            for i, name in enumerate(names):
                def at(key: str) -> Any:
                    values = m.get(key, [])
                    return values[i] if i < len(values) else None
                rows.append({"mode": m["mode"], "region": name, "arrivals": at("arrivals_per_region"),
                             "served": at("served_per_region"), "ttft_p90_s": at("ttft_p90_per_origin_s")})
        return rows


_EXPLAIN_TABLES = {
    "scores": ("profile", "endpoint", "scorer", "type", "raw", "weight", "weighted", "detail", "total", "picked"),
    "filters": ("profile", "filter", "type", "endpoint", "kept", "reason"),
}


def _explain(result: Any) -> Mapping[str, Any]:
    if isinstance(result, Mapping):
        return result
    explain = getattr(result, "explain", None)
    if not callable(explain):
        raise TypeError(f"expected a PickResult or its explain() dict, not {type(result).__name__}")
    return explain()


def explain_rows(result: Any, table: str = "scores") -> List[Row]:
    """A pick's explain trace (a :class:`~pyepp.PickResult` or its ``explain()`` dict) as rows.

    ``"scores"``: one row per profile, endpoint that passed the filters, and scorer: ``raw``,
    ``weight``, ``weighted`` (the scorer's share of the endpoint's ``total``), ``detail`` and
    ``picked`` (the profile picked that endpoint). ``"filters"``: one row per profile, filter
    and endpoint it saw: ``kept`` and the ``reason`` it removed one. Empty when the pick ran
    with ``trace=False``.
    """
    if table not in _EXPLAIN_TABLES:
        raise ValueError(f"unknown table {table!r} (known: {', '.join(_EXPLAIN_TABLES)})")
    rows: List[Row] = []
    for p in _explain(result).get("profiles", []):
        if table == "scores":
            picked = set(p.get("picked", []))
            for s in p.get("scores", []):
                for t in s.get("scorers", []):
                    rows.append({"profile": p["name"], "endpoint": s["endpoint"], "scorer": t["plugin"],
                                 "type": t["type"], "raw": t["raw"], "weight": t["weight"], "weighted": t["weighted"],
                                 "detail": t["detail"], "total": s["total"], "picked": s["endpoint"] in picked})
        else:
            for f in p.get("filters", []):
                rows.extend({"profile": p["name"], "filter": f["plugin"], "type": f["type"], "endpoint": e,
                             "kept": True, "reason": ""} for e in f.get("kept", []))
                rows.extend({"profile": p["name"], "filter": f["plugin"], "type": f["type"], "endpoint": r["endpoint"],
                             "kept": False, "reason": r["reason"]} for r in f.get("removed", []))
    return rows


def to_pandas(result: Any, table: Optional[str] = None) -> Any:
    """A ``pandas.DataFrame`` of a result: a :class:`ReplayReport` or :class:`RegionsReport`
    (or the dict of one, e.g. ``eppctl replay --output json`` loaded), a
    :class:`~pyepp.PickResult` or its ``explain()`` dict (:func:`explain_rows`), or a list of
    row dicts. Raises :class:`~pyepp.MissingDependencyError` (an ``ImportError``) without
    pandas."""
    what = "pyepp.to_pandas()"
    if isinstance(result, _Tables):
        return result.to_pandas(table)
    if isinstance(result, Mapping) and "policies" in result and "trace" in result:
        return ReplayReport(result).to_pandas(table)
    if isinstance(result, Mapping) and "modes" in result and "regions" in result:
        return RegionsReport(result).to_pandas(table)
    if isinstance(result, Mapping) and "profiles" in result or callable(getattr(result, "explain", None)):
        table = "scores" if table is None else table
        rows = explain_rows(result, table)
        return _frame(rows, _EXPLAIN_TABLES[table], what)
    if isinstance(result, Iterable) and not isinstance(result, (str, bytes, Mapping)):
        if table is not None:
            raise ValueError("table applies to reports and pick results, not to a list of rows")
        rows = list(result)
        if not all(isinstance(r, Mapping) for r in rows):
            raise TypeError("a list given to to_pandas must hold dicts (rows)")
        return _frame([dict(r) for r in rows], None, what)
    raise TypeError(f"to_pandas takes a replay report, a PickResult, an explain() dict or a list of rows, "
                    f"not {type(result).__name__}")
