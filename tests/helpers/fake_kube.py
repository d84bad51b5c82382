"""A Kubernetes API server on 127.0.0.1 for discovery tests (eppctl serve --pool-name, pyepp.serve
pool_name=): it answers GET of one InferencePool (v1 or v1alpha2) and the PodList of namespace
`NS`, records every request, and can be told to fail every answer or to delay the pool GET; `imports` holds InferencePoolImport objects by name (inference_pool_import()).
Shared by tests/cli and tests/python (both conftests put tests/helpers on sys.path)."""
import http.server
import json
import threading
import time
import urllib.parse

NS = "ns1"
POOL = "llama"
V1 = "inference.networking.k8s.io"
V1ALPHA2 = "inference.networking.x-k8s.io"


def pod(name, ip, ready=True, deleting=False, labels=None):
    meta = {"name": name, "namespace": NS, "labels": labels or {"app": "vllm"}}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {"metadata": meta,
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pool_object(group, port):
    if group == V1:
        spec = {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": port}],
                "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}
        version = "v1"
    else:
        spec = {"selector": {"app": "vllm"}, "targetPortNumber": port, "extensionRef": {"name": "epp"}}
        version = "v1alpha2"
    return {"apiVersion": "%s/%s" % (group, version), "kind": "InferencePool",
            "metadata": {"name": POOL, "namespace": NS, "resourceVersion": "1"}, "spec": spec}


def inference_pool_import(name, clusters_by_controller):
    """An InferencePoolImport as GIE's v1alpha1 CRD has it: status only, per controller the
    exporting clusters and (here, one) local parent Gateway."""
    controllers = [{"name": controller, "exportingClusters": [{"name": c} for c in clusters],
                    "parents": [{"parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                                               "name": "inference-gateway", "namespace": NS}}],
                    "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
                                    "lastTransitionTime": "2026-11-30T00:00:00Z", "message": ""}]}
                   for controller, clusters in clusters_by_controller.items()]
    return {"apiVersion": "inference.networking.x-k8s.io/v1alpha1", "kind": "InferencePoolImport",
            "metadata": {"name": name, "namespace": NS, "resourceVersion": "7"}, "status": {"controllers": controllers}}


class FakeApiServer:
    """Answers GET for one InferencePool and the Pods of NS; `fail` makes every answer that status."""

    def __init__(self, group, port):
        self.lock = threading.Lock()
        self.group = group
        self.pool = pool_object(group, port)
        self.pods = []
        self.imports = {}  # name -> InferencePoolImport object
        self.fail = None
        self.garbage = None  # bytes: every answer is 200 with this body (not JSON)
        self.pool_delay = 0  # seconds the pool GET waits before answering
        self.pool_get = threading.Event()  # set when a delayed pool GET arrives
        self.requests = []  # (path, query dict, Authorization)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                with outer.lock:
                    outer.requests.append((url.path, urllib.parse.parse_qs(url.query),
                                           self.headers.get("Authorization")))
                    fail = outer.fail
                    garbage = outer.garbage
                    delay = outer.pool_delay
                    pool_path = "/apis/%s/%s/namespaces/%s/inferencepools/%s" % (
                        outer.group, outer.pool["apiVersion"].split("/")[1], NS, POOL)
                    if fail:
                        status, body = fail, {"kind": "Status", "reason": "InternalError", "message": "etcd is down",
                                              "code": fail}
                    elif url.path == pool_path:
                        status, body = 200, outer.pool
                        if delay:
                            outer.pool_get.set()
                    elif url.path.startswith("/apis/inference.networking.x-k8s.io/v1alpha1/namespaces/%s/"
                                             "inferencepoolimports/" % NS) and url.path.rsplit("/", 1)[1] in outer.imports:
                        status, body = 200, outer.imports[url.path.rsplit("/", 1)[1]]
                    elif url.path == "/api/v1/namespaces/%s/pods" % NS:
                        status, body = 200, {"kind": "PodList", "apiVersion": "v1", "items": list(outer.pods)}
                    else:
                        status, body = 404, {"kind": "Status", "reason": "NotFound", "code": 404,
                                             "message": "the server could not find the requested resource"}
                if delay and url.path == pool_path:
                    time.sleep(delay)
                data = json.dumps(body).encode() if garbage is None else garbage
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client is gone (a delayed answer after serve exited)
                    pass

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def set(self, pods=None, fail=None):
        with self.lock:
            if pods is not None:
                self.pods = pods
            self.fail = fail

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
