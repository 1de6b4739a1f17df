"""Checkpoints carry every RNG the training loop draws from: the CPU generator and each CUDA device's generator.

On this CPU machine a fake of the checkpointer's CUDA seam (``CudaRng``: ``torch.cuda.is_available``,
``device_count``, ``get_rng_state_all``, ``set_rng_state_all``) stands in for CUDA; the last test runs the real thing
on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch.distributed.checkpoint.filesystem import FileSystemReader  # noqa: E402

from fmstack.workloads import ckpt_store  # noqa: E402
from fmstack.workloads.checkpoint import CheckpointConfig, CudaRng, TieredCheckpointer  # noqa: E402

pytestmark = pytest.mark.torch
PHILOX_BYTES = 16
"""CUDA's default generator state: seed and offset, 8 bytes each (``torch.cuda.get_rng_state``)."""


@pytest.fixture
def group() -> Iterator[None]:
    """A one-rank gloo process group in this process, as ``train.py`` makes when started without torchrun."""
    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        dist.destroy_process_group()


class FakeCuda(CudaRng):
    """``devices`` CUDA generators, each state a distinct 16-byte tensor; remembers what was restored."""

    def __init__(self, devices: int, first: int) -> None:
        self.devices = devices
        self.states = [torch.full((PHILOX_BYTES,), first + i, dtype=torch.uint8) for i in range(devices)]
        self.restored: list[torch.Tensor] | None = None

    def available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.devices

    def get_all(self) -> list[torch.Tensor]:
        return [s.clone() for s in self.states]

    def set_all(self, states: list[torch.Tensor]) -> None:
        self.restored = [s.clone() for s in states]


def _job(
    tmp_path: Path, logs: list[str], cuda: CudaRng | None = None
) -> tuple[torch.nn.Module, torch.optim.Optimizer, TieredCheckpointer]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    cfg = CheckpointConfig(local_dir=str(tmp_path), sync=True)
    return model, optim, TieredCheckpointer(cfg, log=logs.append, cuda_rng=cuda)


def _keys(tmp_path: Path, step: int) -> set[str]:
    return set(FileSystemReader(ckpt_store.step_dir(str(tmp_path), step)).read_metadata().state_dict_metadata)


def test_cpu_rng_round_trips_and_no_cuda_key_without_cuda(tmp_path: Path, group: None) -> None:
    logs: list[str] = []
    model, optim, ckpt = _job(tmp_path, logs)
    torch.manual_seed(0)
    torch.rand(7)
    ckpt.save(3, model, optim)
    after_save = torch.rand(7)
    torch.manual_seed(12345)
    assert ckpt.restore(model, optim) == 3
    assert torch.equal(torch.rand(7), after_save)
    assert "rng.rank0" in _keys(tmp_path, 3) and "rng_cuda.rank0" not in _keys(tmp_path, 3)
    assert not any("warning" in line for line in logs)
    ckpt.close()


def test_cuda_rng_of_every_device_round_trips(tmp_path: Path, group: None) -> None:
    cuda = FakeCuda(devices=2, first=10)
    logs: list[str] = []
    model, optim, ckpt = _job(tmp_path, logs, cuda)
    ckpt.save(5, model, optim)
    saved = [s.clone() for s in cuda.states]
    cuda.states = [torch.zeros(PHILOX_BYTES, dtype=torch.uint8) for _ in range(2)]  # the run moved on
    assert ckpt.restore(model, optim) == 5
    assert cuda.restored is not None and [s.tolist() for s in cuda.restored] == [s.tolist() for s in saved]
    assert not any("warning" in line for line in logs)
    # resumed where fewer devices are visible: the ones both runs have, with a warning
    cuda.devices, cuda.states = 1, cuda.states[:1]
    assert ckpt.restore(model, optim) == 5
    assert cuda.restored is not None and [s.tolist() for s in cuda.restored] == [saved[0].tolist()]
    assert any("saved the CUDA RNG of 2 devices, this process sees 1" in line for line in logs)
    assert "rng_cuda.rank0" in _keys(tmp_path, 5)
    ckpt.close()


def _old_state(self: TieredCheckpointer, model: Any, optim: Any, step: int) -> dict[str, Any]:
    """What ``TieredCheckpointer._state`` saved before session 16: the CPU RNG alone."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, optim)
    return {"model": msd, "optim": osd, "step": step, "rng": {f"rank{self.rank}": torch.get_rng_state()}}


def test_checkpoint_without_cuda_rng_still_resumes_with_one_warning(
    tmp_path: Path, group: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs: list[str] = []
    model, optim, ckpt = _job(tmp_path, logs)
    monkeypatch.setattr(TieredCheckpointer, "_state", _old_state)
    torch.manual_seed(0)
    ckpt.save(4, model, optim)
    monkeypatch.undo()
    after_save = torch.rand(7)
    weight = model[0].weight.detach().clone()
    with torch.no_grad():
        model[0].weight.zero_()
    cuda = FakeCuda(devices=1, first=7)
    resumed = TieredCheckpointer(ckpt.cfg, log=logs.append, cuda_rng=cuda)  # a new process, on a GPU machine
    torch.manual_seed(999)
    assert resumed.restore(model, optim) == 4
    assert torch.equal(model[0].weight, weight) and torch.equal(torch.rand(7), after_save)
    assert cuda.restored is None  # nothing to restore, and nothing invented
    warnings = [line for line in logs if "warning" in line]
    assert len(warnings) == 1 and "no CUDA RNG state" in warnings[0] and "\n" not in warnings[0]
    ckpt.close()
    resumed.close()


@pytest.mark.gpu
def test_dropout_on_cuda_is_bit_identical_after_resume(tmp_path: Path, group: None) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine")
    logs: list[str] = []
    model, optim, ckpt = _job(tmp_path, logs)
    model.cuda()
    x = torch.ones(64, 1024, device="cuda")
    torch.manual_seed(0)
    drop = torch.nn.Dropout(0.1)
    drop(x)  # the run has drawn from the CUDA generator before the save
    ckpt.save(2, model, optim)
    expected = [drop(x) for _ in range(3)]
    torch.manual_seed(4321)  # a fresh process: seeded, not where the run left off
    assert ckpt.restore(model, optim) == 2
    assert all(torch.equal(drop(x), want) for want in expected)
    assert not any("warning" in line for line in logs)
    ckpt.close()
