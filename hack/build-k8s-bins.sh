#!/usr/bin/env bash
# Build the control-plane binaries the integration tests run (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd) from the Go module proxy, into the setup-envtest layout:
#   <out>/k8s/<X.Y.Z>-linux-amd64/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubectl}
# Built at most once per version per machine: the default output is the machine-wide setup-envtest
# store, so every clone (CI's fresh ones too) finds them; a complete directory there or in the project
# cache <repo>/.k8s-bin is reused and the build is skipped.
# Only the pinned version (hack/versions.env) is built: the tests run on what the project pins. K8S_VERSIONS
# may list others to try after it; falling back to one of them is said loudly, with the reason.
# A build whose binaries are complete and answer their version is kept even when a later step fails; the
# step that failed is named either way.
# Usage: hack/build-k8s-bins.sh [OUT_ROOT]   (default: ${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib/build.sh
. "$here/lib/build.sh"
out_root=${1:-${VKBRIDGE_K8S_BIN:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}}
versions=${K8S_VERSIONS:-$K8S_VERSION}
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
bins="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl"
# The real workers' kubelet (e2e/workers) comes from the same module, into the same directory.
# VKBRIDGE_BUILD_KUBELET=0 leaves it out (fake workers only).
worker_bins="kubelet"; [ "${VKBRIDGE_BUILD_KUBELET:-1}" = 0 ] && worker_bins=""
k8s_cmds="kube-apiserver kube-controller-manager kube-scheduler kubectl $worker_bins"

has() {  # $1 = dir, then binary names
  local d=$1; shift
  for b in "$@"; do [ -x "$d/$b" ] || return 1; done
}

# The wrapper module for $1 (k8s version) in the current directory: staging replaces, tools.go, tidy.
k8s_module() {
  local k8s=$1 stg="v0.${1#v1.}" gomod goline m c
  rm -f go.mod go.sum
  go mod init example.invalid/k8s-test-bins >/dev/null 2>&1
  gomod=$(go mod download -json "k8s.io/kubernetes@$k8s" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
  goline=$(sed -n 's/^go \([0-9.]*\).*/\1/p;T;q' "$gomod")
  go mod edit -go="$goline"
  go mod edit -require="k8s.io/kubernetes@$k8s"
  # shellcheck disable=SC2013  # module paths hold no spaces
  for m in $(sed -n 's#^[[:space:]]*\(k8s\.io/[^ ]*\) => \./staging/src/k8s\.io/.*#\1#p' "$gomod"); do
    go mod edit -replace="$m=$m@$stg"
  done
  echo "== staging replaces: $(grep -c '=> k8s.io' go.mod)"
  { printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for c in $k8s_cmds; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'; } > tools.go
  echo "== go mod tidy"; go mod tidy
}

# go build $3.. (cmd names) of Kubernetes $1 into directory $2, with upstream's version ldflags.
k8s_build() {
  local k8s=$1 dir=$2 minor ldf c pkgs=(); shift 2
  minor=${k8s#v1.}; minor=${minor%%.*}
  ldf="-s -w -X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ) -X k8s.io/client-go/pkg/version.gitVersion=$k8s -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  for c in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  echo "== go build $* (this takes a while on a cold cache)"
  go build -p "$(nproc)" -trimpath -tags=selinux,notest -ldflags="$ldf" -o "$dir/" "${pkgs[@]}"
}

for k8s in $versions; do
  for root in "$out_root" "$repo/.k8s-bin"; do
    dir="$root/k8s/${k8s#v}-linux-amd64"
    # shellcheck disable=SC2086  # word lists on purpose
    if has "$dir" $bins $worker_bins; then
      echo "build-k8s-bins: found complete binaries of Kubernetes $k8s in $dir; skipping the build"
      [ "$k8s" = "$K8S_VERSION" ] || echo "build-k8s-bins: WARNING: Kubernetes $k8s is not the pinned $K8S_VERSION" >&2
      exit 0
    fi
    # shellcheck disable=SC2086
    if has "$dir" $bins; then
      # The control plane is there and only the kubelet is missing: add it from the same module.
      log="$root/logs/build-$k8s-kubelet.log"; mkdir -p "$root/logs" "$root/work/$k8s/k8s"
      echo "build-k8s-bins: control plane found in $dir; building the kubelet ($k8s) into it; log: $log"
      start=$(date +%s)
      # set -e is ignored inside a subshell that is an `if` condition: run it as a command, then test $?.
      set +e
      # shellcheck disable=SC2086
      (set -euo pipefail; cd "$root/work/$k8s/k8s"; k8s_module "$k8s"; k8s_build "$k8s" "$dir" $worker_bins
          echo "== kubelet version"; version_line "$dir/kubelet") >"$log" 2>&1
      rc=$?; set -e
      if [ "$rc" -eq 0 ]; then
        echo "build-k8s-bins: kubelet $k8s built in $(( $(date +%s) - start )) s into $dir"
        exit 0
      fi
      echo "build-k8s-bins: kubelet $k8s FAILED after $(( $(date +%s) - start )) s in step \"$(last_step "$log")\"; last lines:" >&2
      tail -20 "$log" >&2
      exit 1
    fi
  done
done

log_root="$out_root/logs"; mkdir -p "$log_root"
why=""
for k8s in $versions; do
  minor=${k8s#v1.}; minor=${minor%%.*}
  stg="v0.${k8s#v1.}"
  case "$minor" in 37) etcd_v=v3.7.3 ;; *) etcd_v=$ETCD_VERSION ;; esac
  dir="$out_root/k8s/${k8s#v}-linux-amd64"
  work="$out_root/work/$k8s"; mkdir -p "$work/k8s" "$work/etcd" "$dir"
  log="$log_root/build-$k8s.log"
  if [ "$k8s" != "$K8S_VERSION" ]; then
    echo "build-k8s-bins: WARNING: falling back to Kubernetes $k8s instead of the pinned $K8S_VERSION ($why);" \
      "the tests will run on $k8s" >&2
  fi
  echo "build-k8s-bins: building Kubernetes $k8s (staging $stg) and etcd $etcd_v; log: $log"
  start=$(date +%s)
  # set -e is ignored inside a subshell that is an `if` condition: run it as a command, then test $?.
  set +e
  (
    set -euo pipefail
    cd "$work/k8s"
    echo "== module"
    k8s_module "$k8s"
    # shellcheck disable=SC2086  # a word list on purpose
    k8s_build "$k8s" "$dir" $k8s_cmds
    cd "$work/etcd"
    echo "== etcd module"
    rm -f go.mod go.sum
    go mod init example.invalid/etcd-bin >/dev/null 2>&1
    printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
    go get "go.etcd.io/etcd/server/v3@$etcd_v"
    go mod tidy
    echo "== etcd build"
    go build -trimpath -ldflags="-s -w" -o "$dir/etcd" go.etcd.io/etcd/server/v3
    echo "== versions"
    # shellcheck disable=SC2086  # a word list on purpose
    binaries_answer "$dir" $bins $worker_bins
  ) >"$log" 2>&1
  rc=$?; set -e
  took=$(( $(date +%s) - start ))
  if [ "$rc" -eq 0 ]; then
    echo "build-k8s-bins: Kubernetes $k8s built in $took s into $dir:"
    sed -n '/^== versions$/,$p' "$log" | sed '1d; s/^/  /'
    exit 0
  fi
  step=$(last_step "$log")
  # shellcheck disable=SC2086  # a word list on purpose
  if answers=$(binaries_answer "$dir" $bins $worker_bins 2>&1); then
    echo "build-k8s-bins: Kubernetes $k8s: step \"$step\" failed (status $rc) after $took s, but every binary" \
      "is complete and answers its version: keeping them in $dir:" >&2
    printf '%s\n' "$answers" | sed 's/^/  /' >&2
    exit 0
  fi
  echo "build-k8s-bins: Kubernetes $k8s FAILED after $took s in step \"$step\" (status $rc); last lines of $log:" >&2
  tail -20 "$log" >&2
  rm -rf "$dir"
  why="Kubernetes $k8s failed in step \"$step\""
done
echo "build-k8s-bins: no version built ($why)" >&2
exit 1
