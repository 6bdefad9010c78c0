#!/usr/bin/env bash
# The project's test command (the README names it; CI calls it): static checks, then every test.
# Extra arguments go to pytest, e.g. `hack/test.sh -m "not integration"` or `hack/test.sh -k node`.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
status=0
step() { echo; echo "== $*"; }

step "setup (installs only what is missing)"
bash hack/setup.sh || { echo "setup failed"; exit 1; }

# What exists before the tests, so the leftover check at the end names only what the run made.
netns_before=$(ip netns list 2>/dev/null | sort || true)
links_before=$(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sort || true)
mounts_before=$(awk '{print $2}' /proc/self/mounts | sort)

step "ruff"
ruff check . || status=1
ruff format --check . || status=1
step "mypy (strict on vkbridge/ and reflectors/)"
mypy || status=1
step "import-linter (layers of DESIGN.md section 2)"
lint-imports || status=1

# One pytest session; exit 5 (nothing collected) is a failure here.
# --durations: the slowest tests of each session in the log, where CI time goes (issue 16).
run_pytest() {
  # In the background and waited for, so a trapped TERM reaches this script while pytest runs.
  "${PYTHON:-python3}" -m pytest --durations=25 --durations-min=5 "$@" &
  wait "$!"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here"
    rc=1
  fi
  [ "$rc" -eq 0 ] || status=1
}

# Ctrl-C or TERM to this script ends the pytest session it runs (in the background, see run_pytest).
trap 'pkill -TERM -P $$; wait; exit 143' TERM INT

if [ "$#" -gt 0 ]; then
  step "pytest $*"
  run_pytest "$@"
else
  # The whole run (CI's) is four pytest sessions in two lanes side by side: their time is waits (outages,
  # certificate expiry, recoveries), not CPU, and each session has its own planes, workers and addresses
  # (e2e/workers/host.py AddressClaim keeps two sessions' testbed networks apart). Lane A (unit,
  # integration, image) streams here; lane B's (resilience, differential) is printed whole when both end.
  lanes=$(mktemp -d)
  (
    status=0
    # The resilience scenarios stop and restart the session's vkbridge and time recoveries: a session of
    # their own.
    step "pytest: resilience scenarios"
    run_pytest tests/resilience -m resilience
    # The same scenarios against Liqo's own VK and vkbridge, differences exactly docs/compatibility.md.
    step "pytest: differential suite (Liqo v1.2's VK as oracle)"
    run_pytest tests/differential -m differential
    echo "$status" >"$lanes/b.rc"
  ) >"$lanes/b.log" 2>&1 &
  lane_b=$!
  # A signal to this script ends both lanes' pytest sessions (their conftest tears the planes down on TERM).
  trap 'pkill -TERM -P "$lane_b"; pkill -TERM -P $$; wait; exit 143' TERM INT
  t0=$SECONDS
  step "pytest: unit and integration (lane A; lane B runs resilience and differential meanwhile)"
  run_pytest
  # Builds the image (hack/image.sh: own dockerd, debootstrap base) and runs it as the pod of deploy/ on
  # a real consumer kubelet; it owns the node's Lease, so it cannot share a session with the others.
  step "pytest: vkbridge from its image as the pod of deploy/"
  run_pytest tests/integration/test_image_as_pod.py -m shipping
  echo "lane A done in $((SECONDS - t0)) s"
  wait "$lane_b"
  trap - TERM INT
  echo "lane B done in $((SECONDS - t0)) s; its log:"
  cat "$lanes/b.log"
  [ "$(cat "$lanes/b.rc" 2>/dev/null)" = 0 ] || status=1
  rm -rf "$lanes"
fi

step "leftovers (processes, network namespaces, mounts the run made)"
# Real workers (e2e/workers): kubelets from the store; containerd and its runc shims name the testbed's
# /tmp/vkbw-* directory in their arguments (a system containerd does not).
left=$(pgrep -a -f '(\.k8s-bin/|kubebuilder-envtest).*(etcd|kube-apiserver|kube-controller-manager|kube-scheduler)|(\.k8s-bin/|kubebuilder-envtest)[^ ]*/kubelet |containerd.*/vkbw-|e2e\.(fakekubelet|emulator)|-m vkbridge ' || true)
if [ -n "$left" ]; then echo "processes left behind:"; echo "$left"; status=1; else echo "processes: none"; fi
netns_after=$(ip netns list 2>/dev/null | sort || true)
new_netns=$(comm -13 <(echo "$netns_before") <(echo "$netns_after") | sed '/^$/d')
if [ -n "$new_netns" ]; then echo "network namespaces left behind:"; echo "$new_netns"; status=1; else echo "network namespaces: none"; fi
links_after=$(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sort || true)
new_links=$(comm -13 <(echo "$links_before") <(echo "$links_after") | sed '/^$/d')
if [ -n "$new_links" ]; then echo "interfaces left behind:"; echo "$new_links"; status=1; else echo "interfaces: none"; fi
mounts_after=$(awk '{print $2}' /proc/self/mounts | sort)
new_mounts=$(comm -13 <(echo "$mounts_before") <(echo "$mounts_after") | sed '/^$/d')
if [ -n "$new_mounts" ]; then echo "mounts left behind:"; echo "$new_mounts"; status=1; else echo "mounts: none"; fi

echo
if [ "$status" -eq 0 ]; then echo "hack/test.sh: all checks passed"; else echo "hack/test.sh: FAILED"; fi
exit "$status"
