#!/usr/bin/env bash
# A tour of the launcher: installs dependencies, builds, and runs dsrun with plain programs.
# Two ranks on this machine,
# then four ranks on two SSH "hosts" (127.0.0.1, 127.0.0.2) served by a throwaway OpenSSH server,
# each rank reporting its rank environment; finally a rank failure and the teardown it triggers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh >/dev/null
DSRUN="$PWD/build/cli/dsrun"
report='echo "rank $RANK/$WORLD_SIZE local $LOCAL_RANK/$LOCAL_SIZE node $CROSS_RANK/$CROSS_SIZE CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES master $MASTER_ADDR:$MASTER_PORT pid $$"'

echo "== 1. two ranks on this machine (local transport)"
DSRUN_LOCAL_SLOTS=2 "$DSRUN" sh -c "$report"

work=$(mktemp -d)
trap 'kill "$sshd_pid" 2>/dev/null; wait "$sshd_pid" 2>/dev/null; rm -rf "$work"' EXIT
/usr/bin/python3 scripts/throwaway_sshd.py --hosts 2 --dir "$work/sshd" >"$work/sshd.out" &
sshd_pid=$!
for _ in $(seq 100); do grep -q port= "$work/sshd.out" 2>/dev/null && break; sleep 0.1; done
eval "$(tr ' ' '\n' <"$work/sshd.out" | grep -E '^(port|identity|known_hosts)=')"
printf '127.0.0.1 slots=2\n127.0.0.2 slots=2\n' >"$work/hostfile"
ssh_flags=(-H "$work/hostfile" --ssh_port "$port" --ssh_identity "$identity" --ssh_known_hosts "$known_hosts")

echo; echo "== 2. the plan for two hosts (--dry_run)"
"$DSRUN" "${ssh_flags[@]}" --dry_run sh -c "$report"

echo; echo "== 3. four ranks on two SSH hosts"
"$DSRUN" "${ssh_flags[@]}" sh -c "$report"' on $(echo $SSH_CONNECTION | cut -d" " -f3)'

echo; echo "== 4. rank 2 fails: every rank on every host is stopped, dsrun exits with its code"
set +e
"$DSRUN" "${ssh_flags[@]}" sh -c 'if [ "$RANK" = 2 ]; then sleep 1; echo "rank 2 giving up"; exit 3; fi; exec sleep 600'
echo "dsrun exit status: $? (rank 2 exited with 3)"
