"""Token and control fidelity audit of ``fcr/1`` run logs (docs/fidelity-rules.md, docs/fcr.md).

No Django import. Modules (each readable on its own):

* :mod:`.tokenizer`     registered tokenizers (HF ``tokenizer.json``, hashed; the toy tokenizer)
* :mod:`.rules`         R0–R9 on one call, reason codes, spans (docs/fidelity-rules.md#rules-r0r9)
* :mod:`.certificates`  certificate checks via :mod:`workers.certify`
* :mod:`.coverage`      the coverage report
* :mod:`.audit`         ``audit_file`` / ``audit_records``: index, chain and evaluation passes
* :mod:`.masks_export`  loss-mask export (JSONL and a compact binary form)
* :mod:`.importers`     vLLM OpenAI-compatible logs, SGLang ``/generate``, Agent Lightning spans,
                        events and triplets, verl / slime / SkyRL rollout outputs
* :mod:`.join`          attach the trainer side (log-probs, loss masks, sample ids, task hashes) to an import
* :mod:`.verdict`       how a verdict is worded: coverage headline, label, the ``min_coverage`` gate
* :mod:`.cli`           ``python -m workers.fidelity audit|import|join|gateway``
"""
import importlib

# Lazy: the web process imports ``workers.fidelity.rules`` (reason codes) and ``.verdict``; importing the
# package must not load the audit or HF ``tokenizers`` with them. Each name loads its module on first use.
_LAZY = {"audit_file": "audit", "audit_records": "audit", "read_masks": "masks_export", "AuditOptions": "rules",
         "CODES": "rules", "FidelityTokenizer": "tokenizer", "TokenizerRegistry": "tokenizer"}

__all__ = sorted(_LAZY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'workers.fidelity' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"workers.fidelity.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
