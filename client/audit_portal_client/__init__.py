"""Audit Portal client: log rollout/trainer log-probs from a training loop, get a divergence certificate.

from audit_portal_client import Client
run = Client("https://portal.example", api_key).run("my-project", "grpo-7b-lr3e-6")
for step, batch in enumerate(loader):
    ...
    run.log_step(step, rollout_logprobs=..., trainer_logprobs=..., response_mask=..., response_ids=...)
print(run.finish(budget=0.05).url)
"""

from audit_portal_client.client import (
    BudgetExceeded,
    Client,
    FinishResult,
    PortalError,
    PortalUnavailable,
    ReplayFailed,
)
from audit_portal_client.run import Run
from audit_portal_client.fcr import arrow_schema, pad_rows, step_table

__all__ = [
    "BudgetExceeded",
    "Client",
    "FinishResult",
    "PortalError",
    "PortalUnavailable",
    "ReplayFailed",
    "Run",
    "arrow_schema",
    "pad_rows",
    "step_table",
]
__version__ = "0.1.0"
