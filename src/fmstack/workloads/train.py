"""The reference training workload: ``torchrun ... -m fmstack.workloads.train [options]``.

A small GPT (``fmstack.workloads.gpt``) on deterministic synthetic data, DDP or FSDP2 (``fully_shard``), optional
bf16 autocast, per-step wall time and tokens/s, two-tier async checkpoints and auto-resume from the newest complete
checkpoint. Without torchrun's environment it runs as a single process (world size 1). On SIGTERM or SIGUSR1 every
rank finishes the current step, they agree on it, the step is checkpointed and the run exits ``128 + signal``
(``fmstack.workloads.stop``).

Lines on stdout that tools parse: ``step=N loss=... step_time_s=... tokens_per_s=...``, ``ckpt ...`` events, ``stop ...``
when a signal ended the run early, and a final ``done {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from fmstack.workloads.checkpoint import CheckpointConfig, TieredCheckpointer
from fmstack.workloads.gpt import PRESETS, GPTConfig, build_model, flops_per_step, synthetic_batch
from fmstack.workloads.metrics import AppMetricsSink, FanOut, JsonlMetrics, NullMetrics, StepMetrics, StepRecord
from fmstack.workloads.stop import StopRequest, exit_status


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m fmstack.workloads.train", description=__doc__)
    p.add_argument("--model", default="tiny", choices=sorted(PRESETS), help="size preset")
    p.add_argument("--layers", type=int, help="override n_layers")
    p.add_argument("--d-model", type=int, help="override d_model")
    p.add_argument("--dropout", type=float, help="override dropout")
    p.add_argument("--parallel", default="ddp", choices=["ddp", "fsdp"])
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt-dir", help="local checkpoint tier (enables checkpointing)")
    p.add_argument("--ckpt-durable", help="durable tier: path or fsspec URL (s3://...)")
    p.add_argument("--ckpt-interval", type=int, default=10)
    p.add_argument("--ckpt-keep", type=int, default=3)
    p.add_argument("--ckpt-sync", action="store_true", help="commit each save before the next step")
    p.add_argument("--storage-options", default="{}", help="fsspec options for the durable tier, as JSON")
    p.add_argument("--metrics-file", help="JSON lines, one per step (rank 0)")
    p.add_argument("--app-metrics-dir", help="write AppMetrics snapshots here for `fmstack exporter --app-dir`")
    p.add_argument("--job-id", default=os.environ.get("SLURM_JOB_ID", "local"), help="job_id label of the metrics")
    p.add_argument("--step-sleep-s", type=float, default=0.0, help="extra sleep per step (to test preemption)")
    p.add_argument("--crash-at-step", type=int, help="fault injection: SIGKILL rank 0 after this step")
    return p.parse_args(argv)


def model_config(args: argparse.Namespace) -> GPTConfig:
    cfg = PRESETS[args.model]
    overrides = {"n_layers": args.layers, "d_model": args.d_model, "dropout": args.dropout}
    return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})


def _init_dist() -> tuple[int, int, torch.device]:
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    if "RANK" in os.environ:
        dist.init_process_group(backend)
    else:
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group(backend, store=store, rank=0, world_size=1)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    return dist.get_rank(), dist.get_world_size(), device


def _wrap(model: torch.nn.Module, parallel: str, device: torch.device) -> torch.nn.Module:
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:  # type: ignore[union-attr]
        fully_shard(block)
    fully_shard(model)
    return model


def _printer(line: str) -> None:
    print(line, flush=True)


def _quiet(line: str) -> None:
    return None


def _metrics(args: argparse.Namespace, rank: int) -> StepMetrics:
    if rank != 0:
        return NullMetrics()
    app_dir = Path(args.app_metrics_dir) if args.app_metrics_dir else None
    sinks: list[StepMetrics] = [AppMetricsSink(args.job_id, app_dir)]
    if args.metrics_file:
        sinks.append(JsonlMetrics(Path(args.metrics_file)))
    return FanOut(*sinks)


def train(args: argparse.Namespace, stop: StopRequest | None = None) -> dict[str, Any]:
    """Train; with ``stop`` (handlers installed by the caller) a stop signal ends the run early at a step every rank
    agrees on, with that step checkpointed (``summary["stop_signal"]`` then names the signal)."""
    stop = stop or StopRequest()
    rank, world, device = _init_dist()
    cfg = model_config(args)
    torch.manual_seed(args.seed)
    model = _wrap(build_model(cfg).to(device), args.parallel, device)
    optim = torch.optim.AdamW(model.parameters(), lr=args.lr)
    log = _printer if rank == 0 else _quiet
    ckpt = None
    if args.ckpt_dir:
        ckpt_cfg = CheckpointConfig(
            local_dir=str(Path(args.ckpt_dir).resolve()),
            durable_url=args.ckpt_durable,
            interval_steps=args.ckpt_interval,
            keep_last=args.ckpt_keep,
            storage_options=json.loads(args.storage_options),
            sync=args.ckpt_sync,
        )
        ckpt = TieredCheckpointer(ckpt_cfg, log=log)
    start = ckpt.restore(model, optim) if ckpt else 0
    metrics = _metrics(args, rank)
    tokens_per_step = args.batch_size * cfg.seq_len * world
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")
    loss_val = float("nan")
    saved_step = stopped_at = None
    for step in range(start + 1, args.steps + 1):
        t0 = time.perf_counter()
        x, y = synthetic_batch(cfg, seed=args.seed, step=step, rank=rank, batch_size=args.batch_size)
        with autocast:
            logits = model(x.to(device))
            loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size).float(), y.to(device).reshape(-1))
        optim.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optim.step()
        # the mean loss over ranks (the curve does not depend on which rank logs it) and, in the same all-reduce,
        # how many ranks have been asked to stop: every rank sees the same sum after the same step
        packed = torch.stack([loss.detach().float(), loss.new_tensor(1.0 if stop.requested else 0.0)])
        dist.all_reduce(packed)
        loss_sum, stop_votes = packed.tolist()
        loss_val = loss_sum / world
        if args.step_sleep_s:
            time.sleep(args.step_sleep_s)
        dt = time.perf_counter() - t0
        metrics.record(
            StepRecord(
                step=step, loss=loss_val, step_time_s=dt, tokens_per_s=tokens_per_step / dt, tokens=tokens_per_step
            )
        )
        log(f"step={step} loss={loss_val!r} step_time_s={dt:.6f} tokens_per_s={tokens_per_step / dt:.1f}")
        if ckpt:
            ckpt.poll()
            if step % args.ckpt_interval == 0:
                ckpt.save(step, model, optim)
                saved_step = step
        if stop_votes > 0 and step < args.steps:
            log(f"stop signal={_signal_name(stop.signum)} step={step} ranks_signalled={int(stop_votes)}/{world}")
            if ckpt and saved_step != step:
                ckpt.save(step, model, optim)
            stopped_at = step
            break
        if args.crash_at_step == step and rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
    if ckpt:
        ckpt.close()  # a stop's save is committed here, before the exit
    summary = {
        "steps": args.steps,
        "resumed_from_step": start,
        "world_size": world,
        "final_loss": loss_val,
        "flops_per_step": flops_per_step(cfg, global_batch_size=args.batch_size * world),
        # retries so far: the local launcher's FMSTACK_RESTART_COUNT, else Slurm's SLURM_RESTART_COUNT
        "restart_count": int(os.environ.get("FMSTACK_RESTART_COUNT") or os.environ.get("SLURM_RESTART_COUNT", "0")),
        "stopped_at_step": stopped_at,
        # this rank's signal; a rank that was not signalled itself stops with the others and reports SIGTERM
        "stop_signal": None if stopped_at is None else _signal_name(stop.signum),
    }
    log("done " + json.dumps(summary))
    del model, optim  # the DDP/FSDP model uses the group: release it first
    dist.barrier()  # no rank tears the group down while a peer still sends
    dist.destroy_process_group()
    # a normal end, every step run or a stop signal's step saved (the process exits by itself; a requeued job's next
    # run writes a fresh snapshot at its first step): the app snapshot says finished, so the exporter drops the job
    # and FmstackTrainingStalled ends. A crash (an exception, a killed rank, a peer that never reaches the barrier)
    # never gets here: its snapshot stays unfinished and the stall alert fires.
    metrics.finish()
    metrics.close()
    return summary


def _signal_name(signum: int | None) -> str:
    return signal.Signals(signum if signum is not None else signal.SIGTERM).name


def main(argv: list[str] | None = None) -> int:
    """0 when every step ran; ``128 + signal`` when a stop signal ended the run early (after its checkpoint)."""
    args = parse_args(argv)
    with StopRequest() as stop:
        summary = train(args, stop)
    if summary["stopped_at_step"] is None:
        return 0
    return exit_status(stop.signum if stop.signum is not None else signal.SIGTERM)


if __name__ == "__main__":
    sys.exit(main())
