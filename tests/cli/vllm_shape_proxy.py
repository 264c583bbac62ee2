#!/usr/bin/env python3
"""Answers /v1/completions in vLLM's shape, computed by a real llama-server behind it.

    python3 vllm_shape_proxy.py MODE UPSTREAM_URL PORT_FILE

vLLM cannot run on this project's CI machines (no GPU), so this adapter stands in for the *shape* of
its answers, with a real engine's numbers: every figure comes from llama-server's native
/completion. It exists to test compare --server --api openai on the response forms llama-server
does not produce:
  - prompt_logprobs (vLLM's extra parameter): choices[0].prompt_logprobs, a list with one entry per
    prompt token, None first, then {"<id>": {"logprob", "rank", "decoded_token"}};
  - the classic completions logprobs: {"tokens", "token_logprobs", "top_logprobs": [{key: logprob}]},
    keys "token_id:N" when the request asks return_tokens_as_token_ids, at every generated step (the
    decode path), raw (vLLM's default --logprobs-mode raw_logprobs: before temperature and penalties);
  - GET /v1/models lists the served name, "tiny-trained"; a request naming another model is answered
    HTTP 404 {"error": {"message": "The model `x` does not exist.", ...}} as vLLM's _check_model does.
MODE:
  vllm        the shapes above; /detokenize answers {"prompt": text} (vLLM's field name)
  nodetok     the same, but /detokenize is 404 (an OpenAI-compatible server without one)
  text-keys   token text instead of "token_id:N" keys (return_tokens_as_token_ids ignored)
  short       prompt_logprobs one entry short
Standard library only (with json_http.py beside it). Stops when killed.
"""
import json
import sys
import urllib.request

from json_http import JsonHandler, serve

MODE, UPSTREAM, PORT_FILE = sys.argv[1], sys.argv[2].rstrip("/"), sys.argv[3]


def upstream(path, body):
    req = urllib.request.Request(UPSTREAM + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def native_top(prompt, k):
    """llama-server's pre-sampling top-k after `prompt`: [(id, logprob, text)]."""
    r = upstream("/completion", {"prompt": prompt, "n_predict": 1, "n_probs": k, "temperature": 0,
                                 "cache_prompt": True, "post_sampling_probs": False, "return_tokens": True})
    return [(e["id"], e["logprob"], e["token"]) for e in r["completion_probabilities"][0]["top_logprobs"]]


def key(tok_id, text, as_ids):
    return "token_id:%d" % tok_id if as_ids and MODE != "text-keys" else text


SERVED = "tiny-trained"


class Handler(JsonHandler):
    def do_GET(self):
        if self.path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [{"id": SERVED, "object": "model", "owned_by": "vllm"}]})
        return self.send_json(404, {"detail": "Not Found"})

    def do_POST(self):
        req = self.read_json()
        if self.path == "/detokenize":
            if MODE == "nodetok":
                return self.send_json(404, {"detail": "Not Found"})
            return self.send_json(200, {"prompt": upstream("/detokenize", {"tokens": req["tokens"]})["content"]})
        if self.path != "/v1/completions":
            return self.send_json(404, {"detail": "Not Found"})
        if req.get("model") and req["model"] != SERVED:
            return self.send_json(404, {"error": {"message": "The model `%s` does not exist." % req["model"],
                                                  "type": "NotFoundError", "param": "model", "code": 404}})
        prompt, k = req["prompt"], int(req.get("logprobs") or 1)
        as_ids = bool(req.get("return_tokens_as_token_ids"))
        choice = {"index": 0, "text": ""}
        if "cache_salt" in req:  # vLLM's per-request prefix-cache key (llama-server has none: ignored)
            print("cache_salt %s" % req["cache_salt"], file=sys.stderr, flush=True)  # checked by engine_apis.sh
        if req.get("prompt_logprobs"):
            print("prompt_logprobs request", file=sys.stderr, flush=True)  # counted by engine_apis.sh
            pk = int(req["prompt_logprobs"])
            entries = [None]
            for j in range(1, len(prompt)):
                top = native_top(prompt[:j], pk)
                entries.append({str(t): {"logprob": lp, "rank": r + 1, "decoded_token": txt}
                                for r, (t, lp, txt) in enumerate(top)})
            choice["prompt_logprobs"] = entries[:-1] if MODE == "short" else entries
        gen = upstream("/completion", {"prompt": prompt, "n_predict": int(req.get("max_tokens", 16)), "n_probs": k,
                                       "temperature": req.get("temperature", 1.0), "top_k": req.get("top_k", 40),
                                       "top_p": req.get("top_p", 1.0), "min_p": req.get("min_p", 0.0),
                                       "seed": req.get("seed", -1), "ignore_eos": bool(req.get("ignore_eos")),
                                       "presence_penalty": req.get("presence_penalty", 0.0),
                                       "repeat_penalty": req.get("repetition_penalty", 1.0),
                                       "return_tokens": True, "post_sampling_probs": False,
                                       # llama-server's prompt cache as the tool's native requests use it:
                                       # on for one-token (teacher-forced) requests, off for a generation
                                       "cache_prompt": int(req.get("max_tokens", 16)) == 1})
        probs = gen["completion_probabilities"]
        choice["text"] = gen["content"]
        choice["logprobs"] = {
            "tokens": [key(p["id"], p["token"], as_ids) for p in probs],
            "token_logprobs": [p["logprob"] for p in probs],
            "top_logprobs": [{key(e["id"], e["token"], as_ids): e["logprob"] for e in p["top_logprobs"]} for p in probs],
            "text_offset": [0] * len(probs),
        }
        choice["finish_reason"] = "stop" if gen.get("stop_type") in ("eos", "word") else "length"
        self.send_json(200, {"id": "cmpl-test", "object": "text_completion", "model": req.get("model", "?"),
                             "choices": [choice]})


serve(Handler, PORT_FILE)
