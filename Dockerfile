# syntax=docker/dockerfile:1
# argus-trace workers and tools: `argus worker ROLE`, `argus topics create`, `argus collect stacks`.
#   docker build -t argus-trace:0.1.0 .
# Slim, non-root (uid 10001), no compilers in the final image, read-only-root friendly
# (everything writable lives under /tmp, which compose and k8s mount as tmpfs / emptyDir).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/argus
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY argus ./argus
# registry extra: Confluent framing when ARGUS_SCHEMA_REGISTRY_URL is set; the tested versions
RUN /opt/argus/bin/pip install -c constraints.txt ".[registry]"
RUN /opt/argus/bin/pip uninstall -y pip setuptools wheel

FROM ${PYTHON_IMAGE}
ARG ARGUS_VERSION=0.1.0
LABEL org.opencontainers.image.title="argus-trace" \
      org.opencontainers.image.version="${ARGUS_VERSION}" \
      org.opencontainers.image.description="Always-on fail-slow diagnosis for large LLM training jobs on Apache Kafka" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 argus \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
            --shell /usr/sbin/nologin argus
COPY --from=build /opt/argus /opt/argus
ENV PATH=/opt/argus/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    ARGUS_STATE_DIR=/tmp/argus \
    ARGUS_CACHE_DIR=/tmp/argus-cache \
    ARGUS_METRICS_PORT=9464
USER 10001:10001
WORKDIR /tmp
EXPOSE 9464
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/metrics' % os.environ.get('ARGUS_METRICS_PORT', '9464'), timeout=4)"]
ENTRYPOINT ["argus"]
CMD ["--help"]
