# Helpers the build scripts source (bash; no side effects on load).
# shellcheck shell=bash

# The pinned versions: one place, read by the build scripts and by e2e/binaries.py (VERSION=value lines).
here_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/versions.env
. "$here_lib/../versions.env"

# First line of `$1 --version` (or of `$@` when more words are given); the program's status is returned.
# The program's whole output is read before anything is cut: a pipe into `head -1` ends while the
# program may still write (etcd writes its version in four writes), the program dies of SIGPIPE and,
# under pipefail, the step fails with status 141 although the binary is fine (issue 41).
version_line() {
  local out rc=0
  if [ "$#" -eq 1 ]; then out=$("$1" --version 2>&1) || rc=$?; else out=$("$@" 2>&1) || rc=$?; fi
  printf '%s\n' "${out%%$'\n'*}"
  return "$rc"
}

# Every named binary in directory $1 answers its version step; prints "name: first line" for each.
binaries_answer() {
  local d=$1 b; shift
  for b in "$@"; do
    [ -x "$d/$b" ] || { echo "$b: missing"; return 1; }
    printf '%s: ' "$b"
    if [ "$b" = kubectl ]; then version_line "$d/$b" version --client || return 1  # kubectl has no --version
    else version_line "$d/$b" || return 1; fi
  done
}

# The step a build log stopped in: its last "== " marker line (the build scripts print one per step).
last_step() {
  local line step=""
  while IFS= read -r line; do case "$line" in "== "*) step=${line#== } ;; esac; done < "$1"
  printf '%s\n' "${step:-(before the first step)}"
}
