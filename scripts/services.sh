# Sourced by scripts/up and scripts/test: use PostgreSQL and Redis when they answer locally (or when
# DATABASE_URL / REDIS_URL are set); otherwise leave them unset and the portal runs on embedded defaults.
pg_answers() { command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p 5432; }
redis_answers() { .venv/bin/python - <<'PY' 2>/dev/null
import redis, sys
try:
    sys.exit(0 if redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=1).ping() else 1)
except Exception:
    sys.exit(1)
PY
}
use_local_services() {
  local db=${1:-audit_portal}
  if [ -z "${DATABASE_URL:-}" ] && pg_answers; then
    if command -v psql >/dev/null 2>&1 && ! psql -h 127.0.0.1 -U postgres -Atqc "select 1 from pg_database where datname='$db'" | grep -q 1; then
      psql -h 127.0.0.1 -U postgres -qc "create database $db" >/dev/null
    fi
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db"
  fi
  if [ -z "${REDIS_URL:-}" ] && redis_answers; then
    export REDIS_URL="redis://127.0.0.1:6379/0"
  fi
}
