"""`eppctl serve`'s metrics port against hostile clients (#41 item 2): a huge POST, slow header
senders. The server is the built binary on loopback (files for endpoints, no model server needed);
its RSS is read from /proc/PID/status. Every wait is bounded; every socket is closed and serve is
stopped by its fixture.
"""
import http.client
import select
import socket
import threading
import time
import urllib.error
import urllib.request

from test_eppctl_serve import pool, serve  # noqa: F401  (fixtures)

MIB = 1024 * 1024


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS for pid %d" % pid)


def get(port, path, timeout=3):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def post_stream(port, total, pid, chunk=MIB, limit_s=30, stop_on_answer=True):
    """Streams a POST of `total` declared bytes in chunks until the server answers
    (`stop_on_answer`) or closes. Returns (bytes of body sent, the answer's first bytes, peak RSS
    of `pid` in MiB)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    peak = rss_mib(pid)
    answer = b""
    sent = 0
    try:
        sock.sendall(b"POST /metrics HTTP/1.1\r\nHost: epp\r\nContent-Type: application/octet-stream\r\n"
                     b"Content-Length: %d\r\n\r\n" % total)
        data = b"x" * chunk
        deadline = time.monotonic() + limit_s
        while sent < total and time.monotonic() < deadline:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable and stop_on_answer:
                break  # an answer (or the close) arrived
            try:
                sock.sendall(data)
            except (BrokenPipeError, ConnectionResetError, socket.timeout):
                break
            sent += len(data)
            if sent % (16 * MIB) == 0:
                peak = max(peak, rss_mib(pid))
        try:
            while len(answer) < 4096:
                b = sock.recv(4096)
                if not b:
                    break
                answer += b
                if b"\r\n\r\n" in answer:
                    break
        except (ConnectionResetError, socket.timeout):
            pass
        peak = max(peak, rss_mib(pid))
    finally:
        sock.close()
    return sent, answer, peak


def test_a_200_mib_post_does_not_grow_rss(serve, pool):  # noqa: F811
    s = serve("--endpoints", pool)
    pid = s.proc.pid
    for _ in range(3):  # the first renders allocate what later ones reuse
        assert get(s.metrics_port, "/metrics")[0] == 200
    before = rss_mib(pid)
    # A client that stops when answered, then one that keeps sending until the server closes.
    for stop_on_answer in (True, False):
        sent, answer, peak = post_stream(s.metrics_port, 200 * MIB, pid, stop_on_answer=stop_on_answer)
        after = rss_mib(pid)
        print("stop_on_answer=%s: RSS before %.1f MiB, peak %.1f MiB, after %.1f MiB; %.2f MiB of body sent"
              % (stop_on_answer, before, peak, after, sent / MIB))
        # The server answers after the head and never reads the body into memory.
        assert answer == b"" or answer.startswith(b"HTTP/1.1 405 "), answer[:200]
        assert sent < 64 * MIB, sent
        assert peak - before <= 50, (before, peak)
        assert after - before <= 50, (before, after)
    # And keeps serving.
    status, body = get(s.metrics_port, "/metrics")
    assert status == 200 and b"epp_metrics_http_rejected_total{reason=\"method\"} 2" in body, body[-2000:]


def test_slow_header_senders_do_not_block_metrics(serve, pool):  # noqa: F811
    s = serve("--endpoints", pool)
    slow = []
    stop = threading.Event()
    trickle = None
    try:
        for _ in range(8):
            c = socket.create_connection(("127.0.0.1", s.metrics_port), timeout=5)
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: epp\r\n")
            slow.append(c)

        def send_lines():  # one header line a second on each
            n = 0
            while not stop.wait(1.0):
                n += 1
                for c in slow:
                    try:
                        c.sendall(b"X-Slow-%d: y\r\n" % n)
                    except OSError:
                        pass

        trickle = threading.Thread(target=send_lines, daemon=True)
        trickle.start()
        time.sleep(1.5)
        for path, want in (("/metrics", 200), ("/healthz", 200), ("/debug/decisions", 404), ("/metrics", 200)):
            t0 = time.monotonic()
            status, _ = get(s.metrics_port, path, timeout=3)
            took = time.monotonic() - t0
            assert status == want, (path, status)
            assert took < 3, (path, took)
        # A keep-alive scraper: two requests on one connection.
        conn = http.client.HTTPConnection("127.0.0.1", s.metrics_port, timeout=3)
        try:
            for _ in range(2):
                conn.request("GET", "/metrics")
                r = conn.getresponse()
                assert r.status == 200 and r.getheader("Content-Type").startswith("text/plain; version=0.0.4")
                r.read()
        finally:
            conn.close()
    finally:
        stop.set()
        if trickle:
            trickle.join(timeout=5)
        for c in slow:
            c.close()
