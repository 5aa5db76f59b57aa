#!/bin/sh
# The rank program of bench/launch/run.py: the same POSIX shell script for every launcher.
#
#   probe.sh exit     DIR                          record the start time, exit 0
#   probe.sh teardown DIR SLEEP FAIL_RANK WORLD    record the start time, then:
#       rank FAIL_RANK waits until WORLD start files exist, records its time in DIR/fail and exits 1;
#       every other rank sleeps SLEEP seconds and, if it was not killed by then, records DIR/end/RANK and exits 0.
#
# The start record DIR/start/RANK is "<CLOCK_REALTIME ns> <pid>", taken with `date +%s%N` as the first thing the
# script does. RANK comes from the launcher's environment (OMPI_COMM_WORLD_RANK under DeepSpeed's OpenMPI runner,
# which sets no RANK). DSRUN_BENCH_TAG=DIR is exported so that run.py can find
# every process of the job (the `sleep` too) through /proc/PID/environ, even after the launcher lost track of it.
t=$(date +%s%N)
mode=$1
dir=$2
export DSRUN_BENCH_TAG="$dir"
rank=${RANK:-${OMPI_COMM_WORLD_RANK:?probe.sh: neither RANK nor OMPI_COMM_WORLD_RANK is set}}
printf '%s %s\n' "$t" "$$" > "$dir/start/$rank"
case "$mode" in
exit)
    exit 0
    ;;
teardown)
    sleep_s=$3
    fail_rank=$4
    world=$5
    if [ "$rank" = "$fail_rank" ]; then
        # Bounded wait (at most SLEEP seconds) for all ranks to be running.
        i=0
        while [ "$(ls "$dir/start" | wc -l)" -lt "$world" ] && [ "$i" -lt "$((sleep_s * 100))" ]; do
            sleep 0.01
            i=$((i + 1))
        done
        printf '%s %s\n' "$(date +%s%N)" "$$" > "$dir/fail"
        exit 1
    fi
    sleep "$sleep_s"
    printf '%s %s\n' "$(date +%s%N)" "$$" > "$dir/end/$rank"
    exit 0
    ;;
*)
    echo "probe.sh: unknown mode '$mode'" >&2
    exit 2
    ;;
esac
