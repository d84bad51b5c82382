#!/usr/bin/env python3
"""Resident memory of `eppctl serve` per endpoint and per prefix-index entry, at pool scale.

Starts `epp_metrics_farm` with --endpoints endpoints, one `eppctl serve` over them (scrape every
--interval; by default a prefix-cache scorer with GIE's default lruCapacityPerServer and a random
picker, so that every endpoint's LRU fills; --config replaces it), then drives ext_proc traffic with `epp_extproc_load`: prompts
of --prompt-bytes whose characters are all unique per request, so every request adds its blocks
(up to maxPrefixBlocksToMatch, 256) to the picked endpoint's LRU. After each of --steps batches of
--requests requests it records serve's RSS (VmRSS) and epp_prefix_index_entries, and fits the
bytes per entry by least squares. The index is bounded per endpoint (lruCapacityPerServer, or the
server's own KV blocks with autoTune), so entries stop growing at endpoints x capacity.

Every process started is stopped by its pid, also on Ctrl-C.

  /usr/bin/python3 bench/index_memory.py --build build --endpoints 1000 --steps 8 --requests 20000
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scrape_scale import free_port, rss_bytes, scrape, single, stop  # noqa: E402


RANDOM_CONFIG = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: approx-prefix-cache-producer
    parameters:
      autoTune: false
  - type: prefix-cache-scorer
  - type: random-picker
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: prefix-cache-scorer
      - pluginRef: random-picker
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--endpoints", type=int, default=1000)
    ap.add_argument("--interval", default="500ms")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--requests", type=int, default=20000, help="requests per step")
    ap.add_argument("--prompt-bytes", type=int, default=16384)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--config", help="serve --config (default: GIE's default profile)")
    ap.add_argument("--json", help="write the samples here")
    args = ap.parse_args()
    eppctl = os.path.join(args.build, "cli", "eppctl")
    load = os.path.join(args.build, "bench", "epp_extproc_load")
    farm_bin = os.path.join(args.build, "bench", "epp_metrics_farm")
    work = tempfile.mkdtemp(prefix="epp-index-mem-")
    procs = []

    def stop_all():
        for p in reversed(procs):
            stop(p)

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    samples = []
    try:
        farm = subprocess.Popen([farm_bin, "--endpoints", str(args.endpoints)], stdout=subprocess.PIPE,
                                stderr=open(os.path.join(work, "farm.log"), "w"), text=True)
        procs.append(farm)
        port = int(farm.stdout.readline().split()[1])
        endpoints_file = os.path.join(work, "endpoints.yaml")
        with open(endpoints_file, "w") as f:
            f.write("endpoints:\n")
            for i in range(args.endpoints):
                f.write(f"  - address: 10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}:8000\n"
                        f"    metrics: http://127.0.0.1:{port}/e/{i}/metrics\n    engine: vllm\n")
        grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
        cmd = [eppctl, "serve", "--no-secure-serving", "--listen-address", "127.0.0.1",
               "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
               "--metrics-port", str(metrics_port), "--log-level", "warn", "--endpoints", endpoints_file,
               "--refresh-metrics-interval", args.interval, "--scrape-timeout", "2s",
               "--metrics-staleness-threshold", "10s"]
        config = args.config
        if not config:
            # Picks spread uniformly (random-picker) so that every endpoint's LRU fills; GIE's
            # default lruCapacityPerServer (autoTune off: the farm's pages report 27,648 blocks).
            config = os.path.join(work, "config.yaml")
            with open(config, "w") as f:
                f.write(RANDOM_CONFIG)
        cmd += ["--config", config]
        serve = subprocess.Popen(cmd, stdout=open(os.path.join(work, "serve.log"), "w"), stderr=subprocess.STDOUT)
        procs.append(serve)
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        deadline = time.monotonic() + 60
        while True:
            try:
                if single(scrape(url), "epp_endpoints") == args.endpoints:
                    break
            except OSError:
                pass
            if serve.poll() is not None or time.monotonic() > deadline:
                sys.exit("index_memory: serve did not come up:\n" + open(os.path.join(work, "serve.log")).read()[-3000:])
            time.sleep(0.2)
        time.sleep(2)

        def sample(step, ok):
            m = scrape(url)
            s = {"step": step, "requests_ok": ok, "rss_mib": round(rss_bytes(serve.pid) / 2**20, 1),
                 "entries": single(m, "epp_prefix_index_entries")}
            samples.append(s)
            print(json.dumps(s), flush=True)

        sample(0, 0)
        total_ok = 0
        for step in range(1, args.steps + 1):
            out = subprocess.run([load, "--target", f"127.0.0.1:{grpc_port}", "--requests", str(args.requests),
                                  "--concurrency", str(args.concurrency), "--prompt-bytes", str(args.prompt_bytes),
                                  "--question-bytes", str(args.prompt_bytes), "--groups", "1", "--warmup", "0s",
                                  "--duration", "10m", "--timeout", "60s", "--json"],
                                 capture_output=True, text=True, timeout=1200)
            level = json.loads(out.stdout)["levels"][0]
            if level["errors"]:
                print("errors:", level["errors_by_kind"], file=sys.stderr)
            total_ok += level["requests"]
            sample(step, total_ok)
    finally:
        stop_all()
    pts = [(s["entries"], s["rss_mib"] * 2**20) for s in samples if s["entries"] is not None]
    if len(pts) >= 2:
        n = len(pts)
        mx = sum(p[0] for p in pts) / n
        my = sum(p[1] for p in pts) / n
        sxx = sum((p[0] - mx) ** 2 for p in pts)
        if sxx > 0:
            b = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
            print(f"\nRSS per index entry (least squares over {n} samples): {b:.1f} bytes")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(samples, f, indent=1)


if __name__ == "__main__":
    main()
