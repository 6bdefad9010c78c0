#!/usr/bin/env bash
# Regenerates requirements/image.txt: every runtime dependency of the image (pyproject.toml's
# `dependencies`, transitively), pinned with the sha256 of every file PyPI serves for that version. The
# Dockerfile installs with --require-hashes from it, so a dependency changes only when this is rerun and
# the diff reviewed. Python 3.11, as in the image. pip-tools runs from a throwaway venv.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d /tmp/vkbridge-lock.XXXXXX)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "pip-tools==7.7.0"
CUSTOM_COMPILE_COMMAND="bash hack/lock.sh" "$venv/bin/pip-compile" --quiet --generate-hashes \
    --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
    --output-file=requirements/image.txt pyproject.toml
echo "requirements/image.txt: $(grep -cE '^[a-z0-9]' requirements/image.txt) packages pinned with hashes"
