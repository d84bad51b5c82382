"""A Kubernetes API server on 127.0.0.1 for discovery, watch and leader-election tests (eppctl serve
--pool-name, epp, pyepp.serve pool_name=): one InferencePool (v1 or v1alpha2), the Pods of namespace
`NS` (list and watch), Leases, InferencePoolImport objects by name (inference_pool_import());
FakeApiServer says what it answers.
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


def _selector_matches(selector, labels):
    """Kubernetes label selector text (=, ==, !=, in, notin, exists, !exists) against labels."""
    if not selector:
        return True
    parts, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    parts.append(cur)
    for part in (p.strip() for p in parts):
        if part.startswith("!"):
            if part[1:].strip() in labels:
                return False
        elif " notin " in part or " in " in part:
            key, op, rest = part.partition(" notin ") if " notin " in part else part.partition(" in ")
            values = {v.strip() for v in rest.strip().strip("()").split(",")}
            has = labels.get(key.strip()) in values
            if (op.strip() == "in") != has:
                return False
        elif "!=" in part:
            key, _, value = part.partition("!=")
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in part:
            key, _, value = part.replace("==", "=").partition("=")
            if labels.get(key.strip()) != value.strip():
                return False
        elif part.strip() not in labels:
            return False
    return True


class FakeApiServer:
    """A Kubernetes API server on 127.0.0.1 for discovery, watch and leader-election tests.

    - GET of the InferencePool (v1 or v1alpha2), lists of InferencePools (fieldSelector
      metadata.name) and Pods of NS (labelSelector), each answered with metadata.resourceVersion;
    - watches of both (`watch=1`): a chunked stream of the events after the given resourceVersion,
      BOOKMARK events every `bookmark_every` seconds when asked for, the stream ended after
      timeoutSeconds; a resourceVersion older than the retained events answers 410 Gone;
    - Leases (coordination.k8s.io/v1): GET, POST (409 when it exists), PUT (409 when the
      resourceVersion moved);
    - `set(pods=...)` turns the difference into ADDED / MODIFIED / DELETED events; `fail` makes
      every answer that status (and ends open watches), `garbage` every answer a 200 with that body;
    - `requests` records (path, query dict, Authorization) of every request, `calls` (method,
      path, query dict, monotonic time)."""

    def __init__(self, group, port):
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.group = group
        self.rv = 1
        self.pool = pool_object(group, port)
        self._pods = {}  # name -> pod object (with resourceVersion)
        self.events = []  # (rv, kind, type, object); kind "pods", "pools" or a custom collection path
        self.compacted = 0  # events with rv <= this are gone: a watch from there answers 410
        self.imports = {}  # name -> InferencePoolImport object
        self.leases = {}  # name -> Lease object
        self.custom = {}  # collection path -> {name: object} (InferenceObjectives, InferenceModelRewrites)
        self.fail = None
        self.garbage = None  # bytes: every answer is 200 with this body (not JSON)
        self.pool_delay = 0  # seconds the pool GET waits before answering
        self.pool_get = threading.Event()  # set when a delayed pool GET arrives
        self.bookmark_every = 1.0
        self.generation = 0  # bumped by failures: open watches end
        self.requests = []  # (path, query dict, Authorization)
        self.calls = []  # (method, path, query dict, time.monotonic())
        self.closing = False
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self, status, body):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client is gone (a delayed answer after serve exited)
                    pass

            def _record(self, method):
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
                outer.requests.append((url.path, query, self.headers.get("Authorization")))
                outer.calls.append((method, url.path, query, time.monotonic()))
                return url, query

            def _body(self):
                n = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(n) or b"{}")

            def do_GET(self):
                with outer.lock:
                    url, query = self._record("GET")
                    fail, garbage, delay = outer.fail, outer.garbage, outer.pool_delay
                    answer = None if fail or garbage is not None else outer._get(url.path, query)
                if fail:
                    return self._answer(fail, {"kind": "Status", "reason": "InternalError",
                                               "message": "etcd is down", "code": fail})
                if garbage is not None:
                    return self._answer(200, garbage)
                if answer == "watch":
                    return self._watch(url.path, query)
                status, body = answer
                if delay and url.path == outer.pool_path():
                    outer.pool_get.set()
                    time.sleep(delay)
                self._answer(status, body)

            def do_POST(self):
                with outer.lock:
                    url, _ = self._record("POST")
                    status, body = outer._lease_write("POST", url.path, self._body())
                self._answer(status, body)

            def do_PUT(self):
                with outer.lock:
                    url, _ = self._record("PUT")
                    status, body = outer._lease_write("PUT", url.path, self._body())
                self._answer(status, body)

            def _watch(self, path, query):
                kind = "pods" if path.endswith("/pods") else path if path in outer.custom else "pools"
                since = int((query.get("resourceVersion") or ["0"])[0] or 0)
                timeout = float((query.get("timeoutSeconds") or ["300"])[0])
                bookmarks = (query.get("allowWatchBookmarks") or ["false"])[0] == "true"
                selector = (query.get("labelSelector") or [""])[0]
                field = (query.get("fieldSelector") or [""])[0]
                with outer.lock:
                    if since and since < outer.compacted:
                        gone = True
                    else:
                        gone = False
                        generation = outer.generation
                if gone:
                    return self._answer(410, {"kind": "Status", "reason": "Expired", "code": 410,
                                              "message": "too old resource version: %d" % since})
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    deadline = time.monotonic() + timeout
                    next_bookmark = time.monotonic() + outer.bookmark_every
                    sent = since
                    while True:
                        with outer.lock:
                            outer.cond.wait_for(lambda: outer.closing or outer.generation != generation or
                                                any(e[0] > sent for e in outer.events),
                                                timeout=0.05)
                            if outer.closing or outer.generation != generation:
                                break
                            pending = [e for e in outer.events if e[0] > sent]
                            rv_now = outer.rv
                        for rv, ekind, etype, obj in pending:
                            sent = rv
                            if ekind != kind or not _selector_matches(selector, obj["metadata"].get("labels", {})):
                                continue
                            if field and field != "metadata.name=" + obj["metadata"]["name"]:
                                continue
                            self._chunk({"type": etype, "object": obj})
                        now = time.monotonic()
                        if bookmarks and now >= next_bookmark:
                            self._chunk({"type": "BOOKMARK", "object": {
                                "kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv_now)}}})
                            sent = max(sent, rv_now)
                            next_bookmark = now + outer.bookmark_every
                        if now >= deadline:
                            break
                    self.wfile.write(b"0\r\n\r\n")
                    self.wfile.flush()
                except OSError:
                    pass
                self.close_connection = True

            def _chunk(self, event):
                data = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    # ---- state (under self.lock) ----
    def pool_path(self):
        return "/apis/%s/%s/namespaces/%s/inferencepools/%s" % (
            self.group, self.pool["apiVersion"].split("/")[1], NS, POOL)

    def _get(self, path, query):
        watch = (query.get("watch") or [""])[0] in ("1", "true")
        if path == self.pool_path():
            return 200, self.pool
        if path == self.pool_path().rsplit("/", 1)[0]:
            if watch:
                return "watch"
            field = (query.get("fieldSelector") or [""])[0]
            items = [self.pool] if not field or field == "metadata.name=" + POOL else []
            return 200, {"kind": "InferencePoolList", "apiVersion": self.pool["apiVersion"],
                         "metadata": {"resourceVersion": str(self.rv)}, "items": items}
        if path.startswith("/apis/inference.networking.x-k8s.io/v1alpha1/namespaces/%s/inferencepoolimports/" % NS) \
                and path.rsplit("/", 1)[1] in self.imports:
            return 200, self.imports[path.rsplit("/", 1)[1]]
        if path == "/api/v1/namespaces/%s/pods" % NS:
            if watch:
                return "watch"
            selector = (query.get("labelSelector") or [""])[0]
            items = [p for p in self._pods.values() if _selector_matches(selector, p["metadata"].get("labels", {}))]
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.rv)},
                         "items": items}
        if path in self.custom:
            if watch:
                return "watch"
            return 200, {"kind": "List", "metadata": {"resourceVersion": str(self.rv)},
                         "items": list(self.custom[path].values())}
        if path.startswith("/apis/coordination.k8s.io/v1/namespaces/%s/leases/" % NS):
            lease = self.leases.get(path.rsplit("/", 1)[1])
            if lease is not None:
                return 200, lease
        return 404, {"kind": "Status", "reason": "NotFound", "code": 404,
                     "message": "the server could not find the requested resource"}

    # Tokens the fake TokenReview authenticates (token -> username), and the users a
    # SubjectAccessReview allows (username -> set of non-resource paths).
    tokens = {"scraper-token": "system:serviceaccount:monitoring:prometheus",
              "nobody-token": "system:serviceaccount:default:nobody"}
    allowed = {"system:serviceaccount:monitoring:prometheus": {"/metrics", "/debug/decisions"}}

    def _review(self, path, body):
        if path == "/apis/authentication.k8s.io/v1/tokenreviews":
            user = self.tokens.get(body.get("spec", {}).get("token"))
            status = {"authenticated": True, "user": {"username": user, "groups": ["system:authenticated"]}} \
                if user else {"authenticated": False}
            return 201, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "status": status}
        spec = body.get("spec", {})
        allowed = spec.get("nonResourceAttributes", {}).get("path") in self.allowed.get(spec.get("user"), set()) \
            and spec.get("nonResourceAttributes", {}).get("verb") == "get"
        return 201, {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                     "status": {"allowed": allowed}}

    def _lease_write(self, method, path, body):
        if method == "POST" and path in ("/apis/authentication.k8s.io/v1/tokenreviews",
                                         "/apis/authorization.k8s.io/v1/subjectaccessreviews"):
            return self._review(path, body)
        if self.fail:
            return self.fail, {"kind": "Status", "reason": "InternalError", "message": "etcd is down", "code": self.fail}
        prefix = "/apis/coordination.k8s.io/v1/namespaces/%s/leases" % NS
        name = body.get("metadata", {}).get("name", "")
        if method == "POST" and path == prefix:
            if name in self.leases:
                return 409, {"kind": "Status", "reason": "AlreadyExists", "code": 409,
                             "message": 'leases.coordination.k8s.io "%s" already exists' % name}
        elif method == "PUT" and path == prefix + "/" + name:
            current = self.leases.get(name)
            if current is None:
                return 404, {"kind": "Status", "reason": "NotFound", "code": 404, "message": "lease not found"}
            if body.get("metadata", {}).get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, {"kind": "Status", "reason": "Conflict", "code": 409,
                             "message": "Operation cannot be fulfilled on leases.coordination.k8s.io \"%s\": "
                                        "the object has been modified" % name}
        else:
            return 404, {"kind": "Status", "reason": "NotFound", "code": 404, "message": "not found"}
        self.rv += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        body["metadata"]["namespace"] = NS
        self.leases[name] = body
        return 200 if method == "PUT" else 201, body

    def _event(self, kind, etype, obj):
        self.rv += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, etype, obj))
        self.cond.notify_all()
        return obj

    @property
    def pods(self):
        return list(self._pods.values())

    @pods.setter
    def pods(self, pods):
        new = {p["metadata"]["name"]: p for p in pods}
        for name in list(self._pods):
            if name not in new:
                self._event("pods", "DELETED", self._pods.pop(name))
        for name, p in new.items():
            old = self._pods.get(name)
            if old is None:
                self._pods[name] = self._event("pods", "ADDED", p)
            else:
                stripped = json.loads(json.dumps(old))
                stripped["metadata"].pop("resourceVersion", None)
                if stripped != p:
                    self._pods[name] = self._event("pods", "MODIFIED", p)

    def set(self, pods=None, fail=None):
        with self.lock:
            if pods is not None:
                self.pods = pods
            if fail and not self.fail:
                self.generation += 1  # an API server that fails breaks its open watches
                self.cond.notify_all()
            self.fail = fail

    def collection(self, group, plural):
        """Serve (and watch) the namespaced collection /apis/GROUP/v1alpha2/namespaces/NS/PLURAL."""
        path = "/apis/%s/v1alpha2/namespaces/%s/%s" % (group, NS, plural)
        with self.lock:
            self.custom.setdefault(path, {})
        return path

    def put_object(self, group, plural, obj):
        path = self.collection(group, plural)
        with self.lock:
            name = obj["metadata"]["name"]
            etype = "MODIFIED" if name in self.custom[path] else "ADDED"
            obj.setdefault("metadata", {}).setdefault("namespace", NS)
            self.custom[path][name] = self._event(path, etype, obj)

    def delete_object(self, group, plural, name):
        path = self.collection(group, plural)
        with self.lock:
            obj = self.custom[path].pop(name)
            self._event(path, "DELETED", obj)

    def set_pool(self, pool):
        with self.lock:
            self.pool = self._event("pools", "MODIFIED", pool)

    def compact(self):
        """Forget every event so far: a watch from an older resourceVersion answers 410 Gone."""
        with self.lock:
            self.rv += 1  # past every version a client has seen, bookmarks included
            self.compacted = self.rv
            self.events = []
            self.generation += 1  # open watches end, as when an API server restarts
            self.cond.notify_all()

    def lists(self, path, since=0.0):
        """LIST requests (GET without watch) of `path` made after monotonic time `since`."""
        with self.lock:
            return [c for c in self.calls if c[0] == "GET" and c[1] == path and c[3] >= since
                    and (c[2].get("watch") or [""])[0] not in ("1", "true")]

    def close(self):
        with self.lock:
            self.closing = True
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
