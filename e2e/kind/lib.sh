#!/usr/bin/env bash
# shellcheck disable=SC2034  # the variables are used by the scripts that source this file
# Shared settings of the kind e2e scripts (sourced, never run). Every value can be overridden from the
# environment; e2e/README.md lists them.

E2E_KIND_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$E2E_KIND_DIR/../.." && pwd)

E2E_DIR=${E2E_DIR:-${TMPDIR:-/tmp}/vkbridge-kind}
KUBECONFIGDIR=${KUBECONFIGDIR:-$E2E_DIR/kubeconfigs}
CONSUMER_CLUSTER=${CONSUMER_CLUSTER:-vk-consumer}
POOL_CLUSTER=${POOL_CLUSTER:-vk-pool}
# Extend's names (team CONVENTIONS): pool slug = provider cluster id = VirtualNode = Node name.
SLUG=${SLUG:-c0123456789ab}
CONSUMER_ID=${CONSUMER_ID:-c-1a2b3c4d}
LIQO_VERSION=${LIQO_VERSION:-v1.2.0}
IMAGE=${IMAGE:-vkbridge:e2e}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
DOCKER=${DOCKER:-docker}
KIND=${KIND:-kind}
KUBECTL=${KUBECTL:-kubectl}
LIQOCTL=${LIQOCTL:-liqoctl}
PYTHON=${PYTHON:-python3}

CONSUMER_KUBECONFIG=$KUBECONFIGDIR/consumer
POOL_KUBECONFIG=$KUBECONFIGDIR/pool
TENANT_NS=liqo-tenant-$SLUG
ENV_FILE=$E2E_DIR/env

log() { printf '== %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { printf 'e2e/kind: %s\n' "$*" >&2; exit 1; }

# kubectl on the consumer / the pool.
kc() { "$KUBECTL" --kubeconfig "$CONSUMER_KUBECONFIG" "$@"; }
kp() { "$KUBECTL" --kubeconfig "$POOL_KUBECONFIG" "$@"; }

# Exit 2 ("skipped", not failed) when a tool is missing, naming every missing one.
require_tools() {
  local missing="" tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
  done
  if [ -n "$missing" ]; then
    printf 'e2e/kind: missing on PATH:%s (see e2e/README.md, "kind flow")\n' "$missing" >&2
    exit 2
  fi
}

# retry_until SECONDS DESCRIPTION COMMAND...: run COMMAND every 2 s until it succeeds.
retry_until() {
  local timeout=$1 what=$2 deadline
  shift 2
  deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      die "timed out after ${timeout}s waiting for $what"
    fi
    sleep 2
  done
}

# Render a deploy/ manifest with this run's values (the sed of deploy/README.md).
render() {
  sed -e "s|__SLUG__|$SLUG|g" -e "s|__CONSUMER_ID__|$CONSUMER_ID|g" -e "s|__IMAGE__|$IMAGE|g" \
    -e "s|__LOCAL_POD_CIDR__|10.10.0.0/16|g" "$REPO_ROOT/deploy/$1"
}

# EXIT trap of setup.sh and run-scenarios.sh: collect diagnostics when the script fails.
diagnose_on_failure() {
  local status=$?
  if [ "$status" -ne 0 ]; then diagnose; fi
  return "$status"
}

# Everything useful after a failure, into $E2E_DIR/diagnostics (never Secret contents).
diagnose() {
  local out=$E2E_DIR/diagnostics
  mkdir -p "$out"
  log "diagnostics -> $out"
  kc get nodes -o wide >"$out/consumer-nodes.txt" 2>&1 || true
  kc get pods -A -o wide >"$out/consumer-pods.txt" 2>&1 || true
  kc describe node "$SLUG" >"$out/virtual-node.txt" 2>&1 || true
  kc -n "$TENANT_NS" get virtualnodes,resourceslices,namespacemaps -o yaml >"$out/liqo-objects.yaml" 2>&1 || true
  kc -n "$TENANT_NS" logs "deploy/vk-$SLUG" --tail=2000 >"$out/vkbridge.log" 2>&1 || true
  kc -n "$TENANT_NS" logs "deploy/vk-$SLUG" --previous --tail=500 >"$out/vkbridge-previous.log" 2>&1 || true
  kc -n liqo logs deploy/liqo-controller-manager --tail=500 >"$out/liqo-controller-manager.log" 2>&1 || true
  kc get events -A --sort-by=.lastTimestamp >"$out/consumer-events.txt" 2>&1 || true
  kp get pods -A -o wide >"$out/pool-pods.txt" 2>&1 || true
  kp get shadowpods -A -o wide >"$out/pool-shadowpods.txt" 2>&1 || true
}
