#!/usr/bin/env bash
# Bring Liqo's Helm chart at the pinned version (hack/versions.env) into the machine-wide store beside the
# binaries, from Liqo's Go module (its zip holds the chart, its 28 CRDs and its ClusterRoles):
#   <out>/liqo/<version>-chart/{Chart.yaml,values.yaml,charts/liqo-crds/crds/,files/,templates/}
# The test planes install the CRDs from there and the testbed reads the ClusterRoles from there: the repo
# keeps no copy of Liqo's files and reads nothing beside itself. Done once per machine (a few seconds):
# a complete copy in the store or in <repo>/.k8s-bin is reused.
# Usage: hack/fetch-liqo-chart.sh [OUT_ROOT]   (default: ${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=hack/lib/build.sh
. "$here/lib/build.sh"
out_root=${1:-${VKBRIDGE_K8S_BIN:-${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest}}
version=${LIQO_VERSION}
module=github.com/liqotech/liqo
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false

complete() { [ -f "$1/Chart.yaml" ] && [ -d "$1/charts/liqo-crds/crds" ] && [ -d "$1/files" ]; }

for root in "$out_root" "$repo/.k8s-bin"; do
  if complete "$root/liqo/$version-chart"; then
    echo "fetch-liqo-chart: found Liqo $version's chart in $root/liqo/$version-chart; skipping"
    exit 0
  fi
done

dir="$out_root/liqo/$version-chart"
mkdir -p "$out_root/liqo"
start=$(date +%s)
echo "fetch-liqo-chart: go mod download $module@$version (the chart, CRDs and ClusterRoles are in its zip)"
info=$(go mod download -json "$module@$version") || { echo "fetch-liqo-chart: go mod download failed:" >&2; printf '%s\n' "$info" >&2; exit 1; }
src=$(printf '%s' "$info" | python3 -c 'import json,sys;d=json.load(sys.stdin);print(d.get("Dir") or "")')
if [ -z "$src" ] || ! complete "$src/deployments/liqo"; then
  echo "fetch-liqo-chart: no chart at deployments/liqo in the module ($src)" >&2
  exit 1
fi
tmp=$(mktemp -d "$out_root/liqo/.chart.XXXXXX")
cp -r "$src/deployments/liqo/." "$tmp/"
chmod -R u+w "$tmp"
rm -rf "$dir"; mv "$tmp" "$dir"
echo "fetch-liqo-chart: Liqo $version's chart in $dir in $(( $(date +%s) - start )) s" \
  "($(find "$dir/charts/liqo-crds/crds" -name '*.yaml' | wc -l) CRDs, $(find "$dir/files" -name '*.yaml' | wc -l) RBAC files)"
