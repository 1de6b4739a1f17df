"""Node-health engine: signals from one node -> one action (none, restart job, reset GPU, reboot, replace).

Pure and deterministic: no clock, no I/O besides reading the vendored Xid catalog once per engine. The fleet
simulator imports :class:`HealthEngine`, :class:`NodeSignals`, :class:`Decision` and :class:`Action`.

Rules and their sources (shared/reference/observability.md §7, orchestration-05-xid-ecc.md):

- each Xid: NVIDIA's immediate action from the Xid catalog (:mod:`fmstack.observability.xid`); Xid 154 follows
  the recovery action the driver announces; Xid 45 (cleanup after an abort) takes no action: with another Xid that Xid decides, solo the reason
  names the catalog's RESTART_FM (restart Fabric Manager, not an fmstack action);
- row-remap failure (NVML ``bFailureOccurred``, DCGM_FI_DEV_ROW_REMAP_FAILURE): replace the node (no spare rows;
  Meta GCM ``row_remap`` check, NVIDIA "RMA path" for Xid 64);
- pending row remap (NVML ``bPending``: "a reset will be required to actually remap the row") and volatile
  double-bit ECC errors: reset the GPU;
- a GPU that failed diagnostics (DCGM diagnostics, NVIDIA's field diagnostic): replace the node (NVIDIA "RMA
  Policy": the field diagnostic decides whether a GPU qualifies for RMA; HyperPod deep health checks run DCGM
  diagnostics level 4 and replace unhealthy nodes). The fleet twin raises it for silent data corruption, which
  has no Xid (since session 17);
- fewer GPUs visible than expected (HyperPod health-monitoring agent: GPU count vs instance type -> reboot), or
  fewer EFA devices than expected (gpu-cluster-healthcheck): reboot;
- NVLink CRC / replay / recovery errors on one GPU at or above ``nvlink_errors_reset`` in the window: reset the GPU
  (healthcheck NVLINK default; the reference's rule is per GPU: "rate(NVLINK_CRC_*[5m]) > 0" per DCGM series ->
  reset_gpu, shared/reference/observability.md §7); fewer, but some: a reason to watch;
- single-bit ECC rate, thermal violation, EFA retransmit timeouts: no automatic action, a reason to watch;
- recurrence: a restart-job signal on a node whose signals already restarted the job ``restarts_to_reset`` times
  in the window becomes a GPU reset (Xid 13 / 31 "repeated on same GPU -> diag"); a reset on a node already reset
  ``resets_to_reboot`` times in the window becomes a reboot; a reboot
  on a node already rebooted ``reboots_to_replace`` times becomes a replacement (Xid 79 "repeat -> replace"). The
  window is ``HealthPolicy.recurrence_window_s`` (24 h, NVIDIA NVSentinel's repeated-Xid rules); the caller counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fmstack.errors import InputError
from fmstack.observability.actions import Action
from fmstack.observability.xid import CATALOG_URL, XID154_ACTIONS, XidRule, load_xid_catalog

__all__ = ["Action", "Decision", "HealthEngine", "HealthPolicy", "NodeSignals"]

SRC_XID = CATALOG_URL
SRC_NVML_REMAP = "https://docs.nvidia.com/deploy/nvml-api/api/structnvmlRemappedRowsInfo__v2__t.html"
SRC_HMA = (
    "https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-health-monitoring-agent.html"
)
SRC_HEALTHCHECK = "aws-samples/awsome-distributed-training 4.validation_and_observability/2.gpu-cluster-healthcheck"
SRC_MEM_ERR = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"
SRC_RMA = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/rma-policy-thresholds-for-row-remapping.html"
SRC_DERIVED = "fmstack policy (shared/reference/observability.md §7, derived)"


@dataclass(kw_only=True, slots=True)
class NodeSignals:
    """Everything the engine looks at for one node, in one window (counts are within the window)."""

    node: str = ""
    """Node name (Slurm NodeName or Kubernetes node), used by the renderers."""
    xids: list[int] = field(default_factory=list)
    """Xid codes seen in the window (repeats allowed)."""
    xid154_action: str | None = None
    """Recovery action text announced by Xid 154: None, Drain P2P, Drain and Reset, GPU Reset Required,
    Node Reboot Required."""
    sbe_rate_per_hour: float = 0.0
    """Corrected (single-bit) ECC errors per hour, all GPUs of the node."""
    dbe_volatile_count: int = 0
    """Uncorrected (double-bit) volatile ECC errors since the last reset."""
    row_remap_failure: bool = False
    """A row remap failed on some GPU (NVML bFailureOccurred)."""
    pending_row_remap: bool = False
    """A remap is pending until the next GPU reset (NVML bPending)."""
    thermal_violation_ratio: float = 0.0
    """Fraction 0-1 of the window spent thermally throttled."""
    nvlink_error_count: int = 0
    """NVLink CRC flit/data, replay and recovery errors in the window on the node's worst GPU (the largest per-GPU
    count, not the node's sum: the action is to reset that GPU, and DCGM's counters and the FmstackGpuNvlinkErrors
    alert are per GPU)."""
    efa_error_count: int = 0
    """EFA retransmit timeouts, unresponsive / impaired remote events and work-request errors in the window."""
    gpus_visible: int | None = None
    """GPUs NVML enumerates; None when unknown."""
    gpus_expected: int | None = None
    """GPUs the instance type has (p5.48xlarge: 8)."""
    efa_visible: int | None = None
    """EFA devices under /sys/class/infiniband; None when unknown."""
    efa_expected: int | None = None
    """EFA devices the instance type has (p5.48xlarge: 32)."""
    gpu_diag_failed: bool = False
    """A GPU failed diagnostics (DCGM diagnostics, NVIDIA's field diagnostic): it needs RMA."""
    gpu_missing: bool = False
    """A GPU is known to be gone (fallen off the bus, NVML cannot reach it) even if counts are unknown."""
    efa_missing: bool = False
    """An EFA device is known to be gone even if counts are unknown."""
    restarts_in_window: int = 0
    """Job restarts this node's restart-job signals (Xid 13, 31, ...) already caused in the recurrence window."""
    resets_in_window: int = 0
    """GPU resets already done on this node in the recurrence window."""
    reboots_in_window: int = 0
    """Reboots already done on this node in the recurrence window."""


def check_counts(s: NodeSignals, where: str = "") -> None:
    """Refuse more devices visible than expected (``where``: the field's prefix, ``signals[0].``): a node cannot show
    a GPU or an EFA device it does not have, so the expected count is wrong (set for another instance type) or the
    node is not the instance type the caller thinks, and a missing device cannot be told from the count. Before
    session 20, 9 of 8 GPUs visible decided "none" and said nothing."""
    for kind, visible, expected in (("gpus", s.gpus_visible, s.gpus_expected), ("efa", s.efa_visible, s.efa_expected)):
        if visible is not None and expected is not None and visible > expected:
            raise InputError(
                f"{where}{kind}_visible",
                f"{visible} > {kind}_expected {expected}: a node cannot show more than it has; set {kind}_expected "
                "to the instance type's count (p5.48xlarge: 8 GPUs, 32 EFA devices) or check the node's type",
            )


@dataclass(frozen=True, kw_only=True, slots=True)
class HealthPolicy:
    """Thresholds of the engine ([D]: community folklore, see docs/observability.md; change per fleet)."""

    sbe_rate_watch_per_hour: float = 10.0
    """Single-bit ECC errors per hour above which the node is flagged to watch (no action)."""
    thermal_watch_ratio: float = 0.1
    """Fraction of time thermally throttled above which the node is flagged to watch."""
    nvlink_errors_reset: int = 100
    """NVLink errors on one GPU in the window at or above which that GPU is reset (per GPU, as
    ``NodeSignals.nvlink_error_count``; 0 turns the reset off). Fewer, but at least one: "watch"."""
    restarts_to_reset: int = 1
    """Earlier job restarts in the window after which another restart-job signal becomes a GPU reset (Xid catalog
    for Xid 13 / 31: "restart job; repeated on same GPU -> diag"; the GPU is drained and reset, the diagnostics run
    before it returns)."""
    resets_to_reboot: int = 2
    """Earlier resets in the window after which another reset becomes a reboot."""
    reboots_to_replace: int = 1
    """Earlier reboots in the window after which another reboot becomes a replacement."""
    recurrence_window_s: float = 86_400.0
    """Length of the recurrence window the ``*_in_window`` counts of :class:`NodeSignals` cover: the caller counts
    the restarts, resets and reboots of a node whose time lies in ``[now - recurrence_window_s, now]`` (the engine
    has no clock). 24 h: NVIDIA NVSentinel's health-events-analyzer implements the Xid catalog's "repeated on same
    GPU" workflows over the events of the last 86,400 s (rules RepeatedXIDErrorOnSameGPU and RepeatedXID31OnSameGPU,
    ``distros/kubernetes/nvsentinel/charts/health-events-analyzer/values.yaml``); its MultipleRemediations rule
    counts a node's remediations over 7 days (604,800 s), a longer choice. Planned maintenance is no fault and is
    not counted. ``math.inf``: the whole history (the fleet twin before session 17)."""

    def __post_init__(self) -> None:
        for name in ("sbe_rate_watch_per_hour", "thermal_watch_ratio", "nvlink_errors_reset"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not self.recurrence_window_s > 0:  # also refuses nan; inf is the whole history
            raise ValueError(f"recurrence_window_s must be > 0, got {self.recurrence_window_s}")
        if self.restarts_to_reset < 1 or self.resets_to_reboot < 1 or self.reboots_to_replace < 1:
            raise ValueError(
                f"restarts_to_reset({self.restarts_to_reset}), resets_to_reboot({self.resets_to_reboot}) and "
                f"reboots_to_replace({self.reboots_to_replace}) must be >= 1"
            )


@dataclass(frozen=True, slots=True)
class Decision:
    """The action to take, why, and where each rule that fired comes from."""

    action: Action
    reasons: list[str]
    sources: list[str]
    deciding_reason: str = ""
    """The reason that set ``action`` (the escalation, or the first rule of that severity); "" for NONE."""

    @property
    def main_reason(self) -> str:
        """``deciding_reason``, else the first reason (a Decision built by hand)."""
        return self.deciding_reason or (self.reasons[0] if self.reasons else "")

    def to_dict(self) -> dict[str, object]:
        return {
            "action": self.action.name,
            "reasons": list(self.reasons),
            "sources": list(self.sources),
            "deciding_reason": self.main_reason,
        }


class HealthEngine:
    """Maps :class:`NodeSignals` to a :class:`Decision`; the most severe rule that fires wins."""

    def __init__(self, policy: HealthPolicy | None = None, xid_table: dict[int, XidRule] | None = None) -> None:
        self.policy = policy or HealthPolicy()
        self.xid_table = xid_table if xid_table is not None else load_xid_catalog()

    def xid_action(self, xid: int) -> Action:
        """The catalog action for one Xid on its own (NONE for Xids not in the catalog)."""
        rule = self.xid_table.get(xid)
        return rule.action if rule else Action.NONE

    def decide(self, signals: NodeSignals) -> Decision:
        check_counts(signals)
        hits: list[tuple[Action, str, str]] = []
        hits += self._xid_hits(signals)
        hits += self._memory_hits(signals)
        hits += self._inventory_hits(signals)
        hits += self._watch_hits(signals)
        action = max((a for a, _, _ in hits), default=Action.NONE)
        action, escalation = self._escalate(action, signals)
        reasons = [r for _, r, _ in hits] + ([escalation[0]] if escalation else [])
        sources: list[str] = []
        for src in [s for _, _, s in hits] + ([escalation[1]] if escalation else []):
            if src not in sources:
                sources.append(src)
        deciding = ""
        if escalation:
            deciding = escalation[0]
        elif action is not Action.NONE:
            deciding = next(r for a, r, _ in hits if a is action)
        return Decision(action, reasons, sources, deciding)

    def _xid_hits(self, s: NodeSignals) -> list[tuple[Action, str, str]]:
        hits: list[tuple[Action, str, str]] = []
        others = {x for x in s.xids if x not in (45, 154)}
        for xid in sorted(set(s.xids)):
            rule = self.xid_table.get(xid)
            if rule is None:
                hits.append((Action.NONE, f"xid {xid}: not in the Xid catalog, no automatic action", SRC_XID))
                continue
            name = rule.meaning.split(":")[0]
            if xid == 154:
                if s.xid154_action is None:  # e.g. from an alert: the recovery text is in the kernel log only
                    hits.append((Action.NONE, f"xid 154 ({name}): recovery action not given -> none", SRC_XID))
                    continue
                action = XID154_ACTIONS.get(s.xid154_action.strip().lower(), Action.RESTART_JOB)
                msg = f"xid 154 ({name}) announces '{s.xid154_action}' -> {action.name.lower()}"
                hits.append((action, msg, SRC_XID))
                continue
            action = rule.action
            bucket = rule.catalog_action.split(";")[0].removeprefix("immediate=").split(" ")[0]
            note = ""
            if xid == 45:  # catalog WORKFLOW_XID_45: solo RESTART_FM; not solo IGNORE, follow the other Xid
                note = (
                    ", with other Xids: follow them"
                    if others
                    else ", solo: RESTART_FM (restart NVIDIA Fabric Manager; not an fmstack action)"
                )
            hits.append((action, f"xid {xid} ({name}): catalog {bucket}{note} -> {action.name.lower()}", SRC_XID))
        return hits

    def _memory_hits(self, s: NodeSignals) -> list[tuple[Action, str, str]]:
        hits: list[tuple[Action, str, str]] = []
        if s.row_remap_failure:
            hits.append((Action.REPLACE_NODE, "row remap failure: no spare rows, GPU needs RMA", SRC_NVML_REMAP))
        if s.pending_row_remap:
            hits.append((Action.RESET_GPU, "row remap pending: a GPU reset activates it", SRC_NVML_REMAP))
        if s.dbe_volatile_count > 0:
            hits.append((Action.RESET_GPU, f"{s.dbe_volatile_count} uncorrected (DBE) ECC errors", SRC_MEM_ERR))
        if s.sbe_rate_per_hour > self.policy.sbe_rate_watch_per_hour:
            hits.append(
                (
                    Action.NONE,
                    f"watch: corrected ECC rate {s.sbe_rate_per_hour:g}/h > {self.policy.sbe_rate_watch_per_hour:g}/h",
                    SRC_DERIVED,
                )
            )
        return hits

    def _inventory_hits(self, s: NodeSignals) -> list[tuple[Action, str, str]]:
        hits: list[tuple[Action, str, str]] = []
        if s.gpu_diag_failed:
            hits.append((Action.REPLACE_NODE, "a GPU failed diagnostics: field diagnostic decides RMA", SRC_RMA))
        if s.gpus_visible is not None and s.gpus_expected is not None and s.gpus_visible < s.gpus_expected:
            hits.append((Action.REBOOT_NODE, f"GPU count {s.gpus_visible} < expected {s.gpus_expected}", SRC_HMA))
        elif s.gpu_missing:
            hits.append((Action.REBOOT_NODE, "a GPU is missing (fallen off the bus / unreachable)", SRC_HMA))
        if s.efa_visible is not None and s.efa_expected is not None and s.efa_visible < s.efa_expected:
            msg = f"EFA device count {s.efa_visible} < expected {s.efa_expected}"
            hits.append((Action.REBOOT_NODE, msg, SRC_HEALTHCHECK))
        elif s.efa_missing:
            msg = "an EFA device is missing (or the EFA source is down: driver not loaded)"
            hits.append((Action.REBOOT_NODE, msg, SRC_HEALTHCHECK))
        if s.nvlink_error_count >= self.policy.nvlink_errors_reset > 0:
            msg = f"{s.nvlink_error_count} NVLink errors on one GPU >= {self.policy.nvlink_errors_reset}"
            hits.append((Action.RESET_GPU, msg, SRC_HEALTHCHECK))
        return hits

    def _watch_hits(self, s: NodeSignals) -> list[tuple[Action, str, str]]:
        hits: list[tuple[Action, str, str]] = []
        if s.thermal_violation_ratio > self.policy.thermal_watch_ratio:
            msg = f"watch: thermally throttled {s.thermal_violation_ratio:.0%} of the window"
            hits.append((Action.NONE, msg, SRC_DERIVED))
        if s.efa_error_count > 0:
            hits.append((Action.NONE, f"watch: {s.efa_error_count} EFA errors / retransmit timeouts", SRC_DERIVED))
        nvlink, reset_at = s.nvlink_error_count, self.policy.nvlink_errors_reset
        if nvlink > 0 and not nvlink >= reset_at > 0:  # at the threshold _inventory_hits resets the GPU
            below = f"< reset threshold {reset_at}" if reset_at > 0 else "(NVLink reset off)"
            hits.append((Action.NONE, f"watch: {nvlink} NVLink errors on one GPU {below}", SRC_DERIVED))
        return hits

    def _escalate(self, action: Action, s: NodeSignals) -> tuple[Action, tuple[str, str] | None]:
        p = self.policy
        if action is Action.RESTART_JOB and s.restarts_in_window >= p.restarts_to_reset:
            restart = f"escalated restart -> reset: {s.restarts_in_window} job restarts already in the window"
            escalated, more = self._escalate(Action.RESET_GPU, s)
            return escalated, (restart + (f"; {more[0]}" if more else ""), SRC_DERIVED)
        if action is Action.RESET_GPU and s.resets_in_window >= p.resets_to_reboot:
            action = Action.REBOOT_NODE
            reason = f"escalated reset -> reboot: {s.resets_in_window} resets already in the window"
            if s.reboots_in_window >= p.reboots_to_replace:
                return Action.REPLACE_NODE, (reason + f", and {s.reboots_in_window} reboots", SRC_DERIVED)
            return action, (reason, SRC_DERIVED)
        if action is Action.REBOOT_NODE and s.reboots_in_window >= p.reboots_to_replace:
            msg = f"escalated reboot -> replace: {s.reboots_in_window} reboots already in the window"
            return Action.REPLACE_NODE, (msg, SRC_DERIVED)
        return action, None
