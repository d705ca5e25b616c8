"""Routing fidelity of Mixture-of-Experts runs: flip rates, replay verdict, attribution (docs/routing.md).
No Django import."""

from workers.routing.audit import REPLAY_MODES, RoutingAudit, RoutingDataError, TokenMetrics, as_routes, compare_routes

__all__ = ["REPLAY_MODES", "RoutingAudit", "RoutingDataError", "TokenMetrics", "as_routes", "compare_routes"]
