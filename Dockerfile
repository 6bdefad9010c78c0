# syntax=docker/dockerfile:1
# vkbridge: the virtual kubelet behind Multicloud Extend (a drop-in for Liqo v1.2's virtual-kubelet image).
#
#   docker build -t vkbridge:dev --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
#
# Two stages: the builder turns the project and every dependency into wheels; the final image installs
# them offline (--no-index), so it never needs a compiler. It runs as UID 65532 and writes nothing
# outside /tmp (HOME and TMPDIR point there; keys live in memfds), so a read-only root file system
# with an emptyDir on /tmp works.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY vkbridge/ vkbridge/
COPY reflectors/ reflectors/
# Dependencies come as binary wheels (manylinux); only vkbridge itself (pure Python) is built here.
RUN pip wheel --wheel-dir /wheels --prefer-binary .

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=""
LABEL org.opencontainers.image.title="vkbridge" \
      org.opencontainers.image.description="Python asyncio reimplementation of the Liqo v1.2 virtual kubelet (Multicloud Extend)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="Multicloud" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp

# Install offline from the builder's wheels (bind-mounted: they never land in a layer), then drop the
# packaging tools the process never uses. /usr/bin/virtual-kubelet: Liqo's controller-manager sets
# `command: ["/usr/bin/virtual-kubelet"]` on the Deployment it generates, overriding ENTRYPOINT.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels --root-user-action=ignore /wheels/vkbridge-*.whl \
    && python -m pip uninstall --yes --root-user-action=ignore pip setuptools wheel \
    && ln -s /usr/local/bin/vkbridge /usr/bin/virtual-kubelet \
    && groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin nonroot

# 10250: kubelet API (--listen-port); 5872: /metrics, /healthz, /readyz (--metrics-address, Liqo Helm's port).
EXPOSE 10250 5872
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["vkbridge"]
