"""A local stand-in for the Hugging Face hub, over its URL layout, for the
download tests (CI has no network). It serves model repositories from
memory:

  GET  /api/models/{org}/{name}/revision/{rev}   the commit and the file list
                                                 (size, git blob id, lfs.sha256)
  GET  /{org}/{name}/resolve/{rev}/{file}        the file; LFS files answer with a
  HEAD                                           302 to /cdn/{sha256} on a second port
                                                 (another origin, as the hub's CDN is)
  GET  /cdn/{sha256}                             the bytes, with Range support

and it can misbehave on purpose: require a token (401 without it), cut a
file's first transfer half way, or serve a file with one byte changed. Every
request is recorded (path, Range, Authorization) for the tests to check."""
import hashlib
import http.server
import json
import os
import threading
import urllib.parse


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, files, revisions):
        """files: {name: bytes}; revisions: {rev name: commit id}."""
        self.files = files
        self.revisions = revisions

    def listing(self, repo_id, commit):
        siblings = []
        for name, data in sorted(self.files.items()):
            s = {"rfilename": name, "size": len(data), "blobId": git_blob_id(data)}
            if name.endswith(".safetensors"):
                s["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            siblings.append(s)
        return {"id": repo_id, "modelId": repo_id, "sha": commit, "siblings": siblings}


class FakeHub:
    def __init__(self):
        self.repos = {}
        self.token = None  # when set: 401 without "Authorization: Bearer TOKEN"
        self.cut_once = set()  # file names whose next transfer stops half way
        self.corrupt = set()  # file names served with one byte changed
        self.requests = []  # (method, path, Range header, Authorization header)
        self.lock = threading.Lock()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.handle(self, head=True)

            def do_GET(self):
                hub.handle(self, head=False)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.cdn_server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = self.cdn_server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self.cdn_server.server_address[1]}"
        self.threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (self.server, self.cdn_server)]

    def add_repo(self, repo_id, folder, revisions):
        files = {}
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as f:
                files[name] = f.read()
        self.repos[repo_id] = Repo(files, revisions)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        for s in (self.server, self.cdn_server):
            s.shutdown()

    def __exit__(self, *exc):
        self.stop()
        for s in (self.server, self.cdn_server):
            s.server_close()

    def paths(self):
        with self.lock:
            return [r[1] for r in self.requests]

    # -- serving ---------------------------------------------------------

    def send(self, h, code, body=b"", headers=None, head=False):
        h.send_response(code)
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def error(self, h, code, error_code, message, head):
        self.send(h, code, json.dumps({"error": message}).encode(), {"X-Error-Code": error_code,
                                                                     "Content-Type": "application/json"}, head)

    def handle(self, h, head):
        path = urllib.parse.urlsplit(h.path).path
        with self.lock:
            self.requests.append((h.command, path, h.headers.get("Range"), h.headers.get("Authorization")))
        # The CDN's URLs carry their own signature on the real hub; no token there.
        if (self.token is not None and not path.startswith("/cdn/")
                and h.headers.get("Authorization") != f"Bearer {self.token}"):
            return self.error(h, 401, "GatedRepo", "Access to this repository is restricted.", head)
        parts = [urllib.parse.unquote(p) for p in path.split("/")[1:]]
        if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
            return self.api_revision(h, f"{parts[2]}/{parts[3]}", parts[5], head)
        if len(parts) == 5 and parts[2] == "resolve":
            return self.resolve(h, f"{parts[0]}/{parts[1]}", parts[3], parts[4], head)
        if len(parts) == 2 and parts[0] == "cdn":
            return self.cdn(h, parts[1], head)
        return self.error(h, 404, "EntryNotFound", "no such path", head)

    def commit_of(self, repo, rev):
        return rev if rev in repo.revisions.values() else repo.revisions.get(rev)

    def api_revision(self, h, repo_id, rev, head):
        repo = self.repos.get(repo_id)
        if repo is None:
            return self.error(h, 404, "RepoNotFound", "Repository not found", head)
        commit = self.commit_of(repo, rev)
        if commit is None:
            return self.error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}", head)
        body = json.dumps(repo.listing(repo_id, commit)).encode()
        self.send(h, 200, body, {"Content-Type": "application/json"}, head)

    def resolve(self, h, repo_id, rev, name, head):
        repo = self.repos.get(repo_id)
        commit = self.commit_of(repo, rev) if repo else None
        if commit is None or name not in repo.files:
            return self.error(h, 404, "EntryNotFound", "not found", head)
        data = repo.files[name]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_id(data)}"'}
        if name.endswith(".safetensors"):
            sha = hashlib.sha256(data).hexdigest()
            headers.update({"Location": f"{self.cdn_url}/cdn/{sha}", "X-Linked-Etag": f'"{sha}"',
                            "X-Linked-Size": str(len(data))})
            return self.send(h, 302, b"", headers, head)
        self.body(h, name, data, headers, head)

    def cdn(self, h, sha, head):
        for repo in self.repos.values():
            for name, data in repo.files.items():
                if hashlib.sha256(data).hexdigest() == sha:
                    return self.body(h, name, data, {"ETag": f'"{sha}"'}, head)
        return self.error(h, 404, "EntryNotFound", "no such blob", head)

    def body(self, h, name, data, headers, head):
        if name in self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start = 0
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[len("bytes="):-1])
        code = 206 if start > 0 else 200
        if start > 0:
            headers = {**headers, "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
        chunk = data[start:]
        h.send_response(code)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(chunk)))
        h.end_headers()
        if head:
            return
        with self.lock:
            cut = name in self.cut_once
            self.cut_once.discard(name)
        if cut:
            # Half the promised body, then the connection goes.
            h.wfile.write(chunk[: len(chunk) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(2)
            return
        h.wfile.write(chunk)
