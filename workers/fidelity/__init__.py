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
from workers.fidelity.audit import audit_file, audit_records
from workers.fidelity.masks_export import read_masks
from workers.fidelity.rules import CODES, AuditOptions
from workers.fidelity.tokenizer import FidelityTokenizer, TokenizerRegistry

__all__ = ["audit_file", "audit_records", "read_masks", "AuditOptions", "CODES", "FidelityTokenizer",
           "TokenizerRegistry"]
