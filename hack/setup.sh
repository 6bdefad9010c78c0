#!/usr/bin/env bash
# Install what vkbridge's demo and tests need on a fresh machine; idempotent and quick when done.
#   Debian packages (only if missing), the Python package with its dev extras, the control-plane binaries
#   and Liqo's (built or fetched once per machine from the Go module proxy, then reused). It reads nothing
#   beside the repo.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=""
command -v go >/dev/null 2>&1 || missing="$missing golang-go"
command -v pgrep >/dev/null 2>&1 || missing="$missing procps"
command -v script >/dev/null 2>&1 || missing="$missing bsdutils"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
command -v shellcheck >/dev/null 2>&1 || missing="$missing shellcheck"
# Real pool workers (e2e/workers): containerd + runc (not docker.io: no daemon of its own is wanted), the
# CNI plugins, and a static busybox to make the busybox and pause images from. VKBRIDGE_REAL_WORKERS=0: skip.
if [ "${VKBRIDGE_REAL_WORKERS:-1}" != 0 ]; then
  command -v containerd >/dev/null 2>&1 || missing="$missing containerd"
  command -v runc >/dev/null 2>&1 || missing="$missing runc"
  [ -x /usr/lib/cni/bridge ] || missing="$missing containernetworking-plugins"
  dpkg -s busybox-static >/dev/null 2>&1 || missing="$missing busybox-static"
fi
if [ -n "$missing" ]; then
  echo "== apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086  # $missing is a word list on purpose
  apt-get update -qq && apt-get install -y -qq $missing
fi

py=${PYTHON:-python3}
if ! "$py" -c 'import vkbridge, pytest, aiohttp, hypothesis, importlinter' >/dev/null 2>&1 \
   || [ pyproject.toml -nt .setup-stamp ] 2>/dev/null; then
  echo "== pip install -e .[dev]"
  "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -e '.[dev]'
  touch .setup-stamp
fi

echo "== control-plane binaries"
bash hack/build-k8s-bins.sh
echo "== Liqo's chart (its CRDs and ClusterRoles, from Liqo's Go module; the repo keeps no copy)"
bash hack/fetch-liqo-chart.sh
echo "== Liqo's own components: its virtual kubelet (the differential suite's oracle), controller-manager, webhook, crd-replicator"
bash hack/build-liqo.sh
echo "== metrics-server (kubectl top and HPA tests)"
bash hack/build-metrics-server.sh || echo "setup: no metrics-server; tests/integration/test_top_and_hpa.py will skip" >&2
