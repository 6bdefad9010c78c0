#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Two kind clusters with real Liqo v1.2, peered the Extend way (networking off), whose virtual node runs
# the vkbridge image built from this checkout, selected through deploy/vkoptionstemplate.yaml.
# Needs Docker, kind, kubectl and liqoctl (e2e/README.md). Exit 2 = a tool is missing (skipped).
# Writes $E2E_DIR/env for run-scenarios.sh. Idempotent for the clusters: existing ones are reused.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

require_tools "$DOCKER" "$KIND" "$KUBECTL" "$LIQOCTL" sed
"$DOCKER" info >/dev/null 2>&1 || { echo "e2e/kind: the Docker daemon is not reachable" >&2; exit 2; }
mkdir -p "$KUBECONFIGDIR"
trap diagnose_on_failure EXIT

create_cluster() {  # $1 = kind cluster name, $2 = config file, $3 = kubeconfig path
  if grep -qx "$1" <<<"$("$KIND" get clusters 2>/dev/null)"; then
    log "kind cluster $1 exists; reusing it"
    "$KIND" get kubeconfig --name "$1" >"$3"
    return
  fi
  log "creating kind cluster $1"
  local image_args=()
  if [ -n "$KIND_NODE_IMAGE" ]; then image_args=(--image "$KIND_NODE_IMAGE"); fi
  "$KIND" create cluster --name "$1" --config "$2" --kubeconfig "$3" --wait 2m ${image_args[@]+"${image_args[@]}"}
}

install_liqo() {  # $1 = kubeconfig, $2 = cluster id
  log "installing Liqo $LIQO_VERSION (cluster id $2, networking off as Extend's chart)"
  "$LIQOCTL" install kind --kubeconfig "$1" --cluster-id "$2" --version "$LIQO_VERSION" \
    --set networking.enabled=false --set networking.reflectIPs=false --set metrics.enabled=true
  "$KUBECTL" --kubeconfig "$1" -n liqo wait --for=condition=Ready pods --all --timeout=5m
}

create_cluster "$CONSUMER_CLUSTER" "$E2E_KIND_DIR/consumer.yaml" "$CONSUMER_KUBECONFIG" &
create_pid=$!
create_cluster "$POOL_CLUSTER" "$E2E_KIND_DIR/pool.yaml" "$POOL_KUBECONFIG"
wait "$create_pid"

log "building $IMAGE and loading it into $CONSUMER_CLUSTER"
"$DOCKER" build -t "$IMAGE" \
  --build-arg REVISION="$(git -C "$REPO_ROOT" rev-parse HEAD 2>/dev/null || echo unknown)" \
  --build-arg CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$REPO_ROOT"
"$KIND" load docker-image "$IMAGE" --name "$CONSUMER_CLUSTER"

install_liqo "$CONSUMER_KUBECONFIG" "$CONSUMER_ID"
install_liqo "$POOL_KUBECONFIG" "$SLUG"

log "VkOptionsTemplate liqo/vkbridge -> $IMAGE"
render vkoptionstemplate.yaml | kc apply -f -

if kc -n "$TENANT_NS" get virtualnode "$SLUG" >/dev/null 2>&1; then
  log "VirtualNode $SLUG exists; keeping the peering"
else
  # The ResourceSlice and the pool credential (Secret kubeconfig-resourceslice-<slug>), but no
  # VirtualNode yet: Liqo's webhook reads the VkOptionsTemplate only when the VirtualNode is created.
  log "peering $CONSUMER_ID -> $SLUG (ResourceSlice only)"
  "$LIQOCTL" peer --kubeconfig "$CONSUMER_KUBECONFIG" --remote-kubeconfig "$POOL_KUBECONFIG" \
    --networking-disabled --create-virtual-node=false
  retry_until 300 "Secret $TENANT_NS/kubeconfig-resourceslice-$SLUG" \
    kc -n "$TENANT_NS" get secret "kubeconfig-resourceslice-$SLUG"

  log "RBAC that Liqo's liqo-virtual-kubelet-local role lacks for vkbridge"
  render rbac-liqo-managed.yaml | kc apply -f -

  log "VirtualNode $SLUG with --vk-options-template liqo/vkbridge"
  "$LIQOCTL" create virtualnode "$SLUG" --kubeconfig "$CONSUMER_KUBECONFIG" --remote-cluster-id "$SLUG" \
    --resource-slice-name "$SLUG" --vk-options-template liqo/vkbridge --disable-network-check \
    --labels "multicloud.io/pool=$SLUG"
  # Extend's taint (DESIGN §1): liqoctl has no flag for taints.
  kc -n "$TENANT_NS" patch virtualnode "$SLUG" --type merge -p \
    "{\"spec\":{\"taints\":[{\"key\":\"multicloud.io/pool\",\"value\":\"$SLUG\",\"effect\":\"NoSchedule\"}]}}"
fi

log "waiting for vk-$SLUG to run our image and the virtual node to be Ready"
retry_until 300 "Deployment $TENANT_NS/vk-$SLUG" kc -n "$TENANT_NS" get deploy "vk-$SLUG"
image=$(kc -n "$TENANT_NS" get deploy "vk-$SLUG" -o jsonpath='{.spec.template.spec.containers[0].image}')
[ "$image" = "$IMAGE" ] || die "vk-$SLUG runs $image, not $IMAGE (was the VirtualNode created before the template?)"
kc -n "$TENANT_NS" rollout status "deploy/vk-$SLUG" --timeout=5m
kc wait "node/$SLUG" --for=condition=Ready --timeout=5m

cat >"$ENV_FILE" <<EOF
# Written by e2e/kind/setup.sh; read by run-scenarios.sh and by the resilience fixtures (e2e/README.md).
export VKBRIDGE_E2E=kind
export VKBRIDGE_E2E_CONSUMER_KUBECONFIG=$CONSUMER_KUBECONFIG
export VKBRIDGE_E2E_POOL_KUBECONFIG=$POOL_KUBECONFIG
export VKBRIDGE_E2E_SLUG=$SLUG
export VKBRIDGE_E2E_CONSUMER_ID=$CONSUMER_ID
export VKBRIDGE_E2E_VK_DEPLOYMENT=$TENANT_NS/vk-$SLUG
export VKBRIDGE_E2E_POOL_CONTAINER=$POOL_CLUSTER-control-plane
EOF
log "ready: virtual node $SLUG runs $IMAGE; settings in $ENV_FILE"
