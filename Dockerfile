# The controller's image, the one deploy/ runs (README, "An image to run"):
#   docker build -t ghcr.io/gpu-rightsizer/gpu-rightsizer:0.1.0 .
# Two stages on the same Python: the builder makes the project's wheel and installs it with its
# dependencies into /opt/venv (deploy/image/install.sh, which tests/test_image_install.py runs too);
# the runtime stage copies only that venv: no compiler, no source, no wheel. It runs as uid/gid 65532, as
# deploy/base/deployment.yaml does, and writes only under /tmp (the Deployment's emptyDir), so the
# root filesystem can be read-only. tests/test_image.py keeps these facts and the manifests equal.

FROM python:3.11.13-slim-bookworm AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The context is an allow-list (.dockerignore): pyproject.toml, README.md, LICENSE, NOTICE, the three
# packages with their package data, and the install script.
COPY . .
RUN sh deploy/image/install.sh /src /opt/venv

FROM python:3.11.13-slim-bookworm
LABEL org.opencontainers.image.title="gpu-rightsizer" \
      org.opencontainers.image.description="Workload-aware GPU right-sizing recommender and controller for Kubernetes" \
      org.opencontainers.image.source="https://github.com/gpu-rightsizer/gpu-rightsizer" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
# A passwd entry for the manifests' uid, so that libraries asking for the user's name get one.
RUN groupadd --gid 65532 rightsizer \
 && useradd --no-log-init --uid 65532 --gid 65532 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin rightsizer
COPY --from=builder /opt/venv /opt/venv
# Everything written at run time goes under /tmp: matplotlib's font cache (MPLCONFIGDIR), anything
# keyed on HOME or XDG_CACHE_HOME, temporary files. Bytecode was compiled at install; none is written.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/matplotlib
USER 65532:65532
WORKDIR /tmp
# http (/healthz, /readyz, /metrics, KEDA metrics-api), grpc (KEDA external scaler), https
# (external.metrics.k8s.io): the Service's ports.
EXPOSE 8080 9090 6443
ENTRYPOINT ["rightsizer"]
CMD ["controller", "--config", "/etc/rightsizer/config.yaml"]
