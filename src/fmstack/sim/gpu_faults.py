"""GPU faults by Xid class: the GPU rows of Llama 3 Table 5, each as the node signals NVIDIA documents for it.

Llama 3 (arXiv 2407.21783, Table 5; shared/reference/orchestration-04-failures-and-recovery.md section 1) splits
its 268 GPU interruptions (of 419) into faulty GPU 148, GPU HBM3 memory 72, GPU SRAM memory 19, GPU system processor
17, silent data corruption 6, GPU thermal interface + sensor 6 (counts; the paper's percentages do not match
count / 419, the note says use counts). The twin draws a class with these shares and hands its signals to
:class:`fmstack.observability.health.HealthEngine`, which picks the action; the twin hard-codes no action. Signals
from NVIDIA's Xid catalog and memory-error documents (shared/reference/orchestration-05-xid-ecc.md):

- faulty GPU -> Xid 79 (fallen off the bus) and one GPU missing: catalog RESTART_BM, reboot. [D] Table 5 names no
  Xid for "faulty GPU"; a GPU that stops answering is the commonest hard GPU fault, so 79 stands for the row;
- HBM3 -> Xid 48 (double-bit ECC) with Xid 63 (row marked for remapping, NVML ``bPending``): catalog
  WORKFLOW_XID_48 "with Xid 63/64: DRAIN_AND_RESET", a GPU reset activates the remap;
- HBM3 whose remap fails -> Xid 48 with Xid 64 and NVML ``bFailureOccurred``: replace (RMA path; NVIDIA "RMA Policy
  Thresholds for Row Remapping": the flag is set by a ninth uncorrectable remap in one bank, a second remap of a
  remapped row, or 512 in all). [D] share ``remap_failure_share`` of HBM3 faults, default 0: no published split,
  and the thresholds are far from a node's reach in a run (0.24 HBM3 faults per node-year at Llama 3's rate);
- SRAM -> Xid 94 (contained: catalog RESTART_APP, restart the job) or Xid 95 (uncontained: RESET_GPU). [D]
  ``sram_contained_share`` 0.5: no published split;
- GPU system processor -> Xid 119 (GSP RPC timeout): catalog RESET_GPU ("node power cycle if it persists": the
  engine escalates repeats). [D] 119 rather than 120 (GSP error): same action;
- silent data corruption -> no Xid: the job finds it (loss spikes, NaNs) and the GPU fails diagnostics (DCGM diag
  / NVIDIA field diagnostic, which decides RMA): ``gpu_diag_failed`` -> replace. [D] that diagnostics find it;
- thermal interface + sensor -> thermal slowdown (throttled the whole window): the engine's watch rule, no node
  action; the job was interrupted (it is a Table 5 row), so it restarts.
"""

from __future__ import annotations

from dataclasses import dataclass

from fmstack.errors import InputError
from fmstack.observability.health import NodeSignals
from fmstack.perfmodel.failures import Generator


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuFaultClass:
    """One Xid class of GPU fault: its Table 5 row, its count out of 419, and the node signals it raises."""

    name: str
    row: str
    """The Llama 3 Table 5 component."""
    count: float
    """Interruptions of the class in Table 5 (a row split between classes gives each its part)."""
    xids: tuple[int, ...] = ()
    gpu_missing: bool = False
    dbe: bool = False
    remap_pending: bool = False
    remap_failure: bool = False
    thermal: bool = False
    diag_failed: bool = False

    def signals(self, gpus_per_node: int, resets: int, reboots: int, restarts: int = 0) -> NodeSignals:
        """The node's signals for this fault on a node with this many resets, reboots and job restarts in the
        recurrence window."""
        return NodeSignals(
            xids=list(self.xids),
            gpus_visible=gpus_per_node - 1 if self.gpu_missing else None,
            gpus_expected=gpus_per_node if self.gpu_missing else None,
            dbe_volatile_count=1 if self.dbe else 0,
            pending_row_remap=self.remap_pending,
            row_remap_failure=self.remap_failure,
            thermal_violation_ratio=1.0 if self.thermal else 0.0,
            gpu_diag_failed=self.diag_failed,
            restarts_in_window=restarts,
            resets_in_window=resets,
            reboots_in_window=reboots,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class GpuFaultMix:
    """The two splits of Table 5 rows that no source gives ([D]); see the module docstring."""

    remap_failure_share: float = 0.0
    """Share of HBM3 faults whose row remap fails (Xid 64, replace)."""
    sram_contained_share: float = 0.5
    """Share of SRAM faults that are contained (Xid 94, restart the job; the rest Xid 95, reset)."""

    def __post_init__(self) -> None:
        for name in ("remap_failure_share", "sram_contained_share"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise InputError(name, f"must be a share from 0 to 1, got {v}")

    def classes(self) -> tuple[GpuFaultClass, ...]:
        """The classes in a fixed order (the draw walks them in this order: same seed, same class)."""
        f, c = self.remap_failure_share, self.sram_contained_share
        return (
            GpuFaultClass(name="faulty_gpu_xid79", row="Faulty GPU", count=148, xids=(79,), gpu_missing=True),
            GpuFaultClass(name="hbm3_ecc_remap_pending", row="GPU HBM3 memory", count=72 * (1 - f), xids=(48, 63),
                          dbe=True, remap_pending=True),
            GpuFaultClass(name="hbm3_remap_failure", row="GPU HBM3 memory", count=72 * f, xids=(48, 64), dbe=True,
                          remap_failure=True),
            GpuFaultClass(name="sram_contained_xid94", row="GPU SRAM memory", count=19 * c, xids=(94,)),
            GpuFaultClass(name="sram_uncontained_xid95", row="GPU SRAM memory", count=19 * (1 - c), xids=(95,)),
            GpuFaultClass(name="gsp_xid119", row="GPU system processor", count=17, xids=(119,)),
            GpuFaultClass(name="silent_data_corruption", row="Silent data corruption", count=6, diag_failed=True),
            GpuFaultClass(name="thermal_slowdown", row="GPU thermal interface + sensor", count=6, thermal=True),
        )  # fmt: skip

    def shares(self) -> dict[str, float]:
        """Share of each class among GPU faults (count / 268)."""
        classes = self.classes()
        total = sum(k.count for k in classes)
        return {k.name: k.count / total for k in classes}


def draw_gpu_class(rng: Generator, classes: tuple[GpuFaultClass, ...]) -> GpuFaultClass:
    """A class drawn by its count with the twin's generator (one uniform draw, classes in order)."""
    total = sum(k.count for k in classes)
    u = float(rng.random()) * total
    acc = 0.0
    for k in classes:
        acc += k.count
        if u < acc:
            return k
    return next(k for k in reversed(classes) if k.count > 0)
