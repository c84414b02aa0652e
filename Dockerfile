# syntax=docker/dockerfile:1
#
# Sluice: one node (`sluice serve`) per container.
#
#   docker build -t sluice .
#   docker run --rm -p 8080:8080 -v sluice-data:/data sluice
#
# Options after the image name replace the CMD defaults below (so repeat --host, --port and
# --data-dir when adding others); compose.yaml runs three nodes and etcd this way.
# tests/e2e/test_container.py runs this file's ENTRYPOINT + CMD and HEALTHCHECK in the venv.
#
# Reproducible builds: pin the base image by digest at build time, e.g.
#   docker build --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:... .
# and set SOURCE_DATE_EPOCH (e.g. to `git log -1 --format=%ct`) for stable timestamps.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the sluice wheel (with its C extension) and wheels of every dependency ----------
FROM ${PYTHON_IMAGE} AS build

ARG SOURCE_DATE_EPOCH
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

# setup.py builds the C extensions (gateway/formats/_batchcheck.c, _fetchjson.c, _producejson.c,
# engine/_scan.c and _h2session.c, the last over libnghttp2); they are optional there, so the
# check below makes a missing compiler or header fail the build instead of silently shipping the
# slower paths.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libnghttp2-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY engine ./engine
COPY gateway ./gateway
COPY groups ./groups
COPY openapi ./openapi
COPY replication ./replication
COPY schemas ./schemas
COPY spark_ingest ./spark_ingest

RUN pip wheel --wheel-dir /wheels . \
    && python -c "import glob, sys, zipfile; \
names = zipfile.ZipFile(glob.glob('/wheels/sluice-*.whl')[0]).namelist(); \
lacking = [m for m in ('gateway/formats/_batchcheck', 'gateway/formats/_fetchjson', \
'gateway/formats/_producejson', 'gateway/http/_h2session', 'engine/_scan') \
if not any(n.startswith(f'{m}.') and n.endswith('.so') for n in names)]; \
sys.exit(f'the sluice wheel lacks its C extensions {lacking}' if lacking else 0)"

# ---- runtime: the wheels installed, no compiler, no source tree ------------------------------
FROM ${PYTHON_IMAGE}

LABEL org.opencontainers.image.title="sluice" \
      org.opencontainers.image.description="Kafka's log design served over plain HTTP/1.1 and HTTP/2" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# A fixed uid/gid, so volumes keep the same owner across rebuilds. /data belongs to it: a new
# named volume mounted there copies that ownership.
RUN groupadd --system --gid 10001 sluice \
    && useradd --system --uid 10001 --gid sluice --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin sluice \
    && mkdir /data \
    && chown sluice:sluice /data

# libnghttp2 (the HTTP/2 session's library) from Debian: the runtime half of libnghttp2-dev.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libnghttp2-14 \
    && rm -rf /var/lib/apt/lists/*

# Only from the wheels built above (--no-index): the same versions as the build stage, and the
# wheels themselves never become a layer of this image. setup.py's C extensions are optional
# (a failed compile installs the slower Python paths): importing each fails a build without one.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels sluice \
    && python -c "import engine._scan, gateway.formats._batchcheck, gateway.formats._fetchjson, \
gateway.formats._producejson, gateway.http._h2session"

USER sluice:sluice
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080

# /healthz answers while the process serves. slim has no curl: Python's urllib does it (a
# non-2xx answer or no answer raises, so the exit status is 1). Port 8080 is the CMD's.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]

# Exec form: sluice is PID 1 and gets SIGTERM from `docker stop`, then drains and closes its
# logs cleanly (within 10 s, docker's default grace period).
ENTRYPOINT ["sluice", "serve"]
CMD ["--host", "0.0.0.0", "--port", "8080", "--data-dir", "/data"]
