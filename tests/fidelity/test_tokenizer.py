"""Tokenizer registry (hashing: docs/fcr.md#conventions) and the toy tokenizer (docs/fcr.md#toy-tokenizer) as a real
``tokenizers`` pipeline."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings as hsettings, strategies as st

from workers.fidelity.tokenizer import FidelityTokenizer, TokenizerRegistry, toy_tokenizer_json

from .conftest import A as _unused  # noqa: F401  (fixtures come from conftest)
from .conftest import TOY_VOCAB, TOY_SHA

STRINGS = list(TOY_VOCAB.values())


def greedy_reference(text: str) -> list[int] | None:
    """The toy tokenizer literally (docs/fcr.md#toy-tokenizer): greedy longest match from the left over the whole vocabulary (special tokens included)."""
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
        0,
        40,
        41,
        42,
        43,
        46,
        3,
        1,
        44,
        45,
        3,
        2,
    ]
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


def _bpe_tokenizer_json(padding: bool, truncation: bool) -> str:
    """A real byte-level BPE trained here on a small corpus, saved with (or without) the padding / truncation
    settings that e.g. sentence-transformers ship (``Fixed`` 128 padding; here 16 to keep it small)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    corpus = ["list the files in this directory", "ls -la shows hidden files", "the agent lists files"] * 20
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=120, special_tokens=["<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    if padding:
        tok.enable_padding(length=16, pad_id=tok.token_to_id("<pad>"), pad_token="<pad>")
    if truncation:
        tok.enable_truncation(max_length=4)
    return tok.to_str()


def test_padding_and_truncation_in_tokenizer_json_are_turned_off(tmp_path):
    import json

    plain = tmp_path / "plain.json"
    plain.write_text(_bpe_tokenizer_json(False, False))
    padded = tmp_path / "tokenizer.json"
    padded.write_text(_bpe_tokenizer_json(True, True))
    cfg = json.loads(padded.read_text())
    assert cfg["padding"]["strategy"] == {"Fixed": 16} and cfg["truncation"]["max_length"] == 4  # as shipped
    text = "ls -la shows the hidden files in this directory"
    ref = FidelityTokenizer.from_file(plain)
    tok = FidelityTokenizer.from_file(padded)
    assert len(ref.encode(text)) > 4  # so truncation would have cut it
    assert tok.encode(text) == ref.encode(text)  # no pads appended, nothing cut
    assert not tok.drift_if_retokenized(ref.encode(text))  # canonical ids: no false drift
    assert tok.sha256 == hashlib.sha256(padded.read_bytes()).hexdigest()  # identity is still the shipped file
    assert tok.padding_was["length"] == 16 and tok.truncation_was["max_length"] == 4
    # WordPiece (the toy pipeline) with padding configured behaves the same
    wp = tmp_path / "wp.json"
    from tokenizers import Tokenizer

    t = Tokenizer.from_str(toy_tokenizer_json(TOY_VOCAB))
    t.enable_padding(length=8, pad_id=0)
    t.enable_truncation(max_length=2)
    wp.write_text(t.to_str())
    w = FidelityTokenizer.from_file(wp)
    assert w.encode("HAVING<|end|>") == [13, 12, 3] and not w.drift_if_retokenized([13, 12, 3])
