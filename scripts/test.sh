#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test with CTest; then
# builds the unit tests' programs in the `asan` preset (AddressSanitizer + UndefinedBehaviorSanitizer,
# build-asan; target unit_test_programs) and runs the unit tests again under it (`ctest --preset asan`: label unit, not slow).
# Extra arguments go to the first ctest, e.g. `scripts/test.sh -L unit` or `scripts/test.sh -LE slow`;
# with arguments the sanitizer pass is skipped unless DS_TEST_ASAN=1 (DS_TEST_ASAN=0 always skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --tests
scripts/test-venv.sh
scripts/build.sh
ctest --preset default "$@"
asan="${DS_TEST_ASAN:-$([ $# -eq 0 ] && echo 1 || echo 0)}"
if [ "$asan" = 1 ]; then
  start=$SECONDS
  [ -f build-asan/CMakeCache.txt ] || cmake --preset asan >/dev/null
  cmake --build --preset asan --target unit_test_programs -- -j"$(nproc)"  # (only what the unit tests run)
  ctest --preset asan -j"$(nproc)"
  echo "test.sh: the sanitizer pass took $((SECONDS - start)) s"
fi
