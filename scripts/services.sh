# Sourced by scripts/up and scripts/test: use PostgreSQL and Redis when they answer locally (or when
# DATABASE_URL / REDIS_URL are set); otherwise leave them unset and the portal runs on embedded defaults.
#
# One instance, one namespace: each checkout gets its own AUDIT_INSTANCE (derived from the checkout's path unless
# set), hence its own database (audit_portal_<instance>) and its own keys on a shared Redis (the broker's queues,
# the channel layer's groups: audit_portal/settings.py prefixes them with AUDIT_INSTANCE). Two checkouts on one
# machine never take each other's tasks.
pg_answers() { command -v pg_isready >/dev/null 2>&1 && pg_isready -q -h 127.0.0.1 -p 5432; }
redis_answers() { .venv/bin/python - <<'PY' 2>/dev/null
import redis, sys
try:
    sys.exit(0 if redis.Redis(host="127.0.0.1", port=6379, socket_connect_timeout=1).ping() else 1)
except Exception:
    sys.exit(1)
PY
}
instance_name() {  # lowercase letters, digits and _: the checkout's folder name and a hash of its full path
  local root base hash
  root=$(pwd -P)
  base=$(basename "$root" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9\n' '_' | cut -c1-20)
  hash=$(printf '%s' "$root" | sha256sum | cut -c1-8)
  echo "${base}_${hash}"
}
use_local_services() {
  export AUDIT_INSTANCE=${AUDIT_INSTANCE:-$(instance_name)}
  case "$AUDIT_INSTANCE" in *[!a-z0-9_]*|"")
    echo "error: AUDIT_INSTANCE='$AUDIT_INSTANCE': use lowercase letters, digits and _" >&2; return 64 ;;
  esac
  local db=${1:-audit_portal_$AUDIT_INSTANCE}
  LOCAL_PG=0
  if [ -z "${DATABASE_URL:-}" ] && pg_answers; then
    if command -v psql >/dev/null 2>&1 && ! psql -h 127.0.0.1 -U postgres -Atqc "select 1 from pg_database where datname='$db'" | grep -q 1; then
      psql -h 127.0.0.1 -U postgres -qc "create database $db" >/dev/null
    fi
    export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db"
    LOCAL_PG=1 LOCAL_DB=$db
  fi
  if [ -z "${REDIS_URL:-}" ] && redis_answers; then
    export REDIS_URL="redis://127.0.0.1:6379/0"
  fi
}
