"""Tokenizer registry (spec/fidelity.md §4.3 hashing) and the §7.1 toy tokenizer as a real ``tokenizers`` pipeline."""
from __future__ import annotations

import hashlib

from hypothesis import given, settings as hsettings, strategies as st

from workers.fidelity.tokenizer import FidelityTokenizer, TokenizerRegistry, toy_tokenizer_json

from .conftest import A as _unused  # noqa: F401  (fixtures come from conftest)
from .conftest import TOY_VOCAB, TOY_SHA

STRINGS = list(TOY_VOCAB.values())


def greedy_reference(text: str) -> list[int] | None:
    """§7.1 literally: greedy longest match from the left over the whole vocabulary (special tokens included)."""
    inv = {s: int(i) for i, s in TOY_VOCAB.items()}
    out, i = [], 0
    while i < len(text):
        best = max((s for s in inv if text.startswith(s, i)), key=len, default=None)
        if best is None:
            return None
        out.append(inv[best])
        i += len(best)
    return out


def test_spec_strings(toy):
    assert toy.sha256 == TOY_SHA
    assert toy.encode("HAVING<|end|>") == [13, 12, 3]
    assert toy.decode([10, 11, 12, 3]) == "HAVING<|end|>"
    assert toy.encode("<|system|>You are an agent.<|end|><|user|>List files<|end|><|assistant|>") == [
        0, 40, 41, 42, 43, 46, 3, 1, 44, 45, 3, 2]
    assert toy.special_ids == frozenset({0, 1, 2, 3})
    assert toy.decode([20, 21, 3], skip_special_tokens=True) == "ls -la"
    assert toy.drift_if_retokenized([10, 11, 12, 3]) and not toy.drift_if_retokenized([13, 12, 3])
    assert list(toy.known([0, 4, 48, 49, -1, 10**9])) == [True, False, True, False, False, False]
    assert toy.ids_for_string(" -la") == [21] and toy.ids_for_string("nope") == []


@hsettings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(STRINGS), max_size=12))
def test_hf_pipeline_equals_greedy_reference(toy, pieces):
    text = "".join(pieces)
    assert toy.encode(text) == greedy_reference(text)
    assert toy.decode(toy.encode(text)) == text


def test_registry_from_tokenizer_json(tmp_path, toy):
    p = tmp_path / "tokenizer.json"
    p.write_text(toy_tokenizer_json(TOY_VOCAB))
    t = FidelityTokenizer.from_file(p)
    assert t.sha256 == hashlib.sha256(p.read_bytes()).hexdigest() != TOY_SHA  # file bytes, not the vocab JSON
    assert t.encode("HAVING<|end|>") == [13, 12, 3]
    reg = TokenizerRegistry.coerce([p, toy])
    assert reg.get(TOY_SHA) is toy and reg.get(t.sha256) is not None and len(reg) == 2
    assert reg.get("unknown") is None and reg.get(None) is None
