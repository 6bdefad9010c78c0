#!/usr/bin/env bash
# Build Liqo v1.2.0's virtual kubelet (cmd/virtual-kubelet), the differential suite's oracle, from the Go
# module proxy into the machine-wide store beside the control-plane binaries:
#   <out>/liqo/v1.2.0-linux-amd64/virtual-kubelet
# Nothing of Liqo's code enters the repo: the exact module version is downloaded into the Go module cache
# (the proxy refuses the version list, so the version is pinned), copied to a scratch work tree under the
# store (Liqo's go.mod has its own replace lines, so it must build as the main module) and built there.
# Built once per machine: an executable already in the store or in <repo>/.k8s-bin is reused.
# Usage: hack/build-liqo-vk.sh [OUT_ROOT]   (default: ${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out_root=${1:-${VKBRIDGE_K8S_BIN:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}}
# shellcheck source=hack/lib/build.sh
. "$here/lib/build.sh"
version=${LIQO_VERSION}
module=github.com/liqotech/liqo
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0

for root in "$out_root" "$repo/.k8s-bin"; do
  bin="$root/liqo/$version-linux-amd64/virtual-kubelet"
  if [ -x "$bin" ]; then
    echo "build-liqo-vk: found $bin; skipping the build"
    exit 0
  fi
done

dir="$out_root/liqo/$version-linux-amd64"
work="$out_root/work/liqo-$version"
log="$out_root/logs/build-liqo-$version.log"
mkdir -p "$out_root/logs" "$dir"
echo "build-liqo-vk: building Liqo $version cmd/virtual-kubelet into $dir; log: $log"
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
  echo "== go build ./cmd/virtual-kubelet (a few minutes on a cold cache)"
  go build -p "$(nproc)" -trimpath -ldflags="-s -w" -o "$dir/virtual-kubelet.tmp" ./cmd/virtual-kubelet
  mv "$dir/virtual-kubelet.tmp" "$dir/virtual-kubelet"
  ls -l "$dir/virtual-kubelet"
) > >(tee "$log" | sed -u 's/^/build-liqo-vk: /') 2>&1
rc=$?; set -e
if [ "$rc" -eq 0 ]; then
  rm -rf "$work"
  echo "build-liqo-vk: Liqo $version virtual-kubelet built in $(( $(date +%s) - start )) s into $dir"
  exit 0
fi
echo "build-liqo-vk: Liqo $version FAILED after $(( $(date +%s) - start )) s; last lines of $log:" >&2
tail -20 "$log" >&2
rm -f "$dir/virtual-kubelet.tmp"
exit 1
