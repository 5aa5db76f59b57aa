#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang, ASan and UBSan in build-fuzz (CMake preset
# `fuzz`) and runs each for N seconds (default 60) or until R executions, one at a time, at low priority. A target's
# corpus grows in build-fuzz/corpus/<target> (seeded from tests/fuzz/corpus/<target>); a crash,
# leak or timeout is written as build-fuzz/crash/<target>/crash-* and stops that target: copy it
# into tests/fuzz/corpus/<target>/ once fixed, so the normal suite replays it (docs/fuzzing.md).
#   scripts/fuzz.sh [--seconds N] [--runs R] [--no-build] [TARGET...]     (no TARGET: every target)
# Prints one line per target: executions, executions/s, coverage, and whether it found something.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
runs=-1
build=1
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    --runs) runs="$2"; shift 2 ;;
    --runs=*) runs="${1#*=}"; shift ;;
    --no-build) build=0; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=$(sed -n 's/^set(fuzz_targets \(.*\)/\1/p; s/^  *\([a-z_ ]*\))$/\1/p' tests/fuzz/CMakeLists.txt | tr -s ' \n' ' ')
[ ${#targets[@]} -gt 0 ] || read -r -a targets <<< "$all"
for t in "${targets[@]}"; do
  [[ " $all " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (targets: $all)" >&2; exit 2; }
done
command -v clang++ >/dev/null || { echo "fuzz.sh: needs clang (apt-get install clang libclang-rt-dev libomp-dev)" >&2; exit 2; }

[ -f build-fuzz/CMakeCache.txt ] || cmake --preset fuzz >/dev/null
[ "$build" = 0 ] || flock /tmp/dsbuild.lock nice -n 10 cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null

status=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t crashes=build-fuzz/crash/$t log=build-fuzz/fuzz-$t.log
  mkdir -p "$corpus" "$crashes"
  # -rss_limit_mb: a parser that allocates from a length field it did not check is a finding.
  rc=0
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    nice -n 10 "build-fuzz/tests/fuzz/fuzz_$t" "$corpus" "tests/fuzz/corpus/$t" -max_total_time="$seconds" -runs="$runs" \
      -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix="$crashes/" \
      >"$log" 2>&1 || rc=$?
  executed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    found="nothing found"
  else
    found="FOUND: $(ls -t "$crashes" | head -1) (see $log)"
    status=1
  fi
  printf '%-16s %12s executions %8s/s  %-10s %s\n' "$t" "${executed:-?}" "${speed:-?}" "${cov:-}" "$found"
done
exit $status
