#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Run against the clusters of setup.sh: a smoke test (GUIDE §3.7-3.8: offload a namespace, run
# burst-hello on the pool, read its log through the virtual node), then the resilience scenarios
# (`pytest -m resilience`) with the VKBRIDGE_E2E_* variables of $E2E_DIR/env. Extra arguments go to
# pytest. Exit 2 = not set up (skipped); diagnostics land in $E2E_DIR/diagnostics on failure.
set -euo pipefail
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

require_tools "$KUBECTL" "$LIQOCTL" "$PYTHON"
if [ ! -f "$ENV_FILE" ]; then
  echo "e2e/kind: $ENV_FILE not found: run e2e/kind/setup.sh first" >&2
  exit 2
fi
# shellcheck source=/dev/null
. "$ENV_FILE"
trap diagnose_on_failure EXIT

ns=e2e-smoke
log "smoke: offload namespace $ns"
kc create namespace "$ns" --dry-run=client -o yaml | kc apply -f -
"$LIQOCTL" offload namespace "$ns" --kubeconfig "$CONSUMER_KUBECONFIG" \
  --namespace-mapping-strategy DefaultName --pod-offloading-strategy LocalAndRemote
kc -n "$ns" delete pod burst-hello --ignore-not-found --wait=true
kc apply -f - <<EOF
apiVersion: v1
kind: Pod
metadata: {name: burst-hello, namespace: $ns}
spec:
  tolerations:
  - {key: multicloud.io/pool, operator: Equal, value: "$SLUG", effect: NoSchedule}
  nodeSelector: {multicloud.io/pool: "$SLUG"}
  restartPolicy: Never
  containers:
  - name: hello
    image: busybox:1.36
    command: ["sh", "-c", "echo hello from the pool; uname -n; sleep 30"]
    resources:
      requests: {cpu: 100m, memory: 64Mi}
EOF
kc -n "$ns" wait pod/burst-hello --for=condition=Ready --timeout=5m
node=$(kc -n "$ns" get pod burst-hello -o jsonpath='{.spec.nodeName}')
[ "$node" = "$SLUG" ] || die "burst-hello ran on $node, not on the virtual node $SLUG"
retry_until 60 "the log of burst-hello through the virtual node" \
  sh -c "\"$KUBECTL\" --kubeconfig \"$CONSUMER_KUBECONFIG\" -n $ns logs burst-hello | grep 'hello from the pool' >/dev/null"
log "smoke: passed (pod Running on $SLUG, log read through vkbridge's kubelet API)"
kc -n "$ns" delete pod burst-hello --wait=false

log "resilience scenarios: pytest -m resilience $*"
cd "$REPO_ROOT"
set +e
"$PYTHON" -m pytest -m resilience -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "e2e/kind: no resilience scenario ran (none collected for VKBRIDGE_E2E=kind)" >&2
  exit 1
fi
exit "$rc"
