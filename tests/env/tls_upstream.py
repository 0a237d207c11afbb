#!/usr/bin/env python3
"""The credential suite's TLS test host (tests/tests/e2e_credentials.rs).

    tls_upstream.py CERT KEY SECRETS_DIR LOG GIT_ROOT

Serves HTTPS on port 443 of its network namespace, HTTP/1.1 only, one
request per connection. Every request head is appended to LOG as a JSON
line (host side: the suite greps it for what the upstream received).

- /git/...: the files under GIT_ROOT (a bare repository served the "dumb"
  way), only with `Authorization: Basic base64(x-access-token:<git>)`,
  where <git> is SECRETS_DIR/git read at that request; else 401.
- anything else: 200 "key=real" when `x-api-key` is SECRETS_DIR/api read at
  that request (rotation), "key=other" otherwise. The body never echoes a
  header: the container must not learn the secret from its own test host.

socketserver, not http.server.HTTPServer: its bind looks up the host's
name, which hangs in a namespace without DNS.
"""
import base64
import http.server
import json
import os
import socketserver
import ssl
import sys

CERT, KEY, SECRETS, LOG, GIT_ROOT = sys.argv[1:6]


def secret(name):
    try:
        with open(os.path.join(SECRETS, name), encoding="utf-8") as f:
            return f.read().rstrip("\n")
    except OSError:
        return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def record(self):
        line = {
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
        }
        with open(LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")

    def reply(self, code, body, extra=()):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(code)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self.close_connection = True

    def handle_any(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.record()
        if self.path.startswith("/git/"):
            token = secret("git")
            want = "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()
            if token is None or self.headers.get("Authorization") != want:
                return self.reply(401, "auth\n", [("WWW-Authenticate", 'Basic realm="git"')])
            rel = os.path.normpath(self.path[len("/git/"):].split("?")[0]).lstrip("/")
            path = os.path.join(GIT_ROOT, rel)
            if rel.startswith("..") or not os.path.isfile(path):
                return self.reply(404, "no\n")
            with open(path, "rb") as f:
                return self.reply(200, f.read())
        key = self.headers.get("x-api-key")
        api = secret("api")
        self.reply(200, "key=real\n" if api is not None and key == api else "key=other\n")

    do_GET = do_POST = do_HEAD = handle_any


class Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    allow_reuse_address = True
    daemon_threads = True


ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(CERT, KEY)
ctx.set_alpn_protocols(["http/1.1"])
server = Server(("0.0.0.0", 443), Handler)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
