#!/usr/bin/env bash
# Configures and builds dsrun with the default CMake preset into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/CMakeCache.txt ] || cmake --preset default >/dev/null
cmake --build --preset default -- -j"$(nproc)"
