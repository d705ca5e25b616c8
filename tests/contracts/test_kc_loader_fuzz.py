"""Fuzzing the contract-file loader: whatever the input — arbitrary bytes, arbitrary text, YAML token soup,
arbitrary JSON/YAML structures, a shipped contract with any field replaced by anything — ``load_text`` /
``load_file`` return a Contract or raise ContractError (with a field, a line and a JSON-safe record), never another
exception. The explicit examples are the crashes this fuzzing found (each was a ValueError, OverflowError or
RecursionError escaping the loader)."""

from __future__ import annotations

import copy
import json

import yaml
from hypothesis import HealthCheck, example, given, settings, strategies as st

from workers.contracts import ContractError, load_text
from workers.contracts.loader import SPECS_DIR, Contract, load_file

SHIPPED = {p.name: p.read_text() for p in sorted(SPECS_DIR.glob("*.yaml"))}
PRC01 = SHIPPED["C-PRC-01.matmul.v0.1.0.yaml"]
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(text: str, source: str = "<fuzz>"):
    """Load; a ContractError must describe itself (field, line, JSON-safe record); anything else propagates."""
    try:
        return load_text(text, source=source)
    except ContractError as exc:
        return checked(exc)


def checked(exc: ContractError) -> ContractError:
    assert isinstance(exc.message, str) and exc.message
    assert isinstance(exc.field, str)
    assert exc.line is None or (isinstance(exc.line, int) and exc.line >= 1)
    json.dumps(exc.to_dict())
    str(exc)
    return exc


# ------------------------------------------------------------------------------------------ strategies
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**80), 2**80)
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(
        [
            "C-PRC-01",
            "matmul",
            "8*sqrt(K)",
            "statistic <= bound",
            "exp(1000)",
            "1e400",
            "((((1))))",
            "",
            "0.1.0",
            "PASS",
            "cpu",
        ]
    )
)


def _keys(value, out=None):
    out = set() if out is None else out
    if isinstance(value, dict):
        for k, v in value.items():
            out.add(str(k))
            _keys(v, out)
    elif isinstance(value, list):
        for v in value:
            _keys(v, out)
    return out


FIELD_NAMES = sorted(set().union(*(_keys(yaml.safe_load(t)) for t in SHIPPED.values())))
keys = st.sampled_from(FIELD_NAMES) | st.text(max_size=6)
values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(keys, c, max_size=5), max_leaves=20)
YAML_TOKENS = [
    "\n",
    " ",
    "  ",
    "- ",
    ": ",
    "? ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "&a ",
    "*a",
    "!!int ",
    "!!float ",
    "!!timestamp ",
    "!!binary ",
    "!!set ",
    "!!omap ",
    "!!python/object:os.system ",
    "'",
    '"',
    "#",
    "|",
    ">",
    "---",
    "...",
    "%YAML 1.1",
    "identifier",
    "id",
    "bound",
    "1e999",
    "-1",
    "0x1F",
    "2020-13-45",
    "abc",
    "~",
    "\t",
    "\x00",
    "\ufeff",
    "é",
]
yaml_soup = st.lists(st.sampled_from(YAML_TOKENS), max_size=40).map("".join)
EXPR_ALPHABET = "()+-*/., 0123456789eKnsqrtlogexpminmax<=>!andornotbound"
expressions = st.text(alphabet=EXPR_ALPHABET, max_size=40) | st.integers(-(10**400), 10**400)


def _paths(value, prefix=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


BASE = yaml.safe_load(PRC01)
PATHS = list(_paths(BASE))


def _replace(path, value):
    data = copy.deepcopy(BASE)
    target = data
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return data


def _dump(data) -> str:
    try:
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    except yaml.YAMLError:
        return json.dumps(data, default=str)


# ------------------------------------------------------------------------------------------------ tests
@FUZZ
@given(st.text(max_size=300))
@example("a: !!int abc")
@example("a: !!float abc")
@example("a: !!int ''")
@example("a: !!timestamp 2020-13-45")
@example("a: &x [*x]")
@example("a: &x {b: *x}")
@example("[" * 5000 + "]" * 5000)
@example("a:\n" + "".join("  " * i + "- \n" for i in range(3000)))
def test_any_text_loads_or_raises_contract_error(text):
    result = outcome(text)
    assert isinstance(result, (Contract, ContractError))


@FUZZ
@given(yaml_soup)
def test_yaml_token_soup_loads_or_raises_contract_error(text):
    assert isinstance(outcome(text), (Contract, ContractError))


@FUZZ
@given(st.binary(max_size=300))
@example(b"\xff\xfe\x00a: 1")
@example(PRC01.encode()[:-3] + b"\xc3\x28\n")
def test_any_bytes_file_loads_or_raises_contract_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("kc") / "contract.yaml"
    path.write_bytes(data)
    try:
        load_file(path)
    except ContractError as exc:
        checked(exc)
        assert exc.source == str(path)


@FUZZ
@given(values)
def test_any_structure_as_yaml_or_json_loads_or_raises_contract_error(value):
    for text in (_dump(value), json.dumps(value, default=str)):
        result = outcome(text)
        if not isinstance(value, dict):
            assert isinstance(result, ContractError)


@FUZZ
@given(st.sampled_from(PATHS), values | expressions)
@example(("tolerance", "bound"), "(" * 3000 + "1" + ")" * 3000)
@example(("tolerance", "bound"), "-" * 5000 + "1")
@example(("tolerance", "bound"), 10**400)
@example(("measurement_protocol",), {"sweeps": {"x": "exp(1000)"}})
def test_a_shipped_contract_with_any_field_replaced_loads_or_names_the_field(path, value):
    result = outcome(_dump(_replace(path, value)))
    if isinstance(result, ContractError) and result.field:
        top = result.field.split(".")[0].split("[")[0]
        assert top in BASE or top in FIELD_NAMES  # the error names a field of the document


def test_the_shipped_contracts_still_load():
    for name, text in SHIPPED.items():
        assert isinstance(load_text(text, source=name), Contract)


def test_the_crashes_found_by_fuzzing_are_clear_errors():
    """The inputs that used to escape as other exceptions, with what the user now reads."""
    assert "cannot construct value 'abc' as tag:yaml.org,2002:int" in str(outcome("a: !!int abc"))
    assert outcome("a: !!timestamp 2020-13-45").line == 1
    assert "recursive" in outcome("a: &x [*x]").message
    assert "nested too deeply" in outcome("[" * 5000 + "]" * 5000).message
    for bound, message in [("(" * 3000 + "1" + ")" * 3000, "nested too deeply"), (10**400, "too large")]:
        err = outcome(_dump(_replace(("tolerance", "bound"), bound)))
        assert isinstance(err, ContractError) and message in err.message and err.field == "tolerance.bound"
