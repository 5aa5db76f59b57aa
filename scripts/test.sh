#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test with CTest.
# Extra arguments go to ctest, e.g. `scripts/test.sh -L unit` or `scripts/test.sh -LE slow`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
scripts/test-venv.sh
scripts/build.sh
ctest --preset default "$@"
