#!/usr/bin/python3
"""Prometheus text parse throughput: epp (C++) against prometheus_client, in one run.

Runs the Google Benchmark program epp_bench_parse (JSON output) and times
prometheus_client.parser.text_string_to_metric_families on exactly the same bytes (the program
writes its inputs out with --dump_inputs, the synthetic one included), then prints a markdown
table: input, size, epp MB/s, prometheus_client MB/s, ratio.

The machine may be shared and noisy, so the two are interleaved as finely as is practical: each
round, for each input, runs the C++ benchmark on that input and then times prometheus_client on
it. The table shows medians over the rounds (the ratio is the median of the per-round ratios,
each from two back-to-back measurements). Both sides count CPU time of the process (Google
Benchmark's default; time.process_time() here), which a busy neighbour disturbs less than wall
time. MB = 10^6 bytes.

Run it with Debian's interpreter, which carries prometheus_client:

    /usr/bin/python3 bench/run_parse_bench.py --bench build-bench/bench/epp_bench_parse
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOAL_MBPS = 300.0
GOAL_RATIO = 50.0

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # pyenv's python3 comes first on PATH and lacks prometheus_client
    sys.exit(
        "run_parse_bench.py: prometheus_client is not importable by %s; "
        "run it with /usr/bin/python3 (Debian's python3-prometheus-client)" % sys.executable
    )


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--bench",
        default=os.path.join(REPO, "build-bench", "bench", "epp_bench_parse"),
        help="the epp_bench_parse program (default: build-bench/bench/epp_bench_parse)",
    )
    p.add_argument(
        "--fixtures",
        default=os.environ.get("EPP_SHARED_FIXTURES")
        or os.path.normpath(os.path.join(REPO, "..", "shared", "fixtures")),
        help="the shared fixtures folder holding metrics/ (default: $EPP_SHARED_FIXTURES, "
        "else ../shared/fixtures next to the repository)",
    )
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds (default 7)")
    p.add_argument(
        "--min-time",
        type=float,
        default=0.3,
        help="CPU seconds per input and round, for each parser (default 0.3)",
    )
    p.add_argument("--json", help="also write every measurement to this JSON file")
    return p.parse_args()


def load_inputs(bench, fixtures, tmp):
    if subprocess.run([bench, "--fixtures=" + fixtures, "--dump_inputs=" + tmp]).returncode != 0:
        sys.exit("run_parse_bench.py: %s could not load its inputs (see above)" % bench)
    inputs = []  # (benchmark name after "BM_ParsePrometheusText/", input bytes)
    with open(os.path.join(tmp, "inputs.txt")) as manifest:
        for line in manifest:
            if line.strip():
                name, file = line.rstrip("\n").split("\t")
                with open(os.path.join(tmp, file), "rb") as f:
                    inputs.append((name, f.read()))
    return inputs


def ere_escape(s):
    """Escapes a literal for Google Benchmark's filter (a POSIX extended regex; Python's
    re.escape also escapes '-', which std::regex rejects)."""
    return re.sub(r"([.\[\]{}()\\*+?^$|])", r"\\\1", s)


def run_epp(bench, fixtures, min_time, name):
    """The C++ benchmark on one input: {input name: (bytes/s, samples)}, and its context."""
    out = subprocess.run(
        [
            bench,
            "--fixtures=" + fixtures,
            "--benchmark_format=json",
            "--benchmark_min_time=%g" % min_time,
            "--benchmark_filter=^BM_ParsePrometheusText/%s$" % ere_escape(name),
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        sys.exit("run_parse_bench.py: %s failed:\n%s" % (bench, out.stderr))
    report = json.loads(out.stdout)
    results = {}
    for b in report["benchmarks"]:
        if b.get("error_occurred"):
            sys.exit("run_parse_bench.py: %s: %s" % (b["name"], b.get("error_message")))
        name = b["name"].split("/", 1)[1]
        results[name] = (b["bytes_per_second"], int(b["samples"]))
    return results, report["context"]


def parse_with_prometheus_client(text):
    """Fully consumes the generator: every family and every sample. Returns the sample count."""
    families = list(text_string_to_metric_families(text))
    return sum(len(list(f.samples)) for f in families)


def time_prometheus_client(data, min_time):
    """bytes/s (CPU time) of prometheus_client on `data` (timed on the str it takes)."""
    text = data.decode("utf-8")
    parse_with_prometheus_client(text)  # warm-up
    iters = 0
    start = time.process_time()
    while True:
        parse_with_prometheus_client(text)
        iters += 1
        elapsed = time.process_time() - start
        if elapsed >= min_time:
            return len(data) * iters / elapsed


def fmt_size(n):
    if n < 10000:
        return "%d B" % n
    if n < 1 << 20:
        return "%.1f KiB" % (n / 1024)
    return "%.2f MiB" % (n / (1 << 20))


def main():
    args = parse_args()
    if not os.access(args.bench, os.X_OK):
        sys.exit(
            "run_parse_bench.py: %s is not built; see docs/benchmarks.md for the build command"
            % args.bench
        )
    with tempfile.TemporaryDirectory(prefix="epp-parse-bench-") as tmp:
        inputs = load_inputs(args.bench, args.fixtures, tmp)

    epp = {name: [] for name, _ in inputs}
    pc = {name: [] for name, _ in inputs}
    ratio = {name: [] for name, _ in inputs}
    samples = {}
    context = {}
    for r in range(args.rounds):
        print("round %d/%d ..." % (r + 1, args.rounds), file=sys.stderr, flush=True)
        for name, data in inputs:
            epp_run, context = run_epp(args.bench, args.fixtures, args.min_time, name)
            if name not in epp_run:
                sys.exit("run_parse_bench.py: %s did not run %s" % (args.bench, name))
            e_bps, e_samples = epp_run[name]
            p_bps = time_prometheus_client(data, args.min_time)
            epp[name].append(e_bps)
            pc[name].append(p_bps)
            ratio[name].append(e_bps / p_bps)
            p_samples = parse_with_prometheus_client(data.decode("utf-8"))
            if e_samples != p_samples:
                sys.exit(
                    "run_parse_bench.py: %s: epp parsed %d samples, prometheus_client %d"
                    % (name, e_samples, p_samples)
                )
            samples[name] = e_samples

    try:
        from importlib.metadata import version

        pc_version = version("prometheus_client")
    except Exception:  # the version is for the report only
        pc_version = "?"
    print()
    print(
        "Python %s, prometheus_client %s; %d rounds, %.2g CPU s per input, parser and round; "
        "medians; MB = 10^6 bytes."
        % (
            platform.python_version(),
            pc_version,
            args.rounds,
            args.min_time,
        )
    )
    if context.get("library_build_type") == "debug":
        print("(libbenchmark itself reports a debug build; the code under test is Release.)")
    print()
    print("| input | size | samples | epp MB/s | prometheus_client MB/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    rows = []
    for name, data in inputs:
        e = statistics.median(epp[name]) / 1e6
        p = statistics.median(pc[name]) / 1e6
        x = statistics.median(ratio[name])
        rows.append((name, e, x))
        print(
            "| %s | %s | %d | %.0f | %.1f | %.0fx |"
            % (name, fmt_size(len(data)), samples[name], e, p, x)
        )
    print()
    for name, e, x in rows:
        ok_mbps = e >= GOAL_MBPS
        ok_ratio = x >= GOAL_RATIO
        print(
            "- %s: %s >= %.0f MB/s, %s >= %.0fx prometheus_client"
            % (
                name,
                "meets" if ok_mbps else "MISSES",
                GOAL_MBPS,
                "meets" if ok_ratio else "MISSES",
                GOAL_RATIO,
            )
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "context": context,
                    "python": platform.python_version(),
                    "epp_bytes_per_second": epp,
                    "prometheus_client_bytes_per_second": pc,
                    "ratio": ratio,
                    "samples": samples,
                    "sizes": {name: len(data) for name, data in inputs},
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
