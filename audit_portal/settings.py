"""Settings for Audit Portal, read from the environment.

Real services when configured (``DATABASE_URL``, ``REDIS_URL``); on a machine with nothing but Python the
portal still runs on embedded defaults: SQLite, a filesystem Celery broker, and an in-memory channel layer
whose websocket consumers fall back to polling the database for job progress.

Environment:
  AUDIT_SECRET_KEY      secret key (a development key is used when unset and DEBUG is on)
  AUDIT_DEBUG           "1" for development (default "1"; production settings set it to "0")
  DATABASE_URL          e.g. postgres://user@127.0.0.1:5432/audit_portal (default: SQLite under var/)
  REDIS_URL             e.g. redis://127.0.0.1:6379/0 — channel layer, and the broker unless overridden
  CELERY_BROKER_URL     broker (default: REDIS_URL, else the embedded filesystem broker)
  ARTIFACT_ROOT         where uploaded logs and traces are kept (default var/artifacts)
  UPLOAD_MAX_BYTES      largest accepted upload (default 5 GiB)
  UPLOAD_THROTTLE_RATE  API upload rate per key or user (default "120/min")
  UPLOAD_PARTS_ABOVE_BYTES  the browser form sends larger files as a resumable upload in parts (default 32 MiB)
  UPLOAD_SESSION_IDLE_SECONDS  an open upload session with no part for this long is abandoned: the periodic
                        maintenance task deletes it and its stored parts (default 86400, 24 h)
  ALLOWED_HOSTS         comma-separated (default localhost,127.0.0.1,[::1],testserver)
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

from audit_portal import task_names

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AUDIT_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    return default if value is None else value.strip().lower() in {"1", "true", "yes", "on"}


DEBUG = env_bool("AUDIT_DEBUG", True)
SECRET_KEY = os.environ.get("AUDIT_SECRET_KEY") or ("dev-only-insecure-key-change-me" if DEBUG else None)
if not SECRET_KEY:
    raise RuntimeError("AUDIT_SECRET_KEY must be set when AUDIT_DEBUG is off")

ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "audit_portal.core",
    "audit_portal.accounts",
    "audit_portal.jobs",
    "audit_portal.runs",
    "audit_portal.certificates",
    "audit_portal.fidelity",
    "audit_portal.kernels",
    "audit_portal.attestations",
    "audit_portal.training",
    "audit_portal.alerts",
    "audit_portal.live",
    "audit_portal.dashboards",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "audit_portal.core.security.SecurityHeadersMiddleware",
    "audit_portal.core.api_errors.ApiErrorMiddleware",  # JSON errors for everything under /api/, no orphan uploads
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "audit_portal.urls"
WSGI_APPLICATION = "audit_portal.wsgi.application"
ASGI_APPLICATION = "audit_portal.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "audit_portal.core.context_processors.portal",
                "audit_portal.attestations.context_processors.banner",  # the failed-log-check banner on every page
            ],
        },
    },
]

# --- data -------------------------------------------------------------------------------------------
DATABASE_URL = os.environ.get("DATABASE_URL", "")
EMBEDDED_DATABASE = not DATABASE_URL
if EMBEDDED_DATABASE:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASE_URL = f"sqlite:///{VAR_DIR / 'portal.sqlite3'}"
# Persistent connections for workers and management commands; the ASGI entry point sets DB_CONN_MAX_AGE=0 (each
# request runs in a thread of its own there, and a kept connection per thread exhausted PostgreSQL under load).
DATABASES = {
    "default": dj_database_url.parse(
        DATABASE_URL, conn_max_age=int(os.environ.get("DB_CONN_MAX_AGE", 60)), conn_health_checks=True
    )
}
if EMBEDDED_DATABASE:
    # SQLite serialises writers; a worker and the web process share it, so wait rather than fail.
    DATABASES["default"]["OPTIONS"] = {"timeout": 30, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

ARTIFACT_ROOT = Path(os.environ.get("ARTIFACT_ROOT", VAR_DIR / "artifacts"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": ARTIFACT_ROOT}},
    "artifacts": {"BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": ARTIFACT_ROOT}},
    # hashed, gzip-compressed names with a one-year immutable cache once collected (audit_portal/core/staticfiles.py)
    "staticfiles": {"BACKEND": "audit_portal.core.staticfiles.HashedCompressedStaticFiles"},
}

# --- uploads ----------------------------------------------------------------------------------------
UPLOAD_MAX_BYTES = int(os.environ.get("UPLOAD_MAX_BYTES", 5 * 1024**3))
UPLOAD_PARTS_ABOVE_BYTES = int(os.environ.get("UPLOAD_PARTS_ABOVE_BYTES", 32 * 1024**2))
UPLOAD_SESSION_IDLE_SECONDS = int(os.environ.get("UPLOAD_SESSION_IDLE_SECONDS", 24 * 3600))
FILE_UPLOAD_HANDLERS = ["audit_portal.runs.upload_handler.HashingUploadHandler"]
FILE_UPLOAD_TEMP_DIR = None  # the hashing handler writes straight into ARTIFACT_ROOT/incoming
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
UPLOAD_VALIDATION_MAX_ERRORS = 20
# An upload larger than this is certified in chunks of about this size by any number of cpu workers and merged
# (pipelines/certificates.py, docs/deploy.md "One run, many workers"); 0 = always one task per upload.
CERTIFY_CHUNK_BYTES = int(float(os.environ.get("CERTIFY_CHUNK_BYTES", 64 * 1024**2)))
# The same for validation (pipelines/uploads.py): pieces validated by any cpu worker, merged into the one-pass
# summary (workers/fcr/validate_pieces.py); 0 = always one task per upload.
VALIDATE_CHUNK_BYTES = int(float(os.environ.get("VALIDATE_CHUNK_BYTES", 64 * 1024**2)))
UPLOAD_THROTTLE_RATE = os.environ.get("UPLOAD_THROTTLE_RATE", "120/min")

# --- signed certificates and the transparency log (docs/verify.md) ---------------------------------
# AUDIT_SIGNING_KEY: an Ed25519 private key (PKCS#8 PEM text); AUDIT_SIGNING_KEY_FILE: the path of one. With
# neither, the key is AUDIT_SIGNING_KEY_DIR/signing-key.pem, created (mode 0600) on first use.
AUDIT_SIGNING_KEY = os.environ.get("AUDIT_SIGNING_KEY", "")
AUDIT_SIGNING_KEY_FILE = os.environ.get("AUDIT_SIGNING_KEY_FILE", "")
AUDIT_SIGNING_KEY_DIR = Path(os.environ.get("AUDIT_SIGNING_KEY_DIR", VAR_DIR / "keys"))
# 0 for a process that must never sign nor hold the key: the kernels worker role, which runs submitted code in
# its sandbox (docs/security.md, "Worker roles"); conformance results are signed by a task on the cpu queue.
AUDIT_SIGNING_ENABLED = os.environ.get("AUDIT_SIGNING_ENABLED", "1") not in ("0", "false", "no")
AUDIT_LOG_ORIGIN = os.environ.get("AUDIT_LOG_ORIGIN", "audit-portal transparency log")
# Signed checkpoints are also published here, append-only, outside the database (attestations/witness.py);
# point it at storage the database's operators cannot rewrite. Empty: no witness.
AUDIT_LOG_WITNESS_DIR = os.environ.get("AUDIT_LOG_WITNESS_DIR", str(VAR_DIR / "witness"))
# Verifier keys (name+hash+base64, cosignature/v1) of the independent witnesses whose cosignatures the log accepts
# (python -m workers.verify witness prints its key); space- or comma-separated. Each is checked by the scheduled
# log check (attestations.tasks.check_log): a witness that refuses the log's checkpoints raises an alert.
AUDIT_LOG_WITNESS_KEYS = [k for k in os.environ.get("AUDIT_LOG_WITNESS_KEYS", "").replace(",", " ").split() if k]

# --- queue and live progress -----------------------------------------------------------------------
# One instance, one namespace: scripts/up and scripts/test set AUDIT_INSTANCE per checkout (scripts/services.sh);
# it prefixes the broker's and the channel layer's keys on a shared Redis. Empty: no prefix.
AUDIT_INSTANCE = os.environ.get("AUDIT_INSTANCE", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED_BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL or "filesystem://"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("out", "processed", "control"):
        (EMBEDDED_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(EMBEDDED_BROKER_DIR / "out"),
        "data_folder_out": str(EMBEDDED_BROKER_DIR / "out"),
        "data_folder_processed": str(EMBEDDED_BROKER_DIR / "processed"),
        "store_processed": False,
        "control_folder": str(EMBEDDED_BROKER_DIR / "control"),
    }
else:
    # A task whose worker dies is redelivered after this long (must exceed the longest job).
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 6 * 3600}
    if AUDIT_INSTANCE and CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        # every broker key (queues, unacked, control) under the instance's prefix: instances sharing a Redis
        # never see each other's tasks
        CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = f"{AUDIT_INSTANCE}:"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_INCLUDE = ["pipelines"]  # imported by workers only; the web tier sends tasks by name (audit_portal.task_names)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE = {
    "reap-stale-jobs": {"task": task_names.REAP_STALE_JOBS, "schedule": 60.0, "options": {"queue": "cpu"}},
    # lost messages of alerts and growing runs: deliveries and follow-ups resent (pipelines/alerts.py)
    "sweep-alerts": {"task": task_names.SWEEP_ALERTS, "schedule": 60.0, "options": {"queue": "cpu"}},
    # the transparency log against its signatures, key history and witnesses; an alert when it stops verifying
    "check-transparency-log": {
        "task": task_names.CHECK_TRANSPARENCY_LOG,
        "schedule": float(os.environ.get("AUDIT_LOG_CHECK_SECONDS", 300)),
        "options": {"queue": "cpu"},
    },
}
# A running job whose worker has not reported for this long is retried, then failed with a reason.
JOB_HEARTBEAT_TIMEOUT_SECONDS = int(os.environ.get("JOB_HEARTBEAT_TIMEOUT_SECONDS", 600))
JOB_MAX_ATTEMPTS = 3

if REDIS_URL:
    # redis-py 8 defaults to a 5 s socket timeout, which races channels_redis's 5 s BZPOPMIN: give it room.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                "prefix": f"asgi-{AUDIT_INSTANCE}" if AUDIT_INSTANCE else "asgi",
            },
        }
    }
    PROGRESS_POLL_SECONDS = 0  # progress arrives through the channel layer
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    # The in-memory layer cannot hear a worker in another process; consumers poll the job rows instead.
    PROGRESS_POLL_SECONDS = 1.0

# --- alerts (audit_portal/alerts, docs/alerts.md) ------------------------------------------------------
# A webhook URL whose host resolves to a loopback, private, link-local (cloud metadata), CGNAT, unique-local or other
# non-public address is refused, at save and at every delivery (SSRF): set 1 where the receivers are internal.
ALERT_WEBHOOK_ALLOW_PRIVATE = env_bool("ALERT_WEBHOOK_ALLOW_PRIVATE", False)
ALERT_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("ALERT_WEBHOOK_TIMEOUT_SECONDS", 5))  # connect, and each read
ALERT_WEBHOOK_MAX_ATTEMPTS = int(os.environ.get("ALERT_WEBHOOK_MAX_ATTEMPTS", 6))
ALERT_WEBHOOK_BACKOFF_SECONDS = float(os.environ.get("ALERT_WEBHOOK_BACKOFF_SECONDS", 10))  # doubles per retry
ALERT_WEBHOOK_MAX_PAYLOAD_BYTES = 16 * 1024

# --- API ---------------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "audit_portal.accounts.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # the caller and the URL's project, resolved once per request (audit_portal/accounts/permissions.py)
    "DEFAULT_PERMISSION_CLASSES": [
        "audit_portal.accounts.permissions.IsAuthenticatedPrincipal",
        "audit_portal.accounts.permissions.ProjectInScope",
    ],
    "DEFAULT_PAGINATION_CLASS": "audit_portal.core.pagination.CreatedCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "audit_portal.core.errors.api_exception_handler",
    # JSON bodies bounded in size and nesting depth before they are parsed (audit_portal/core/parsers.py)
    "DEFAULT_PARSER_CLASSES": [
        "audit_portal.core.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Audit Portal API",
    "DESCRIPTION": "Divergence certificates, fidelity audits and kernel conformance for ML infrastructure.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "COMPONENT_SPLIT_REQUEST": True,
    # Served from the sidecar package's static files: no CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # the ApiKey security scheme is declared by audit_portal/core/schema.py (an authentication extension), which
    # also documents the error envelope and the error responses of every operation
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "audit_portal.core.schema.document_error_responses",
    ],
    # several models have a field named "kind" with their own choices: each enum gets a name of its own
    "ENUM_NAME_OVERRIDES": {
        "AlertRuleKindEnum": "audit_portal.alerts.rules.KIND_CHOICES",
        "TokenizerKindEnum": "audit_portal.fidelity.models.RegisteredTokenizer.Kind",
        "ImplementationKindEnum": "audit_portal.kernels.models.ImplementationKind",
    },
}

# --- auth and sessions -------------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboards:home"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 8}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Hardening that is safe over plain HTTP in development; audit_portal/settings_production.py adds the rest
# (HTTPS-only cookies, HSTS, SSL redirect, an enforced Content-Security-Policy). docs/security.md explains each.
# Sign-in: after this many failures for one username within the window, that username is refused for the window
# (audit_portal/accounts/throttling.py). Counted in the default cache: the production settings share it via Redis.
LOGIN_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", 10))
LOGIN_FAILURE_WINDOW_SECONDS = int(os.environ.get("LOGIN_FAILURE_WINDOW_SECONDS", 15 * 60))
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # static/js/upload.js reads the token to send X-CSRFToken with session uploads
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Sent by audit_portal.core.security.SecurityHeadersMiddleware. Scripts: this origin plus inline scripts that
# carry the request's nonce (``<script nonce="{{ csp_nonce }}">``); inline event handlers are not allowed.
# Styles: inline styles are allowed (style attributes in the templates, Plotly's generated styles).
CONTENT_SECURITY_POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'", "'nonce-{nonce}'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:", "blob:"],
    "font-src": ["'self'", "data:"],
    "connect-src": ["'self'", "ws://{host}", "wss://{host}"],
    "worker-src": ["'self'", "blob:"],  # ReDoc's search worker
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
# Development reports violations in the browser console without blocking; production enforces the policy.
CONTENT_SECURITY_POLICY_REPORT_ONLY = env_bool("CSP_REPORT_ONLY", True)
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", VAR_DIR / "staticfiles"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.request": {"level": "ERROR"}},
}
