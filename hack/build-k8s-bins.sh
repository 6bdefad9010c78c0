#!/usr/bin/env bash
# Build the control-plane binaries the integration tests run (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd) from the Go module proxy, into the setup-envtest layout:
#   <out>/k8s/<X.Y.Z>-linux-amd64/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
# Built at most once per version per machine: the default output is the machine-wide setup-envtest
# store, so every clone (CI's fresh ones too) finds them; a complete directory there or in the project
# cache <repo>/.k8s-bin is reused and the build is skipped.
# Usage: hack/build-k8s-bins.sh [OUT_ROOT]   (default: ${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out_root=${1:-${VKBRIDGE_K8S_BIN:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}}
versions=${K8S_VERSIONS:-"v1.36.3 v1.36.1 v1.37.2 v1.35.4"}
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
bins="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl"

complete() {  # $1 = dir
  for b in $bins; do [ -x "$1/$b" ] || return 1; done
}

for k8s in $versions; do
  for root in "$out_root" "$repo/.k8s-bin"; do
    dir="$root/k8s/${k8s#v}-linux-amd64"
    if complete "$dir"; then
      echo "build-k8s-bins: found complete binaries in $dir; skipping the build"
      exit 0
    fi
  done
done

log_root="$out_root/logs"; mkdir -p "$log_root"
for k8s in $versions; do
  minor=${k8s#v1.}; minor=${minor%%.*}
  stg="v0.${k8s#v1.}"
  case "$minor" in 37) etcd_v=v3.7.3 ;; *) etcd_v=v3.6.16 ;; esac
  dir="$out_root/k8s/${k8s#v}-linux-amd64"
  work="$out_root/work/$k8s"; mkdir -p "$work/k8s" "$work/etcd" "$dir"
  log="$log_root/build-$k8s.log"
  echo "build-k8s-bins: building Kubernetes $k8s (staging $stg) and etcd $etcd_v; log: $log"
  start=$(date +%s)
  if (
    set -euo pipefail
    cd "$work/k8s"
    rm -f go.mod go.sum
    go mod init example.invalid/k8s-test-bins >/dev/null 2>&1
    gomod=$(go mod download -json "k8s.io/kubernetes@$k8s" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
    goline=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod" | head -1)
    go mod edit -go="$goline"
    go mod edit -require="k8s.io/kubernetes@$k8s"
    # shellcheck disable=SC2013  # module paths hold no spaces
    for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/k8s\.io/.*#\1#p' "$gomod"); do
      go mod edit -replace="$m=$m@$stg"
    done
    echo "== staging replaces: $(grep -c '=> k8s.io' go.mod)"
    printf 'package tools\n\nimport (\n\t_ "k8s.io/kubernetes/cmd/kube-apiserver"\n\t_ "k8s.io/kubernetes/cmd/kube-controller-manager"\n\t_ "k8s.io/kubernetes/cmd/kube-scheduler"\n\t_ "k8s.io/kubernetes/cmd/kubectl"\n)\n' > tools.go
    sed -i '1i //go:build tools\n' tools.go
    echo "== go mod tidy"; go mod tidy
    ldf="-s -w -X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ) -X k8s.io/client-go/pkg/version.gitVersion=$k8s -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
    echo "== go build (this takes a while on a cold cache)"
    go build -p "$(nproc)" -trimpath -tags=selinux,notest -ldflags="$ldf" -o "$dir/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
    cd "$work/etcd"
    rm -f go.mod go.sum
    go mod init example.invalid/etcd-bin >/dev/null 2>&1
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go get "go.etcd.io/etcd/server/v3@$etcd_v"
    go mod tidy
    echo "== etcd build"
    go build -trimpath -ldflags="-s -w" -o "$dir/etcd" go.etcd.io/etcd/server/v3
    "$dir/kube-apiserver" --version
    "$dir/etcd" --version | head -1
  ) >"$log" 2>&1; then
    echo "build-k8s-bins: Kubernetes $k8s built in $(( $(date +%s) - start )) s into $dir"
    tail -2 "$log"
    exit 0
  fi
  echo "build-k8s-bins: Kubernetes $k8s FAILED after $(( $(date +%s) - start )) s; last lines:" >&2
  tail -20 "$log" >&2
  rm -rf "$dir"
done
echo "build-k8s-bins: no version built" >&2
exit 1
