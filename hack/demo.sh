#!/usr/bin/env bash
# The README's first command: set up what is missing, then run the demo (Ctrl-C stops everything).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
exec "${PYTHON:-python3}" -m e2e.demo "$@"
