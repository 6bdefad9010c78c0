#!/usr/bin/env bash
# The project's test command (the README names it; CI calls it): static checks, then every test.
# Extra arguments go to pytest, e.g. `hack/test.sh -m "not integration"` or `hack/test.sh -k node`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
status=0
step() { echo; echo "== $*"; }

step "setup (installs only what is missing)"
bash hack/setup.sh || { echo "setup failed"; exit 1; }

step "ruff"
ruff check . || status=1
step "mypy (strict on vkbridge/ and reflectors/)"
mypy || status=1
step "import-linter (layers of DESIGN.md section 2)"
lint-imports || status=1

step "pytest"
"${PYTHON:-python3}" -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here"
  rc=1
fi
[ "$rc" -eq 0 ] || status=1

step "leftover processes"
left=$(pgrep -a -f '(\.k8s-bin/|kubebuilder-envtest).*(etcd|kube-apiserver|kube-controller-manager|kube-scheduler)|e2e\.(fakekubelet|emulator)' || true)
if [ -n "$left" ]; then echo "processes left behind:"; echo "$left"; status=1; else echo "none"; fi

echo
if [ "$status" -eq 0 ]; then echo "hack/test.sh: all checks passed"; else echo "hack/test.sh: FAILED"; fi
exit "$status"
