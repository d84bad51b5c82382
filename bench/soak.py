#!/usr/bin/env python3
"""Soak: many ext_proc streams through `eppctl serve` with simulated model servers behind it.

Starts --sims `eppctl sim` servers (scraped by serve every 50 ms), one `eppctl serve` over them,
and `epp_extproc_load` with --requests streams at --concurrency (mixed prompt sizes, a share of
streams cancelled mid-body, a share that send headers and never a body and are ended by serve's
--stream-request-timeout). Every --sample seconds it records serve's RSS, open descriptors,
threads, prefix-index entries and open streams (from /proc and serve's /metrics). At the end it
prints a summary and writes every sample and the load generator's result as JSON (--out).

Verdict: errors other than the planned cancels and stalls; the slope of RSS, descriptors and
threads over the samples after the warm-up (--warmup-fraction of the run), per hour and in total,
by least squares. Every process started is stopped by its pid, also on Ctrl-C.

  /usr/bin/python3 bench/soak.py --build build --requests 1000000 --concurrency 200
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
            elif k == "Threads":
                out[k] = int(v)
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def metric_values(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    vals = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            try:
                vals[m.group(1)] = float(m.group(2))
            except ValueError:
                pass
    return vals


def slope(points):
    """Least-squares slope of (t, y) points, per second; None with fewer than 3."""
    if len(points) < 3:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    return sum((t - mt) * (y - my) for t, y in points) / var


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory with cli/eppctl and bench/epp_extproc_load")
    ap.add_argument("--requests", type=int, default=1000000)
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--sims", type=int, default=4)
    ap.add_argument("--prompt-bytes", default="1k,4k,16k,64k,220k")
    ap.add_argument("--groups", type=int, default=64, help="distinct system prompts (prefix-index growth)")
    ap.add_argument("--cancel-fraction", type=float, default=0.01)
    ap.add_argument("--stall-fraction", type=float, default=0.0005)
    ap.add_argument("--request-timeout", default="5s", help="serve's --stream-request-timeout (ends the stalls)")
    ap.add_argument("--threads", type=int, default=1, help="load generator threads")
    ap.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    ap.add_argument("--warmup-fraction", type=float, default=0.2)
    ap.add_argument("--out", default="", help="JSON file with every sample and the result")
    args = ap.parse_args()

    eppctl = os.path.join(args.build, "cli", "eppctl")
    load = os.path.join(args.build, "bench", "epp_extproc_load")
    for p in (eppctl, load):
        if not os.access(p, os.X_OK):
            sys.exit(f"soak: {p} not built (cmake --build {args.build} --target eppctl epp_extproc_load)")
    work = tempfile.mkdtemp(prefix="epp-soak-")
    procs = []

    def stop_all(*_):
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    signal.signal(signal.SIGTERM, lambda *a: (stop_all(), sys.exit(143)))
    try:
        sim_ports = []
        for i in range(args.sims):
            port = free_port()
            sim_ports.append(port)
            log = open(os.path.join(work, f"sim{i}.log"), "w")
            procs.append(subprocess.Popen([eppctl, "sim", "--host", "127.0.0.1", "--port", str(port),
                                           "--seed", str(i)], stdout=log, stderr=subprocess.STDOUT))
        grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
        serve_log = open(os.path.join(work, "serve.log"), "w")
        cmd = [eppctl, "serve", "--no-secure-serving", "--listen-address", "127.0.0.1",
               "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
               "--metrics-port", str(metrics_port), "--log-level", "warn",
               "--stream-request-timeout", args.request_timeout]
        for port in sim_ports:
            cmd += ["-e", f"127.0.0.1:{port}"]
        serve = subprocess.Popen(cmd, stdout=serve_log, stderr=subprocess.STDOUT)
        procs.append(serve)
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        deadline = time.monotonic() + 20
        while True:
            try:
                if metric_values(metrics_url).get("epp_endpoints", 0) >= args.sims:
                    break
            except OSError:
                pass
            if serve.poll() is not None or time.monotonic() > deadline:
                sys.exit("soak: serve did not come up:\n" + open(serve_log.name).read())
            time.sleep(0.1)

        load_out = open(os.path.join(work, "load.json"), "w")
        t0 = time.monotonic()
        gen = subprocess.Popen([load, "--target", f"127.0.0.1:{grpc_port}", "--requests", str(args.requests),
                                "--concurrency", str(args.concurrency), "--prompt-bytes", args.prompt_bytes,
                                "--groups", str(args.groups), "--cancel-fraction", str(args.cancel_fraction),
                                "--stall-fraction", str(args.stall_fraction), "--threads", str(args.threads),
                                "--timeout", "60s", "--server-pid", str(serve.pid), "--json"],
                               stdout=load_out, stderr=subprocess.STDOUT)
        procs.append(gen)
        samples = []
        next_sample = t0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                st = proc_status(serve.pid)
                m = metric_values(metrics_url)
                s = {"t": round(now - t0, 1), "rss": st.get("VmRSS"), "rss_peak": st.get("VmHWM"),
                     "threads": st.get("Threads"), "fds": st["fds"],
                     "prefix_index_entries": m.get("epp_prefix_index_entries"),
                     "streams_active": m.get("epp_streams_active"), "streams_total": m.get("epp_streams_total"),
                     "requests_200": m.get('epp_requests_total{outcome="200"}'),
                     "timeouts_request": m.get('epp_stream_timeouts_total{phase="request"}')}
                samples.append(s)
                print("t=%6.0fs rss %6.1f MiB  fds %4d  threads %3d  prefix entries %8.0f  streams %6.0f open / %9.0f total"
                      % (s["t"], s["rss"] / 2**20, s["fds"], s["threads"], s["prefix_index_entries"] or 0,
                         s["streams_active"] or 0, s["streams_total"] or 0), flush=True)
                next_sample += args.sample
            if gen.poll() is not None:
                break
            if serve.poll() is not None:
                sys.exit("soak: serve exited during the run:\n" + open(serve_log.name).read()[-4000:])
            time.sleep(min(0.5, max(0.05, next_sample - time.monotonic())))
        elapsed = time.monotonic() - t0
        time.sleep(1)
        final = proc_status(serve.pid)
        m = metric_values(metrics_url)
        load_out.close()
        result = json.load(open(load_out.name))
        level = result["levels"][0]

        warm = [s for s in samples if s["t"] >= args.warmup_fraction * elapsed]
        slopes = {k: slope([(s["t"], s[k]) for s in warm]) for k in ("rss", "fds", "threads", "prefix_index_entries")}
        span = (warm[-1]["t"] - warm[0]["t"]) if len(warm) > 1 else 0
        summary = {
            "requests": args.requests, "concurrency": args.concurrency, "seconds": round(elapsed, 1),
            "streams_started": level["started"], "ok": level["requests"], "cancelled": level["cancelled"],
            "stalled_ended_by_server": level["stalled_ended"], "errors": level["errors"],
            "errors_by_kind": level["errors_by_kind"], "requests_per_s": level["requests_per_s"],
            "server_cpu_cores": level["server_cpu_cores"],
            "added_latency_ms": level["added_latency_ms"],
            "rss_mib_first_after_warmup": round(warm[0]["rss"] / 2**20, 1) if warm else None,
            "rss_mib_last": round(samples[-1]["rss"] / 2**20, 1) if samples else None,
            "rss_peak_mib": round(final["VmHWM"] / 2**20, 1),
            "rss_slope_mib_per_hour": None if slopes["rss"] is None else round(slopes["rss"] * 3600 / 2**20, 2),
            "rss_change_mib_after_warmup": None if slopes["rss"] is None else round(slopes["rss"] * span / 2**20, 2),
            "fds_min_max_after_warmup": [min(s["fds"] for s in warm), max(s["fds"] for s in warm)] if warm else None,
            "threads_min_max_after_warmup": [min(s["threads"] for s in warm), max(s["threads"] for s in warm)] if warm else None,
            "prefix_index_entries_last": samples[-1]["prefix_index_entries"] if samples else None,
            "streams_active_after": m.get("epp_streams_active"),
            "requests_in_flight_after": m.get("epp_requests_in_flight"),
            "stream_timeouts_request": m.get('epp_stream_timeouts_total{phase="request"}'),
            "stream_timeouts_idle": m.get('epp_stream_timeouts_total{phase="idle"}'),
            "samples": len(samples),
        }
        print(json.dumps(summary, indent=2))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"summary": summary, "samples": samples, "load": result,
                           "command": sys.argv}, f, indent=1)
        ok = (summary["errors"] == 0 and summary["streams_active_after"] == 0
              and summary["requests_in_flight_after"] == 0 and serve.poll() is None)
        return 0 if ok else 1
    finally:
        stop_all()


if __name__ == "__main__":
    sys.exit(main())
