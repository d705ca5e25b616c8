"""Worker tier: pure engines (certify, contracts, fidelity, training) and the thin Celery tasks."""
