"""Contract files (docs/contract-language.md#the-parts-of-a-contract): the shipped suite loads; every validation error
names the field and the line."""

import json
from pathlib import Path

import pytest

from workers.contracts import ContractError, load_suite, load_text
from workers.contracts.loader import SPECS_DIR
from workers.contracts.schema import CLASSES, EIGHT_PARTS

PRC01 = (SPECS_DIR / "C-PRC-01.matmul.v0.1.0.yaml").read_text()


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle`` (independent of the loader)."""
    for i, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(needle)


def test_suite_has_the_twelve_classes_once_each():
    contracts = load_suite()
    assert sorted(c.cls for c in contracts) == sorted(CLASSES)
    for c in contracts:
        assert c.id.startswith(c.cls + "/")
        assert c.data["calibration"]["violating"] and c.data["calibration"]["conforming"]


def test_to_dict_is_a_json_safe_database_record():
    for c in load_suite():
        d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
        assert set(d["parts"]) == set(EIGHT_PARTS)
        for key in ("id", "version", "family", "title", "derivation", "evidence", "policies", "source_text", "sha256"):
            assert key in d
        import hashlib

        assert d["sha256"] == hashlib.sha256(d["source_text"].encode()).hexdigest()
        assert load_text(d["source_text"]).to_dict()["parts"] == d["parts"]  # source text round-trips


def _mutate(old, new, text=PRC01):
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize(
    "old,new,field,needle,fragment",
    [
        ('  bound: "8*sqrt(K)"\n', "", "tolerance.bound", "tolerance:", "required field 'bound' is missing"),
        ("  level: T2", "  level: T9", "tolerance.level", "level: T9", "not one of"),
        ('  bound: "8*sqrt(K)"', '  bound: "8*sqrt(K).real"', "tolerance.bound", "8*sqrt(K).real", "attribute access"),
        ('  bound: "8*sqrt(K)"', '  bound: "8*sqrt(Q)"', "tolerance.bound", "8*sqrt(Q)", "unbound name(s) ['Q']"),
        ('  bound: "8*sqrt(K)"', '  bound: "__import__(K)"', "tolerance.bound", "__import__", "may not start with '_'"),
        ('  bound: "8*sqrt(K)"', '  bound: "system(K)"', "tolerance.bound", "system(K)", "unknown function"),
        (
            '  relation: "probe_mismatch == 0 and rho <= bound"',
            '  relation: "rho + bound"',
            "postcondition.relation",
            'relation: "rho + bound"',
            "comparison",
        ),
        ("  trials: 2", "  trials: two", "measurement_protocol.trials", "trials: two", "expected an integer"),
        ("  version: 0.1.0", "  version: v1", "identifier.version", "version: v1", "does not match"),
        ("  family: precision", "  family: ordering", "identifier.family", "family: ordering", "belongs to family"),
        ("  statistic: rho", "  statistic: rhoo", "tolerance.statistic", "statistic: rhoo", "not measured"),
        ("  trials: 2", "  trials: 2\n  colour: blue", "measurement_protocol.colour", "colour: blue", "unknown field"),
        (
            "    rho_flat_in_K:",
            "    rho_wobbles:",
            "violation_signature.discriminators.rho_wobbles",
            "rho_wobbles",
            "not a pattern",
        ),
        (
            "  sweeps: {K: [64, 256, 1024, 4096], M: [32], N: [32]}",
            "  sweeps: {K: [64], Z: [1]}",
            "measurement_protocol.sweeps.Z",
            "sweeps: {K: [64], Z: [1]}",
            "no sweep 'Z'",
        ),
        ('  unit_roundoff: "2**-24"', '  unit_roundoff: "2**-q"', "tolerance.unit_roundoff", "2**-q", "constant"),
        (
            "  protocol: matmul_precision",
            "  protocol: layernorm_cancellation",
            "identifier.protocol",
            "protocol: layernorm_cancellation",
            "measures C-PRC-02",
        ),
    ],
)
def test_errors_name_field_and_line(old, new, field, needle, fragment):
    text = _mutate(old, new)
    with pytest.raises(ContractError) as exc:
        load_text(text, source="x.yaml")
    err = exc.value
    assert err.field == field
    assert err.line == line_of(text, needle)
    assert fragment in err.message
    assert f"x.yaml:{err.line}: {field}" in str(err)


def test_missing_top_level_part_is_reported_at_document_level():
    start = PRC01.index("violation_signature:")
    end = PRC01.index("calibration:")
    with pytest.raises(ContractError) as exc:
        load_text(PRC01[:start] + PRC01[end:])
    assert exc.value.field == "violation_signature" and "missing" in exc.value.message


def test_duplicate_key_is_an_error_not_a_silent_override():
    text = _mutate("  trials: 2", "  trials: 2\n  trials: 3")
    with pytest.raises(ContractError) as exc:
        load_text(text)
    assert exc.value.field == "measurement_protocol.trials" and "duplicate" in exc.value.message
    assert exc.value.line == line_of(text, "trials: 3")


def test_yaml_syntax_error_has_a_line():
    text = _mutate("  trials: 2", "  trials: [2")
    with pytest.raises(ContractError) as exc:
        load_text(text)
    assert "YAML syntax error" in exc.value.message and exc.value.line is not None


def test_list_item_errors_carry_their_index():
    text = _mutate("  harness_invariants: [fresh_poisoned_outputs,", "  harness_invariants: [fresh_poisoned_output,")
    with pytest.raises(ContractError) as exc:
        load_text(text)
    assert exc.value.field == "measurement_protocol.harness_invariants[0]"


def test_versioned_contracts_highest_version_wins(tmp_path: Path):
    (tmp_path / "a.v0.1.0.yaml").write_text(PRC01)
    newer = _mutate("  version: 0.1.0", "  version: 0.2.0")
    newer = _mutate('  bound: "8*sqrt(K)"', '  bound: "6*sqrt(K)"', newer)
    (tmp_path / "a.v0.2.0.yaml").write_text(newer)
    (contract,) = load_suite(tmp_path)
    assert contract.version == "0.2.0" and contract.bound.text == "6*sqrt(K)"


def test_loading_listing_and_grading_do_not_import_torch():
    """The portal loads contracts into its database from a process that never imports torch."""
    import subprocess
    import sys

    code = (
        "import sys, workers.contracts as kc; cs = kc.suite(); [c.to_dict() for c in cs]; "
        "kc.grade([{'contract_class': 'C-PRC-01', 'verdict': 'PASS', 'assurance_level': 3}]); "
        "from workers.contracts.cli import main; main(['list', '--json']); "
        "assert 'torch' not in sys.modules, 'torch was imported'; print(len(cs))"
    )
    root = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("12")


def test_alias_bomb_is_refused():
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    prev = "a"
    for i in range(8):  # 10**9 nodes once expanded
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*{prev}"] * 10) + "]")
        prev = f"l{i}"
    with pytest.raises(ContractError, match="nodes"):
        load_text("\n".join(lines) + "\n")


def test_unknown_environment_flag_is_named_with_its_line():
    text = _mutate("  env: {allow_tf32: false}", "  env: {allow_tf33: false}")
    with pytest.raises(ContractError) as exc:
        load_text(text)
    assert exc.value.field == "precondition.env.allow_tf33" and exc.value.line == line_of(text, "allow_tf33")
