"""The engines: pure libraries (fcr, certify, fidelity, routing, training, contracts, verify) that import no Django,
Celery or portal code. The Celery tasks that drive them live one tier up, in ``pipelines/`` (docs/architecture.md)."""
