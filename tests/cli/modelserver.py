"""A tiny OpenAI-compatible model server for CLI tests: real HTTP on 127.0.0.1, an ephemeral port.

Each server is configured with a `behaviour` dict; the tests flip entries to produce every failure
`eppctl check` must report (HTTP 500, garbage, a huge body, a slow answer, wrong types...).
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VLLM_METRICS = """# HELP vllm:num_requests_waiting Number of requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="tiny"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="tiny"} 3
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="tiny"} 0.25
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 1.7e9
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="512"} 1
"""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep test output clean
        pass

    def _send(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        b = self.server.behaviour
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        if self.path == b.get("metrics_path", "/metrics"):
            if b.get("metrics_delay"):
                time.sleep(b["metrics_delay"])
            if b.get("metrics_huge_mib"):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(b["metrics_huge_mib"] << 20))
                self.end_headers()
                chunk = (b"a 1\n" * (1 << 18))  # 1 MiB
                try:
                    for _ in range(b["metrics_huge_mib"]):
                        self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                return
            self._send(b.get("metrics_status", 200), b.get("metrics", VLLM_METRICS), "text/plain")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"object": "list", "data": [{"id": m, "object": "model"} for m in b.get("models", ["tiny"])]}))
        else:
            self._send(404, '{"error": "not found"}')

    def do_POST(self):
        b = self.server.behaviour
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        self.server.seen.append((self.command, self.path, dict(self.headers), body))
        if b.get("api_status", 200) != 200:
            self._send(b["api_status"], '{"error": {"message": "boom", "type": "server_error"}}')
            return
        if self.path == "/v1/completions":
            self._send(200, json.dumps({"id": "c1", "object": "text_completion", "model": body["model"],
                                        "choices": [{"index": 0, "text": "OK", "finish_reason": "length"}],
                                        "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}}))
        elif self.path == "/v1/chat/completions":
            if body.get("stream"):
                chunks = [{"id": "s1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": t}}]}
                          for t in ("O", "K")]
                sse = "".join("data: " + json.dumps(c) + "\n\n" for c in chunks) + "data: [DONE]\n\n"
                self._send(200, sse, "text/event-stream")
            else:
                self._send(200, json.dumps({"id": "x1", "object": "chat.completion", "model": body["model"],
                                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}}]}))
        else:
            self._send(404, '{"error": "not found"}')


class ModelServer:
    """Context manager: `with ModelServer(metrics=...) as s: s.url`."""

    def __init__(self, **behaviour):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.behaviour = behaviour
        self.httpd.seen = []
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.httpd.server_address[1]

    @property
    def seen(self):
        return self.httpd.seen

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
