#!/usr/bin/env python3
"""The ext_proc headline cells of docs/benchmarks.md (`eppctl serve` under epp_extproc_load), for one
build or two side by side.

    bench/serve_cells.py [--build DIR] [--build DIR2] [--rounds 2] [--cells a,b,...] [--json F]

Starts three simulated model servers (`eppctl sim --count 3`) from the first build, then for each
round, each build (alternating A, B, B, A, ... so neither always goes first) and each cell: one
`eppctl serve` scraping the three simulators every 50 ms (plaintext h2c, or TLS with its own
self-signed certificate), and the build's `epp_extproc_load` against it with `--server-pid`. Each
build directory needs cli/eppctl and bench/epp_extproc_load (`cmake --build DIR --target eppctl
epp_extproc_load`). Every process started is stopped by its pid, also on Ctrl-C.

Cells (added latency: from the last body chunk written to the pick received):
  tls-220k-200     TLS, 220 KiB prompts, 200 streams, each idle 200 ms (uniform 100-300 ms) between
                   its pick and its response path, as while a model generates: issue #19's TLS goal
                   (added p99 < 5 ms)
  plain-220k-200   the same in plaintext
  plain-400k-16    plaintext, 400 KiB prompts, 16 streams, no idle time: requests/s per core of
                   serve (issue #19's long-prompt goal: >= 1,000)
The table gives, per build, the median and range over the rounds of req/s, added p50 / p99 /
p99.9 (ms), serve's cores and requests/s per serve core. The machines are shared and noisy: read
ranges, compare within one run.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scrape_scale import free_port, stop  # noqa: E402

CELLS = {
    "tls-220k-200": dict(tls=True, prompt="220k", concurrency=200, delay="200ms"),
    "plain-220k-200": dict(tls=False, prompt="220k", concurrency=200, delay="200ms"),
    "plain-400k-16": dict(tls=False, prompt="400k", concurrency=16, delay="0"),
}

PROCS = []


def stop_all(*_):
    for p in reversed(PROCS):
        stop(p)
    PROCS.clear()


def wait_port(port, proc, what, log, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    stop_all()
    sys.exit(f"serve_cells: {what} did not come up:\n" + open(log).read()[-3000:])


def run_cell(build, cell, sims, args, work):
    spec = CELLS[cell]
    eppctl = os.path.join(build, "cli", "eppctl")
    load = os.path.join(build, "bench", "epp_extproc_load")
    grpc_port = free_port()
    log = os.path.join(work, f"serve-{cell}.log")
    cmd = [eppctl, "serve", "--listen-address", "127.0.0.1", "--grpc-port", str(grpc_port),
           "--grpc-health-port", "0", "--metrics-port", "0", "--log-level", "warn",
           "--refresh-metrics-interval", "50ms"]
    if not spec["tls"]:
        cmd.append("--secure-serving=false")
    for port in sims:
        cmd += ["--endpoint", f"127.0.0.1:{port}"]
    with open(log, "w") as out:
        serve = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    PROCS.append(serve)
    try:
        wait_port(grpc_port, serve, "eppctl serve", log)
        time.sleep(1.0)  # first scrapes
        lcmd = [load, "--target", f"127.0.0.1:{grpc_port}", "--prompt-bytes", spec["prompt"],
                "--concurrency", str(spec["concurrency"]), "--response-delay", spec["delay"],
                "--duration", args.duration, "--warmup", args.warmup, "--timeout", "30s",
                "--server-pid", str(serve.pid), "--json"]
        if spec["tls"]:
            lcmd.append("--insecure-skip-verify")
        r = subprocess.run(lcmd, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            stop_all()
            sys.exit(f"serve_cells: {' '.join(lcmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
        level = json.loads(r.stdout)["levels"][0]
    finally:
        stop(serve)
        PROCS.remove(serve)
    added = level["added_latency_ms"]
    serve_cores = level["server_cpu_cores"]
    return {
        "rps": level["requests_per_s"], "errors": level["errors"],
        "p50": added["p50"], "p99": added["p99"], "p999": added["p999"],
        "serve_cores": serve_cores, "client_cores": level["client_cpu_cores"],
        "rps_per_core": level["requests_per_s"] / serve_cores if serve_cores else None,
    }


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    fmt = (lambda v: f"{v:.0f}") if max(values) >= 100 else (lambda v: f"{v:.2f}")
    med = fmt(statistics.median(values))
    return med if len(values) == 1 else f"{med} ({fmt(min(values))}-{fmt(max(values))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", help="build directory (give twice to compare; default build)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--duration", default="8s")
    ap.add_argument("--warmup", default="2s")
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args()
    builds = args.build or ["build"]
    if len(builds) > 2:
        sys.exit("serve_cells: at most two --build")
    cells = args.cells.split(",")
    for c in cells:
        if c not in CELLS:
            sys.exit(f"serve_cells: unknown cell '{c}' (known: {', '.join(CELLS)})")
    for b in builds:
        for prog in ("cli/eppctl", "bench/epp_extproc_load"):
            if not os.access(os.path.join(b, prog), os.X_OK):
                sys.exit(f"serve_cells: {os.path.join(b, prog)} is missing "
                         f"(cmake --build {b} --target eppctl epp_extproc_load)")
    signal.signal(signal.SIGINT, lambda *a: (stop_all(), sys.exit(130)))
    signal.signal(signal.SIGTERM, lambda *a: (stop_all(), sys.exit(143)))

    results = {b: {c: [] for c in cells} for b in builds}
    with tempfile.TemporaryDirectory(prefix="serve_cells-") as work:
        base = free_port()
        sims = [base, base + 1, base + 2]
        sim_log = os.path.join(work, "sim.log")
        with open(sim_log, "w") as out:
            sim = subprocess.Popen([os.path.join(builds[0], "cli", "eppctl"), "sim", "--count", "3",
                                    "--base-port", str(base)], stdout=out, stderr=subprocess.STDOUT)
        PROCS.append(sim)
        try:
            for port in sims:
                wait_port(port, sim, "eppctl sim", sim_log)
            for rnd in range(args.rounds):
                order = builds if rnd % 2 == 0 else list(reversed(builds))
                for b in order:
                    for c in cells:
                        r = run_cell(b, c, sims, args, work)
                        results[b][c].append(r)
                        print(f"round {rnd + 1}/{args.rounds} {b} {c}: {r['rps']:.0f} req/s, added p99 "
                              f"{r['p99']:.2f} ms, serve {r['serve_cores']:.2f} cores", file=sys.stderr)
        finally:
            stop_all()

    print("| cell | build | req/s | added ms p50 | p99 | p99.9 | serve cores | req/s per serve core |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for c in cells:
        for b in builds:
            rs = results[b][c]
            print(f"| {c} | {b} | {summary([r['rps'] for r in rs])} | {summary([r['p50'] for r in rs])} | "
                  f"{summary([r['p99'] for r in rs])} | {summary([r['p999'] for r in rs])} | "
                  f"{summary([r['serve_cores'] for r in rs])} | {summary([r['rps_per_core'] for r in rs])} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
