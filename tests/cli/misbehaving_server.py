#!/usr/bin/env python3
"""A test server that misbehaves on purpose, for tests/cli/server.sh (compare --server's errors).

    python3 misbehaving_server.py MODE PORT_FILE [TEXT_FILE [CASE_FILE]]

Listens on 127.0.0.1 on a free port (written to PORT_FILE; "port=N": on port N) and answers every
POST as MODE says (GET /health: 200, as llama-server once loaded):
  hang     never answers (sleeps far beyond the client's time-out)
  close    closes the connection without a response
  refuse   HTTP 500 with a JSON error
  crash    HTTP 500 "see the stack trace", a traceback (after a warning naming an exception) on stderr
  garbage  HTTP 200 with a body that is not JSON
  rawbytes HTTP 500 with a body that is not UTF-8 either (bytes 0xFF 0xFE, half a character)
  fields   /completion: HTTP 200 with JSON lacking the fields llama-server's has
  vocab    /detokenize answers another text: another model's vocabulary
  ids      /completion answers token ids outside any small vocabulary (another model's); its
           /detokenize answers TEXT_FILE's content (the right text, so that the ids are what fails)
  endless  /detokenize answers HTTP 200 with a chunked body that never ends
With CASE_FILE (a golden record's case, .safetensors), /detokenize answers TEXT_FILE's content and
/completion answers like a correct llama-server of the record's model: a teacher-forced request
(n_predict 1) the record's own top-K at that position; a generation the golden continuation. Then:
  replay   nothing else: the control, judged good
  empty    the generation has no tokens (stop_type "eos"): the seed's empty answer
  oov      the generation's 4th id is the vocabulary size (2048: one beyond the last logit row)
  stoptype the generation's stop_type is a number
  positive teacher-forced log-probs are +0.5
  nan      teacher-forced log-probs are NaN (written as Python writes it: not JSON)
  noprobs  the generation has no completion_probabilities although n_probs was asked (ignores it)
  stepcount the generation's completion_probabilities has one entry fewer than its tokens
  steptoken the generation's 2nd completion_probabilities entry is for another token than generated
  stepmass the generation's per-step log-probs are all log(0.9): probabilities that do not sum
  warmdiff a generation sent with cache_prompt says it reused 17 tokens (timings.cache_n) and its 4th
           token differs from the cold answer's: a prefix cache that changes the answer
  cachebad a generation sent with cache_prompt states timings.cache_n as a string
  cutshort the greedy generation stops after 1 token with stop_type "limit" (its budget not spent)
  earlyeos the greedy generation stops after 3 tokens with stop_type "eos" where the golden goes on
  stepoov  the generation's 3rd per-step list names id 2048 (beyond the 2048 logit rows)
  huge     teacher-forced answers list every one of a million ids (a valid answer of about 50 MB)
  repeatdiff every second cold generation's 4th token differs from the first's: a server whose answer
           changes between two identical cold requests
A generation asked with n_probs lists the record's top-K at each generated step (its decode path).
Standard library only (with json_http.py beside it). Stops when killed.
"""
import json
import struct
import sys
import time

from json_http import JsonHandler, serve

MODE = sys.argv[1]
TEXT = open(sys.argv[3], encoding="utf-8").read() if len(sys.argv) > 3 else ""
CASE = {}
if len(sys.argv) > 4:
    with open(sys.argv[4], "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()

    def tensor(name):
        t = head[name]
        b, e = t["data_offsets"]
        vals = struct.unpack("<%d%s" % ((e - b) // 4, "i" if t["dtype"] == "I32" else "f"), data[b:e])
        return vals, t["shape"]

    CASE["prompt"] = list(tensor("prompt")[0])
    CASE["continuation"] = list(tensor("continuation")[0])
    ids, shape = tensor("topk_ids")
    lps = tensor("topk_logprobs")[0]
    k = shape[1]
    CASE["top"] = [[(ids[p * k + j], lps[p * k + j]) for j in range(k)] for p in range(shape[0])]


GENERATIONS = [0]  # the cold generations answered (repeatdiff)


def replayed(req):
    """What a correct llama-server of the record's model answers to /completion (CASE_FILE given)."""
    prompt = req.get("prompt", [])
    if req.get("n_predict") == 1:  # teacher-forced: the distribution after the last prompt token
        lp = 0.5 if MODE == "positive" else float("nan") if MODE == "nan" else None
        top = [{"id": i, "logprob": lp if lp is not None else v} for i, v in CASE["top"][len(prompt) - 1]]
        if MODE == "huge":
            top += [{"id": 100000 + i, "logprob": -80.0} for i in range(1000000)]
        return {"tokens": [top[0]["id"]], "stop_type": "limit",
                "completion_probabilities": [{"id": top[0]["id"], "logprob": top[0]["logprob"], "top_logprobs": top}]}
    tokens = CASE["continuation"][: req.get("n_predict", 0)]
    stop = "eos"
    if MODE == "empty":
        tokens = []
    elif MODE == "oov":
        tokens = tokens[:3] + [2048] + tokens[4:]
    elif MODE == "stoptype":
        stop = 2
    elif MODE == "cutshort":
        tokens, stop = tokens[:1], "limit"
    elif MODE == "earlyeos":
        tokens = tokens[:3]
    warm = bool(req.get("cache_prompt"))
    if MODE == "repeatdiff" and not warm:
        GENERATIONS[0] += 1
        if GENERATIONS[0] % 2 == 0:
            tokens = tokens[:3] + [(tokens[3] + 1) % 2048] + tokens[4:]
    if MODE == "warmdiff" and warm:
        tokens = tokens[:3] + [(tokens[3] + 1) % 2048] + tokens[4:]
    answer = {"tokens": tokens, "stop_type": stop, "content": "x"}
    if warm and MODE in ("warmdiff", "cachebad"):
        answer["timings"] = {"cache_n": 17 if MODE == "warmdiff" else "17"}
    if req.get("n_probs", 0) > 0 and MODE != "noprobs":
        steps = []
        for i, t in enumerate(tokens):
            top = [{"id": j, "logprob": -0.10536 if MODE == "stepmass" else v}
                   for j, v in CASE["top"][len(prompt) - 1 + i]]
            if MODE == "stepoov" and i == 2:
                top.append({"id": 2048, "logprob": -30.0})
            steps.append({"id": t + 1 if (MODE == "steptoken" and i == 1) else t, "logprob": 0.0, "top_logprobs": top})
        answer["completion_probabilities"] = steps[:-1] if MODE == "stepcount" else steps
    return answer


class Handler(JsonHandler):
    def do_GET(self):
        self.send_json(200 if self.path == "/health" else 404, {"status": "ok"})

    def do_POST(self):
        req = self.read_json()
        if MODE == "hang":
            time.sleep(3600)
        elif MODE == "close":
            self.close_connection = True
            self.connection.shutdown(2)
        elif MODE == "refuse":
            self.send_json(500, {"error": {"code": 500, "message": "model not loaded"}})
        elif MODE == "crash":  # an engine dead behind a live front end, as vLLM's: the cause in the log only
            print("WARNING a limit that can cause errors like `OSError: [Errno 24] Too many open files`", file=sys.stderr)
            print("ERROR Traceback (most recent call last):\nERROR   File \"mamba_utils.py\", line 202, in batch_memcpy\n"
                  "ERROR TypeError: 'function' object is not subscriptable\nERROR EngineDeadError: EngineCore died",
                  file=sys.stderr, flush=True)
            self.send_json(500, {"error": {"code": 500, "message": "EngineCore encountered an issue. See stack trace (above)"}})
        elif MODE in ("garbage", "rawbytes"):
            body = b"<html>502 Bad Gateway</html>" if MODE == "garbage" else b"\xff\xfe upstream failed \xc3"
            self.send_response(200 if MODE == "garbage" else 500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif MODE == "endless":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b" " * 65536
            try:
                self.wfile.write(b'd\r\n{"content": "\r\n')
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:  # the client hung up: what it should do
                pass
        elif self.path == "/detokenize":
            self.send_json(200, {"content": "something else entirely" if MODE == "vocab" else TEXT})
        elif CASE:
            self.send_json(200, replayed(req))
        elif MODE == "fields":
            self.send_json(200, {"content": "hello", "stop": True})
        elif MODE == "ids":
            top = [{"id": 150000 + i, "token": "x", "logprob": -1.0 - i} for i in range(4)]
            self.send_json(200, {"content": "x", "tokens": [150000],
                                 "completion_probabilities": [{"id": 150000, "logprob": -1.0, "top_logprobs": top}]})
        else:
            self.send_json(404, {"error": "unknown mode " + MODE})


serve(Handler, sys.argv[2])
