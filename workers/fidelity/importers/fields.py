"""Declarative field tables for the importers (docs/fidelity.md#importers-upstream-read-fields-mapped-what-is-refused).

An importer is a table: each :class:`Field` names the fcr/1 field it fills (``target``), the source fields it reads
(``sources``, dotted paths into the logged object, tried in order) and one shared transform from this module that
turns the raw value into the fcr value (or None: absent, wrong type). A new upstream field name is one more source;
a new stack is a new table over the same transforms. What a table cannot say (a split of one list into prompt and
response, the calls inside a trajectory) is a named transform below, tested on its own
(``tests/fidelity/test_importer_tables.py``).

Reading rules, chosen to match what the upstream objects mean:

* ``pick="set"`` (default): the first source whose value is not None (``a if a is not None else b``);
* ``pick="present"``: the first source whose key exists, even when it holds None (``obj.get(a, obj.get(b))``);
* ``pick="truthy"``: the first source with a truthy value (``a or b``);
* ``pick="valid"``: the first source whose value the transform accepts (gives not None);
* ``pick="key"``: the *name* (last path segment) of the first source whose value is not None (which
  structured-output key was set).

A path that runs through something other than an object reads as absent — the input is a log line, not trusted.
``flat=True`` reads the sources as literal keys (OpenTelemetry span attributes are flattened: ``gen_ai.request.model``
is one key); ``pick="suffix"`` (flat) takes the first key, in sorted order, that ends with a source and is not None.
"""

from __future__ import annotations

from dataclasses import dataclass

from workers.fidelity.importers.common import int_list, safe_literal, token_id_of

_ABSENT = object()


def path_get(obj, path: str):
    """The value at a dotted ``path`` of nested objects, or the module's absent marker."""
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _ABSENT
        cur = cur[part]
    return cur


def keep(v):
    """The value as logged."""
    return v


def version(v):
    """A weights version: an int, or a string of digits (slime's ``weight_versions``, SGLang's ``weight_version``)."""
    if type(v) is int:
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


def integer(v):
    """An int (bools excluded), else None."""
    return v if type(v) is int else None


def number(v):
    """An int or a float (bools excluded), else None."""
    return v if type(v) is int or type(v) is float else None


def text(v):
    """A string, else None."""
    return v if isinstance(v, str) else None


def sha256_hex(v):
    """A SHA-256 as 64 lower-case hex digits, else None (a declared task hash; anything else is not one)."""
    return v if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v) else None


def boolean(v):
    """A JSON boolean, else None."""
    return v if isinstance(v, bool) else None


def declared_role(v):
    """A role a log declares (``X-FCR-Call-Role``): policy, background or unknown, else None."""
    return v if v in ("policy", "background", "unknown") else None


def nonempty_text(v):
    """A non-empty string, else None."""
    return v if isinstance(v, str) and v else None


def text_or_messages(v):
    """A prompt: its text, or its message list (``task_text`` takes the first user message), else None."""
    return v if isinstance(v, (str, list)) else None


def ids(v):
    """A list of non-negative ints (JSON or Python-repr text parsed), else None."""
    return int_list(v)


def id_array(v):
    """A JSON array of non-negative ints, else None (text is not parsed: a prompt string is text, not ids)."""
    return int_list(v) if isinstance(v, list) else None


def truthy(v) -> bool:
    """A flag logged as any truthy value."""
    return bool(v)


def token_id_strings(v):
    """vLLM's ``return_tokens_as_token_ids`` strings (``"token_id:N"``, one per token) → their ids, else None."""
    if not (isinstance(v, list) and v):
        return None
    got = [token_id_of(s) for s in v]
    return None if any(t is None for t in got) else got


def entry_ids(v):
    """SGLang log-prob entries ``[[logprob, id, text], …]`` → their ids (all non-negative ints), else None."""
    if isinstance(v, list) and v and all(isinstance(e, list) and len(e) >= 2 for e in v):
        return int_list([e[1] for e in v])
    return None


def first_of_lists(v):
    """A value that may be a list of per-choice lists (AGL's ``response_token_ids``): the first choice's."""
    v = safe_literal(v)
    if isinstance(v, list) and v and isinstance(v[0], list):
        return v[0]
    return v


TRANSFORMS = {
    f.__name__: f
    for f in (
        keep,
        version,
        integer,
        number,
        text,
        nonempty_text,
        text_or_messages,
        ids,
        id_array,
        token_id_strings,
        entry_ids,
        truthy,
        first_of_lists,
        boolean,
        declared_role,
        sha256_hex,
    )
}


# how the docs table words a row's reading rule when it has several sources (``set`` is the default: unworded)
_PICK_WORDS = {
    "present": "the first present",
    "truthy": "the first non-empty",
    "valid": "the first valid",
    "key": "the name of the one set",
}


@dataclass(frozen=True)
class Field:
    """One row of an importer's table: ``sources`` (dotted paths, tried in order) → ``target`` (an fcr/1 field, or
    ``extra.*`` / an input of a named transform) through ``transform`` (a function of this module). ``optional``:
    left out of the result when the transform gives None (``extra`` keys)."""

    target: str
    sources: tuple[str, ...]
    transform: object = keep
    pick: str = "set"
    optional: bool = False
    note: str = ""
    flat: bool = False

    def _candidates(self, obj):
        if not self.flat:
            return ((path, path_get(obj, path)) for path in self.sources)
        if not isinstance(obj, dict):
            return ()
        if self.pick == "suffix":
            return ((k, obj[k]) for s in self.sources for k in sorted(obj) if isinstance(k, str) and k.endswith(s))
        return ((k, obj[k]) for k in self.sources if k in obj)

    def raw(self, obj):
        """The first source's raw value under the ``pick`` rule, or None."""
        for path, v in self._candidates(obj):
            if self.pick == "suffix" and v is not None:
                return v
            if v is _ABSENT:
                continue
            if self.pick == "key" and v is not None:
                return path.rpartition(".")[2]
            if self.pick == "present" or (self.pick == "set" and v is not None) or (self.pick == "truthy" and v):
                return v
        return None

    def read(self, obj):
        if self.pick == "valid":
            return next((t for _, v in self._candidates(obj) if (t := self.transform(v)) is not None), None)
        return self.transform(self.raw(obj))

    def describe(self) -> str:
        """The row as the docs table shows it: ``a`` / ``b`` → target."""
        src = " / ".join(f"`{'…' if self.pick == 'suffix' else ''}{s}`" for s in self.sources)
        rule = _PICK_WORDS.get(self.pick) if len(self.sources) > 1 else None
        notes = [n for n in (rule, self.note) if n]
        return f"{src} → `{self.target}`" + (f" ({'; '.join(notes)})" if notes else "")


def read_table(obj, table) -> dict:
    """Every field of ``table`` read from ``obj``: ``{target: value}`` (optional fields only when not None)."""
    out = {}
    for f in table:
        v = f.read(obj)
        if v is None and f.optional:
            continue
        out[f.target] = v
    return out


def block(values: dict, prefix: str) -> dict:
    """The ``prefix.*`` entries of a read table (``extra``, ``sampling``), keyed by their name inside the block."""
    n = len(prefix) + 1
    return {k[n:]: v for k, v in values.items() if k.startswith(prefix + ".")}


def extras(values: dict) -> dict:
    """The ``extra.*`` entries of a read table."""
    return block(values, "extra")


@dataclass(frozen=True)
class Rung:
    """One step of a provenance ladder: the ids ``field`` reads, the ``provenance`` they get, and the APIs the rung
    applies to (empty: all)."""

    field: Field
    provenance: str
    apis: tuple[str, ...] = ()

    def describe(self) -> str:
        where = f" ({', '.join(self.apis)})" if self.apis else ""
        return f"{self.field.describe()} `{self.provenance}`{where}"


def ladder_rung(obj, rungs, api=None):
    """The first rung that yields a value, most direct first: ``(value, rung)`` or ``(None, None)``."""
    for rung in rungs:
        if rung.apis and api not in rung.apis:
            continue
        v = rung.field.read(obj)
        if v is not None:
            return v, rung
    return None, None


def ladder(obj, rungs, api=None):
    """The first rung that yields a value, most direct first: ``(value, provenance)`` or ``(None, None)`` — e.g.
    prompt ids the engine returned before the ids that were sent."""
    v, rung = ladder_rung(obj, rungs, api)
    return v, (rung.provenance if rung is not None else None)
