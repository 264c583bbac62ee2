#!/usr/bin/env python3
"""Renders a generated set of conversations with the official Qwen3.5 chat template (issue 20, point 6).

Independent check of src/model/chat_template.cpp: the template is the Jinja file that Qwen ships
(models/templates/Qwen3.5-4B.jinja of the llama.cpp that llama-cpp-python 0.3.36 vendors, SHA-256
pinned below), rendered with jinja2 the way transformers' apply_chat_template does it (sandboxed
environment, trim_blocks, lstrip_blocks, loopcontrols, raise_exception). The set is deterministic:
named cases for each rule of the template, then seeded random conversations over roles
(system/user/assistant), a system message or none, reasoning_content present (also empty) or absent,
"<think>"/"</think>" written inside the content (one and several), whitespace to trim (ASCII and
Unicode), enable_thinking undefined/true/false and add_generation_prompt on/off. Conversations the
template rejects are recorded with its error message. Tool calls, tool messages and the `tools`
list are out of scope (degenbisect renders none of them).

Output (commit it; neither this script nor jinja2 is needed to build or test):
  tests/fixtures/chat/qwen35.json   {"format", "version", "template": {...}, "cases": [
                                      {"name", "messages": [{"role", "content", "reasoning_content"?}],
                                       "add_generation_prompt", "enable_thinking" (true/false, absent =
                                       undefined), and "text" (the rendering) or "error" (the message)}]}

Usage:
  python3 tools/make_chat_fixtures.py [--template FILE] [--out FILE]   write the fixture
  python3 tools/make_chat_fixtures.py --check                          exit 0 when the committed
      fixture is what this script renders now, 1 when not, 77 when it cannot tell (no jinja2 or no
      template file)
The template is read from --template, else from build/llama.cpp/src/models/templates/ (made by
scripts/build-llama-cpp.sh), else from the source distribution in $DEGEN_LLAMA_CACHE or build/llama-sdist.
"""
import argparse
import hashlib
import json
import os
import random
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "chat", "qwen35.json")
FORMAT, VERSION = "degenbisect-chat-fixtures", 1

SDIST_VERSION = "0.3.36"  # as scripts/build-llama-cpp.sh
TEMPLATE_MEMBER = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/models/templates/Qwen3.5-4B.jinja"
TEMPLATE_SHA256 = "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"
SKIP = 77


def load_template(path):
    """The template's text, checked against the pinned digest; None when no copy is found."""
    data = None
    if path:
        with open(path, "rb") as f:
            data = f.read()
    else:
        unpacked = os.path.join(ROOT, "build", "llama.cpp", "src", "models", "templates", "Qwen3.5-4B.jinja")
        caches = [os.environ.get("DEGEN_LLAMA_CACHE", ""), os.path.join(ROOT, "build", "llama-sdist")]
        if os.path.isfile(unpacked):
            with open(unpacked, "rb") as f:
                data = f.read()
        for cache in caches:
            tarball = os.path.join(cache, f"llama_cpp_python-{SDIST_VERSION}.tar.gz") if cache else ""
            if data is None and tarball and os.path.isfile(tarball):
                with tarfile.open(tarball) as t:
                    data = t.extractfile(TEMPLATE_MEMBER).read()
    if data is None:
        return None, None
    digest = hashlib.sha256(data).hexdigest()
    if digest != TEMPLATE_SHA256:
        sys.exit(f"make_chat_fixtures.py: the template has SHA-256 {digest}, expected {TEMPLATE_SHA256} "
                 f"(Qwen3.5-4B.jinja of llama-cpp-python {SDIST_VERSION})")
    return data.decode("utf-8"), digest


class TemplateError(Exception):
    pass


def make_renderer(source):
    # As transformers.utils.chat_template_utils._compile_jinja_template.
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(source)

    def render(case):
        kwargs = {"messages": case["messages"], "add_generation_prompt": case["add_generation_prompt"]}
        if "enable_thinking" in case:
            kwargs["enable_thinking"] = case["enable_thinking"]
        try:
            return {"text": template.render(**kwargs)}
        except TemplateError as e:
            return {"error": str(e)}

    return render, jinja2.__version__


# --- the conversations --------------------------------------------------------------------------
ABSENT = object()  # no reasoning_content key


def msg(role, content, reasoning=ABSENT):
    m = {"role": role, "content": content}
    if reasoning is not ABSENT:
        m["reasoning_content"] = reasoning
    return m


def u(content):
    return msg("user", content)


def a(content, reasoning=ABSENT):
    return msg("assistant", content, reasoning)


def s(content):
    return msg("system", content)


# Python's str.isspace() (what Jinja's |trim strips) is true for these, false for U+200B and U+FEFF.
WS = "\u3000\u00a0\u2028\u0085\x1c\x1f\x0b\x0c\t\r"
USER_TEXTS = [
    "Q", "What is 2+2?", "  padded question \n", f"{WS}unicode space{WS}", "line one\nline two", "",
    "\u4f60\u597d \U0001F600", "\u200bzero width\u200b", "\ufeffbom", "<think>a user can write tags</think> too",
    "<tool_response>\nresult\n</tool_response>",   # not a query for the template (a tool result)
    " \n<tool_response>r</tool_response>\n",       # the same after |trim
    "<tool_response>unclosed",                     # a query
]
SYSTEM_TEXTS = ["You are helpful.", "  S  \n", "", "   ", f"{WS}wide{WS}", "rules:\n- be brief\n"]
ASSISTANT = [  # (content, reasoning_content or ABSENT)
    ("A", ABSENT), ("  A  \n", ABSENT), ("", ABSENT), ("A", "R"), ("A", "  R\n\n"), ("A", ""), (" ", " "),
    ("<think>\nR\n</think>\n\nA", ABSENT),
    ("R</think>A", ABSENT),
    ("<think>R</think>\n \n A \n", ABSENT),                  # text after </think>: only '\n' stripped
    ("<think>R \n</think>\n\t A", ABSENT),
    ("<think>R1</think>mid</think>\n\nA", ABSENT),           # several </think>: after the last
    ("a</think>b</think>c</think>", ABSENT),                 # ends with </think>: empty answer
    ("pre<think>R</think>A", ABSENT),                        # text before <think> dropped
    ("<think>x<think>R\n\n</think>A", ABSENT),               # after the last <think>
    ("</think>", ABSENT), ("<think></think>", ABSENT), ("<think>\n\n</think>\n\n", ABSENT),
    ("<think>R</think>A", "given"),                          # reasoning_content wins, tags kept
    ("<think>R</think>A", ""),
    ("\n\n<think>\n\nR\n\n</think>\n\n\nA\n\n", ABSENT),
    ("A <think>never closed", ABSENT),
    (f"{WS}<think>{WS}R{WS}</think>{WS}A{WS}", ABSENT),
    ("A", f"{WS}R{WS}"),
    ("<think>\u4f60</think>\n\U0001F600", ABSENT),
]


def named_cases():
    """One or more cases per rule of the template (and the four differences of issue 20.6)."""
    c = []

    def add(name, messages, gen=True, thinking=ABSENT):
        case = {"name": name, "messages": messages, "add_generation_prompt": gen}
        if thinking is not ABSENT:
            case["enable_thinking"] = thinking
        c.append(case)

    add("single user, thinking undefined", [u("U")])
    add("single user, thinking on", [u("U")], thinking=True)
    add("single user, thinking off", [u("U")], thinking=False)
    add("single user, no generation prompt", [u("U")], gen=False)
    add("system and user", [s("S"), u("U")])
    add("empty system", [s(""), u("U")], thinking=False)
    add("past turns lose their reasoning",
        [u("Q1"), a("A1", "R1"), u("Q2"), a("<think>\nR2\n</think>\n\nA2")], gen=False)
    add("assistant after the last user, not final, no reasoning",
        [u("Q"), a("A1"), a("A2")], gen=False)
    add("assistant after the last user, not final, no reasoning, prompt", [u("Q"), a("A1"), a("A2", "R2")])
    add("two assistants after the last user, both without reasoning",
        [s("S"), u("Q1"), a("A0"), u("Q2"), a("A1"), a("A2")], thinking=False)
    add("text after </think> keeps spaces", [u("Q"), a("<think>R</think>\n \n A \n")], gen=False)
    add("text after </think> keeps a tab", [u("Q"), a("<think>R \n</think>\n\t A"), u("Q2")])
    add("several </think>: text after the last", [u("Q"), a("<think>R1</think>mid</think>\n\nA")], gen=False)
    add("several </think> in a past turn", [u("Q"), a("x</think>y</think>z"), u("Q2")])
    add("reasoning_content wins over tags in content", [u("Q"), a("<think>R</think>A", "given")], gen=False)
    add("empty reasoning_content still wins", [u("Q"), a("<think>R</think>A", "")], gen=False)
    add("tool_response user turn is not a query", [u("Q"), a("A1"), u("<tool_response>\nr\n</tool_response>"), a("A2")])
    add("no messages", [])
    add("no user message: assistant only", [a("A")])
    add("no user message: system and assistant", [s("S"), a("A")])
    add("no user message: system only", [s("S")])
    add("no user message: only tool_response users", [u("<tool_response>r</tool_response>"), a("A")])
    add("no user message wins over a misplaced system", [a("A"), s("S")])
    add("system not first", [u("U"), s("S")])
    add("system twice", [s("S1"), s("S2"), u("U")])
    add("unexpected role", [u("U"), msg("bot", "B")])
    add("misplaced system before an unexpected role", [u("U"), s("S"), msg("bot", "B")])
    return c


def random_cases(n, seed=20):
    rng = random.Random(seed)
    cases = []
    for i in range(n):
        messages = []
        if rng.random() < 0.5:
            messages.append(s(rng.choice(SYSTEM_TEXTS)))
        for k in range(rng.randint(1, 6)):
            if (k == 0 and rng.random() < 0.85) or rng.random() < 0.4:
                messages.append(u(rng.choice(USER_TEXTS)))
            else:
                content, reasoning = rng.choice(ASSISTANT)
                messages.append(a(content, reasoning))
        if rng.random() < 0.03:  # an occasional misplaced system message
            messages.insert(rng.randint(1, len(messages)), s("late"))
        case = {"name": f"random {i}", "messages": messages, "add_generation_prompt": rng.random() < 0.6}
        t = rng.choice(["undefined", True, False])
        if t != "undefined":
            case["enable_thinking"] = t
        cases.append(case)
    return cases


def build(render, jinja_version, digest):
    cases = []
    for case in named_cases() + random_cases(200):
        cases.append({**case, **render(case)})
    return {
        "format": FORMAT, "version": VERSION,
        "regenerate": "python3 tools/make_chat_fixtures.py (jinja2; the template of llama-cpp-python "
                      f"{SDIST_VERSION}: scripts/build-llama-cpp.sh or its build/llama-sdist cache)",
        "template": {"file": TEMPLATE_MEMBER, "sha256": digest, "rendered_with": f"jinja2 {jinja_version}"},
        "cases": cases,
    }


def dump(doc):
    return json.dumps(doc, indent=1, ensure_ascii=True) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--template", help="the Qwen3.5-4B.jinja file (default: see --help)")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with the committed fixture instead of writing")
    args = ap.parse_args()
    try:
        import jinja2  # noqa: F401
    except ImportError:
        if args.check:
            print("make_chat_fixtures.py: SKIP, jinja2 is not installed", file=sys.stderr)
            sys.exit(SKIP)
        raise
    source, digest = load_template(args.template)
    if source is None:
        msg_ = ("no Qwen3.5-4B.jinja found (run scripts/build-llama-cpp.sh, or pass --template); "
                "looked in build/llama.cpp/src/models/templates and the llama-cpp-python source distribution")
        if args.check:
            print(f"make_chat_fixtures.py: SKIP, {msg_}", file=sys.stderr)
            sys.exit(SKIP)
        sys.exit(f"make_chat_fixtures.py: {msg_}")
    render, jinja_version = make_renderer(source)
    doc = build(render, jinja_version, digest)
    if args.check:
        with open(args.out, encoding="utf-8") as f:
            committed = json.load(f)
        committed["template"].pop("rendered_with", None)
        now = json.loads(dump(doc))
        now["template"].pop("rendered_with", None)
        if committed != now:
            bad = [c["name"] for c, d in zip(committed.get("cases", []), now["cases"]) if c != d]
            print(f"make_chat_fixtures.py: {args.out} is not current ({len(now['cases'])} cases now, "
                  f"{len(committed.get('cases', []))} committed; differing: {bad[:10]}); rerun the script",
                  file=sys.stderr)
            sys.exit(1)
        print(f"make_chat_fixtures.py: {args.out} is current ({len(now['cases'])} cases, jinja2 {jinja_version})")
        return
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(dump(doc))
    n_err = sum("error" in c for c in doc["cases"])
    print(f"wrote {args.out}: {len(doc['cases'])} cases ({n_err} rejected by the template), jinja2 {jinja_version}")


if __name__ == "__main__":
    main()
