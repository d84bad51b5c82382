#!/usr/bin/env python3
"""The multi-region replay grid of docs/routing.md ("Several regions"): every cell is one
`eppctl replay --regions ... --rtt ...` run (virtual time, deterministic for the seed), printed as
the Markdown rows the doc holds.

    bench/replay_regions.py [--eppctl build/cli/eppctl] [--duration 60] [--seed 0]

Each row: workload, rate, RTT, east's capacity, the saturation queue; then per mode (global, hierarchical, local) TTFT
p50 / p90 (network time included), block hit rate, cross-region share and requests shed.
"""
import argparse
import json
import os
import subprocess
import sys

MOONCAKE = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures", "traces",
                        "mooncake-fast25-synthetic_trace.jsonl")

WORKLOADS = {
    "many-sys": "short-questions__many-system-prompts",
    "multi-chat": "short-questions__few-system-prompts__multi-chat",
}
# (workload, rate, rtt_ms, east capacity rps or 0[, saturation queue]); mooncake: the trace's own rate
CELLS = [
    ("many-sys", 10, 10, 0), ("many-sys", 10, 70, 0), ("many-sys", 10, 150, 0),
    ("many-sys", 25, 10, 0), ("many-sys", 25, 70, 0), ("many-sys", 25, 150, 0),
    ("many-sys", 40, 10, 0), ("many-sys", 40, 70, 0), ("many-sys", 40, 150, 0),
    ("many-sys", 40, 70, 20), ("many-sys", 40, 70, 0, 2),
    ("multi-chat", 10, 70, 0), ("multi-chat", 25, 70, 0), ("multi-chat", 40, 70, 0),
    ("mooncake", None, 10, 0), ("mooncake", None, 70, 0),
]


def run(eppctl, workload, rate, rtt, cap, sat, duration, seed):
    east = f"us-east:4:0.6{':' + str(cap) if cap else ''}"
    if workload == "mooncake":
        source = ["--trace", MOONCAKE]
    else:
        source = ["--gie-workload", WORKLOADS[workload], "--rate", str(rate), "--duration", str(duration)]
    cmd = [eppctl, "replay", *source, "--policy", "gie-default", "--regions", f"{east},us-west:4:0.4",
           "--rtt", f"us-east/us-west={rtt}", "--saturation-queue", str(sat), "--seed", str(seed), "--no-progress",
           "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eppctl", default="build/cli/eppctl")
    ap.add_argument("--duration", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print("| workload | rate | RTT | east cap | sat. queue | global p50 / p90 | hit | cross | hier. p50 / p90 | hit | cross | shed "
          "| local p50 / p90 | hit | cross | best p90 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for w, rate, rtt, cap, *rest in CELLS:
        sat = rest[0] if rest else 5
        if w == "mooncake" and not os.path.exists(MOONCAKE):
            print(f"skipped: {MOONCAKE} is absent (../shared/fixtures)", file=sys.stderr)
            continue
        d = run(a.eppctl, w, rate, rtt, cap, sat, a.duration, a.seed)
        m = {x["mode"]: x for x in d["modes"]}
        cells = []
        for name in ("global", "hierarchical", "local"):
            x = m[name]
            cells.append(f"{x['ttft_s']['p50']:.3f} / {x['ttft_s']['p90']:.3f}")
            cells.append(f"{x['block_hit_rate']:.3f}")
            cells.append(f"{100 * x['cross_region_share']:.0f}%")
            if name == "hierarchical":
                cells.append(str(x["shed"]))
        low = min(m[n]["ttft_s"]["p90"] for n in m)
        best = " = ".join(n for n in ("global", "hierarchical", "local") if m[n]["ttft_s"]["p90"] <= low * 1.01)
        print(f"| {w} | {rate or 'trace'} | {rtt} ms | {cap or '-'} | {sat} | " + " | ".join(cells) + f" | {best} |")


if __name__ == "__main__":
    main()
