#!/usr/bin/env python3
"""Pod discovery by watch against periodic listing, at pool scale with Pod churn (issue #35).

For each Pod count (--pods) and each mode, alternated within every round (--rounds):

  watch   `eppctl serve --pool-name` as it starts by default: list, then watch the pool and its Pods;
  list    the same with `--no-pool-watch --pool-resync-interval 2s` (--resync): list every interval;
  list:D  the same with interval D (e.g. list:100ms: many lists, to see what one costs);

it starts the loopback Kubernetes API server of the tests (tests/helpers/fake_kube.py, in this
process; BOOKMARK events every --bookmark-every seconds, 60 as kube-apiserver) with N Pods, starts
`eppctl serve` against it, waits until serve has every Ready Pod, and after --warmup seconds
changes --churn (10%) of the Pods per minute for --window seconds (an even rate, each step's
phase drawn at random). The changes go
round in threes: a Ready Pod is replaced (deleted, and a new Pod with a new name and IP added
Ready), a Ready Pod turns not Ready, the Pod not Ready longest turns Ready again (a few Pods start
not Ready so that each stays so for --hold seconds). Reported per cell:

  - API requests per minute by kind (LIST pods, GET pool, LIST pools, WATCH ...) made in
    the window, and the bytes the API server wrote (headers, bodies and watch streams) per kind;
  - serve's CPU (utime + stime from /proc/PID/stat) over the window, in cores, raw and net of the
    script's own reads of serve's /metrics (the cost of one read is measured after the window and
    subtracted); serve's RSS at the end;
  - latency from a Pod turning Ready (api.set() returned: its watch event is queued, the next LIST
    has it) to its endpoint being in serve's /metrics (epp_endpoint_waiting_queue_size
    {endpoint="ip:port"}), p50 / p90 / max over every replaced or re-Ready Pod of the window, in
    three ways: (a) to the first read of /metrics that shows it, (b) to the timestamp of serve's
    log line "reloaded: ... added: ip:port" (the new set installed), (c) from the moment the change
    left the API server (the watch event naming the Pod written, or the first LIST taken after
    the change) to that log line: serve's own part. The same for a Pod turning not Ready and its
    endpoint leaving /metrics.

serve's /metrics (about 0.85 KiB per endpoint) is not polled: the script tails serve's log every
5 ms and reads /metrics once for each batch of changes the log announced, to confirm them. The
Pods' metrics are answered by one asyncio HTTP server (a child process, this file with
--responder) listening on 0.0.0.0:PORT: Linux routes all of 127/8 to loopback, so every Pod IP
127.x.y.z reaches it. It answers a short vLLM page over keep-alive connections; serve reads each
endpoint every --refresh-metrics-interval (10s: 100 reads a second at 1,000 Pods, in both modes).

serve's InferenceObjective and InferenceModelRewrite watches are answered with empty lists and
quiet watches (empty_crds). eppctl is copied once per run, so that a rebuild during the run does
not mix binaries; its sha256 is printed. Every process started is stopped by its pid (SIGTERM,
then SIGKILL), also on Ctrl-C.

  /usr/bin/python3 bench/kube_watch.py                                   # quick: 100 and 1000 Pods, 30 s, ~2.5 min
  /usr/bin/python3 bench/kube_watch.py --pods 1000 --window 60 --rounds 2 --json out.json
  /usr/bin/python3 bench/kube_watch.py --pods 1000 --window 60 --modes watch,list,list:100ms
"""
import argparse
import calendar
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLK_TCK = os.sysconf("SC_CLK_TCK")

# One vLLM page: the gauges serve maps (running, waiting, KV usage, cache config) and the counters.
PAGE = "".join(
    line + "\n" for line in [
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 0.0',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0',
        "# TYPE vllm:cache_config_info gauge",
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
        'num_gpu_blocks="27648"} 1.0',
        "# TYPE vllm:prefix_cache_queries_total counter",
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 0.0',
        "# TYPE vllm:prefix_cache_hits_total counter",
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 0.0',
    ]).encode()


def responder(port):
    """The Pods' /metrics: one asyncio server on 0.0.0.0:port, keep-alive, every path the page."""
    import asyncio

    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: %d\r\n\r\n"
              % len(PAGE)) + PAGE
    served = [0]

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                if m:
                    await reader.readexactly(int(m.group(1)))
                writer.write(answer)
                served[0] += 1
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "0.0.0.0", port, backlog=4096, reuse_address=True)
        print("port %d" % server.sockets[0].getsockname()[1], flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        server.close()
        print("served %d" % served[0], file=sys.stderr, flush=True)

    asyncio.run(main())


# ---- helpers ----

def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def stop(proc, timeout=20):
    """SIGTERM to this pid, then SIGKILL if it is still there after `timeout` seconds."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


RELOAD = re.compile(r"^(\S+Z) .*reloaded: \d+ endpoints; added: (.*?); removed: (.*?)(?:; replaced|$)")


def log_time(stamp):
    """serve's log timestamp (UTC, 2026-12-06T02:12:17.570Z) as time.time()."""
    return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + stamp[19:-1])


def seconds(duration):
    """"10s", "100ms" as seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", duration)
    if not m:
        sys.exit("bad duration %r (want e.g. 100ms, 10s, 1m)" % duration)
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


def ms(values):
    return [round(1000 * pct(values, q), 1) if values else None for q in (0.5, 0.9, 1.0)]


def load_avg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def count_bytes(api, sent):
    """Counts the bytes the fake API server writes, by kind of request (its handler class is
    replaced by a subclass whose wfile counts; requests accepted from then on use it), and notes
    in `sent` (IP -> [time.time()]) when a watch event naming a Pod's IP was written."""
    totals = {}
    lock = threading.Lock()
    pod_ip = re.compile(rb'"podIP": "([^"]+)"')
    base = api.httpd.RequestHandlerClass

    class Counter:
        def __init__(self, raw, handler):
            self._raw, self._handler = raw, handler

        def write(self, data):
            n = self._raw.write(data)
            now = time.time()
            kind = request_kind("GET", getattr(self._handler, "path", ""))
            with lock:
                totals[kind] = totals.get(kind, 0) + len(data)
                if kind == "WATCH pods":
                    for ip in pod_ip.findall(data):
                        sent.setdefault(ip.decode(), []).append(now)
            return n

        def __getattr__(self, name):
            return getattr(self._raw, name)

    class Counting(base):
        def setup(self):
            super().setup()
            self.wfile = Counter(self.wfile, self)

    api.httpd.RequestHandlerClass = Counting

    def snapshot():
        with lock:
            return dict(totals)
    return snapshot


def request_kind(method, path_and_query):
    path, _, query = path_and_query.partition("?")
    watch = re.search(r"(^|&)watch=(1|true)(&|$)", query) is not None
    if path.endswith("/pods"):
        return "WATCH pods" if watch else "LIST pods"
    if path.endswith("/inferencepools"):
        return "WATCH pools" if watch else "LIST pools"
    if "/inferencepools/" in path:
        return "GET pool"
    if path.endswith(("/inferenceobjectives", "/inferencemodelrewrites")):
        return "WATCH objectives/rewrites" if watch else "LIST objectives/rewrites"
    return "%s other" % method


def empty_crds(api):
    """serve also lists and watches InferenceObjectives and InferenceModelRewrites (two API groups
    each); fake_kube answers them 404, which serve retries with backoff. Here they exist and are
    empty: a LIST answers no items, a WATCH stays open with bookmarks only (no pool events happen
    in this benchmark, so the fake's pool-event stream they get is quiet)."""
    get = api._get

    def _get(path, query):
        if path.endswith(("/inferenceobjectives", "/inferencemodelrewrites")):
            if (query.get("watch") or [""])[0] in ("1", "true"):
                return "watch"
            return 200, {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": str(api.rv)}, "items": []}
        return get(path, query)
    api._get = _get


class Churn:
    """N Pods on 127.x.y.z; each step changes one Pod, in turn: a Ready Pod is replaced (deleted, a
    new Pod with a new name and IP added Ready), a Ready Pod turns not Ready, the Pod that has been
    not Ready longest turns Ready again. `down` Pods start not Ready, so that each stays not Ready
    for `down` x 3 steps: long enough for either mode to see it leave before it comes back."""

    def __init__(self, fk, n, down, seed):
        self.fk = fk
        self.rng = random.Random(seed)
        self.next_ip = 0
        self.next_name = 0
        self.pods = {}  # name -> (ip, ready)
        self.down = []  # names of not-Ready Pods, longest first
        for i in range(n):
            name = self._name()
            self.pods[name] = (self._ip(), i >= down)
            if i < down:
                self.down.append(name)
        self.step_no = 0

    def _ip(self):
        i = self.next_ip
        self.next_ip += 1
        return "127.%d.%d.%d" % (1 + i // 62500, (i // 250) % 250, 1 + i % 250)

    def _name(self):
        self.next_name += 1
        return "vllm-%05d" % self.next_name

    def objects(self):
        return [self.fk.pod(name, ip, ready=ready) for name, (ip, ready) in self.pods.items()]

    def step(self):
        """Changes one Pod; returns ("appear" | "leave", its IP)."""
        kind = ("replace", "unready", "ready")[self.step_no % 3]
        self.step_no += 1
        if kind == "ready" and self.down:
            name = self.down.pop(0)
            self.pods[name] = (self.pods[name][0], True)
            return "appear", self.pods[name][0]
        down = set(self.down)
        name = self.rng.choice([n for n in self.pods if n not in down])
        ip = self.pods[name][0]
        if kind != "replace":
            self.pods[name] = (ip, False)
            self.down.append(name)
            return "leave", ip
        del self.pods[name]
        new_ip = self._ip()
        self.pods[self._name()] = (new_ip, True)
        return "appear", new_ip


def run_cell(fk, mode, n, port, args, work, cell_no):
    api = fk.FakeApiServer(fk.V1, port)
    api.bookmark_every = args.bookmark_every
    empty_crds(api)
    sent = {}
    bytes_by_kind = count_bytes(api, sent)
    step_every = 60.0 / (args.churn * n)
    down = max(1, int(math.ceil(args.hold / (3 * step_every))))
    churn = Churn(fk, n, down, seed=cell_no)
    ready = n - down
    api.set(pods=churn.objects())
    api.compact()  # forget the N ADDED events: serve lists them, and watches from that version
    ready_file = os.path.join(work, "ready-%d.json" % cell_no)
    log_path = os.path.join(work, "serve-%d-%s-%d.log" % (cell_no, mode, n))
    cmd = [args.eppctl, "serve", "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0",
           "--listen-address", "127.0.0.1", "--ready-file", ready_file, "--secure-serving=false",
           "--pool-name", fk.POOL, "--pool-namespace", fk.NS, "--kube-api-server", api.url,
           "--refresh-metrics-interval", args.refresh_metrics_interval, "--scrape-timeout", "500ms",
           "--metrics-staleness-threshold", "%gs" % (3 * seconds(args.refresh_metrics_interval))]
    if args.no_metrics_auth:  # builds that authenticate /metrics by TokenReview by default
        cmd.append("--metrics-endpoint-auth=false")
    if mode.startswith("list"):  # "list" (every --resync) or "list:DURATION"
        cmd += ["--no-pool-watch", "--pool-resync-interval", mode.partition(":")[2] or args.resync]
    serve = None
    log = open(log_path, "w")
    try:
        serve = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + 60
        while not os.path.exists(ready_file) or os.path.getsize(ready_file) == 0:
            if serve.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("eppctl serve did not start (exit %s):\n%s" % (serve.poll(), open(log_path).read()[-3000:]))
            time.sleep(0.05)
        time.sleep(0.05)
        metrics_url = "http://127.0.0.1:%d/metrics" % json.load(open(ready_file))["metrics"]

        def read_metrics():
            with urllib.request.urlopen(metrics_url, timeout=10) as r:
                return r.read().decode()

        def present(text, ip):
            return ('epp_endpoint_waiting_queue_size{endpoint="%s:%d"}' % (ip, port)) in text

        def endpoints(text):
            m = re.search(r"^epp_endpoints (\S+)", text, re.M)
            return int(float(m.group(1))) if m else None

        while endpoints(read_metrics()) != ready:
            if serve.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("serve never had %d endpoints:\n%s" % (ready, open(log_path).read()[-3000:]))
            time.sleep(0.1)
        time.sleep(args.warmup)

        pending = {}  # ip -> [kind, t_set (monotonic), wall_set, t_log (monotonic or None)]
        appear, leave, appear_m, leave_m, appear_s, leave_s = [], [], [], [], [], []
        pods_path = "/api/v1/namespaces/%s/pods" % fk.NS

        def left_api(ip, mono_set, wall_set):
            """When the change left the API server (time.time()): the watch event naming the
            Pod's IP, or the first LIST of the Pods taken after the change."""
            if mode == "watch":
                return next((t for t in list(sent.get(ip, ())) if t >= wall_set), None)
            lists = [c[3] for c in api.lists(pods_path, since=mono_set)]
            return wall_set + (lists[0] - mono_set) if lists else None

        unresolved = superseded = 0
        tail = open(log_path, "rb")
        tail.seek(0, os.SEEK_END)
        partial = b""
        t0 = time.monotonic()
        c0 = cpu_seconds(serve.pid)
        b0 = bytes_by_kind()
        polls = 0
        rng = random.Random(cell_no)
        next_step = t0 + step_every * rng.uniform(0, 1)
        next_read = 0.0
        end = t0 + args.window
        while True:
            now = time.monotonic()
            if now >= end:
                break
            if now >= next_step:
                kind, ip = churn.step()
                api.set(pods=churn.objects())
                mono, wall = time.monotonic(), time.time()
                if ip in pending:
                    superseded += 1
                pending[ip] = [kind, mono, wall, None]
                # An even rate, each step's phase drawn at random: a fixed period would lock onto
                # the list interval's phase (6 s at 100 Pods is three 2 s intervals).
                next_step += step_every * rng.uniform(0.5, 1.5)
                continue
            # serve's log: the reload that added or removed the endpoint, at its own timestamp.
            chunk = tail.read()
            if chunk:
                lines = (partial + chunk).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    m = RELOAD.search(line.decode(errors="replace"))
                    if not m:
                        continue
                    wall_log = log_time(m.group(1))
                    for what, group in (("appear", m.group(2)), ("leave", m.group(3))):
                        for addr in group.split(", "):
                            ip = addr.rsplit(":", 1)[0]
                            p = pending.get(ip)
                            if p and p[0] == what and p[3] is None:
                                p[3] = time.monotonic()
                                (appear if what == "appear" else leave).append(max(0.0, wall_log - p[2]))
                                origin = left_api(ip, p[1], p[2])
                                if origin is not None:
                                    (appear_s if what == "appear" else leave_s).append(max(0.0, wall_log - origin))
            # One /metrics read confirms what the log announced (one read per batch, either mode).
            logged = [ip for ip, p in pending.items() if p[3] is not None]
            if logged and now >= next_read:
                text = read_metrics()
                polls += 1
                t = time.monotonic()
                for ip in logged:
                    p = pending[ip]
                    if present(text, ip) == (p[0] == "appear"):
                        (appear_m if p[0] == "appear" else leave_m).append(t - p[1])
                        del pending[ip]
                next_read = t + 0.02
            for ip in [ip for ip, p in pending.items() if now - p[1] > 30]:
                unresolved += 1
                del pending[ip]
            time.sleep(min(0.005, max(0.0, min(next_step, end) - time.monotonic())))
        t1 = time.monotonic()
        c1 = cpu_seconds(serve.pid)
        b1 = bytes_by_kind()
        rss = rss_mib(serve.pid)
        minutes = (t1 - t0) / 60
        counts = {}
        with api.lock:
            calls = [c for c in api.calls if t0 <= c[3] < t1]
        for method, path, query, _ in calls:
            kind = request_kind(method, path + ("?watch=1" if (query.get("watch") or [""])[0] in ("1", "true") else ""))
            counts[kind] = counts.get(kind, 0) + 1
        # The cost of one read of serve's /metrics, to take the window's reads out of its CPU.
        r0 = cpu_seconds(serve.pid)
        renders = 40
        for _ in range(renders):
            read_metrics()
        render_s = (cpu_seconds(serve.pid) - r0) / renders
        page = len(read_metrics())
        final = read_metrics()
        kube = {name: float(v) for name, v in re.findall(r"^(epp_kube_\w+) (\S+)", final, re.M)}
        cores = (c1 - c0) / (t1 - t0)
        cell = {
            "mode": mode, "pods": n, "window_s": round(t1 - t0, 1), "changes": churn.step_no,
            "requests_per_min": {k: round(v / minutes, 1) for k, v in sorted(counts.items())},
            "api_kib_per_min": {k: round((b1.get(k, 0) - b0.get(k, 0)) / 1024 / minutes, 1)
                                for k in sorted(set(b1) | set(b0))},
            "serve_cpu_s": round(c1 - c0, 2),
            "serve_cores": round(cores, 4),
            "metrics_reads": polls, "metrics_read_cpu_ms": round(1000 * render_s, 2),
            "metrics_page_kib": round(page / 1024, 1),
            "serve_cores_net": round(max(0.0, cores - polls * render_s / (t1 - t0)), 4),
            "serve_rss_mib": round(rss, 1),
            "appear_n": len(appear), "appear_ms": ms(appear), "appear_metrics_ms": ms(appear_m),
            "appear_from_api_ms": ms(appear_s),
            "leave_n": len(leave), "leave_ms": ms(leave), "leave_metrics_ms": ms(leave_m),
            "leave_from_api_ms": ms(leave_s),
            "pending_at_end": len(pending), "unresolved": unresolved, "superseded": superseded, "load": load_avg(),
            "serve_kube": kube,
        }
        tail.close()
        return cell
    finally:
        stop(serve)
        log.close()
        api.close()


def fmt_range(values, digits=1):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    f = "%%.%df" % digits
    return f % lo if f % lo == f % hi else (f % lo) + "-" + (f % hi)


def table(cells):
    kinds = sorted({k for c in cells for k in c["requests_per_min"]})
    rows = []

    def lat(cs, key):
        return " / ".join(fmt_range([c[key][i] for c in cs], 0) for i in range(3))

    for n in sorted({c["pods"] for c in cells}):
        for mode in sorted({c["mode"] for c in cells}, key=lambda m: (m != "watch", m)):
            cs = [c for c in cells if c["pods"] == n and c["mode"] == mode]
            if not cs:
                continue
            req = "; ".join("%s %s" % (k, fmt_range([c["requests_per_min"].get(k, 0) for c in cs])) for k in kinds
                            if any(c["requests_per_min"].get(k) for c in cs)) or "none"
            kib = fmt_range([sum(c["api_kib_per_min"].values()) for c in cs], 0)
            rows.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d |" % (
                mode, n, req, kib, fmt_range([c["serve_cores"] for c in cs], 3),
                fmt_range([c["serve_cores_net"] for c in cs], 3), fmt_range([c["serve_rss_mib"] for c in cs], 0),
                lat(cs, "appear_metrics_ms"), lat(cs, "appear_ms"), lat(cs, "appear_from_api_ms"),
                lat(cs, "leave_metrics_ms"), sum(c["appear_n"] for c in cs)))
    head = ("| mode | Pods | API requests / min | API KiB / min | serve cores | net of /metrics reads | RSS MiB "
            "| Ready -> in /metrics (ms) | Ready -> installed, log (ms) | event or LIST sent -> installed (ms) "
            "| not Ready -> gone from /metrics (ms) | Ready samples |\n"
            "|---|---:|---|---:|---:|---:|---:|---|---|---|---|---:|")
    return head + "\n" + "\n".join(rows) + "\n\nLatencies: p50 / p90 / max, each the range over rounds."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--eppctl", default=os.path.join(ROOT, "build", "cli", "eppctl"))
    ap.add_argument("--pods", default="100,1000", help="comma-separated Pod counts")
    ap.add_argument("--modes", default="watch,list",
                    help="comma-separated, alternated: watch, list (--no-pool-watch, every --resync), list:DURATION")
    ap.add_argument("--window", type=float, default=30, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=3, help="seconds after serve has every Pod")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--churn", type=float, default=0.10, help="share of the Pods changed per minute")
    ap.add_argument("--resync", default="2s", help="--pool-resync-interval of the list mode")
    ap.add_argument("--refresh-metrics-interval", default="10s",
                    help="serve's scrape interval (1,000 Pods at 10s: 100 reads a second, alike in both modes)")
    ap.add_argument("--hold", type=float, default=10, help="seconds a Pod stays not Ready before it turns Ready again")
    ap.add_argument("--bookmark-every", type=float, default=60,
                    help="seconds between the API server's BOOKMARK events on a watch (kube-apiserver: about a minute)")
    ap.add_argument("--json", help="write every cell here")
    ap.add_argument("--responder", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.responder is not None:
        return responder(args.responder)

    sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
    import fake_kube as fk

    resp = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--responder", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    cells = []
    try:
        line = resp.stdout.readline()
        m = re.match(r"port (\d+)", line)
        if not m:
            raise RuntimeError("responder did not start: %r %s" % (line, resp.stderr.read()))
        port = int(m.group(1))
        with urllib.request.urlopen("http://127.3.2.1:%d/metrics" % port, timeout=5) as r:
            assert r.read() == PAGE, "the responder does not answer on 127.3.2.1"
        work = tempfile.mkdtemp(prefix="kube_watch-")
        # A private copy: another build may replace the binary during the run.
        copy = os.path.join(work, "eppctl")
        shutil.copy2(args.eppctl, copy)
        with open(copy, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:12]
        print("eppctl %s (sha256 %s, copied to %s); load %s" % (args.eppctl, digest, work, load_avg()), flush=True)
        args.eppctl = copy
        usage = subprocess.run([copy, "serve", "--help"], capture_output=True, text=True).stdout
        args.no_metrics_auth = "--metrics-endpoint-auth" in usage
        modes = args.modes.split(",")
        cell_no = 0
        for rnd in range(args.rounds):
            for n in (int(x) for x in args.pods.split(",")):
                order = modes if rnd % 2 == 0 else modes[::-1]
                for mode in order:
                    cell_no += 1
                    for attempt in range(2):  # eppctl may be rebuilt under us: one retry
                        try:
                            cell = run_cell(fk, mode, n, port, args, work, cell_no)
                            break
                        except (RuntimeError, OSError) as e:
                            if attempt:
                                raise
                            print("cell failed, retrying: %s" % str(e)[-500:], flush=True)
                            time.sleep(2)
                    cell["round"] = rnd + 1
                    cells.append(cell)
                    print(json.dumps(cell), flush=True)
    finally:
        resp.send_signal(signal.SIGTERM)
        try:
            resp.wait(timeout=10)
        except subprocess.TimeoutExpired:
            resp.kill()
            resp.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(cells, f, indent=1)
    print()
    print(table(cells))


if __name__ == "__main__":
    main()
