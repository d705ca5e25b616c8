"""Architecture checks run by ``lint-imports`` (config: ``.importlinter``; docs/architecture.md)."""
