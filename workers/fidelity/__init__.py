"""Token and control fidelity audit of ``fcr/1`` run logs (docs/fidelity-rules.md, docs/fcr.md).

No Django import. Modules (each readable on its own):

* :mod:`.tokenizer`     registered tokenizers (HF ``tokenizer.json``, hashed; the toy tokenizer)
* :mod:`.rules`         R0–R9 on one call (docs/fidelity-rules.md#rules-r0r9): R0–R4, R5/R9 and the order
* :mod:`.logprob_rules` R6–R8: rollout log-probs, their semantics and top-K, the trainer's log-probs
* :mod:`.codes`         reason codes, the per-position bit words, spans (numpy only: the web tier reads them)
* :mod:`.certificates`  certificate checks via :mod:`workers.certify`
* :mod:`.coverage`      the coverage report
* :mod:`.audit`         ``audit_file`` / ``audit_records``: the evaluation, fix-up and verdict passes
* :mod:`.sources`       what the audit reads: records of a file or list, parsed and validated once
* :mod:`.lineage_index` what R5, R9 and the TITO diagnostic know about the other calls (prefix digests)
* :mod:`.masks_export`  loss-mask export (JSONL and a compact binary form)
* :mod:`.importers`     vLLM OpenAI-compatible logs, SGLang ``/generate``, Agent Lightning spans,
                        events and triplets, verl / slime / SkyRL rollout outputs
* :mod:`.join`          attach the trainer side (log-probs, loss masks, sample ids, task hashes) to an import
* :mod:`.verdict`       how a verdict is worded: coverage headline, label, the ``min_coverage`` gate
* :mod:`.cli`           ``python -m workers.fidelity audit|import|join|gateway``
"""

from workers.lazy import lazy_exports

# Lazy: the web process imports ``workers.fidelity.rules`` (reason codes) and ``.verdict``; importing the
# package must not load the audit or HF ``tokenizers`` with them. Each name loads its module on first use.
_LAZY = {
    "audit_file": "audit",
    "audit_records": "audit",
    "read_masks": "masks_export",
    "AuditOptions": "rules",
    "CODES": "rules",
    "FidelityTokenizer": "tokenizer",
    "TokenizerRegistry": "tokenizer",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
