#!/usr/bin/env python3
"""Compares latency models on the simulator's requests (docs/latency.md, "Why this model").

The samples come from the predictor's accuracy test, which writes every finished request (the
features it was predicted from, its TTFT and TPOT, and what libepp's predictor said online) when
EPP_LATENCY_SAMPLES is set:

    EPP_LATENCY_SAMPLES=/tmp/latency.csv build/tests/epp_tests \\
        --gtest_filter=LatencyPredictorTest.PredictsTheSimulatorsLatencies
    python3 bench/latency_model_compare.py /tmp/latency.csv

Every model below is refitted every 5 simulated seconds on requests that arrived at least 10 s
before (finished, nearly all of them) and predicts the next 5 s of arrivals; errors are over the
requests libepp's test scores (arrivals from 60 s on). The ridge here is a NumPy copy of libepp's
fit (squared relative error, standardized columns, per endpoint, no pool prior), so its row shows
what the protocol costs against the online figures. The tree models are scikit-learn's
HistGradientBoostingRegressor (LightGBM's algorithm), standing in for the reference's XGBoost /
LightGBM sidecar: pool-wide (the reference's training entries carry no endpoint identity), with
the endpoint as a feature, and per endpoint.

Needs NumPy and scikit-learn (Debian: python3-sklearn); neither is a dependency of the project.
"""
import sys

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor


def load(path):
    d = np.genfromtxt(path, delimiter=",", names=True)
    inp = d["input_tokens"]
    hit = np.minimum(d["prefix_hit_tokens"], inp)
    unc = inp - hit
    # libepp's design columns (latency/predictor.h), without the encoder ones (text only here).
    x = np.column_stack([unc, hit, unc * inp / 1000, d["waiting_requests"], d["running_requests"],
                         d["kv_cache_usage"], d["inflight_requests"], d["inflight_prefill_tokens"]])
    return d, x


def ridge(x, y, lam=1.0):
    mu, sd = x.mean(0), x.std(0)
    use = sd > 1e-9
    sd[~use] = 1
    z = np.column_stack([np.ones(len(x)), (x - mu) / sd * use])
    w = 1 / y**2
    w *= len(y) / w.sum()
    a = (z * w[:, None]).T @ z + np.diag([0] + [lam] * x.shape[1])
    b = np.linalg.solve(a, (z * w[:, None]).T @ y)
    floor = 0.5 * y.min()
    return lambda xn: np.maximum(b[0] + ((xn - mu) / sd * use) @ b[1:], floor)


def trees(x, y, log):
    m = HistGradientBoostingRegressor(max_iter=100, random_state=0)
    m.fit(x, np.log(y) if log else y)
    return (lambda xn: np.exp(m.predict(xn))) if log else m.predict


def rolling(d, x, y, fit, per_endpoint, window, with_id=False, step=5.0):
    t, srv = d["arrival_us"] / 1e6, d["server"].astype(int)
    pred = np.full(len(t), np.nan)
    for t0 in np.arange(60, t.max() + step, step):
        avail = (t < t0 - 10) & np.isfinite(y) & (y > 0)
        test = (t >= t0) & (t < t0 + step)
        for g in (np.unique(srv) if per_endpoint else [None]):
            sel = (srv == g) if g is not None else np.ones(len(t), bool)
            idx = np.where(avail & sel)[0][-window:]
            te = test & sel
            if len(idx) < 32 or not te.any():
                continue
            xtr, xte = x[idx], x[te]
            if with_id:
                xtr, xte = np.column_stack([xtr, srv[idx]]), np.column_stack([xte, srv[te]])
            pred[te] = fit(xtr, y[idx])(xte)
    return pred


def errors(p, y):
    m = np.isfinite(p) & np.isfinite(y) & (y > 0)
    e = np.abs(p[m] - y[m]) / y[m]
    return np.median(e), np.percentile(e, 90), e.mean()


def main():
    d, x = load(sys.argv[1] if len(sys.argv) > 1 else "/tmp/latency.csv")
    scored = d["arrival_us"] >= 60e6
    ttft, tpot = d["ttft_s"], d["tpot_s"]
    print(f"requests scored: {scored.sum()}")
    print(f"{'model':<54} TTFT p50 / p90 / MAPE    TPOT p50 / p90 / MAPE")

    def show(name, pt, pp):
        a, b = errors(pt[scored], ttft[scored]), errors(pp[scored], tpot[scored])
        print(f"{name:<54} {a[0]:.3f} / {a[1]:.3f} / {a[2]:.3f}    {b[0]:.3f} / {b[1]:.3f} / {b[2]:.3f}", flush=True)

    show("libepp predictor (online, the test's own predictions)", d["predicted_ttft_s"], d["predicted_tpot_s"])
    models = [
        ("ridge, relative loss, per endpoint, last 512", ridge, True, 512, False),
        ("ridge, relative loss, pool-wide, last 4096", ridge, False, 4096, False),
        ("trees, squared loss, per endpoint, last 512", lambda a, b: trees(a, b, False), True, 512, False),
        ("trees, log target, per endpoint, last 512", lambda a, b: trees(a, b, True), True, 512, False),
        ("trees, squared loss, pool-wide, last 4096", lambda a, b: trees(a, b, False), False, 4096, False),
        ("trees, log target, pool-wide, last 4096", lambda a, b: trees(a, b, True), False, 4096, False),
        ("trees, log target, pool-wide + endpoint id, last 4096", lambda a, b: trees(a, b, True), False, 4096, True),
    ]
    for name, fit, per_endpoint, window, with_id in models:
        show(name, rolling(d, x, ttft, fit, per_endpoint, window, with_id),
             rolling(d, x, tpot, fit, per_endpoint, window, with_id))


if __name__ == "__main__":
    main()
