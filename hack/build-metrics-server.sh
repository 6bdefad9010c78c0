#!/usr/bin/env bash
# Build metrics-server (sigs.k8s.io/metrics-server) from the Go module proxy into the same store as the
# control plane (hack/build-k8s-bins.sh), so e2e/binaries.py finds it by the same lookup order:
#   <out>/k8s/<X.Y.Z>-linux-amd64/metrics-server   (every complete version directory there gets a copy)
# Built at most once per machine: an executable metrics-server in the newest version directory (or the
# project cache <repo>/.k8s-bin) is reused and the build is skipped.
# Usage: hack/build-metrics-server.sh [OUT_ROOT]   (default: ${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out_root=${1:-${VKBRIDGE_K8S_BIN:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}}
# shellcheck source=hack/lib/build.sh
. "$here/lib/build.sh"
ms_v=${METRICS_SERVER_VERSION}
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

dirs=()
for root in "$out_root" "$repo/.k8s-bin"; do
  for d in "$root"/k8s/*-linux-amd64; do
    [ -x "$d/kube-apiserver" ] || continue
    if [ -x "$d/metrics-server" ]; then
      echo "build-metrics-server: found $d/metrics-server; skipping the build"; exit 0
    fi
    dirs+=("$d")
  done
done
if [ ${#dirs[@]} = 0 ]; then
  echo "build-metrics-server: no control-plane directory under $out_root/k8s; run hack/build-k8s-bins.sh first" >&2
  exit 1
fi
work="$out_root/work/metrics-server-$ms_v"; log="$out_root/logs/build-metrics-server-$ms_v.log"
mkdir -p "$work" "$out_root/logs"
echo "build-metrics-server: building metrics-server $ms_v; log: $log"
start=$(date +%s)
# set -e is ignored inside a subshell that is an `if` condition: run it as a command, then test $?.
set +e
(
  set -euo pipefail
  cd "$work"
  rm -f go.mod go.sum
  go mod init example.invalid/metrics-server-bin >/dev/null 2>&1
  go get "sigs.k8s.io/metrics-server@$ms_v"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/metrics-server/cmd/metrics-server"\n' > tools.go
  go mod tidy
  go build -trimpath -ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$ms_v" \
    -o "$work/metrics-server" sigs.k8s.io/metrics-server/cmd/metrics-server
  "$work/metrics-server" --version
) >"$log" 2>&1
rc=$?; set -e
if [ "$rc" -eq 0 ]; then
  for d in "${dirs[@]}"; do cp "$work/metrics-server" "$d/metrics-server.tmp" && mv "$d/metrics-server.tmp" "$d/metrics-server"; done
  echo "build-metrics-server: metrics-server $ms_v built in $(( $(date +%s) - start )) s into ${dirs[*]}"
  exit 0
fi
echo "build-metrics-server: metrics-server $ms_v FAILED after $(( $(date +%s) - start )) s; last lines:" >&2
tail -20 "$log" >&2
exit 1
