#!/usr/bin/env bash
# fmstack local job gpt-small: 1 node(s) x 8 process(es)
set -u
cd /fsx/logs
export FI_EFA_FORK_SAFE=1
export FI_EFA_USE_DEVICE_RDMA=1
export FI_PROVIDER=efa
export HF_HOME=/fsx/hf
export NCCL_DEBUG=WARN
export NCCL_SOCKET_IFNAME='^lo,docker'
delays=(10 20 40)
attempt=0
while :; do
  echo "$attempt" > $FMSTACK_JOB_DIR/restarts
  export FMSTACK_RESTART_COUNT=$attempt
  python3 -m torch.distributed.run --nnodes=1 --nproc-per-node=8 --standalone -m fmstack.workloads.train --model small --parallel fsdp --precision bf16 --steps 1000 --batch-size 4 --seed 0 --ckpt-dir /fsx/ckpt/gpt-small --ckpt-interval 50 --ckpt-keep 3 --ckpt-durable s3://ckpts/gpt-small
  rc=$?
  [ "$rc" -eq 0 ] && break
  [ "$attempt" -ge "${#delays[@]}" ] && break
  echo "fmstack: attempt $((attempt + 1)) exited $rc; retrying in ${delays[$attempt]} s" >&2
  sleep "${delays[$attempt]}"
  attempt=$((attempt + 1))
done
echo "$rc" > $FMSTACK_JOB_DIR/exit_code
exit "$rc"
