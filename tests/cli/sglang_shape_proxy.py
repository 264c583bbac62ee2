#!/usr/bin/env python3
"""Answers SGLang's native POST /generate in SGLang's shape, computed by a real llama-server behind it.

    python3 sglang_shape_proxy.py MODE PORT_FILE UPSTREAM_URL
    python3 sglang_shape_proxy.py MODE PORT_FILE --launch 'llama-server ... --port @PORT@ ...'

SGLang cannot run on this project's CI machines (it needs a GPU), so this adapter stands in for the
*shape* of its answers, with a real engine's numbers: every figure comes from llama-server's native
/completion (the whole vocabulary's log-probs at each position, pre-sampling). With --launch it
starts the upstream itself (on a free port put for @PORT@, in its own process group's reach: a sweep
that stops the proxy's group stops it too), and listens once the upstream is healthy.
The quirks of SGLang it reproduces (read from SGLang 0.5.23's source; docs/server.md "SGLang"):
  - /generate takes input_ids as one list or a list of lists (a batch, answered as a list in order),
    sampling_params (a dict, or a list for a batch) with SGLang's names (max_new_tokens, temperature,
    top_p, top_k, min_p, repetition_penalty, presence_penalty, sampling_seed, ignore_eos), and
    refuses an unknown sampling_params key with HTTP 400, as 0.5.23 does;
  - meta_info's log-probs are (logprob, token_id, text|null) triples; the input rows are shifted by
    one against the ids: entry j is the distribution that predicted input_ids[S+j] (S:
    logprob_start_len; -1: no input rows), entry 0 null; the distribution after the whole input is
    output_top_logprobs[0];
  - output log-probs are log(softmax((logits - penalties) / T)): at the sampling temperature, after
    the presence penalty over the tokens generated so far; the model's own (penalties still in) when
    the proxy runs with SGLANG_RETURN_ORIGINAL_LOGPROB=1 in its environment, as SGLang; a greedy
    request (temperature 0) gets log_softmax(logits);
  - meta_info.cached_tokens: the longest prefix of the input shared with an earlier request's
    input + output (a radix cache), at most len(input) - 1, and at most S when input log-probs are
    asked from S >= 0; POST /flush_cache empties it; finish_reason {"type": "length", "length": N} or
    {"type": "stop", "matched": id};
  - POST /detokenize {"tokens", "skip_special_tokens"} -> {"text"}; GET /v1/models, /model_info,
    /health (200, empty body).
With SGLANG_PROXY_PARTIAL=1 in its environment the upstream is asked for the request's top_logprobs_num
ids only (every id of a 248,320-id vocabulary at every position is about 30 MB of JSON): an input id
outside that listing then states null, and a sampled request's output rows are llama-server's top-K
unscaled (the tool does not score a partial listing of a sampled step: it cannot undo the temperature).
MODE:
  sglang    the shapes above
  tuple2    the triples written as (logprob, token_id) pairs
  wrongids  input_token_logprobs[2] names another id than the request's input_ids[2]
  nometa    answers without meta_info
  noshift   input rows not shifted: entry j is the distribution after input_ids[S+j], entry 0 not null
  nocache   cached_tokens always 0 (a server run with --disable-radix-cache)
Standard library only (with json_http.py beside it). Stops when killed.
"""
import json
import math
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from json_http import JsonHandler, serve

MODE, PORT_FILE = sys.argv[1], sys.argv[2]
ORIGINAL = os.environ.get("SGLANG_RETURN_ORIGINAL_LOGPROB", "") not in ("", "0", "false", "False")
PARTIAL = os.environ.get("SGLANG_PROXY_PARTIAL", "") not in ("", "0")
SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty", "sampling_seed", "ignore_eos", "stop", "stop_token_ids", "min_new_tokens", "n",
                 "skip_special_tokens", "no_stop_trim", "logit_bias"}
child = None


def launch(cmd):
    """Starts the upstream on a free port; returns its URL once /health answers 200."""
    global child
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    child = subprocess.Popen(shlex.split(cmd.replace("@PORT@", str(port))))
    url = "http://127.0.0.1:%d" % port
    for _ in range(600):
        if child.poll() is not None:
            sys.exit("sglang_shape_proxy: the upstream exited with status %d before it was healthy" % child.returncode)
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return url
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    sys.exit("sglang_shape_proxy: the upstream was not healthy after 120 s")


def stop(*_):
    if child is not None and child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
    os._exit(0)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
UPSTREAM = launch(sys.argv[4]) if sys.argv[3] == "--launch" else sys.argv[3].rstrip("/")

cache = []  # the radix cache, as the token sequences it holds
cache_lock = threading.Lock()


def upstream(path, body):
    req = urllib.request.Request(UPSTREAM + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def full_listing(entries):
    """llama-server's top list (every id) as {id: logprob} (null: -inf)."""
    return {e["id"]: (e["logprob"] if e["logprob"] is not None else -math.inf) for e in entries}


def log_softmax(lp, shift=None, temperature=1.0):
    """log(softmax((lp - shift) / T)) over a {id: logprob} map; shift: {id: penalty}. Without either,
    llama-server's log-probs as they are (already normalised: renormalising would move their last bits)."""
    if not shift and temperature == 1.0:
        return dict(lp)
    z = {i: ((v - (shift or {}).get(i, 0.0)) / temperature) for i, v in lp.items()}
    m = max(z.values())
    lse = m + math.log(sum(math.exp(v - m) for v in z.values() if v > -math.inf))
    return {i: v - lse for i, v in z.items()}


def after(prefix, cache_prompt, k_top=0):
    """The whole distribution after `prefix` (pre-sampling), as {id: logprob} (PARTIAL: its top k_top)."""
    r = upstream("/completion", {"prompt": prefix, "n_predict": 1, "n_probs": max(k_top, 1) if PARTIAL else 1000000, "temperature": 0,
                                 "cache_prompt": cache_prompt, "post_sampling_probs": False, "return_tokens": True})
    return full_listing(r["completion_probabilities"][0]["top_logprobs"])


def triple(lp, tok):
    v = None if lp is None or lp == -math.inf else lp
    return [v, tok] if MODE == "tuple2" else [v, tok, None]


def top(dist, k):
    best = sorted(dist.items(), key=lambda e: -e[1])[:k]
    return [triple(v, i) for i, v in best]


def cached_prefix(ids, limit):
    with cache_lock:
        n = 0
        for seq in cache:
            m = 0
            while m < len(seq) and m < len(ids) and seq[m] == ids[m]:
                m += 1
            n = max(n, m)
    return 0 if MODE == "nocache" else max(0, min(n, limit))


def pick(value, k, default):
    if isinstance(value, list):
        return value[k] if k < len(value) else default
    return default if value is None else value


def one(ids, sp, return_logprob, start, k_top):
    L = len(ids)
    if start is None or start < 0 or not return_logprob:
        S = L
    else:
        S = start
    limit = L - 1 if not return_logprob or start is None or start < 0 else min(L - 1, start)
    cached = cached_prefix(ids, limit)
    temperature = float(sp.get("temperature", 1.0))
    greedy = temperature < 1e-6
    max_new = int(sp.get("max_new_tokens", 128))
    presence = float(sp.get("presence_penalty", 0.0))
    top_k = int(sp.get("top_k", -1))
    # the input rows first, then the generation: the order of the tool's native requests (the
    # distribution after each prefix, the whole sequence last), so that llama-server's cache holds
    # the same tokens before each request and its figures are the native ones to the last bit
    itl, itop = [], []
    if return_logprob:
        for j in range(S, L):
            if MODE == "noshift":
                d = after(ids[:j + 1], True, k_top)
                itl.append(triple(d.get(ids[j]), ids[j]))
                itop.append(top(d, k_top) if k_top else None)
                continue
            if j == S:
                itl.append(triple(None, ids[j]))
                itop.append(None)
                continue
            d = after(ids[:j], True, k_top)
            itl.append(triple(d.get(ids[j]), ids[j] + (1 if MODE == "wrongids" and j == 2 else 0)))
            itop.append(top(d, k_top) if k_top else None)
    gen = upstream("/completion", {
        "prompt": ids, "n_predict": max_new, "n_probs": (max(k_top, 1) if PARTIAL else 1000000) if return_logprob else 0,
        "temperature": 0 if greedy else temperature, "top_k": 0 if top_k < 0 else top_k,
        "top_p": float(sp.get("top_p", 1.0)), "min_p": float(sp.get("min_p", 0.0)),
        "repeat_penalty": float(sp.get("repetition_penalty", 1.0)), "presence_penalty": presence,
        "seed": int(sp.get("sampling_seed", 42)), "ignore_eos": bool(sp.get("ignore_eos", False)),
        # llama-server's own prompt cache as the tool's native requests use it (on for one-token
        # requests, off for a generation), except where the radix emulation says the prompt is cached
        "cache_prompt": cached > 0 or max_new == 1, "return_tokens": True, "post_sampling_probs": False})
    out = gen["tokens"]
    meta = {"id": "proxy", "prompt_tokens": L, "completion_tokens": len(out), "cached_tokens": cached,
            "finish_reason": ({"type": "length", "length": len(out)} if gen.get("stop_type") == "limit"
                              else {"type": "stop", "matched": out[-1] if out else None})}
    if return_logprob:
        otl, otop = [], []
        for i, p in enumerate(gen["completion_probabilities"]):
            raw = full_listing(p["top_logprobs"])
            pen = {t: presence for t in out[:i]} if presence and not greedy else None
            d = raw if PARTIAL else log_softmax(raw, pen, 1.0 if greedy or ORIGINAL else temperature)
            otl.append(triple(d.get(out[i]), out[i]))
            otop.append(top(d, k_top) if k_top else None)
        meta.update({"input_token_logprobs": itl, "output_token_logprobs": otl})
        if k_top:
            meta.update({"input_top_logprobs": itop, "output_top_logprobs": otop})
    with cache_lock:
        if MODE != "nocache":
            cache.append(list(ids) + list(out))
    answer = {"text": gen.get("content", ""), "output_ids": out, "meta_info": meta}
    if MODE == "nometa":
        del answer["meta_info"]
    return answer


class Handler(JsonHandler):
    def do_GET(self):
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if self.path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [{"id": "tiny-trained", "object": "model", "owned_by": "sglang"}]})
        if self.path in ("/model_info", "/get_model_info"):
            return self.send_json(200, {"model_path": "tiny-trained", "is_generation": True})
        return self.send_json(404, {"detail": "Not Found"})

    def do_POST(self):
        req = self.read_json()
        if self.path == "/flush_cache":
            with cache_lock:
                cache.clear()
            body = b"Cache flushed.\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        if self.path in ("/detokenize", "/v1/detokenize"):
            return self.send_json(200, {"text": upstream("/detokenize", {"tokens": req["tokens"]})["content"]})
        if self.path != "/generate":
            return self.send_json(404, {"detail": "Not Found"})
        ids = req.get("input_ids")
        if not ids:
            return self.send_json(400, {"error": {"message": "input_ids cannot be empty."}})
        batch = isinstance(ids[0], list)
        items = ids if batch else [ids]
        answers = []
        for k, item in enumerate(items):
            sp = pick(req.get("sampling_params"), k, {}) or {}
            unknown = sorted(set(sp) - SAMPLING_KEYS)
            if unknown:
                return self.send_json(400, {"error": "unknown field `%s`, expected one of %s" % (unknown[0], ", ".join(sorted(SAMPLING_KEYS)))})
            answers.append(one(item, sp, bool(pick(req.get("return_logprob"), k, False)),
                               pick(req.get("logprob_start_len"), k, -1), int(pick(req.get("top_logprobs_num"), k, 0))))
        return self.send_json(200, answers if batch else answers[0])


serve(Handler, PORT_FILE)
