#!/usr/bin/env python3
"""The agent suite's package host (tests/tests/e2e_agent.rs).

    agent_index.py ROOT LOG PORT NPM_BASE

Builds, under ROOT (emptied first), with nothing from the internet:
- a PEP 503 simple index (/simple/, /simple/vibe-hello/) with one pure-Python
  wheel, vibe_hello-1.0.0-py3-none-any.whl (a zip with its dist-info and a
  RECORD of sha256 hashes; the index link carries #sha256= too);
- an npm registry: /vibe-greet (the package document, JSON) and
  /vibe-greet/-/vibe-greet-1.0.0.tgz, whose dist.tarball URL starts with
  NPM_BASE (the name the container asks for);
then serves ROOT over plain HTTP on PORT of its network namespace, one
request per connection, and appends every request line and Host header to
LOG as a JSON line (host evidence: the request reached the test host).

socketserver, not http.server.HTTPServer: its bind looks up the host's
name, which hangs in a namespace without DNS.
"""
import base64
import hashlib
import http.server
import io
import json
import os
import shutil
import socketserver
import sys
import tarfile
import zipfile

ROOT, LOG, PORT, NPM_BASE = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].rstrip("/")

WHEEL_NAME = "vibe_hello-1.0.0-py3-none-any.whl"
MODULE = 'def hello():\n    return "hello from the local index"\n'


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()},{len(data)}"


def build_wheel():
    files = {
        "vibe_hello/__init__.py": MODULE.encode(),
        "vibe_hello-1.0.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: vibe-hello\nVersion: 1.0.0\n"
            b"Summary: a test package of vibe-shim's agent suite\n"
        ),
        "vibe_hello-1.0.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: agent_index.py\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
        "vibe_hello-1.0.0.dist-info/top_level.txt": b"vibe_hello\n",
    }
    record = "".join(f"{name},{record_hash(data)}\n" for name, data in files.items())
    record += "vibe_hello-1.0.0.dist-info/RECORD,,\n"
    files["vibe_hello-1.0.0.dist-info/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def build_npm_tgz():
    files = {
        "package/package.json": json.dumps(
            {"name": "vibe-greet", "version": "1.0.0", "main": "index.js"}
        ).encode(),
        "package/index.js": b'module.exports = () => "greetings from the local registry";\n',
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 1700000000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write(rel, data):
    path = os.path.join(ROOT, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def build():
    shutil.rmtree(ROOT, ignore_errors=True)
    wheel = build_wheel()
    write(f"simple/vibe-hello/{WHEEL_NAME}", wheel)
    sha = hashlib.sha256(wheel).hexdigest()
    write(
        "simple/vibe-hello/index.html",
        f'<!DOCTYPE html><html><body><a href="{WHEEL_NAME}#sha256={sha}">{WHEEL_NAME}</a>'
        "</body></html>\n".encode(),
    )
    write(
        "simple/index.html",
        b'<!DOCTYPE html><html><body><a href="vibe-hello/">vibe-hello</a></body></html>\n',
    )
    tgz = build_npm_tgz()
    write("vibe-greet/-/vibe-greet-1.0.0.tgz", tgz)
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tgz).digest()).decode()
    doc = {
        "name": "vibe-greet",
        "dist-tags": {"latest": "1.0.0"},
        "versions": {
            "1.0.0": {
                "name": "vibe-greet",
                "version": "1.0.0",
                "main": "index.js",
                "dist": {
                    "tarball": f"{NPM_BASE}/vibe-greet/-/vibe-greet-1.0.0.tgz",
                    "shasum": hashlib.sha1(tgz).hexdigest(),
                    "integrity": integrity,
                },
            }
        },
    }
    # /vibe-greet is a directory (its tarballs live below it): its
    # document is the directory's index.json.
    write("vibe-greet/index.json", json.dumps(doc).encode())


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, data, ctype="text/plain"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.close_connection = True

    def do_GET(self):
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps({"path": self.path, "host": self.headers.get("Host")}) + "\n")
        rel = os.path.normpath(self.path.split("?")[0].split("#")[0]).lstrip("/")
        if rel.startswith(".."):
            return self.reply(404, b"no\n")
        path = os.path.join(ROOT, rel)
        if os.path.isdir(path):
            for index, ctype in (("index.html", "text/html"), ("index.json", "application/json")):
                if os.path.isfile(os.path.join(path, index)):
                    with open(os.path.join(path, index), "rb") as f:
                        return self.reply(200, f.read(), ctype)
            return self.reply(404, b"no index\n")
        if not os.path.isfile(path):
            return self.reply(404, b"not found\n")
        with open(path, "rb") as f:
            return self.reply(200, f.read(), "application/octet-stream")

    do_HEAD = do_GET


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    allow_reuse_address = True
    daemon_threads = True


build()
Server(("0.0.0.0", PORT), Handler).serve_forever()
