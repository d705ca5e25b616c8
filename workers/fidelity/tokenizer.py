"""Tokenizers the audit can trust: registered from a Hugging Face ``tokenizer.json`` and keyed by hash.

``tokenizer.sha256`` = SHA-256 of the ``tokenizer.json`` bytes (for the toy tokenizer: of its canonical vocabulary
JSON; docs/fcr.md#conventions, docs/fcr.md#toy-tokenizer). A record whose ``tokenizer.sha256`` is not registered gets no tokenizer: the rules
that need one fail closed (``R2_NOT_EVALUABLE``, ``R4_NOT_EVALUABLE``, docs/fidelity-rules.md#definitions) and the vocabulary check of R0 and the
drift diagnostic are skipped (reported as ``null``).

The toy tokenizer (greedy longest match from the left, special tokens included; decoding concatenates strings) is
expressed as a real ``tokenizers`` pipeline: a WordPiece model with an empty continuing-subword prefix (WordPiece *is*
greedy longest-prefix matching), the ``<|…|>`` strings as special added tokens, and a ``Fuse`` decoder. So the audit
runs one code path for the toy and for production tokenizers.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping

import numpy as np
from tokenizers import AddedToken, Tokenizer, decoders, models

REPLACEMENT_CHAR = "\ufffd"


def canonical_vocab_json(vocab: Mapping) -> str:
    """The toy tokenizer's canonical JSON of the id→string vocabulary (string keys, sorted, no spaces)."""
    return json.dumps({str(k): v for k, v in vocab.items()}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def toy_tokenizer_json(vocab: Mapping, *, special_prefix: str = "<|") -> str:
    """A ``tokenizer.json`` implementing the toy tokenizer (docs/fcr.md#toy-tokenizer) for an id→string vocabulary."""
    v = {s: int(i) for i, s in vocab.items()}
    unk = "[UNK]"
    while unk in v:
        unk = "[" + unk + "]"
    v[unk] = max(v.values()) + 1
    tok = Tokenizer(models.WordPiece(v, unk_token=unk, continuing_subword_prefix="", max_input_chars_per_word=1 << 30))
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in v if s.startswith(special_prefix)])
    tok.decoder = decoders.Fuse()
    return tok.to_str()


class FidelityTokenizer:
    """A ``tokenizers.Tokenizer`` with the identity the audit needs (``id``, ``sha256``) and vectorised helpers."""

    def __init__(self, hf: Tokenizer, *, sha256: str, id: str = "", vocab_ids: Iterable[int] | None = None):
        # A tokenizer.json may configure padding and truncation (sentence-transformers ship ``Fixed`` 128-token
        # padding, many ship ``truncation.max_length``): what ``encode`` returns would then be padded / cut, not
        # the tokenization of the text, and every canonical call would look like drift. The audit compares
        # tokenizations, so both are turned off (the file — and its sha256 — are unchanged).
        self.padding_was = hf.padding
        self.truncation_was = hf.truncation
        if hf.padding is not None:
            hf.no_padding()
        if hf.truncation is not None:
            hf.no_truncation()
        self.hf = hf
        self.sha256 = sha256
        self.id = id or sha256[:12]
        vocab = hf.get_vocab(with_added_tokens=True)
        ids = sorted(set(vocab.values()) if vocab_ids is None else set(vocab_ids))
        self.vocab_size = (ids[-1] + 1) if ids else 0
        known = np.zeros(self.vocab_size, dtype=bool)
        known[ids] = True
        self._known = known
        self._ids = ids
        self.special_ids = frozenset(
            i for i, t in hf.get_added_tokens_decoder().items() if t.special and i < self.vocab_size and known[i]
        )
        self._by_string: dict[str, list[int]] | None = None
        self._raw = {s: i for s, i in vocab.items() if i < self.vocab_size and known[i]}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_json(cls, text: str, *, sha256: str, id: str = "") -> FidelityTokenizer:
        """A Hugging Face ``tokenizer.json`` given as text (``sha256`` of its bytes); the library's parse error
        (a plain Exception) propagates."""
        return cls(Tokenizer.from_str(text), sha256=sha256, id=id)

    @classmethod
    def from_file(cls, path, *, id: str = "") -> FidelityTokenizer:
        data = open(path, "rb").read()
        return cls.from_json(
            data.decode("utf-8"), sha256=hashlib.sha256(data).hexdigest(), id=id or os.path.basename(os.fspath(path))
        )

    @classmethod
    def toy(cls, vocab: Mapping, *, id: str = "toy") -> FidelityTokenizer:
        """The toy tokenizer (docs/fcr.md#toy-tokenizer); ``sha256`` = SHA-256 of the canonical vocabulary JSON."""
        sha = hashlib.sha256(canonical_vocab_json(vocab).encode("utf-8")).hexdigest()
        return cls(Tokenizer.from_str(toy_tokenizer_json(vocab)), sha256=sha, id=id, vocab_ids=[int(k) for k in vocab])

    # ------------------------------------------------------------------ operations
    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids, *, skip_special_tokens: bool = False) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def known(self, ids) -> np.ndarray:
        """Boolean mask: id is a vocabulary id (vectorised)."""
        a = np.asarray(ids, dtype=np.int64)
        ok = (a >= 0) & (a < self.vocab_size)
        out = np.zeros(a.shape, dtype=bool)
        out[ok] = self._known[a[ok]]
        return out

    def ids_for_string(self, s: str) -> list[int]:
        """Vocabulary ids whose single-token decoding is ``s`` (fallback: the raw vocabulary entry ``s``)."""
        if self._by_string is None:
            idx: dict[str, list[int]] = {}
            for i in self._ids:
                idx.setdefault(self.hf.decode([i], skip_special_tokens=False), []).append(i)
            self._by_string = idx
        hit = self._by_string.get(s)
        if hit:
            return hit
        raw = self._raw.get(s)
        return [raw] if raw is not None else []

    def drift_if_retokenized(self, ids) -> bool:
        """The drift diagnostic (docs/fidelity-rules.md#rules-r0r9): would an offline decode→encode pipeline change these
        ids?"""
        return self.encode(self.decode(ids)) != list(ids)


class TokenizerRegistry:
    """sha256 → tokenizer. ``resolve(record)`` returns the tokenizer the record declares, or None."""

    def __init__(self, tokenizers: Iterable[FidelityTokenizer] = ()):
        self._by_sha: dict[str, FidelityTokenizer] = {}
        for t in tokenizers:
            self.register(t)

    def register(self, tok: FidelityTokenizer) -> FidelityTokenizer:
        self._by_sha[tok.sha256] = tok
        return tok

    def __contains__(self, sha) -> bool:
        return sha in self._by_sha

    def __len__(self) -> int:
        return len(self._by_sha)

    def shas(self) -> list[str]:
        return sorted(self._by_sha)

    def get(self, sha) -> FidelityTokenizer | None:
        return self._by_sha.get(sha) if isinstance(sha, str) else None

    @classmethod
    def coerce(cls, spec) -> TokenizerRegistry:
        """Accept None, a registry, a tokenizer, a path to ``tokenizer.json``, or a list of those."""
        if isinstance(spec, cls):
            return spec
        reg = cls()
        if spec is None:
            return reg
        items = spec if isinstance(spec, (list, tuple)) else [spec]
        for it in items:
            if isinstance(it, FidelityTokenizer):
                reg.register(it)
            elif isinstance(it, cls):
                for sha in it.shas():
                    reg.register(it.get(sha))
            else:
                reg.register(FidelityTokenizer.from_file(it))
        return reg
