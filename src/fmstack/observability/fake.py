"""Fakes beside the real backends: a scripted GPU backend and an in-memory sysfs, both with injectable faults.

:class:`FakeGpuBackend` implements :class:`~fmstack.observability.gpu.GpuBackend` from a JSON fixture of NVML
answers (``{"gpus": [{field: value, ...}], "script": [{"at_poll": N, "gpu": G, "xid": X}, ...]}``) and takes
faults by method: :meth:`lose_nvml` (every call fails, as after a driver crash), :meth:`fall_off_bus` (one GPU
unreadable, Xid 79 queued as the driver reports it), :meth:`inject_xid`, :meth:`set`. :class:`RandomFaults`
draws faults from a seeded ``random.Random`` passed in (the benchmark and the fault test use it).
"""

from __future__ import annotations

import dataclasses
import json
import random
import typing
from pathlib import Path
from typing import Any

from fmstack.observability.gpu import GpuReadError, GpuReading
from fmstack.observability.sysfs import DictFs

H100_DEFAULTS: dict[str, Any] = {
    "model_name": "NVIDIA H100 80GB HBM3",
    "gpu_util_pct": 97.0,
    "mem_copy_util_pct": 41.0,
    "sm_clock_mhz": 1980.0,
    "mem_clock_mhz": 2619.0,
    "fb_used_mib": 71234.0,
    "fb_free_mib": 9851.0,
    "power_w": 652.5,
    "energy_mj": 123456789.0,
    "gpu_temp_c": 61.0,
    "memory_temp_c": 70.0,
    "pcie_replay_total": 0,
    "ecc_sbe_volatile_total": 0,
    "ecc_dbe_volatile_total": 0,
    "ecc_sbe_aggregate_total": 2,
    "ecc_dbe_aggregate_total": 0,
    "remapped_rows_correctable": 0,
    "remapped_rows_uncorrectable": 0,
    "row_remap_pending": False,
    "row_remap_failure": False,
    "nvlink_crc_flit_errors_total": 0,
    "nvlink_crc_data_errors_total": 0,
    "nvlink_replay_errors_total": 0,
    "nvlink_recovery_errors_total": 0,
    "power_violation_ns": 0,
    "thermal_violation_ns": 0,
    "clocks_event_reasons": 0,
    "sm_active_ratio": 0.82,
}
"""Plausible H100 SXM values for a busy node (made up, not a recording): 700 W TDP, 80 GB HBM3."""


def _reading(index: int, values: dict[str, Any]) -> GpuReading:
    data = {**H100_DEFAULTS, **values}
    data.setdefault("uuid", f"GPU-00000000-0000-0000-0000-{index:012d}")
    data.setdefault("pci_bus_id", f"00000000:{0x53 + 16 * index:02X}:00.0")
    data["index"] = index
    known = {f.name for f in dataclasses.fields(GpuReading)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"gpu {index}: unknown NVML fields {unknown}; known: {sorted(known)}")
    for name, value in data.items():
        _check_type(index, name, value, _FIELD_TYPES[name])
    return GpuReading(**data)


_FIELD_TYPES = typing.get_type_hints(GpuReading)


def _check_type(index: int, name: str, value: Any, hint: Any) -> None:
    """The value a GpuReading field takes: a JSON number for float / int (no bool), true / false, a string, null
    where optional; a wrong one fails at load, not at every scrape."""
    allowed = typing.get_args(hint) or (hint,)
    if value is None and type(None) in allowed:
        return
    if bool in allowed:
        ok = isinstance(value, bool)
    elif float in allowed:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif int in allowed:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    if not ok:
        want = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
        raise ValueError(f"gpus[{index}].{name}: expected {want}, got {value!r:.40}")


class FakeGpuBackend:
    """Scripted NVML answers with faults; implements the :class:`GpuBackend` interface."""

    def __init__(self, num_gpus: int = 8, gpus: list[dict[str, Any]] | None = None) -> None:
        specs = gpus if gpus is not None else [{} for _ in range(num_gpus)]
        self.readings = [_reading(i, spec) for i, spec in enumerate(specs)]
        self.script: list[dict[str, int]] = []
        self.nvml_lost = False
        self.off_bus: set[int] = set()
        self.pending_xids: list[tuple[int, int]] = []
        self.polls = 0

    @classmethod
    def from_json(cls, path: Path) -> FakeGpuBackend:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
            raise ValueError('expected {"gpus": [{field: value, ...}, ...], "script": [...]}')
        if not all(isinstance(g, dict) for g in data["gpus"]):
            raise ValueError("gpus: expected a list of objects")
        backend = cls(gpus=list(data["gpus"]))
        script = data.get("script", [])
        if not isinstance(script, list):
            raise ValueError("script: expected a list")
        for i, step in enumerate(script):
            if not isinstance(step, dict) or sorted(step) != ["at_poll", "gpu", "xid"]:
                raise ValueError(f'script[{i}]: expected {{"at_poll": N, "gpu": G, "xid": X}}')
            if not all(type(v) is int for v in step.values()):
                raise ValueError(f"script[{i}]: at_poll, gpu and xid are integers")
            if not 0 <= step["gpu"] < len(backend.readings):
                raise ValueError(f"script[{i}].gpu: {step['gpu']} is not one of the {len(backend.readings)} GPUs")
        backend.script = [dict(step) for step in script]
        return backend

    def device_count(self) -> int:
        if self.nvml_lost:
            raise GpuReadError("NVML: Driver Not Loaded (fake)")
        return len(self.readings)

    def read(self, index: int) -> GpuReading:
        if self.nvml_lost:
            raise GpuReadError("NVML: Driver Not Loaded (fake)")
        if index in self.off_bus:
            raise GpuReadError(f"gpu {index}: GPU is lost (fake)")
        return self.readings[index]

    def poll_xids(self) -> list[tuple[int, int]]:
        if self.nvml_lost:
            raise GpuReadError("NVML: Driver Not Loaded (fake)")
        self.polls += 1
        due = [s for s in self.script if s["at_poll"] == self.polls]
        events = self.pending_xids + [(s["gpu"], s["xid"]) for s in due]
        self.pending_xids = []
        return events

    def inject_xid(self, gpu: int, xid: int) -> None:
        self.pending_xids.append((gpu, xid))

    def fall_off_bus(self, gpu: int) -> None:
        self.off_bus.add(gpu)
        self.inject_xid(gpu, 79)

    def lose_nvml(self) -> None:
        self.nvml_lost = True

    def heal(self) -> None:
        self.nvml_lost = False
        self.off_bus.clear()

    def set(self, gpu: int, **values: Any) -> None:
        """Change fields of one GPU's answers (e.g. ``row_remap_failure=True``)."""
        self.readings[gpu] = dataclasses.replace(self.readings[gpu], **values)


def clone_efa_devices(files: dict[str, str], template: str, num_devices: int) -> dict[str, str]:
    """A recorded tree with its EFA devices replaced by ``num_devices`` copies of device ``template``.

    Names follow p5's ``rdmap<16*(i+1)>s27`` pattern (32 devices on a p5.48xlarge).
    """
    prefix = f"sys/class/infiniband/{template}/"
    if not any(k.startswith(prefix) for k in files):
        raise ValueError(f"no EFA device {template!r} in the tree")
    out = {k: v for k, v in files.items() if not k.startswith("sys/class/infiniband/")}
    device_files = {k[len(prefix) :]: v for k, v in files.items() if k.startswith(prefix)}
    for i in range(num_devices):
        for rest, text in device_files.items():
            out[f"sys/class/infiniband/rdmap{16 * (i + 1)}s27/{rest}"] = text
    return out


class RandomFaults:
    """Before each scrape, heal everything and then inject each fault kind with probability ``p``."""

    KINDS = ("nvml_lost", "gpu_off_bus", "xid", "efa_file_gone", "efa_device_gone", "lustre_gone", "app_error")

    def __init__(self, rng: random.Random, gpu: FakeGpuBackend, efa_fs: DictFs, p: float = 0.1) -> None:
        self.rng, self.gpu, self.efa_fs, self.p = rng, gpu, efa_fs, p
        self.app_should_fail = False
        self.injected: dict[str, int] = dict.fromkeys(self.KINDS, 0)

    def step(self) -> None:
        self.gpu.heal()
        self.efa_fs.restore()
        self.app_should_fail = False
        for kind in self.KINDS:
            if self.rng.random() >= self.p:
                continue
            self.injected[kind] += 1
            if kind == "nvml_lost":
                self.gpu.lose_nvml()
            elif kind == "gpu_off_bus":
                self.gpu.fall_off_bus(self.rng.randrange(len(self.gpu.readings)))
            elif kind == "xid":
                self.gpu.inject_xid(self.rng.randrange(len(self.gpu.readings)), self.rng.choice([13, 31, 48, 63, 94]))
            elif kind == "efa_file_gone":
                path = self.rng.choice(self.efa_fs.file_paths())
                (self.efa_fs.hide if self.rng.random() < 0.5 else self.efa_fs.break_file)(path)
            elif kind == "efa_device_gone":
                self.efa_fs.hide_prefix(self.rng.choice(self.efa_fs.dir_paths(depth=4)))
            elif kind == "lustre_gone":
                self.efa_fs.hide_prefix("proc/fs/lustre")
            elif kind == "app_error":
                self.app_should_fail = True
