"""Importers to ``fcr/1`` (docs/fidelity-rules.md#importers): vLLM OpenAI-compatible logs and Agent Lightning spans."""

from workers.fidelity.importers.agl import import_agl
from workers.fidelity.importers.agl_events import import_agl_events
from workers.fidelity.importers.common import safe_literal
from workers.fidelity.importers.vllm import import_vllm

__all__ = ["import_agl", "import_agl_events", "import_vllm", "safe_literal"]
