# vkbridge: the virtual kubelet behind Multicloud Extend (a drop-in for Liqo v1.2's virtual-kubelet image).
#
#   docker build -t vkbridge:dev --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" .
#
# or `bash hack/image.sh`, which also works where no registry can be reached (a Debian base made from
# Debian's packages, passed as PYTHON_IMAGE). Any base with python3 (>= 3.11) and its venv module will do.
# No `# syntax=` line: it would pull a frontend image; the builder's own Dockerfile frontend suffices.
#
# Two stages: the builder turns the project and every dependency into wheels; the final image installs
# them offline (--no-index) into a virtual environment, /opt/vkbridge, so it never needs a compiler and
# never touches a distribution's own Python packages (PEP 668). It runs as UID 65532 and writes nothing
# outside /tmp (HOME and TMPDIR point there; keys live in memfds), so a read-only root file system
# with an emptyDir on /tmp works.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# Dependencies come as binary wheels (manylinux), exactly those of requirements/image.txt, each checked
# against the sha256 recorded there (--require-hashes; `bash hack/lock.sh` regenerates it): a layer of its
# own, so a change to the source reuses it. Then vkbridge itself (pure Python), without dependencies.
COPY requirements/image.txt requirements/image.txt
RUN python3 -m pip wheel --wheel-dir /wheels --prefer-binary --require-hashes -r requirements/image.txt
COPY pyproject.toml README.md LICENSE ./
COPY vkbridge/ vkbridge/
COPY reflectors/ reflectors/
RUN python3 -m pip wheel --wheel-dir /wheels --no-deps . && rm -rf build

FROM ${PYTHON_IMAGE}
ARG PYTHON_IMAGE
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
    PATH=/opt/vkbridge/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/tmp \
    TMPDIR=/tmp

# Install offline from the builder's wheels (bind-mounted: they never land in a layer) into a venv, then
# drop the venv's packaging tools, which the process never uses. /usr/bin/virtual-kubelet: Liqo's
# controller-manager sets `command: ["/usr/bin/virtual-kubelet"]` on the Deployment it generates,
# overriding ENTRYPOINT.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python3 -m venv /opt/vkbridge \
    && /opt/vkbridge/bin/pip install --no-cache-dir --no-index --find-links=/wheels /wheels/vkbridge-*.whl \
    && /opt/vkbridge/bin/pip uninstall --yes pip setuptools \
    && ln -s /opt/vkbridge/bin/vkbridge /usr/bin/virtual-kubelet \
    && groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin nonroot
# The commit, for vkbridge_build_info (after the install, so a new commit reuses its layer).
ENV VKBRIDGE_REVISION=${REVISION}

# 10250: kubelet API (--listen-port); 5872: /metrics, /healthz, /readyz (--metrics-address, Liqo Helm's port).
EXPOSE 10250 5872
USER 65532:65532
WORKDIR /tmp
ENTRYPOINT ["vkbridge"]
