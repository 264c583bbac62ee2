#!/usr/bin/env python3
"""A test server that misbehaves on purpose, for tests/cli/server.sh (compare --server's errors).

    python3 misbehaving_server.py MODE PORT_FILE [TEXT_FILE]

Listens on 127.0.0.1 on a free port (written to PORT_FILE) and answers every POST as MODE says:
  hang     never answers (sleeps far beyond the client's time-out)
  close    closes the connection without a response
  refuse   HTTP 500 with a JSON error
  garbage  HTTP 200 with a body that is not JSON
  fields   /completion: HTTP 200 with JSON lacking the fields llama-server's has
  vocab    /detokenize answers another text: another model's vocabulary
  ids      /completion answers token ids outside any small vocabulary (another model's); its
           /detokenize answers TEXT_FILE's content (the right text, so that the ids are what fails)
Standard library only (with json_http.py beside it). Stops when killed.
"""
import sys
import time

from json_http import JsonHandler, serve

MODE = sys.argv[1]
TEXT = open(sys.argv[3], encoding="utf-8").read() if len(sys.argv) > 3 else ""


class Handler(JsonHandler):
    def do_POST(self):
        req = self.read_json()
        if MODE == "hang":
            time.sleep(3600)
        elif MODE == "close":
            self.close_connection = True
            self.connection.shutdown(2)
        elif MODE == "refuse":
            self.send_json(500, {"error": {"code": 500, "message": "model not loaded"}})
        elif MODE == "garbage":
            body = b"<html>502 Bad Gateway</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path == "/detokenize":
            self.send_json(200, {"content": "something else entirely" if MODE == "vocab" else TEXT})
        elif MODE == "fields":
            self.send_json(200, {"content": "hello", "stop": True})
        elif MODE == "ids":
            top = [{"id": 150000 + i, "token": "x", "logprob": -1.0 - i} for i in range(4)]
            self.send_json(200, {"content": "x", "tokens": [150000],
                                 "completion_probabilities": [{"id": 150000, "logprob": -1.0, "top_logprobs": top}]})
        else:
            self.send_json(404, {"error": "unknown mode " + MODE})


serve(Handler, sys.argv[2])
