#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Delete the two kind clusters of setup.sh (and with --purge, $E2E_DIR: kubeconfigs, env, diagnostics).
# Deleting the clusters removes Liqo and the peering with them: nothing else is left on the machine.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

require_tools "$KIND"
for cluster in "$CONSUMER_CLUSTER" "$POOL_CLUSTER"; do
  if grep -qx "$cluster" <<<"$("$KIND" get clusters 2>/dev/null)"; then
    log "deleting kind cluster $cluster"
    "$KIND" delete cluster --name "$cluster"
  else
    log "kind cluster $cluster does not exist"
  fi
done
rm -f "$ENV_FILE"
if [ "${1:-}" = "--purge" ]; then
  log "removing $E2E_DIR"
  rm -rf "$E2E_DIR"
fi
