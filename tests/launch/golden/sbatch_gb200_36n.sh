#!/bin/bash
#SBATCH --job-name=gpt-gb
#SBATCH --nodes=36
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
#SBATCH --exclusive
#SBATCH --time=120
#SBATCH --partition=gpu
#SBATCH --segment=18
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=/fsx/logs/%x-%j.out
#SBATCH --signal=B:USR1@120
# fmstack: 36 node(s) x 4 process(es), 4 GPU(s) per node
# fmstack: multi-node NVLink (p6e-gb200.36xlarge: NVLink domains of 72 GPUs, 18 nodes). GPUs on different nodes
#   use NVLink only through NVIDIA IMEX, which this script cannot set up (it runs as the user, on one node).
#   The cluster's Prolog must, on every node of the job, before it starts: write the job's node addresses
#   (scontrol show hostnames $SLURM_JOB_NODELIST -> NodeAddr, one per line) to nvidia-imex's
#   nodes_config.cfg (IMEX_NODE_CONFIG_FILE), restart nvidia-imex and wait until it is ready; and the job
#   needs an IMEX channel, /dev/nvidia-caps-imex-channels/channel0 (Slurm switch/nvidia_imex allocates one).
#   Without them NCCL has no NVLink between nodes. See docs/launch.md, GB200 / GB300 on Slurm.
set -uo pipefail
export FI_EFA_FORK_SAFE=1
export FI_EFA_USE_DEVICE_RDMA=1
export FI_PROVIDER=efa
export NCCL_DEBUG=WARN
export NCCL_MNNVL_ENABLE=1
export NCCL_NVLS_ENABLE=1
export NCCL_SOCKET_IFNAME='^lo,docker'
export TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120
HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
MASTER_ADDR=$(scontrol show node "$HEAD_NODE" | tr " " "\n" | sed -n "s/^NodeAddr=//p")
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))
export MASTER_ADDR MASTER_PORT
echo "fmstack: job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0} on $SLURM_JOB_NODELIST head $MASTER_ADDR"
# container mounts need their source directories on every node (pyxis/enroot bind mounts)
srun --nodes=36 --ntasks-per-node=1 mkdir -p -- /fsx/ckpt/gpt-gb || { echo 'fmstack: cannot create the container mount source(s) /fsx/ckpt/gpt-gb' >&2; exit 1; }
# node rank comes from each srun task's own SLURM_NODEID, hence bash -c
stop=""
# time limit in ~120 s (--signal=B:USR1): the steps checkpoint and stop; the job is requeued
trap 'stop=USR1; echo "fmstack: time-limit warning: checkpoint and stop"; scancel --signal=TERM "$SLURM_JOB_ID"' USR1
# fmstack: graceful cancel on USR2 (sent by fmstack cancel to this shell alone): the steps checkpoint and stop, then the job cancels itself
trap 'stop=CANCEL; echo "fmstack: cancel requested: checkpoint and stop"; scancel --signal=TERM "$SLURM_JOB_ID"' USR2
trap 'stop=${stop:-TERM}; echo "fmstack: SIGTERM: waiting for the steps to checkpoint"' TERM
srun --kill-on-bad-exit=1 --nodes=36 --ntasks-per-node=1 --container-image=123456789012.dkr.ecr.us-east-1.amazonaws.com/fmstack:0.1 --container-mounts=/fsx/logs:/fsx/logs,/fsx/ckpt/gpt-gb:/fsx/ckpt/gpt-gb bash -c 'exec python3 -m torch.distributed.run --nnodes=36 --nproc-per-node=4 --node-rank="$SLURM_NODEID" --master-addr="$MASTER_ADDR" --master-port="$MASTER_PORT" -m fmstack.workloads.train --model small --parallel fsdp --precision bf16 --steps 1000 --batch-size 4 --seed 0 --ckpt-dir /fsx/ckpt/gpt-gb --ckpt-interval 50 --ckpt-keep 3' &
srun_pid=$!
# wait returns early (status > 128) when a trap runs: wait again until srun has exited
while :; do wait "$srun_pid"; rc=$?; kill -0 "$srun_pid" 2>/dev/null || break; done
# a cancel's steps have saved and exited: end the job as cancelled (scancel signals this shell: trapped)
if [ "$stop" = CANCEL ]; then
  echo "fmstack: stopped for cancel (exit $rc)"; scancel "$SLURM_JOB_ID"; exit "$rc"
fi
# a run that finished its steps inside the warning exits 0 and is not requeued
if [ "$stop" = USR1 ] && [ "$rc" -ne 0 ]; then
  echo "fmstack: stopped for the time limit (exit $rc); requeue to resume"; scontrol requeue "$SLURM_JOB_ID"; exit 0
fi
exit "$rc"
