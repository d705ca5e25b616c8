# One image for every role (web, CPU worker, beat); the GPU worker uses the same Dockerfile with a CUDA base
# (build arg BASE) and a CUDA build of torch (build arg TORCH_INDEX). See docs/deploy.md.
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    DJANGO_SETTINGS_MODULE=audit_portal.settings_production \
    AUDIT_DEBUG=0 AUDIT_VAR_DIR=/var/lib/audit-portal ARTIFACT_ROOT=/data/artifacts STATIC_ROOT=/app/staticfiles \
    NUMBA_CACHE_DIR=/var/lib/audit-portal/numba-cache \
    FORWARDED_ALLOW_IPS=*
WORKDIR /app
# bubblewrap: the kernels worker role runs submitted kernels only inside it (docs/security.md)
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap && rm -rf /var/lib/apt/lists/*
COPY requirements.txt .
RUN pip install --extra-index-url "${TORCH_INDEX}" -r requirements.txt
COPY . .
# collectstatic needs settings that import cleanly: build-time placeholders only, never used at run time
RUN AUDIT_SECRET_KEY=build-only-placeholder-build-only-placeholder-build-only ALLOWED_HOSTS=build \
    python manage.py collectstatic --noinput -v0
# /app is root's and read-only for the portal user: numba caches the certificate kernel's machine code in
# NUMBA_CACHE_DIR instead (without a writable place it would compile it in every worker process, ≈ 3 s each)
RUN useradd --system --uid 10001 portal && mkdir -p /data/artifacts /var/lib/audit-portal/numba-cache \
    && chown -R portal /data /var/lib/audit-portal
USER portal
EXPOSE 8000
CMD ["scripts/web", "0.0.0.0", "8000"]
