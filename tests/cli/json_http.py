"""What the test servers of tests/cli share (misbehaving_server.py, vllm_shape_proxy.py): a quiet
request handler that answers JSON, and serving it on a free port of 127.0.0.1 whose number is
written to a file (atomically: the test waits for the file, then reads a whole number).
Standard library only."""
import json
import os
import socketserver
from http.server import BaseHTTPRequestHandler, HTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def read_json(self):
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")


class _Server(socketserver.ThreadingMixIn, HTTPServer):
    daemon_threads = True


def serve(handler, port_file):
    """Serves `handler` (a JsonHandler subclass) until killed; the port goes to `port_file`, or, given
    as "port=N" (a command line of compare/sweep --server-cmd, with {port}), is N."""
    if port_file.startswith("port="):
        _Server(("127.0.0.1", int(port_file[5:])), handler).serve_forever()
        return
    srv = _Server(("127.0.0.1", 0), handler)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(srv.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    srv.serve_forever()
