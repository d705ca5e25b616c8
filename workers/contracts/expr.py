"""A small, safe expression language for postconditions and tolerance bounds
(the ``postcondition`` and
``tolerance`` parts of docs/contract-language.md#the-parts-of-a-contract).

Contract files carry formulas such as ``4*sqrt(K)`` (a bound) or ``probe_mismatch == 0 and rho <= bound``
(a relation). They come from files that may be uploaded by users, so they are never handed to ``eval``:
this module tokenises the text, parses it by recursive descent into a tiny tuple AST, and evaluates that
AST against a dict of names bound by the measurement protocol.

Grammar (lowest to highest precedence)::

    expr    := or
    or      := and ('or' and)*
    and     := not ('and' not)*
    not     := 'not' not | cmp
    cmp     := arith (('<=' | '<' | '>=' | '>' | '==' | '!=') arith)*     # chained as in Python
    arith   := term (('+' | '-') term)*
    term    := unary (('*' | '/') unary)*
    unary   := ('-' | '+') unary | power
    power   := atom ('**' unary)?                                          # right-associative
    atom    := NUMBER | NAME | FUNC '(' expr (',' expr)* ')' | '(' expr ')'

Functions: ``min max abs sqrt log log2 exp``. Names are identifiers that do not start with ``_`` (so no
dunder tricks); there is no attribute access, indexing, string literal or call of anything but the
whitelisted functions. Errors carry the column of the offending character.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["ExprError", "Expr", "clause_report", "parse", "evaluate", "FUNCTIONS"]


class ExprError(ValueError):
    """A syntax or evaluation error; ``column`` is 1-based within the expression text."""

    def __init__(self, message: str, text: str = "", column: int | None = None):
        self.message, self.text, self.column = message, text, column
        where = f" at column {column}" if column is not None else ""
        super().__init__(f"{message}{where} in expression {text!r}" if text else message)


def _checked_log(x, base=None):
    if x <= 0:
        raise ExprError(f"log of non-positive value {x}")
    return math.log(x) if base is None else math.log(x, base)


def _checked_sqrt(x):
    if x < 0:
        raise ExprError(f"sqrt of negative value {x}")
    return math.sqrt(x)


# name -> (callable, min args, max args)
FUNCTIONS = {
    "min": (min, 1, 64),
    "max": (max, 1, 64),
    "abs": (abs, 1, 1),
    "sqrt": (_checked_sqrt, 1, 1),
    "log": (_checked_log, 1, 2),
    "log2": (lambda x: _checked_log(x, 2), 1, 1),
    "exp": (math.exp, 1, 1),
}
_KEYWORDS = {"and", "or", "not"}

_TOKEN_RE = re.compile(
    r"""(?P<ws>\s+)
      | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op>\*\*|<=|>=|==|!=|[-+*/(),<>])
    """,
    re.VERBOSE,
)


@dataclass(frozen=True)
class _Tok:
    kind: str  # num | name | op | end
    value: str
    col: int  # 1-based


def _tokenize(text: str) -> list[_Tok]:
    toks, pos = [], 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m:
            ch = text[pos]
            hint = " (attribute access is not allowed)" if ch == "." else ""
            raise ExprError(f"unexpected character {ch!r}{hint}", text, pos + 1)
        kind = m.lastgroup
        val = m.group(kind)
        if kind == "name":
            if val.startswith("_"):
                raise ExprError(f"name {val!r} may not start with '_'", text, pos + 1)
            # "a.b" would tokenise as name, then fail on '.', but "1.e5.x" etc. also end up in the error above
        if kind != "ws":
            toks.append(_Tok(kind, val, pos + 1))
        pos = m.end()
    toks.append(_Tok("end", "", len(text) + 1))
    return toks


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, value: str) -> _Tok:
        t = self.take()
        if t.value != value or t.kind not in ("op", "name"):
            raise ExprError(f"expected {value!r}, found {t.value or 'end of input'!r}", self.text, t.col)
        return t

    def parse(self):
        if self.peek().kind == "end":
            raise ExprError("empty expression", self.text, 1)
        node = self.or_()
        t = self.peek()
        if t.kind != "end":
            raise ExprError(f"unexpected {t.value!r}", self.text, t.col)
        return node

    def _is_kw(self, kw):
        t = self.peek()
        return t.kind == "name" and t.value == kw

    def or_(self):
        node = self.and_()
        while self._is_kw("or"):
            self.take()
            node = ("or", node, self.and_())
        return node

    def and_(self):
        node = self.not_()
        while self._is_kw("and"):
            self.take()
            node = ("and", node, self.not_())
        return node

    def not_(self):
        if self._is_kw("not"):
            self.take()
            return ("not", self.not_())
        return self.cmp()

    def cmp(self):
        first = self.arith()
        ops, rest = [], []
        while self.peek().kind == "op" and self.peek().value in ("<=", "<", ">=", ">", "==", "!="):
            ops.append(self.take().value)
            rest.append(self.arith())
        return ("cmp", first, tuple(zip(ops, rest))) if ops else first

    def arith(self):
        node = self.term()
        while self.peek().kind == "op" and self.peek().value in "+-" and self.peek().value:
            op = self.take().value
            node = (op, node, self.term())
        return node

    def term(self):
        node = self.unary()
        while self.peek().kind == "op" and self.peek().value in ("*", "/"):
            op = self.take().value
            node = (op, node, self.unary())
        return node

    def unary(self):
        t = self.peek()
        if t.kind == "op" and t.value in ("-", "+"):
            self.take()
            return ("neg", self.unary()) if t.value == "-" else self.unary()
        return self.power()

    def power(self):
        base = self.atom()
        if self.peek().kind == "op" and self.peek().value == "**":
            self.take()
            return ("**", base, self.unary())
        return base

    def atom(self):
        t = self.take()
        if t.kind == "num":
            return ("num", float(t.value))
        if t.kind == "name":
            if t.value in _KEYWORDS:
                raise ExprError(f"unexpected keyword {t.value!r}", self.text, t.col)
            if self.peek().kind == "op" and self.peek().value == "(":
                if t.value not in FUNCTIONS:
                    raise ExprError(f"call of unknown function {t.value!r}", self.text, t.col)
                self.take()
                args = [self.or_()]
                while self.peek().value == "," and self.peek().kind == "op":
                    self.take()
                    args.append(self.or_())
                self.expect(")")
                _, lo, hi = FUNCTIONS[t.value]
                if not lo <= len(args) <= hi:
                    raise ExprError(f"{t.value}() takes {lo}..{hi} arguments, got {len(args)}", self.text, t.col)
                return ("call", t.value, tuple(args))
            return ("name", t.value)
        if t.kind == "op" and t.value == "(":
            node = self.or_()
            self.expect(")")
            return node
        raise ExprError(f"unexpected {t.value or 'end of input'!r}", self.text, t.col)


def _names(node, acc: set):
    tag = node[0]
    if tag == "name":
        acc.add(node[1])
    elif tag == "num":
        pass
    elif tag == "call":
        for a in node[2]:
            _names(a, acc)
    elif tag == "cmp":
        _names(node[1], acc)
        for _, n in node[2]:
            _names(n, acc)
    else:
        for child in node[1:]:
            _names(child, acc)
    return acc


_CMP = {
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


def _eval(node, env: dict, text: str):
    special = _NODE_EVAL.get(node[0])
    if special is not None:
        return special(node, env, text)
    return _arith(node[0], _eval(node[1], env, text), _eval(node[2], env, text), text)


def _eval_name(node, env: dict, text: str) -> float:
    if node[1] not in env:
        raise ExprError(f"unknown name {node[1]!r}", text)
    v = env[node[1]]
    if not isinstance(v, (bool, int, float)):
        raise ExprError(f"name {node[1]!r} is bound to a non-number ({type(v).__name__})", text)
    return float(v)


def _eval_cmp(node, env: dict, text: str) -> bool:
    """A chain ``a < b <= c``: every link holds, each operand evaluated once, stopping at the first that fails."""
    left = _eval(node[1], env, text)
    for op, rhs in node[2]:
        right = _eval(rhs, env, text)
        if not _CMP[op](left, right):
            return False
        left = right
    return True


def _eval_call(node, env: dict, text: str) -> float:
    fn = FUNCTIONS[node[1]][0]
    args = [_eval(a, env, text) for a in node[2]]
    try:
        return float(fn(*args))
    except OverflowError:  # exp(1000): as for "**", an overflow is infinite
        return math.inf


def _divide(a, b):
    if b == 0:
        return math.copysign(math.inf, a) if a != 0 else math.nan
    return a / b


_ARITH = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _divide,
    "**": lambda a, b: float(a) ** float(b),
}


def _arith(tag: str, a, b, text: str):
    if tag not in _ARITH:
        raise ExprError(f"internal: unknown node {tag}", text)  # pragma: no cover
    try:
        return _ARITH[tag](a, b)
    except OverflowError:
        return math.inf


_NODE_EVAL = {
    "num": lambda node, env, text: node[1],
    "name": _eval_name,
    "neg": lambda node, env, text: -_eval(node[1], env, text),
    "not": lambda node, env, text: not _truth(_eval(node[1], env, text)),
    "and": lambda node, env, text: _truth(_eval(node[1], env, text)) and _truth(_eval(node[2], env, text)),
    "or": lambda node, env, text: _truth(_eval(node[1], env, text)) or _truth(_eval(node[2], env, text)),
    "cmp": _eval_cmp,
    "call": _eval_call,
}


def _truth(v) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and math.isnan(v):
        return False
    return bool(v)


@dataclass(frozen=True)
class Expr:
    """A parsed expression. ``names`` are its free variables (checked against a protocol by the loader)."""

    text: str
    tree: tuple = field(repr=False)
    names: frozenset = field(default=frozenset())

    def __call__(self, **env):
        return self.evaluate(env)

    def evaluate(self, env: dict):
        try:
            return _eval(self.tree, env, self.text)
        except RecursionError:
            raise ExprError("expression is nested too deeply to evaluate", self.text) from None

    def holds(self, env: dict) -> bool:
        """Evaluate as a predicate; NaN counts as false (a NaN statistic never passes)."""
        return _truth(self.evaluate(env))

    def is_predicate(self) -> bool:
        return self.tree[0] in ("cmp", "and", "or", "not")


def _render(node) -> str:
    tag = node[0]
    if tag == "num":
        v = node[1]
        return repr(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(v)
    if tag == "name":
        return node[1]
    if tag == "neg":
        return f"-{_render(node[1])}"
    if tag == "not":
        return f"not {_render(node[1])}"
    if tag in ("and", "or"):
        return f"({_render(node[1])} {tag} {_render(node[2])})"
    if tag == "cmp":
        return _render(node[1]) + "".join(f" {op} {_render(n)}" for op, n in node[2])
    if tag == "call":
        return f"{node[1]}({', '.join(_render(a) for a in node[2])})"
    return f"({_render(node[1])} {tag} {_render(node[2])})"


def clause_report(expr: "Expr", env: dict) -> list[dict]:
    """The top-level ``and`` clauses of a relation, each with its text, whether it holds and, for a comparison
    ``lhs op rhs``, the two sides' values: what a verdict names when a secondary clause fails."""
    out, stack = [], [expr.tree]
    while stack:
        node = stack.pop(0)
        if node[0] == "and":
            stack[:0] = [node[1], node[2]]
            continue
        rec = {"clause": _render(node), "holds": _truth(_eval(node, env, expr.text))}
        if node[0] == "cmp" and len(node[2]) == 1:
            op, rhs = node[2][0]
            rec.update(
                lhs=_render(node[1]),
                op=op,
                rhs=_render(rhs),
                lhs_value=_eval(node[1], env, expr.text),
                rhs_value=_eval(rhs, env, expr.text),
            )
        out.append(rec)
    return out


def parse(text) -> Expr:
    """Parse ``text`` (a str, or an int/float which becomes a constant)."""
    if isinstance(text, bool):
        raise ExprError("a boolean is not an expression")
    if isinstance(text, (int, float)):
        try:
            text = repr(float(text))
        except OverflowError:  # an integer literal beyond the float range
            raise ExprError(f"number {str(text)[:20]}… is too large") from None
    if not isinstance(text, str):
        raise ExprError(f"expression must be a string or number, not {type(text).__name__}")
    try:
        tree = _Parser(text).parse()
        return Expr(text, tree, frozenset(_names(tree, set())))
    except RecursionError:  # "((((…1…))))" or "----…1": the parser is recursive descent
        raise ExprError("expression is nested too deeply", text[:80]) from None


def evaluate(text, env: dict | None = None):
    return parse(text).evaluate(env or {})
