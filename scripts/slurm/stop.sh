#!/usr/bin/env bash
# Stop what start.sh started, by the PIDs in its PID files: every slurmd, then slurmctld, then munged
# (KEEP_MUNGE=1 keeps munged). TERM first; KILL after 10 s (a slurmd retrying registration ignores TERM).
set -u
RUN=/run/fmstack-slurm
alive() {  # running and not a zombie: daemons double-fork and reaping can lag
  [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
stop_pidfiles() {
  local f pid pids=()
  for f in "$@"; do
    [ -s "$f" ] || continue
    pid=$(cat "$f")
    if alive "$pid"; then kill "$pid" 2>/dev/null; pids+=("$pid"); fi
    rm -f "$f"
  done
  [ ${#pids[@]} -eq 0 ] && return 0
  for _ in $(seq 100); do
    local left=0
    for pid in "${pids[@]}"; do alive "$pid" && left=1; done
    [ $left = 0 ] && return 0
    sleep 0.1
  done
  for pid in "${pids[@]}"; do alive "$pid" && kill -9 "$pid" 2>/dev/null; done
  return 0
}
stop_pidfiles "$RUN"/slurmd-*.pid
stop_pidfiles "$RUN/slurmctld.pid"
if [ "${KEEP_MUNGE:-0}" != 1 ] && [ -s "$RUN/munged.pid" ]; then
  stop_pidfiles "$RUN/munged.pid"
  rm -f /run/munge/munged.pid
fi
exit 0
