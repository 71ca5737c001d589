# gpu-platform's image: the control plane (`serve`) and the node agent (`agent`).
#   docker build -t gpu-platform .
#   docker build --network host --build-arg BASE_IMAGE=gpu-platform-base:bookworm -t gpu-platform .
# BASE_IMAGE: a Debian-like image with python3 >= 3.11 and its venv module: python:3.11-slim,
# or one imported from a debootstrap where no registry is reachable (docs/containers.md).
# Few instructions, the ones that change last: each layer is a full copy on the vfs driver.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS builder
# Dependencies first: this layer is rebuilt only when pyproject.toml (or the wheelhouse)
# changes. A `wheelhouse/` of wheels in the build context makes the build offline (`pip wheel
# -w wheelhouse ...` on a host that reaches an index); without one, pip uses its index.
# (The glob keeps COPY valid without a wheelhouse: pyproject.toml always matches.)
COPY pyproject.toml wheelhouse* /build/wheelhouse/
RUN set -e; cd /build; export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1; \
    python3 -m venv /opt/gpu-platform; \
    python3 -c "import tomllib; print('\n'.join(tomllib.load(open('wheelhouse/pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt; \
    offline=""; if ls wheelhouse/*.whl >/dev/null 2>&1; then offline="--no-index --find-links wheelhouse"; fi; \
    /opt/gpu-platform/bin/pip install $offline -r requirements.txt "setuptools>=68" wheel
# The package itself: offline (no build isolation), no dependency left to fetch.
COPY pyproject.toml README.md /build/
COPY src /build/src
RUN set -e; cd /build; export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1; \
    /opt/gpu-platform/bin/pip install --no-deps --no-build-isolation .; \
    /opt/gpu-platform/bin/pip uninstall -y setuptools wheel

FROM ${BASE_IMAGE}
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /var/lib/gpu-platform gpu-platform
LABEL org.opencontainers.image.title="gpu-platform" \
      org.opencontainers.image.description="Data-center GPU cluster manager"
ENV PATH=/opt/gpu-platform/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GPU_PLATFORM_HOST=0.0.0.0 \
    GPU_PLATFORM_DATA_DIR=/var/lib/gpu-platform
USER gpu-platform
WORKDIR /var/lib/gpu-platform
# REST, gRPC, agents' streams, Raft (the defaults; each is a setting)
EXPOSE 8080 50051 50053 7001
# /healthz on the REST port this container serves (GPU_PLATFORM_PORT, default 8080; with 0,
# the port the server bound, from its data directory's ports.json).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["python3", "-c", "import json, os, urllib.request; e = os.environ; p = e.get('GPU_PLATFORM_PORT', '8080'); p = json.load(open(os.path.join(e['GPU_PLATFORM_DATA_DIR'], 'ports.json')))['rest'] if p == '0' else p; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % p, timeout=2)"]
ENTRYPOINT ["gpu-platform"]
CMD ["serve"]
# Last: the only layer of this stage that a code change rebuilds.
COPY --from=builder /opt/gpu-platform /opt/gpu-platform
