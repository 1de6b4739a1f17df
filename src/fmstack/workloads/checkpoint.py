"""Two-tier asynchronous checkpoints with torch.distributed.checkpoint (DCP) and auto-resume.

Save: every rank calls ``dcp.async_save`` into ``<local>/step_N`` on a dedicated gloo process group (so the
background collectives never interleave with training collectives). DCP's coordinator writes ``.metadata`` only after
every rank has written its shard, so when rank 0's future is done the checkpoint is complete: rank 0 then writes
the ``COMMITTED`` marker, queues the copy to the durable tier (fsspec, e.g. s3://) and prunes to the last K.
At most one save is in flight: the next save first waits for the previous one.

Resume: rank 0 picks the newest committed step in either tier and broadcasts it; every rank loads model, optimizer,
step (the data position: batches are a pure function of step) and its own RNG states: the CPU generator and, where
CUDA is available, every CUDA device's generator (dropout on a GPU draws from the CUDA one; before session 16 only
the CPU state was saved, and such a checkpoint still loads, with a warning on CUDA). The training loop draws from no
Python ``random`` or NumPy generator (batches come from a seeded ``torch.Generator`` per step), so neither is saved.
Sources: PyTorch DCP docs (``torch.distributed.checkpoint.async_save``, ``state_dict.get_state_dict``);
``torch.cuda.get_rng_state_all`` / ``set_rng_state_all``.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save
from torch.distributed.checkpoint.storage import StorageReader

from fmstack.workloads import ckpt_store


@dataclass(frozen=True, kw_only=True, slots=True)
class CheckpointConfig:
    """Where and how often to checkpoint."""

    local_dir: str
    """Fast tier: a local (or shared) directory; written first."""
    durable_url: str | None = None
    """Durable tier: a path or fsspec URL (s3://bucket/prefix); committed checkpoints are copied here."""
    interval_steps: int = 10
    """Save after every this many optimizer steps."""
    keep_last: int = 3
    """Committed checkpoints kept in each tier."""
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    """fsspec options for the durable tier (e.g. ``{"client_kwargs": {"endpoint_url": ...}}``)."""
    sync: bool = False
    """Wait for each save to be committed before training on: a kill then loses at most one interval of steps
    (async saves overlap training, so a kill can lose up to two)."""

    def __post_init__(self) -> None:
        if self.interval_steps < 1:
            raise ValueError(f"interval_steps({self.interval_steps}) must be >= 1")
        if self.keep_last < 1:
            raise ValueError(f"keep_last({self.keep_last}) must be >= 1")


Log = Callable[[str], None]


class CudaRng:
    """The CUDA generators a checkpoint saves and restores: ``torch.cuda``'s own (one seam, so that a test fakes
    these four calls and not ``torch.cuda.is_available``, which DCP's writer also asks)."""

    def available(self) -> bool:
        return torch.cuda.is_available()

    def device_count(self) -> int:
        return torch.cuda.device_count()

    def get_all(self) -> list[torch.Tensor]:
        return torch.cuda.get_rng_state_all()

    def set_all(self, states: list[torch.Tensor]) -> None:
        torch.cuda.set_rng_state_all(states)


class TieredCheckpointer:
    """Async DCP saves to a local tier, commit marker, background copy to a durable tier, retention, resume."""

    def __init__(self, cfg: CheckpointConfig, *, log: Log = print, cuda_rng: CudaRng | None = None) -> None:
        self.cfg = cfg
        self._cuda = cuda_rng or CudaRng()
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self._pg = dist.new_group(backend="gloo")
        self._log = log
        self._pending: tuple[int, Any] | None = None
        self._committed_pending = False
        self._uploader = cf.ThreadPoolExecutor(max_workers=1) if self.rank == 0 and cfg.durable_url else None
        self._uploads: list[cf.Future[None]] = []
        self._uploading: set[int] = set()
        self._lock = threading.Lock()

    def _state(self, model: torch.nn.Module, optim: torch.optim.Optimizer, step: int) -> dict[str, Any]:
        msd, osd = get_state_dict(model, optim)
        state = {"model": msd, "optim": osd, "step": step, "rng": {f"rank{self.rank}": torch.get_rng_state()}}
        if self._cuda.available():
            # one row per device (CUDA's Philox state: seed and offset), stacked so that DCP stores one tensor
            state["rng_cuda"] = {f"rank{self.rank}": torch.stack(self._cuda.get_all())}
        return state

    def save(self, step: int, model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
        """Start an asynchronous save of ``step`` (waits for the previous save first)."""
        self.wait()
        self._log(f"ckpt save-begin step={step}")
        path = ckpt_store.step_dir(self.cfg.local_dir, step)
        fut = async_save(self._state(model, optim, step), checkpoint_id=path, process_group=self._pg)
        self._pending = (step, fut)
        self._committed_pending = False
        if self.cfg.sync:
            self.wait()

    def poll(self) -> None:
        """Commit the in-flight save on rank 0 as soon as it is complete; cheap, call every step."""
        if self._pending and self.rank == 0 and not self._committed_pending and self._pending[1].done():
            self._pending[1].result()
            self._commit(self._pending[0])
            self._committed_pending = True

    def wait(self) -> None:
        """Block until the in-flight save is written and committed."""
        if self._pending is None:
            return
        step, fut = self._pending
        fut.result()
        if self.rank == 0 and not self._committed_pending:
            self._commit(step)
        self._pending = None

    def _commit(self, step: int) -> None:
        info = {"step": step, "world_size": self.world_size, "time_unix_s": round(time.time(), 3)}
        ckpt_store.write_marker(self.cfg.local_dir, step, info)
        self._log(f"ckpt committed step={step}")
        if self._uploader is not None:
            with self._lock:
                self._uploading.add(step)
            self._uploads.append(self._uploader.submit(self._upload, step))
        with self._lock:
            protect = frozenset(self._uploading)
        ckpt_store.prune(self.cfg.local_dir, self.cfg.keep_last, protect=protect)

    def _upload(self, step: int) -> None:
        assert self.cfg.durable_url is not None
        try:
            ckpt_store.upload(self.cfg.local_dir, step, self.cfg.durable_url, self.cfg.storage_options)
            ckpt_store.prune(self.cfg.durable_url, self.cfg.keep_last, storage_options=self.cfg.storage_options)
            self._log(f"ckpt durable step={step}")
        finally:
            with self._lock:
                self._uploading.discard(step)

    def close(self) -> None:
        """Finish the in-flight save and every durable copy."""
        self.wait()
        for up in self._uploads:
            up.result()
        if self._uploader is not None:
            self._uploader.shutdown(wait=True)
        dist.barrier(group=self._pg)

    def newest(self) -> tuple[int, str] | None:
        """(step, root) of the newest committed checkpoint over both tiers, as decided by rank 0."""
        choice: list[Any] = [None]
        if self.rank == 0:
            found = [(s, self.cfg.local_dir) for s in ckpt_store.committed_steps(self.cfg.local_dir)[-1:]]
            if self.cfg.durable_url:
                durable = ckpt_store.committed_steps(self.cfg.durable_url, self.cfg.storage_options)
                found += [(s, self.cfg.durable_url) for s in durable[-1:]]
            # ties go to the local tier (listed first; max keeps the first maximum)
            choice[0] = max(found, key=lambda sr: sr[0]) if found else None
        dist.broadcast_object_list(choice, src=0, group=self._pg)
        return choice[0]  # type: ignore[no-any-return]

    def restore(self, model: torch.nn.Module, optim: torch.optim.Optimizer) -> int:
        """Load the newest committed checkpoint into model and optimizer; returns the step to continue after (0 if none)."""
        found = self.newest()
        if found is None:
            return 0
        step, root = found
        state = self._state(model, optim, 0)
        path = ckpt_store.step_dir(root, step)
        reader = self._reader(root, path)
        # a checkpoint from before session 16 has no CUDA RNG: load what it has (DCP refuses a key it lacks)
        saved = reader.read_metadata().state_dict_metadata.get(f"rng_cuda.rank{self.rank}")
        state.pop("rng_cuda", None)
        if isinstance(saved, TensorStorageMetadata) and self._cuda.available():
            state["rng_cuda"] = {f"rank{self.rank}": torch.empty(saved.size, dtype=torch.uint8)}
        dcp_load(state, storage_reader=reader, process_group=self._pg)
        set_state_dict(model, optim, model_state_dict=state["model"], optim_state_dict=state["optim"])
        torch.set_rng_state(state["rng"][f"rank{self.rank}"])
        if "rng_cuda" in state:
            self._set_cuda_rng(list(state["rng_cuda"][f"rank{self.rank}"].unbind(0)), step)
        elif self._cuda.available():
            self._log(f"ckpt warning: step={step} has no CUDA RNG state (saved before session 16): CUDA draws "
                      "(dropout) go on from this process's seed, not from where the run left off")  # fmt: skip
        self._log(f"ckpt resumed step={state['step']} from={root}")
        return int(state["step"])

    def _reader(self, root: str, path: str) -> StorageReader:
        if root == self.cfg.local_dir:
            return FileSystemReader(path)
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(path, **dict(self.cfg.storage_options))

    def _set_cuda_rng(self, states: list[torch.Tensor], step: int) -> None:
        """Every device's saved CUDA RNG state; with another device count, the devices both runs have."""
        count = self._cuda.device_count()
        if len(states) != count:
            self._log(f"ckpt warning: step={step} saved the CUDA RNG of {len(states)} devices, this process sees "
                      f"{count}: restored the first {min(len(states), count)}")  # fmt: skip
        self._cuda.set_all(states[:count])
