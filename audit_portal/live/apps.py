from django.apps import AppConfig


class LiveConfig(AppConfig):
    name = "audit_portal.live"
    label = "live"

    def ready(self):
        from audit_portal.live import consistency, services  # noqa: F401  (consistency: registers its checks)
        from audit_portal.runs import extras

        extras.register("steps", services.parse_step_range, services.tag_segment)  # a segment's step range
        extras.register("rank", services.parse_rank, None)  # its process: read by tag_segment
