#!/usr/bin/env bash
# Start fmstack's 4-node Slurm test cluster on this host (no systemd): munged, slurmctld, slurmd -N n1..n4.
# Run as root. Installs Debian's slurmctld/slurmd/slurm-client/munge if missing. Stop it with stop.sh (by PID).
# Env: SLURM_NODES (default "n1 n2 n3 n4"; must be nodes of slurm.conf).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NODES="${SLURM_NODES:-n1 n2 n3 n4}"
RUN=/run/fmstack-slurm
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
fi
install -d /etc/slurm "$RUN" "$RUN/gpu" /var/spool/fmstack-slurm/ctld /var/log/fmstack-slurm
install -m 0644 "$HERE/slurm.conf" "$HERE/gres.conf" /etc/slurm/

if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 0755 /run/munge
if ! { [ -s /run/munge/munged.pid ] && kill -0 "$(cat /run/munge/munged.pid)" 2>/dev/null; }; then
  runuser -u munge -- /usr/sbin/munged
  cp /run/munge/munged.pid "$RUN/munged.pid" 2>/dev/null || true
fi
for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done

for i in 0 1 2 3 4 5 6 7; do
  [ -e "$RUN/gpu/gpu$i" ] || mknod "$RUN/gpu/gpu$i" c 1 3 || touch "$RUN/gpu/gpu$i"
done

# controller first, with fresh state (-c); a slurmd without a controller retries for minutes
slurmctld -c
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
scontrol ping | grep -q UP || { tail -20 /var/log/fmstack-slurm/slurmctld.log >&2; exit 1; }

for n in $NODES; do
  install -d "/var/spool/fmstack-slurm/$n"
  slurmd -N "$n"
done
want=$(echo $NODES | wc -w)
for _ in $(seq 150); do
  [ "$(sinfo -h -t idle -o '%D' 2>/dev/null)" = "$want" ] && break; sleep 0.2
done
if [ "$(sinfo -h -t idle -o '%D')" != "$want" ]; then
  sinfo -N -R >&2; tail -5 /var/log/fmstack-slurm/slurmd-*.log >&2; exit 1
fi
sinfo -N -h -o '%N %T %c %G'
