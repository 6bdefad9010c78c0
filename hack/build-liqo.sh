#!/usr/bin/env bash
# Build Liqo's own components at the pinned version (hack/versions.env) from the Go module proxy into the
# machine-wide store beside the control-plane binaries:
#   <out>/liqo/<version>-linux-amd64/{virtual-kubelet,liqo-controller-manager,webhook,crd-replicator}
# The virtual kubelet is the differential suite's oracle and rival; the controller-manager, webhook and
# crd-replicator are the Liqo control plane the testbed runs around a virtual kubelet (issue 34).
# Nothing of Liqo's code enters the repo: the exact module version is downloaded into the Go module cache
# (the proxy refuses the version list, so the version is pinned), copied to a scratch work tree under the
# store (Liqo's go.mod has its own replace lines, so it must build as the main module) and built there, all
# four in one `go build` (they share most packages: about 85 s more than the VK alone, cold).
# Built once per machine: what is already in the store or in <repo>/.k8s-bin is reused; only missing
# binaries are built.
# Usage: hack/build-liqo.sh [OUT_ROOT]   (default: ${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib/build.sh
. "$here/lib/build.sh"
out_root=${1:-${VKBRIDGE_K8S_BIN:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}}
version=${LIQO_VERSION}
module=github.com/liqotech/liqo
cmds="virtual-kubelet liqo-controller-manager webhook crd-replicator"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

for root in "$out_root" "$repo/.k8s-bin"; do
  d="$root/liqo/$version-linux-amd64"
  all=1
  for c in $cmds; do [ -x "$d/$c" ] || all=0; done
  if [ "$all" = 1 ]; then
    echo "build-liqo: found Liqo $version's $cmds in $d; skipping the build"
    exit 0
  fi
done

dir="$out_root/liqo/$version-linux-amd64"
missing=""
for c in $cmds; do [ -x "$dir/$c" ] || missing="$missing $c"; done
work="$out_root/work/liqo-$version"
log="$out_root/logs/build-liqo-$version.log"
mkdir -p "$out_root/logs" "$dir"
echo "build-liqo: building Liqo $version:$missing into $dir; log: $log"
start=$(date +%s)
# set -e is ignored inside a subshell that is an `if` condition: run it as a command, then test $?.
set +e
(
  set -euo pipefail
  echo "== go mod download $module@$version"
  src=$(go mod download -json "$module@$version" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  echo "== module tree $src"
  rm -rf "$work"; mkdir -p "$work"
  cp -r "$src/." "$work/"; chmod -R u+w "$work"
  cd "$work"
  echo "== go mod download (dependencies)"
  go mod download
  pkgs=()
  for c in $missing; do pkgs+=("./cmd/$c"); done
  echo "== go build ${pkgs[*]} (a few minutes on a cold cache)"
  rm -rf "$dir/.tmp"; mkdir -p "$dir/.tmp"
  go build -p "$(nproc)" -trimpath -ldflags="-s -w" -o "$dir/.tmp/" "${pkgs[@]}"
  for c in $missing; do mv "$dir/.tmp/$c" "$dir/$c"; done
  rmdir "$dir/.tmp"
  echo "== built"
  for c in $missing; do ls -l "$dir/$c"; done
) > >(tee "$log" | sed -u 's/^/build-liqo: /') 2>&1
rc=$?; set -e
if [ "$rc" -eq 0 ]; then
  rm -rf "$work"
  echo "build-liqo: Liqo $version:$missing built in $(( $(date +%s) - start )) s into $dir"
  exit 0
fi
echo "build-liqo: Liqo $version FAILED after $(( $(date +%s) - start )) s in step \"$(last_step "$log")\"; last lines of $log:" >&2
tail -20 "$log" >&2
rm -rf "$dir/.tmp"
exit 1
