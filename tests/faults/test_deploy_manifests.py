"""The deployment files parse and hang together (no Docker engine or cluster here: syntax and wiring only)."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
SETTINGS_SOURCES = (ROOT / "audit_portal" / "settings.py").read_text() + "".join(
    p.read_text() for p in (ROOT / "audit_portal").glob("settings_*.py")
)


def k8s_docs():
    return [(path.name, doc) for path in K8S for doc in yaml.safe_load_all(path.read_text()) if doc]


def containers(doc):
    spec = doc["spec"]
    if doc["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    pod = spec["template"]["spec"]
    return pod.get("initContainers", []) + pod["containers"], pod


def test_every_manifest_parses_and_is_namespaced():
    docs = k8s_docs()
    assert len(K8S) >= 5 and len(docs) >= 10
    for name, doc in docs:
        assert {"apiVersion", "kind", "metadata"} <= doc.keys(), name
        assert doc["metadata"]["name"], name
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "audit-portal", (name, doc["kind"])


def test_deployments_select_their_own_pods_and_mount_what_they_name():
    defined = {(d["kind"], d["metadata"]["name"]) for _, d in k8s_docs()}
    for name, doc in k8s_docs():
        if doc["kind"] not in ("Deployment", "Job", "CronJob"):
            continue
        if doc["kind"] == "Deployment":
            assert (
                doc["spec"]["selector"]["matchLabels"].items() <= doc["spec"]["template"]["metadata"]["labels"].items()
            )
        ctrs, pod = containers(doc)
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in ctrs:
            for ref in c.get("envFrom", []):
                kind, ref_name = (
                    ("ConfigMap", ref["configMapRef"]["name"])
                    if "configMapRef" in ref
                    else ("Secret", ref["secretRef"]["name"])
                )
                assert (kind, ref_name) in defined, (name, kind, ref_name)
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, (name, m)
        for v in volumes.values():
            if "persistentVolumeClaim" in v:
                assert ("PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"]) in defined


def _worker_role(command: list, env: dict) -> tuple[str, str]:
    """(role, queues) of a container that starts scripts/worker, with the defaults scripts/worker applies."""
    assert command[0] == "scripts/worker", command
    role = command[1]
    defaults = {
        "general": ("WORKER_QUEUES", "cpu,gpu"),
        "kernels": ("KERNEL_WORKER_QUEUES", "kernels,kernels-gpu"),
        "calibration": ("CALIBRATION_WORKER_QUEUES", "calibration"),
    }
    name, default = defaults[role]
    return role, env.get(name, default)


def test_workers_start_their_roles_through_scripts_worker_and_beat_is_single():
    roles = {}
    for _, d in k8s_docs():
        if d["kind"] == "Deployment" and d["metadata"]["name"].startswith("worker"):
            c = containers(d)[0][-1]
            roles[d["metadata"]["name"]] = _worker_role(c["command"], {e["name"]: e["value"] for e in c.get("env", [])})
    assert roles["worker-cpu"] == ("general", "cpu") and roles["worker-gpu"] == ("general", "gpu")
    assert roles["worker-kernels"] == ("kernels", "kernels,calibration")  # 2 replicas: calibration holds ≤ 1
    kernels = next(d for _, d in k8s_docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "worker-kernels")
    secret_refs = [r["secretRef"]["name"] for r in containers(kernels)[0][-1]["envFrom"] if "secretRef" in r]
    kernels_secret = next(d for _, d in k8s_docs() if d["kind"] == "Secret" and d["metadata"]["name"] in secret_refs)
    assert not any(k.startswith("AUDIT_SIGNING_KEY") for k in kernels_secret["stringData"])  # it cannot sign
    commands = {
        d["metadata"]["name"]: containers(d)[0][-1]["command"] for _, d in k8s_docs() if d["kind"] == "Deployment"
    }
    assert "beat" in commands["beat"]
    assert commands["web"][0] == "scripts/web"  # the streaming ASGI server, the same command scripts/up starts
    beat = next(d for _, d in k8s_docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == "beat")
    assert beat["spec"]["replicas"] == 1 and beat["spec"]["strategy"]["type"] == "Recreate"


def test_config_names_settings_the_portal_reads_and_a_settings_module_that_exists():
    config = next(d for _, d in k8s_docs() if d["kind"] == "ConfigMap")["data"]
    secret = {k: v for _, d in k8s_docs() if d["kind"] == "Secret" for k, v in d["stringData"].items()}
    module = config["DJANGO_SETTINGS_MODULE"]
    assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), module
    for key in [k for k in {**config, **secret} if k != "DJANGO_SETTINGS_MODULE"]:
        assert re.search(rf"['\"]{key}['\"]", SETTINGS_SOURCES), f"{key} is not read by the settings"


def test_compose_has_every_role_wired_to_postgres_redis_and_one_artifact_volume():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"web", "worker-cpu", "worker-gpu", "worker-kernels", "beat", "postgres", "redis"} <= services.keys()
    for role in ("web", "worker-cpu", "worker-gpu", "worker-kernels", "beat"):
        svc = services[role]
        assert "postgres:5432" in svc["environment"]["DATABASE_URL"] and "redis:6379" in svc["environment"]["REDIS_URL"]
        assert "artifacts:/data/artifacts" in svc["volumes"]
        assert set(svc["depends_on"]) == {"postgres", "redis"}
    assert _worker_role(services["worker-cpu"]["command"], services["worker-cpu"]["environment"]) == ("general", "cpu")
    assert _worker_role(services["worker-gpu"]["command"], services["worker-gpu"]["environment"]) == ("general", "gpu")
    kernels = services["worker-kernels"]
    assert _worker_role(kernels["command"], kernels["environment"]) == ("kernels", "kernels")
    assert kernels["environment"]["AUDIT_SIGNING_ENABLED"] == "0" and "ports" not in kernels
    calibration = services["worker-calibration"]  # apart from submissions, so none waits behind it
    assert _worker_role(calibration["command"], calibration["environment"]) == ("calibration", "calibration")
    assert calibration["environment"]["AUDIT_SIGNING_ENABLED"] == "0" and "ports" not in calibration
    assert set(compose["volumes"]) >= {"artifacts", "pgdata"}
    env_example = (ROOT / "deploy" / "portal.env.example").read_text()
    for key in re.findall(r"^([A-Z_]+)=", env_example, re.M):
        assert re.search(rf"['\"]{key}['\"]", SETTINGS_SOURCES), key


@pytest.mark.parametrize("path", ["Dockerfile"])
def test_dockerfile_runs_the_production_settings_as_a_non_root_user(path):
    text = (ROOT / path).read_text()
    assert "DJANGO_SETTINGS_MODULE=audit_portal.settings_production" in text
    assert re.search(r"^USER (?!root)\w+", text, re.M) and 'CMD ["scripts/web"' in text
    # the code is root's, so numba's kernel cache needs a directory the non-root user owns (created, then chowned)
    cache_dir = re.search(r"NUMBA_CACHE_DIR=(\S+)", text).group(1)
    setup = re.search(r"^RUN useradd.*?(?<!\\)\n", text, re.M | re.S).group(0)  # with its continuation lines
    assert "mkdir -p" in setup and cache_dir in setup and "chown -R portal" in setup
    assert any(cache_dir.startswith(d) for d in re.search(r"chown -R portal ([^\n]+)", setup).group(1).split())
