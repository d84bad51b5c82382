"""Shared pytest setup for the pyepp suites.

ctest runs these with PYTHONPATH=<build>/python:<source>/python (tests/CMakeLists.txt). Run by
hand, the same paths are added here: the source tree's python/ and <EPP_BUILD_DIR>/python
(default <source>/build/python), so `python3 -m pytest tests/python` works after building the
_pyepp target.
"""

from __future__ import annotations

import http.server
import importlib.machinery
import importlib.util
import json
import os
import sys
import threading
from pathlib import Path
from typing import Callable, Dict, Iterator, List

import pytest

SOURCE_DIR = Path(os.environ.get("EPP_SOURCE_DIR", Path(__file__).resolve().parents[2]))


def _make_importable() -> None:
    if importlib.util.find_spec("pyepp") is None:
        sys.path.insert(0, str(SOURCE_DIR / "python"))
    spec = importlib.util.find_spec("pyepp")
    packaged = spec is not None and spec.origin is not None and any(
        (Path(spec.origin).parent / f"_pyepp{suffix}").exists() for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )
    if not packaged and importlib.util.find_spec("_pyepp") is None:
        build_dir = Path(os.environ.get("EPP_BUILD_DIR", SOURCE_DIR / "build"))
        sys.path.insert(0, str(build_dir / "python"))


_make_importable()
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "helpers"))  # shared fakes (fake_kube)


def shared_fixtures_dir() -> Path:
    """Real captures kept outside the project (never copied in); may be absent."""
    default = SOURCE_DIR.parent / "shared" / "fixtures"
    return Path(os.environ.get("EPP_SHARED_FIXTURES", default))


@pytest.fixture(scope="session")
def source_dir() -> Path:
    return SOURCE_DIR


# A vLLM V1 /metrics page written for these tests.
VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="test-model"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="test-model"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="test-model"} 0.25
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a-lora, b-lora",waiting_lora_adapters="c-lora"} 1.7e+09
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",num_gpu_blocks="4096"} 1.0
"""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # Concurrent checks open many connections at once; the default backlog of 5 overflows and
    # the kernel then delays connects by a SYN retransmission (1 s).
    request_queue_size = 128


class FakeModelServer:
    """An OpenAI-compatible model server on loopback, port 0, answering what `check` probes.

    It runs on a Python thread, so `check` can only get answers if the native code releases
    the GIL while it waits on the network.
    """

    def __init__(self, metrics_text: str = VLLM_METRICS, metrics_path: str = "/metrics") -> None:
        self.metrics_text = metrics_text
        self.metrics_path = metrics_path
        self.requests: List[Dict[str, object]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _record(self, body: bytes) -> None:
                with server._lock:
                    server.requests.append(
                        {"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body}
                    )

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._record(b"")
                if self.path == server.metrics_path:
                    self._send(200, "text/plain; version=0.0.4", server.metrics_text.encode())
                elif self.path == "/v1/models":
                    body = {"object": "list", "data": [{"id": "test-model", "object": "model"}]}
                    self._send(200, "application/json", json.dumps(body).encode())
                else:
                    self._send(404, "text/plain", b"not found")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self._record(body)
                request = json.loads(body)
                if self.path == "/v1/completions":
                    answer = {"object": "text_completion", "choices": [{"index": 0, "text": "OK"}],
                              "usage": {"prompt_tokens": 3}}
                    self._send(200, "application/json", json.dumps(answer).encode())
                elif self.path == "/v1/chat/completions" and request.get("stream"):
                    chunk = {"object": "chat.completion.chunk",
                             "choices": [{"index": 0, "delta": {"content": "OK"}}]}
                    sse = f"data: {json.dumps(chunk)}\n\ndata: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
                    self._send(200, "text/event-stream", sse.encode())
                elif self.path == "/v1/chat/completions":
                    answer = {"object": "chat.completion",
                              "choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}}],
                              "usage": {"prompt_tokens": 9}}
                    self._send(200, "application/json", json.dumps(answer).encode())
                else:
                    self._send(404, "text/plain", b"not found")

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-model-server", daemon=True
        )

    def start(self) -> "FakeModelServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def paths(self) -> List[str]:
        with self._lock:
            return [str(r["path"]) for r in self.requests]


@pytest.fixture
def vllm_metrics() -> str:
    return VLLM_METRICS


@pytest.fixture
def make_fake_server() -> Iterator[Callable[..., FakeModelServer]]:
    """Starts FakeModelServer(**kwargs) servers, stopped after the test."""
    servers: List[FakeModelServer] = []

    def make(**kwargs: str) -> FakeModelServer:
        servers.append(FakeModelServer(**kwargs).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def fake_server(make_fake_server: Callable[..., FakeModelServer]) -> FakeModelServer:
    return make_fake_server()


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL nobody listens on (the port was just released)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
