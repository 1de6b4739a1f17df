#!/bin/bash
#SBATCH --job-name=gpt-small
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:8
#SBATCH --exclusive
#SBATCH --time=120
#SBATCH --partition=gpu
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=/fsx/logs/%x-%j.out
#SBATCH --signal=B:USR1@120
# fmstack: 4 node(s) x 8 process(es), 8 GPU(s) per node
set -uo pipefail
export FI_EFA_FORK_SAFE=1
export FI_EFA_USE_DEVICE_RDMA=1
export FI_PROVIDER=efa
export FMSTACK_DP=32
export FMSTACK_PP=1
export FMSTACK_TP=1
export HF_HOME=/fsx/hf
export NCCL_DEBUG=WARN
export NCCL_SOCKET_IFNAME='^lo,docker'
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_ADDR=$(scontrol show node "$HEAD_NODE" | tr " " "\n" | sed -n "s/^NodeAddr=//p")
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export MASTER_ADDR MASTER_PORT
echo "fmstack: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST head $MASTER_ADDR"
# container mounts need their source directories on every node (pyxis/enroot bind mounts)
srun --nodes=4 --ntasks-per-node=1 mkdir -p -- /fsx/ckpt/gpt-small || { echo 'fmstack: cannot create the container mount source(s) /fsx/ckpt/gpt-small' >&2; exit 1; }
# node rank comes from each srun task's own SLURM_NODEID, hence bash -c
stop=""
# time limit in ~120 s (--signal=B:USR1): the steps checkpoint and stop; the job is requeued
trap 'stop=USR1; echo "fmstack: time-limit warning: checkpoint and stop"; scancel --signal=TERM "$SLURM_JOB_ID"' USR1
# fmstack: graceful cancel on USR2 (sent by fmstack cancel to this shell alone): the steps checkpoint and stop, then the job cancels itself
trap 'stop=CANCEL; echo "fmstack: cancel requested: checkpoint and stop"; scancel --signal=TERM "$SLURM_JOB_ID"' USR2
trap 'stop=${stop:-TERM}; echo "fmstack: SIGTERM: waiting for the steps to checkpoint"' TERM
# srun exits 128 + signal once it has killed the other nodes' tasks (--kill-on-bad-exit): the failing task's
# own exit code is in srun's message 'task N: Exited with exit code C', kept here as srun's stderr goes to the log
exec 3>&2
if srun_msgs=$(mktemp -d "${TMPDIR:-/tmp}/fmstack-srun.XXXXXX") && mkfifo "$srun_msgs/stderr"; then
  (trap '' TERM INT; exec awk -v f="$srun_msgs/codes" '{ print; fflush() } / tasks? [0-9,-]+: Exited with exit code [0-9]+$/ { print $NF > f; fflush(f) }' < "$srun_msgs/stderr" >&2) &
  copier_pid=$!
  exec 3> "$srun_msgs/stderr"
fi
srun --kill-on-bad-exit=1 --nodes=4 --ntasks-per-node=1 --container-image=123456789012.dkr.ecr.us-east-1.amazonaws.com/fmstack:0.1 --container-mounts=/fsx/logs:/fsx/logs,/fsx/ckpt/gpt-small:/fsx/ckpt/gpt-small bash -c 'exec python3 -m torch.distributed.run --nnodes=4 --nproc-per-node=8 --node-rank="$SLURM_NODEID" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" -m fmstack.workloads.train --model small --parallel fsdp --precision bf16 --steps 1000 --batch-size 4 --seed 0 --ckpt-dir /fsx/ckpt/gpt-small --ckpt-interval 50 --ckpt-keep 3 --ckpt-durable s3://ckpts/gpt-small' 2>&3 &
srun_pid=$!
exec 3>&-
# wait returns early (status > 128) when a trap runs: wait again until srun has exited
while :; do wait "$srun_pid"; rc=$?; kill -0 "$srun_pid" 2>/dev/null || break; done
if [ -n "${copier_pid:-}" ]; then while kill -0 "$copier_pid" 2>/dev/null; do wait "$copier_pid"; done; fi
task_codes=$(sort -un "${srun_msgs:-/nonexistent}/codes" 2>/dev/null | tr "\n" " ")
[ -n "${srun_msgs:-}" ] && rm -rf "$srun_msgs"
# a cancel's steps have saved and exited: end the job as cancelled (scancel signals this shell: trapped)
if [ "$stop" = CANCEL ]; then
  echo "fmstack: stopped for cancel (exit $rc)"; scancel "$SLURM_JOB_ID"; exit "$rc"
fi
# a run that finished its steps inside the warning exits 0 and is not requeued
if [ "$stop" = USR1 ] && [ "$rc" -ne 0 ]; then
  echo "fmstack: stopped for the time limit (exit $rc); requeue to resume"; scontrol requeue "$SLURM_JOB_ID"; exit 0
fi
# SIGTERM to this shell (scancel, preemption, the time limit): the job is ending, Slurm decides what follows
if [ "$stop" = TERM ]; then
  echo "fmstack: SIGTERM to the batch shell: the job ends here (exit $rc), not requeued"; exit "$rc"
fi
# time-limit requeues (above) are not failures: they do not count against retry.max_restarts
limit_requeues=$(grep -c '^fmstack: stopped for the time limit' /fsx/logs/gpt-small-"$SLURM_JOB_ID".out 2>/dev/null)
failures=$(( ${SLURM_RESTART_COUNT:-0} - ${limit_requeues:-0} ))
for code in 75; do
  case " $rc $task_codes " in *" $code "*)
    if [ "$failures" -lt 3 ]; then
      echo "fmstack: task exit code $code asks for a requeue (srun exited $rc)"; scontrol requeue "$SLURM_JOB_ID"; exit 0
    fi ;;
  esac
done
exit "$rc"
