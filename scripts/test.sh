#!/usr/bin/env bash
# Install everything the tests need (Debian packages, .venv), then lint, type-check and run
# the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# Outside clients the tests drive the server with: curl (HTTP/1.1, h2c, h2 over TLS) and h2load;
# the cluster tests need etcd (the metadata store) and iproute2 (network namespaces); the
# benchmark harness also needs wrk, redis-server and nats-server (its Redis Streams and NATS
# JetStream peers) and nginx (the cheapest answer a server gives here); the Spark ingest tests need a Java runtime (Spark's local mode). The C
# extensions (setup.py) need a compiler and Python's headers, the HTTP/2 session also
# libnghttp2's (without them pip still installs, and the tests of the C paths skip); gcc also
# brings the ASan and UBSan runtimes their sanitizer tests load.
missing=()
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
[ -f /usr/include/nghttp2/nghttp2.h ] || missing+=(libnghttp2-dev)
python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' ||
  missing+=(python3-dev)
command -v curl >/dev/null || missing+=(curl)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v ip >/dev/null || missing+=(iproute2)
command -v nats-server >/dev/null || missing+=(nats-server)
command -v h2load >/dev/null || missing+=(nghttp2-client)
command -v wrk >/dev/null || missing+=(wrk)
command -v redis-server >/dev/null || missing+=(redis-server)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null || missing+=(nginx)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
# A real EventSource: headless Chromium driven by Selenium (tests/e2e/test_events_browser.py).
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  # The package starts its own server where port 80 is free: the benchmarks start their own.
  [ ! -f /run/nginx.pid ] || $sudo /usr/sbin/nginx -s quit || true
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'

export PATH="$PWD/.venv/bin:$PATH"
echo "== ruff"
ruff check .
ruff format --check .
echo "== import layers (DESIGN.md §2, docs/layers.md)"
lint-imports
echo "== mypy"
mypy engine replication groups schemas gateway loadtests openapi spark_ingest tests
echo "== pytest (the 25 slowest tests are listed at the end: CI keeps its pytest time low)"
# Everything a test needs was installed above: a skip (a C extension that did not build, a tool
# that did not install) fails (tests/conftest.py).
export SLUICE_NO_SKIPS=1
# Two processes (pytest-xdist): most tests wait on servers, etcd and sockets, so two share the
# two cores of the smallest machine it runs on; tests isolate themselves (free ports, their own
# directories and network namespaces). SLUICE_TEST_PROCESSES=0 runs them in this process.
pytest -q -n "${SLUICE_TEST_PROCESSES:-2}" --durations=25 "$@"
