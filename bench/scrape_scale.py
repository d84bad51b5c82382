#!/usr/bin/env python3
"""Scrape cost at pool scale: `eppctl serve` reading the /metrics of many endpoints.

Starts `epp_metrics_farm` (one epoll thread answering every endpoint's /metrics with the
simulator's vLLM exposition, gzip when asked) and one `eppctl serve` whose endpoints file lists
--endpoints endpoints, all scraped from the farm. No ext_proc traffic: what is measured is the
scrape loop alone. For each --interval, after --warmup seconds it measures for --seconds:

  - serve's CPU (utime + stime from /proc, in cores) and the farm's;
  - serve's RSS (VmRSS) at the end of the window;
  - freshness: every --sample-every seconds it reads serve's epp_endpoint_metrics_age_seconds
    for every endpoint, and reports the share of (sample, endpoint) pairs whose metrics were
    younger than one interval, and the age p50 / p99 / max;
  - the time between consecutive reads of the same endpoint, as the farm saw them: p50 / p99 /
    max and the share within 1.1 intervals (the share of endpoints refreshed within one interval);
  - serve's own scrape gauges (epp_scrape_duration_seconds and, where the build has them, the
    counters of reads and overruns).

Every process started is stopped by its pid, also on Ctrl-C.

  /usr/bin/python3 bench/scrape_scale.py --build build --endpoints 1000 --interval 500ms,50ms
  /usr/bin/python3 bench/scrape_scale.py --build /tmp/a/build --build build ...   # A/B, alternated
"""
import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def stop(proc, timeout=30):
    """SIGTERM, then SIGKILL if the process is still there after `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def scrape(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m:
            out.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return out


def single(m, name):
    v = m.get(name)
    return v[0][1] if v else None


def duration_s(text):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", text)
    if not m:
        sys.exit(f"bad interval '{text}' (want e.g. 50ms or 0.5s)")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def run_cell(build, farm_port, endpoints_file, n, interval, args, work):
    eppctl = os.path.join(build, "cli", "eppctl")
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    log = open(os.path.join(work, f"serve-{os.getpid()}-{interval}.log"), "w")
    cmd = [eppctl, "serve", "--no-secure-serving", "--listen-address", "127.0.0.1",
           "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
           "--metrics-port", str(metrics_port), "--log-level", "warn",
           "--endpoints", endpoints_file, "--refresh-metrics-interval", interval,
           "--metrics-staleness-threshold", args.staleness] + args.serve_extra.split()
    serve = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if single(scrape(url), "epp_endpoints") == n:
                    break
            except OSError:
                pass
            if serve.poll() is not None or time.monotonic() > deadline:
                log.close()
                sys.exit("scrape_scale: serve did not come up:\n" + open(log.name).read()[-4000:])
            time.sleep(0.2)
        time.sleep(args.warmup)
        iv = duration_s(interval)
        farm_url = f"http://127.0.0.1:{farm_port}"
        urllib.request.urlopen(farm_url + "/stats/reset", timeout=10).read()
        before = scrape(url)
        t0, c0 = time.monotonic(), cpu_seconds(serve.pid)
        ages, young, total = [], 0, 0
        # Random sampling times: a fixed period would lock onto the scrape interval's phase.
        rng = random.Random(1)
        next_sample = t0 + rng.uniform(0, args.sample_every)
        while time.monotonic() < t0 + args.seconds:
            time.sleep(max(0.0, next_sample - time.monotonic()))
            next_sample += rng.uniform(0.5, 1.5) * args.sample_every
            # The sample's own cost (rendering 1,000 endpoints' gauges) is on serve's CPU too;
            # its share is reported as sample_cost below.
            m = scrape(url)
            for _, age in m.get("epp_endpoint_metrics_age_seconds", []):
                ages.append(age)
                total += 1
                young += age <= iv
            total += n - len(m.get("epp_endpoint_metrics_age_seconds", []))  # never read: not young
        t1, c1 = time.monotonic(), cpu_seconds(serve.pid)
        gaps = json.loads(urllib.request.urlopen(f"{farm_url}/stats?interval_ms={int(iv * 1000)}", timeout=10).read())
        after = scrape(url)
        # What one /metrics render costs serve, to subtract the samples' share from the CPU figure.
        r0 = cpu_seconds(serve.pid)
        renders = 20
        for _ in range(renders):
            scrape(url)
        render_s = (cpu_seconds(serve.pid) - r0) / renders
        samples = int(args.seconds / args.sample_every)
        cores = (c1 - c0) / (t1 - t0)
        cell = {
            "build": build, "endpoints": n, "interval": interval, "seconds": round(t1 - t0, 1),
            "serve_cores": round(cores, 3),
            "serve_cores_without_samples": round(max(0.0, cores - samples * render_s / (t1 - t0)), 3),
            "serve_rss_mib": round(rss_bytes(serve.pid) / 2**20, 1),
            "fresh_share": round(young / total, 4) if total else None,
            "age_p50_ms": round(1000 * pct(ages, 0.5), 1) if ages else None,
            "age_p99_ms": round(1000 * pct(ages, 0.99), 1) if ages else None,
            "age_max_ms": round(1000 * max(ages), 1) if ages else None,
            "gap_p50_ms": gaps.get("gap_p50_ms"), "gap_p99_ms": gaps.get("gap_p99_ms"),
            "gap_max_ms": gaps.get("gap_max_ms"), "gaps_within_1_1": gaps.get("within_1_1"),
            "gaps_within_1_5": gaps.get("within_1_5"),
            "scrape_duration_s": single(after, "epp_scrape_duration_seconds"),
            "cycles_per_s": round(((single(after, "epp_scrape_cycles_total") or 0) -
                                   (single(before, "epp_scrape_cycles_total") or 0)) / (t1 - t0), 2),
        }
        for name in ("epp_scrape_reads_total", "epp_scrape_overruns_total"):
            if single(after, name) is not None:
                cell[name.replace("epp_scrape_", "") + "_per_s"] = round(
                    (single(after, name) - (single(before, name) or 0)) / (t1 - t0), 1)
        # Failed reads within the window (the start's burst of every endpoint at once is excluded).
        errors = (sum(v for _, v in after.get("epp_endpoint_scrape_errors_total", [])) -
                  sum(v for _, v in before.get("epp_endpoint_scrape_errors_total", [])))
        cell["scrape_errors"] = errors
        return cell
    finally:
        stop(serve)
        log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", help="build directory (twice: A/B, alternated); default ./build")
    ap.add_argument("--endpoints", type=int, default=1000)
    ap.add_argument("--interval", default="500ms,50ms", help="comma-separated scrape intervals")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--sample-every", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--staleness", default="2s", help="serve's --metrics-staleness-threshold")
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--serve-extra", default="", help="more flags for serve, e.g. --serve-extra=--scrape-gzip")
    ap.add_argument("--no-gzip", action="store_true")
    ap.add_argument("--page", help="the farm serves this captured /metrics page (engine from --engine)")
    ap.add_argument("--json", help="write the cells here")
    args = ap.parse_args()
    builds = args.build or ["build"]
    farm_bin = os.path.join(builds[-1], "bench", "epp_metrics_farm")
    work = tempfile.mkdtemp(prefix="epp-scrape-")
    farm_cmd = [farm_bin, "--endpoints", str(args.endpoints), "--engine", args.engine]
    if args.no_gzip:
        farm_cmd.append("--no-gzip")
    if args.page:
        farm_cmd += ["--page", args.page]
    farm = subprocess.Popen(farm_cmd, stdout=subprocess.PIPE, stderr=open(os.path.join(work, "farm.log"), "w"),
                            text=True)
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    cells = []
    try:
        line = farm.stdout.readline()
        if not line.startswith("port "):
            sys.exit("scrape_scale: the farm did not start")
        port = int(line.split()[1])
        endpoints_file = os.path.join(work, "endpoints.yaml")
        with open(endpoints_file, "w") as f:
            f.write("endpoints:\n")
            for i in range(args.endpoints):
                f.write(f"  - address: 10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}:8000\n"
                        f"    metrics: http://127.0.0.1:{port}/e/{i}/metrics\n"
                        f"    engine: {args.engine}\n")
        for r in range(args.rounds):
            for interval in args.interval.split(","):
                for build in builds:
                    f0 = cpu_seconds(farm.pid)
                    t0 = time.monotonic()
                    cell = run_cell(build, port, endpoints_file, args.endpoints, interval, args, work)
                    cell["round"] = r + 1
                    cell["farm_cores_whole_cell"] = round((cpu_seconds(farm.pid) - f0) / (time.monotonic() - t0), 3)
                    cells.append(cell)
                    print(json.dumps(cell), flush=True)
    finally:
        stop(farm, timeout=10)
    print()
    print("| build | endpoints | interval | serve cores | RSS MiB | gap p50 / p99 / max ms | gaps <= 1.1 interval "
          "| age <= interval | age p50 / p99 / max ms | errors |")
    print("|---|---:|---|---:|---:|---|---:|---:|---|---:|")
    for c in cells:
        print(f"| {c['build']} | {c['endpoints']} | {c['interval']} | {c['serve_cores_without_samples']} | "
              f"{c['serve_rss_mib']} | {c['gap_p50_ms']} / {c['gap_p99_ms']} / {c['gap_max_ms']} | "
              f"{c['gaps_within_1_1']} | {c['fresh_share']} | "
              f"{c['age_p50_ms']} / {c['age_p99_ms']} / {c['age_max_ms']} | {c['scrape_errors']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(cells, f, indent=1)


if __name__ == "__main__":
    main()
