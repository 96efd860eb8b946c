"""A stand-in for a Kubernetes API server's discovery, for `kubectl apply --dry-run=client` offline.

kubectl's client-side dry run still asks a server which resources exist (discovery: /api, /apis and
the resource list of each group version) and GETs each object (a 404 makes it "created"). This
stub answers those from a fixed table of built-in Kubernetes 1.32 resources (plural, kind, whether
namespaced) and 404 for every object, so the dry run checks that each manifest maps to a real
resource of the right scope and that kubectl can build its apply request. Objects are never
stored; schemas (/openapi) are not served, so the dry run runs with --validate=false.

Usage: with KubeApiStub() as url: kubectl ... -s url. Thread-safety: serves on its own thread.
"""
import http.server
import json
import re
import threading

# Built-in resources of Kubernetes 1.32 (a subset: the kinds a deployment like ours uses).
RESOURCES = {
    ("", "v1"): [("namespaces", "Namespace", False), ("configmaps", "ConfigMap", True),
                 ("services", "Service", True), ("persistentvolumeclaims", "PersistentVolumeClaim", True),
                 ("serviceaccounts", "ServiceAccount", True), ("secrets", "Secret", True), ("pods", "Pod", True),
                 ("persistentvolumes", "PersistentVolume", False)],
    ("apps", "v1"): [("deployments", "Deployment", True), ("statefulsets", "StatefulSet", True),
                     ("daemonsets", "DaemonSet", True)],
    ("networking.k8s.io", "v1"): [("networkpolicies", "NetworkPolicy", True), ("ingresses", "Ingress", True)],
    ("rbac.authorization.k8s.io", "v1"): [("roles", "Role", True), ("rolebindings", "RoleBinding", True),
                                          ("clusterroles", "ClusterRole", False),
                                          ("clusterrolebindings", "ClusterRoleBinding", False)],
    ("policy", "v1"): [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    ("autoscaling", "v2"): [("horizontalpodautoscalers", "HorizontalPodAutoscaler", True)],
}
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


class _Handler(http.server.BaseHTTPRequestHandler):
    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's name)
        path = self.path.split("?")[0]
        if path == "/version":
            return self._send(200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0"})
        if path == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if path == "/apis":
            groups = [{"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                       "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}} for g, v in RESOURCES if g]
            return self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        m = re.fullmatch(r"/api/(v1)|/apis/([^/]+)/([^/]+)", path)
        if m:
            gv = ("", "v1") if m.group(1) else (m.group(2), m.group(3))
            if gv in RESOURCES:
                res = [{"name": p, "singularName": k.lower(), "namespaced": ns, "kind": k, "verbs": VERBS}
                       for p, k, ns in RESOURCES[gv]]
                return self._send(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                        "groupVersion": f"{gv[0]}/{gv[1]}" if gv[0] else "v1", "resources": res})
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

    def log_message(self, *args):
        pass


class KubeApiStub:
    def __enter__(self):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
