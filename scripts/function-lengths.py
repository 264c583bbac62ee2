#!/usr/bin/env python3
"""Function lengths of src/ and kernels/ (C++ and CUDA), a sibling of check-layers.sh.

A function is a brace body opened at namespace or class scope after a signature (a definition,
a constructor with an initialiser list, an operator, a CUDA kernel, a lambda at namespace scope or
in a namespace-scope initialiser); its length is the number of lines from the first line of its
signature (its template header included) to its closing brace, as an editor counts them. Comments,
string and character literals and preprocessor lines are skipped when braces are counted. Bodies
nested in a function (lambdas, local structs) count towards the enclosing function. A function is
named by the identifier before its parameter list, with its Class:: qualification; attributes that
take arguments (`__launch_bounds__(N)`, `alignas(16)`) are no names, so a kernel is named as itself.

Usage: scripts/function-lengths.py [--max N] [--top K] [ROOT]
  --max N   the limit (default 100): every function over it is printed as FILE:LINE: NAME LINES
            and the exit status is 1; 0 when none is over.
  --top K   also print the K longest functions (default 0).
Exit 2 on a bad option, 128 on a missing folder or a file that does not balance its braces (the count would be wrong).
Run by the test cli:function_lengths on every `make test`.
"""
import os
import re
import sys

LIMIT_DEFAULT = 100
SCOPE_KEYWORDS = ("namespace", "struct", "class", "union", "enum", "extern")


def strip_code(text):
    """The text with comments, literals and preprocessor lines blanked, newlines kept."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if at_line_start and c == "#":
            # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        at_line_start = False
        if c == "\n":
            out.append(c)
            at_line_start = True
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and (text[i - 1].isalnum()) and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")  # a digit separator (1'000)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


# What a brace opened outside any function is, decided from the declaration before it (its head):
#   SCOPE        a namespace, class or extern "C" block: the declarations in it are read
#   FUNCTION     a function's body (or a lambda's at namespace scope); braces in it are INNER
#   INIT         a variable's braced initialiser (its braces nest; a lambda in it is a FUNCTION)
#   MEMBER_INIT  `A() : x_{1} {`: a member's brace in a constructor's initialiser list
#   ARG_INIT     a brace inside parentheses: a default argument `T t = {}`, `f(T{})`
# After MEMBER_INIT and ARG_INIT the declaration goes on, so its head is kept.
SCOPE, FUNCTION, INNER, INIT, MEMBER_INIT, ARG_INIT = "scope", "function", "inner", "init", "member-init", "arg-init"
KEEPS_HEAD = (MEMBER_INIT, ARG_INIT)
CLASS_KEYS = ("struct", "class", "union", "enum")
# Identifiers that take a parenthesised argument in a signature without being its name.
NOT_A_NAME = {"__launch_bounds__", "__attribute__", "__declspec", "alignas", "decltype", "noexcept",
              "throw", "requires", "sizeof", "alignof", "if", "while", "for", "switch", "return"}
# a constructor's initialiser list begins: ") :" (a ':' that is not half of '::'), noexcept allowed
CTOR_INIT = re.compile(r"\)\s*(?:noexcept\s*)?(?<!:):(?!:)")
# the end of a function's signature: its parameter list, qualifiers, a trailing return type
FUNC_END = re.compile(r"\)\s*(?:(?:const|volatile|noexcept|override|final|mutable|&&?)\s*)*(?:(?:->|requires)[^;{}]*)?$")
# the end of a lambda's head: [captures](parameters) mutable -> T, the parameters optional; the
# captures follow '=', '(' or ',' (or begin the head), so `T arr[2]{...}` is no lambda
LAMBDA_END = re.compile(r"(?:^|[=(,]\s*)\[[^\[\]]*\]\s*(?:\((?:[^()]|\([^()]*\))*\))?\s*(?:(?:mutable|constexpr|noexcept)\s*)*(?:->[^;{}]*)?$")
# a line that is only a macro's invocation, `DEGEN_INSTANTIATE(float)`: a declaration of its own
MACRO_LINE = re.compile(r"\s*[A-Z][A-Z0-9_]*\s*\(.*\)\s*")
# template arguments, one level of nesting: <int, std::pair<int, int>>
TEMPLATE_ARGS = r"<[^()<>]*(?:<[^()<>]*>[^()<>]*)*>"


def first_keyword(words):
    """The first word of a declaration, after any template header and [[attributes]]."""
    rest = re.sub(r"^(?:\s*\[\[[^\]]*\]\])+", "", words)
    rest = re.sub(r"^\s*template\s*<", "<", rest)
    if rest.startswith("<"):  # skip the template header's angle brackets, nested ones included
        depth = 0
        for k, ch in enumerate(rest):
            depth += (ch == "<") - (ch == ">")
            if depth == 0:
                rest = rest[k + 1:]
                break
    m = re.match(r"\s*(\w+)", rest)
    return (m.group(1) if m else ""), rest


def classify(words, outer):
    """The kind of brace that a declaration head (stripped) opens outside any function."""
    if outer == INIT:
        return FUNCTION if LAMBDA_END.search(words) else INIT
    if outer == MEMBER_INIT:
        return MEMBER_INIT
    if words.count("(") > words.count(")"):
        return FUNCTION if LAMBDA_END.search(words) else ARG_INIT
    kw, rest = first_keyword(words)
    if kw == "namespace":
        return SCOPE
    if kw == "extern" and re.fullmatch(r"extern\s*", rest.strip()):
        return SCOPE  # extern "C" { (the literal is blanked)
    if words == "" or words.endswith("=") or re.search(r"\breturn$", words):
        return INIT
    if LAMBDA_END.search(words):
        return FUNCTION
    if CTOR_INIT.search(words):
        return MEMBER_INIT if re.search(r"[\w>]$", words) else FUNCTION
    if FUNC_END.search(words):
        return FUNCTION  # `struct Z make_z() {` too
    if kw in CLASS_KEYS or ")" not in words:
        return SCOPE  # a class, or a braced variable `T x{...}` whose inner braces are no bodies
    return INIT


def variable_name(words):
    """The variable a braced initialiser belongs to: `static const X kTable[] = {` is kTable."""
    m = re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*=?$", words)
    return m.group(1) if m else "?"


def functions(path):
    """(name, first line, length) of every function of one file."""
    code = strip_code(open(path, encoding="utf-8", errors="replace").read())
    found = []
    stack = []  # (kind, info): info is (name, start line) for a FUNCTION, the variable for an INIT
    stmt_start = 0  # offset where the current declaration began
    line, line_start = 1, 0
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
            if not stack or stack[-1][0] in (SCOPE,):
                # a macro's invocation on a line of its own ends a declaration
                text = code[line_start:i]
                before = code[stmt_start:line_start]
                if MACRO_LINE.fullmatch(text) and before.count("(") == before.count(")") and text.count("(") == text.count(")"):
                    stmt_start = i + 1
            line_start = i + 1
        elif c == "{":
            outer = stack[-1][0] if stack else SCOPE
            if outer in (FUNCTION, INNER):
                stack.append((INNER, None))
                continue
            head = code[stmt_start:i]
            kind = classify(head.strip(), outer)
            info = None
            if kind == FUNCTION:
                name = "lambda in " + stack[-1][1] if outer == INIT else signature_name(head.strip())
                info = (name, line - head.count("\n") + leading_newlines(head))
            elif kind == INIT:
                info = stack[-1][1] if outer == INIT else variable_name(head.strip())
            stack.append((kind, info))
            if kind not in KEEPS_HEAD:
                stmt_start = i + 1
        elif c == "}":
            if not stack:
                raise ValueError(f"{path}:{line}: '}}' without '{{'")
            kind, info = stack.pop()
            if kind == FUNCTION:
                name, start_line = info
                found.append((name, start_line, line - start_line + 1))
            if kind not in KEEPS_HEAD:  # after `y_{2}` or `T t = {}` the declaration goes on
                stmt_start = i + 1
        elif not stack or stack[-1][0] in (SCOPE, INIT):
            if c == ";" or (c == ":" and re.search(r"\b(public|private|protected)\s*$", code[stmt_start:i])):
                stmt_start = i + 1
    if stack:
        raise ValueError(f"{path}: {len(stack)} brace(s) left open at the end")
    return found


def leading_newlines(head):
    """Newlines before the first non-blank character of a declaration."""
    stripped = head.lstrip()
    return head[: len(head) - len(stripped)].count("\n")


def qualified(before, name):
    """NAME with the Class:: (or ns::Class<T>::) qualification that BEFORE ends with."""
    q = re.search(r"(?:\b\w+(?:\s*" + TEMPLATE_ARGS + r")?\s*::\s*)*$", before)
    return re.sub(r"\s+", "", q.group(0)) + name


def signature_name(words):
    """The function's name: the identifier before its parameter list, the first '(' at depth 0
    (outside template arguments) that follows a name; an attribute such as __launch_bounds__(N) is
    no name. A lambda at namespace scope is named by its variable."""
    op = re.search(r"\boperator\b\s*(\(\s*\)|\[\s*\]|(?:new|delete)\s*(?:\[\s*\])?|\w[\w:\s<>*&]*?|[^\w\s(]+)\s*\(", words)
    if op:
        symbol = re.sub(r"\s+", "", op.group(1))
        conversion = op.group(1)[:1].isalpha() and symbol not in ("new", "delete", "new[]", "delete[]")
        name = "operator " + op.group(1).strip() if conversion else "operator" + symbol
        return qualified(words[: op.start()], name)
    lam = re.match(r"(?:.*?\b)?(\w+)\s*=\s*\[", words, re.S)
    if lam and "(" not in words[: lam.end(1)]:
        return lam.group(1)
    paren = angle = 0
    for k, ch in enumerate(words):
        if ch == "(":
            if paren == 0 and angle == 0:
                before = words[:k].rstrip()
                m = re.search(r"(~?[A-Za-z_]\w*)\s*(" + TEMPLATE_ARGS + ")?$", before)
                if m and m.group(1) not in NOT_A_NAME:
                    return qualified(before[: m.start()], m.group(1) + re.sub(r"\s+", "", m.group(2) or ""))
            paren += 1
        elif ch == ")":
            paren -= 1
        elif paren == 0 and ch == "<" and re.search(r"\w\s*$", words[:k]):
            angle += 1
        elif paren == 0 and ch == ">" and angle > 0 and words[k - 1] != "-":
            angle -= 1
    return "?"


def main(argv):
    limit, top, root = LIMIT_DEFAULT, 0, None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a in ("--max", "--top"):
            if not args or not args[0].isdigit():
                print(f"function-lengths: {a} expects a number of lines, found {args[0] if args else 'nothing'}", file=sys.stderr)
                return 2
            value = int(args.pop(0))
            limit, top = (value, top) if a == "--max" else (limit, value)
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            root = a
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    for folder in ("src", "kernels"):
        d = os.path.join(root, folder)
        if not os.path.isdir(d):
            print(f"function-lengths: {d} is missing (expected the project's {folder}/)", file=sys.stderr)
            return 128
        for dirpath, _, names in os.walk(d):
            for nm in sorted(names):
                if not nm.endswith((".cpp", ".h", ".cu", ".cuh", ".hpp")):
                    continue
                p = os.path.join(dirpath, nm)
                try:
                    for name, ln, length in functions(p):
                        rows.append((length, os.path.relpath(p, root), ln, name))
                except ValueError as e:
                    print(f"function-lengths: {e}", file=sys.stderr)
                    return 128
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    over = [r for r in rows if r[0] > limit]
    for length, p, ln, name in over:
        print(f"{p}:{ln}: {name} {length} lines (limit {limit})")
    if top:
        print(f"the {top} longest of {len(rows)} functions:")
        for length, p, ln, name in rows[:top]:
            print(f"  {length:5d}  {p}:{ln}  {name}")
    if over:
        print(f"function-lengths: {len(over)} function(s) over {limit} lines")
        return 1
    print(f"function-lengths: {len(rows)} functions, none over {limit} lines (longest {rows[0][0] if rows else 0})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
