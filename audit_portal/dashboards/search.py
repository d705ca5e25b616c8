"""The runs table's search language (the search box and the API list's ``q``), parsed by hand and translated to ORM
filters over the runs table's annotated columns (dashboards/tables.py), the run's config and its tags. Nothing is
evaluated: every field is looked up in a fixed table, every value is a parameter of the query.

Grammar (docs/portal.md#searching-runs)::

    query      := or_expr
    or_expr    := and_expr ("or" and_expr)*
    and_expr   := unary ("and" unary)*
    unary      := "not" unary | "(" or_expr ")" | condition
    condition  := "tag:" VALUE | "tags." NAME | field OP VALUE
    field      := name | verdict | status | eps_hat | … (a runs table column) | "params." KEY ("." KEY)*
    OP         := "=" | "!=" | "<" | "<=" | ">" | ">=" | "~"        (~: contains, any case)
    VALUE      := a number (1e-5, 90%), a quoted string ('a b' or "a b") or a bare word (grpo-7b)

A query that uses none of the operator characters (= ! < > ~ : parentheses) and no ``tags.`` word is plain text:
the run's name contains it, as before. Keywords (and, or, not) are case-insensitive.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, time, timedelta

from django.db.models import Func, Q, TextField
from django.db.models.fields.json import KeyTransform
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from workers.certify.verdict import LABELS


class SearchError(ValueError):
    """A query the language cannot take; the message names the token, its position and what was expected."""


NUMERIC = {"eps_hat", "delta_hat", "acceptance", "best_bound", "coverage", "tokens", "steps"}
TEXT = {"name", "verdict", "status"}
OTHER = {"duration", "created"}
FIELDS = sorted(NUMERIC | TEXT | OTHER)
STATES = ["running", "finished", "failed", ""]
OPS = ["<=", ">=", "!=", "=", "<", ">", "~"]
LOOKUP = {"=": "exact", "<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}
KEY = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")
MAX_QUERY = 500
MAX_CONDITIONS = 20
MAX_DEPTH = 20
PLAIN = re.compile(r"[=!<>~:()]")


@dataclass(frozen=True)
class Token:
    kind: str  # word, string, op, lparen, rparen, colon, end
    text: str
    pos: int


_TOKEN = re.compile(
    r"""\s*(?:(?P<op><=|>=|!=|=|<|>|~)|(?P<lparen>\()|(?P<rparen>\))|(?P<colon>:)
                        |(?P<string>"[^"]*"|'[^']*')|(?P<word>[^\s=!<>~():"']+))""",
    re.X,
)


def tokenize(text: str) -> list[Token]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.lastgroup is None:
            start = pos + len(text[pos:]) - len(text[pos:].lstrip())
            char = text[start]
            raise SearchError(
                f"search: unexpected {char!r} at position {start + 1}"
                + (": a quoted value is not closed" if char in "\"'" else ": expected a field, a value or an operator")
            )
        kind = m.lastgroup
        value = m.group(kind)
        out.append(Token(kind, value[1:-1] if kind == "string" else value, m.start(kind)))
        pos = m.end()
    out.append(Token("end", "", len(text)))
    return out


def is_plain(text: str) -> bool:
    """No operator and no ``tags.`` word: the whole text is a name fragment."""
    return not PLAIN.search(text) and not any(w.lower().startswith("tags.") for w in text.split())


def _describe(tok: Token) -> str:
    return "the end of the query" if tok.kind == "end" else f"{tok.text!r} at position {tok.pos + 1}"


class _Parser:
    def __init__(self, text: str):
        self.tokens = tokenize(text)
        self.i = 0
        self.conditions = 0
        self.depth = 0
        self.annotations: dict = {}

    def peek(self) -> Token:
        return self.tokens[self.i]

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def keyword(self, word: str) -> bool:
        tok = self.peek()
        if tok.kind == "word" and tok.text.lower() == word:
            self.i += 1
            return True
        return False

    def fail(self, expected: str, tok: Token | None = None):
        raise SearchError(f"search: expected {expected}, got {_describe(tok or self.peek())}")

    def parse(self) -> Q:
        q = self.or_expr()
        if self.peek().kind != "end":
            self.fail("and, or or the end of the query")
        return q

    def or_expr(self) -> Q:
        q = self.and_expr()
        while self.keyword("or"):
            q = q | self.and_expr()
        return q

    def and_expr(self) -> Q:
        q = self.unary()
        while self.keyword("and"):
            q = q & self.unary()
        return q

    def unary(self) -> Q:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SearchError(f"search: at most {MAX_DEPTH} nested 'not' and parentheses, at {_describe(self.peek())}")
        try:
            if self.keyword("not"):
                return ~self.unary()
            if self.peek().kind == "lparen":
                self.take()
                q = self.or_expr()
                if self.peek().kind != "rparen":
                    self.fail("')'")
                self.take()
                return q
            return self.condition()
        finally:
            self.depth -= 1

    def condition(self) -> Q:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise SearchError(f"search: at most {MAX_CONDITIONS} conditions in one query")
        tok = self.take()
        if tok.kind != "word":
            self.fail("a field (name, verdict, params.<key>, tag:<tag>, …)", tok)
        field = tok.text.lower()
        if field == "tag" and self.peek().kind == "colon":
            self.take()
            value = self.take()
            if value.kind not in ("word", "string") or not value.text:
                self.fail("a tag after 'tag:'", value)
            return Q(tags__contains=[value.text])
        if field.startswith("tags.") and self.peek().kind != "op":
            if not tok.text[5:]:
                self.fail("a tag after 'tags.'", tok)
            return Q(tags__contains=[tok.text[5:]])
        op = self.take()
        if op.kind != "op":
            self.fail(f"an operator ({', '.join(OPS)}) after {tok.text!r}", op)
        value = self.take()
        if value.kind not in ("word", "string"):
            self.fail(f"a value after {op.text!r}", value)
        if field.startswith("params."):
            return self.param(tok, op, value)
        if field in ("tags", "tag"):
            if op.text not in ("=", "!="):
                self.fail("= or != after 'tags'", op)
            q = Q(tags__contains=[value.text])
            return ~q if op.text == "!=" else q
        if field not in FIELDS:
            self.fail(f"a field: one of {', '.join(FIELDS)}, params.<key>, tags.<tag> or tag:<tag>", tok)
        return self.column(field, op, value)

    def column(self, field: str, op: Token, value: Token) -> Q:
        if field in NUMERIC:
            number = _number(value)
            if number is None:
                self.fail(f"a number after '{field} {op.text}'", value)
            if op.text == "~":
                self.fail(f"=, !=, <, <=, > or >= for the number {field}", op)
            return _compare(field, op.text, number)
        if field == "duration":
            number = _number(value)
            if number is None or op.text == "~":
                self.fail("a comparison with a number of seconds for duration", value if number is None else op)
            return _compare(field, op.text, timedelta(seconds=number))
        if field == "created":
            try:
                when = (
                    parse_date(value.text)
                    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.text)
                    else parse_datetime(value.text)
                )
            except ValueError:  # well formed but not a real date (2026-13-45)
                when = None
            if when is None or op.text == "~":
                self.fail(
                    "a comparison with a date (2026-12-05 or an ISO time) for created", value if when is None else op
                )
            if isinstance(when, datetime):
                return _compare(field, op.text, when if timezone.is_aware(when) else timezone.make_aware(when))
            start = timezone.make_aware(datetime.combine(when, time()))  # a day, in the portal's time zone
            end = start + timedelta(days=1)
            day = Q(created__gte=start, created__lt=end)
            return {
                "=": day,
                "!=": ~day,
                "<": Q(created__lt=start),
                "<=": Q(created__lt=end),
                ">": Q(created__gte=end),
                ">=": Q(created__gte=start),
            }[op.text]
        text = value.text
        if field == "verdict" and op.text in ("=", "!=") and text not in LABELS:
            self.fail(f"a verdict ({', '.join(LABELS)})", value)
        if field == "status" and op.text in ("=", "!=") and text not in STATES:
            self.fail(f"a status ({', '.join(s for s in STATES if s)})", value)
        if op.text == "~":
            return Q(**{f"{field}__icontains": text})
        if op.text not in ("=", "!="):
            self.fail(f"=, != or ~ for the text field {field}", op)
        return _compare(field, op.text, text)

    def param(self, tok: Token, op: Token, value: Token) -> Q:
        # a run's config is flat (runs/declarations.py keeps a nested section as dotted keys), so everything after
        # "params." is one key: params.optim.lr is the key "optim.lr"
        key = tok.text[7:]
        if not all(KEY.match(p) for p in key.split(".")) or "__" in key:
            self.fail("params.<key> with keys of letters, digits, _ and - (sections joined by dots)", tok)
        path = [key]
        lookup = "config__" + key
        number = _number(value) if value.kind == "word" else None
        if op.text == "~":
            name = f"_search_text_{len(self.annotations)}"
            self.annotations[name] = Func(
                _key(path), function="", template="(%(expressions)s #>> '{}')", output_field=TextField()
            )
            return Q(**{f"{name}__icontains": value.text})
        if op.text in ("=", "!="):
            if value.kind == "word" and value.text in ("true", "false", "null"):
                q = Q(**{lookup: {"true": True, "false": False, "null": None}[value.text]})
            elif number is not None:  # 1e-5 matches the number 0.00001 and the string "1e-5"
                q = Q(**{lookup: number}) | Q(**{lookup: value.text})
            else:
                q = Q(**{lookup: value.text})
            return ~q if op.text == "!=" else (q & Q(**{f"{lookup}__isnull": False}))
        if number is None:
            self.fail(f"a number after '{tok.text} {op.text}'", value)
        name = f"_search_type_{len(self.annotations)}"
        self.annotations[name] = Func(_key(path), function="jsonb_typeof", output_field=TextField())
        return Q(**{name: "number", f"{lookup}__{LOOKUP[op.text]}": number})


def _key(path: list[str]):
    expr = "config"
    for p in path:
        expr = KeyTransform(p, expr)
    return expr


def _number(tok: Token) -> float | None:
    text = tok.text
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _compare(field: str, op: str, value) -> Q:
    if op == "!=":
        return ~Q(**{field: value})
    return Q(**{f"{field}__{LOOKUP[op]}": value})


def parse(text: str) -> tuple[Q, dict]:
    """``text`` as a filter and the annotations it needs; :class:`SearchError` names the bad token."""
    if len(text) > MAX_QUERY:
        raise SearchError(f"search: at most {MAX_QUERY} characters")
    parser = _Parser(text)
    if parser.peek().kind == "end":
        return Q(), {}
    return parser.parse(), parser.annotations


def apply(qs, text: str):
    """``qs`` (the runs table) narrowed by the search ``text``: plain text is "name contains"."""
    text = text.strip()
    if not text:
        return qs
    if is_plain(text):
        return qs.filter(name__icontains=text)
    q, annotations = parse(text)
    return qs.annotate(**annotations).filter(q) if annotations else qs.filter(q)
