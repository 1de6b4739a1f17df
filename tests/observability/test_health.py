"""Node-health engine: the Xid table against NVIDIA's catalog, the other rules, escalation, renderers."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmstack.errors import InputError
from fmstack.observability.health import Action, Decision, HealthEngine, HealthPolicy, NodeSignals
from fmstack.observability.health_io import (
    HEALTH_LABEL,
    k8s_node_state,
    render_k8s,
    render_slurm,
    render_slurm_resume,
    signals_from_alerts,
    signals_from_dict,
)
from fmstack.observability.xid import load_xid_catalog, xids_for

ENGINE = HealthEngine()


ADDED_TO_SHARED_CATALOG = {54, 121, 126, 151, 168}
"""Rows the vendored catalog has beyond shared/data/xid-catalog.csv: the Xids gpu-cluster-healthcheck's r590 table
classifies (shared/reference/observability.md §3) that the shared file lacks (data/SOURCES.md)."""


def test_vendored_catalog_is_the_shared_one_plus_documented_rows(shared_dir: Path) -> None:
    vendored = Path(__file__).resolve().parents[2] / "src/fmstack/observability/data/xid-catalog.csv"
    vendored_lines = vendored.read_text().splitlines()
    shared_lines = (shared_dir / "data/xid-catalog.csv").read_text().splitlines()
    assert [line for line in vendored_lines if line in shared_lines] == shared_lines  # same rows, same order
    extra = {int(line.split(",")[0]) for line in vendored_lines if line not in shared_lines}
    assert extra <= ADDED_TO_SHARED_CATALOG


def test_actions_are_ordered_by_severity() -> None:
    assert Action.NONE < Action.RESTART_JOB < Action.RESET_GPU < Action.REBOOT_NODE < Action.REPLACE_NODE
    assert max([Action.RESET_GPU, Action.NONE, Action.REBOOT_NODE]) is Action.REBOOT_NODE


# Immediate actions read off NVIDIA's Xid catalog (shared/data/xid-catalog.csv, column "action").
@pytest.mark.parametrize(
    ("xid", "action"),
    [
        (13, Action.RESTART_JOB),  # RESTART_APP
        (31, Action.RESTART_JOB),  # RESTART_APP
        (43, Action.NONE),  # IGNORE
        (45, Action.NONE),  # WORKFLOW_XID_45: solo RESTART_FM (not an fmstack action), else IGNORE
        (48, Action.RESET_GPU),  # WORKFLOW_XID_48: solo RESET_GPU
        (63, Action.NONE),  # IGNORE (pending remap, reset later)
        (64, Action.RESET_GPU),  # RESET_GPU
        (74, Action.RESET_GPU),  # WORKFLOW_NVLINK_ERR
        (79, Action.REBOOT_NODE),  # RESTART_BM
        (92, Action.NONE),  # IGNORE
        (94, Action.RESTART_JOB),  # RESTART_APP
        (95, Action.RESET_GPU),  # RESET_GPU
        (119, Action.RESET_GPU),
        (147, Action.NONE),  # WORKFLOW_NVLINK5_ERR (IGNORE)
        (149, Action.RESET_GPU),  # WORKFLOW_NVLINK5_ERR (RESET_GPU)
        (171, Action.RESET_GPU),  # follow Xid 48
        # gpu-cluster-healthcheck r590 table (shared/reference/observability.md §3, signal table §7)
        (54, Action.REPLACE_NODE),  # CHECK_MECHANICALS; healthcheck ISOLATE, §7 "Xid 54 (mechanical) -> replace_node"
        (121, Action.NONE),  # IGNORE (C2C corrected errors); healthcheck MONITOR
        (126, Action.RESTART_JOB),  # RESTART_APP; healthcheck MONITOR "restart job, not node"
        (151, Action.REBOOT_NODE),  # RESTART_VM; healthcheck REBOOT
        (168, Action.REBOOT_NODE),  # BOOT_REATTEMPT_OR_ENABLE_ECC; healthcheck REBOOT
    ],
)
def test_single_xid_follows_the_catalog(xid: int, action: Action) -> None:
    d = ENGINE.decide(NodeSignals(xids=[xid]))
    assert d.action is action
    assert d.sources == ["https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"]


def test_catalog_has_46_rows_and_reboots_as_the_reference() -> None:
    table = load_xid_catalog()
    assert len(table) == 46
    # gpu-cluster-healthcheck r590 (shared/reference/observability.md §3): 54 ISOLATE; 79, 151, 168 REBOOT
    assert xids_for(table, Action.REBOOT_NODE) == [79, 151, 168]
    assert xids_for(table, Action.REPLACE_NODE) == [54]
    # restart job is exactly the catalog's RESTART_APP bucket (Xid 45's RESTART_FM is not: it used to be)
    restart_app = [x for x, r in table.items() if r.catalog_action.removeprefix("immediate=").startswith("RESTART_APP")]
    assert xids_for(table, Action.RESTART_JOB) == sorted(restart_app)


def test_xid54_151_168_reasons_name_the_catalog_entry() -> None:
    d54 = ENGINE.decide(NodeSignals(xids=[54]))
    assert d54.main_reason == "xid 54 (SILENT_RUNNING_PWR_REDUCED_CLOCKING): catalog CHECK_MECHANICALS -> replace_node"
    d151 = ENGINE.decide(NodeSignals(xids=[151]))
    assert d151.main_reason == "xid 151 (ROBUST_CHANNEL_KEY_ROTATION_ERROR): catalog RESTART_VM -> reboot_node"
    d168 = ENGINE.decide(NodeSignals(xids=[168]))
    assert d168.main_reason == (
        "xid 168 (REDUCED_GPU_MEMORY_CAPACITY): catalog BOOT_REATTEMPT_OR_ENABLE_ECC -> reboot_node"
    )
    # a reboot Xid after a reboot already in the window: replace (as Xid 79)
    assert ENGINE.decide(NodeSignals(xids=[151], reboots_in_window=1)).action is Action.REPLACE_NODE
    # 54 outranks everything else on the node
    assert ENGINE.decide(NodeSignals(xids=[54, 79, 48])).action is Action.REPLACE_NODE


def test_unknown_xid_is_no_action_with_a_reason() -> None:
    d = ENGINE.decide(NodeSignals(xids=[999]))
    assert d.action is Action.NONE
    assert "not in the Xid catalog" in d.reasons[0]


def test_xid45_takes_no_action_and_defers_to_another_xid() -> None:
    # catalog row 45: "immediate=WORKFLOW_XID_45 (solo: RESTART_FM = restart Fabric Manager; not solo: IGNORE and
    # follow the other Xid)"; orchestration-05-xid-ecc.md §2: "sympathetic; no node action". Never RESTART_APP.
    solo = ENGINE.decide(NodeSignals(xids=[45]))
    assert solo.action is Action.NONE
    assert "solo: RESTART_FM (restart NVIDIA Fabric Manager" in solo.reasons[0]
    assert ENGINE.decide(NodeSignals(xids=[45, 43])).action is Action.NONE
    assert ENGINE.decide(NodeSignals(xids=[45, 48])).action is Action.RESET_GPU


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("None", Action.NONE),
        ("Drain P2P", Action.RESET_GPU),
        ("GPU Reset Required", Action.RESET_GPU),
        ("Node Reboot Required", Action.REBOOT_NODE),
    ],
)
def test_xid154_follows_the_announced_action(text: str, action: Action) -> None:
    assert ENGINE.decide(NodeSignals(xids=[154], xid154_action=text)).action is action


def test_memory_and_inventory_rules() -> None:
    assert ENGINE.decide(NodeSignals(row_remap_failure=True)).action is Action.REPLACE_NODE
    assert ENGINE.decide(NodeSignals(pending_row_remap=True)).action is Action.RESET_GPU
    assert ENGINE.decide(NodeSignals(dbe_volatile_count=1)).action is Action.RESET_GPU
    assert ENGINE.decide(NodeSignals(gpus_visible=7, gpus_expected=8)).action is Action.REBOOT_NODE
    assert ENGINE.decide(NodeSignals(gpus_visible=8, gpus_expected=8)).action is Action.NONE
    assert ENGINE.decide(NodeSignals(efa_visible=31, efa_expected=32)).action is Action.REBOOT_NODE
    assert ENGINE.decide(NodeSignals(efa_missing=True)).action is Action.REBOOT_NODE
    assert ENGINE.decide(NodeSignals(nvlink_error_count=99)).action is Action.NONE
    assert ENGINE.decide(NodeSignals(nvlink_error_count=100)).action is Action.RESET_GPU


def test_a_gpu_that_fails_diagnostics_is_replaced() -> None:
    # NVIDIA's RMA policy: the field diagnostic decides RMA; the fleet twin raises it for silent data corruption
    d = ENGINE.decide(NodeSignals(gpu_diag_failed=True))
    assert d.action is Action.REPLACE_NODE
    assert d.sources == [
        "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/rma-policy-thresholds-for-row-remapping.html"
    ]
    assert signals_from_dict({"gpu_diag_failed": True}).gpu_diag_failed is True
    with pytest.raises(InputError, match="gpu_diag_failed"):
        signals_from_dict({"gpu_diag_failed": "yes"})


def test_nvlink_errors_below_the_reset_threshold_are_a_watch_reason() -> None:
    d = ENGINE.decide(NodeSignals(nvlink_error_count=99))
    assert d.action is Action.NONE
    assert d.reasons == ["watch: 99 NVLink errors on one GPU < reset threshold 100"]
    assert d.sources == ["fmstack policy (shared/reference/observability.md §7, derived)"]
    d = ENGINE.decide(NodeSignals(nvlink_error_count=100))
    assert d.reasons == ["100 NVLink errors on one GPU >= 100"]  # the reset, and no watch line beside it
    off = HealthEngine(HealthPolicy(nvlink_errors_reset=0)).decide(NodeSignals(nvlink_error_count=500))
    assert off.action is Action.NONE
    assert off.reasons == ["watch: 500 NVLink errors on one GPU (NVLink reset off)"]
    assert ENGINE.decide(NodeSignals()).reasons == []


def test_nvlink_threshold_is_per_gpu_from_alerts() -> None:
    # FmstackGpuNvlinkErrors fires once per GPU (sum by Hostname, gpu); 60 + 60 on two GPUs of one node is 120 on
    # the node but 60 on its worst GPU: below the per-GPU threshold of 100, a watch and no reset.
    def alert(gpu: str, value: str) -> dict[str, object]:
        labels = {"alertname": "FmstackGpuNvlinkErrors", "Hostname": "n1", "gpu": gpu}
        return {"labels": labels, "state": "firing", "value": value}

    signals = signals_from_alerts([alert("0", "60"), alert("1", "60")])["n1"]
    assert signals.nvlink_error_count == 60
    d = ENGINE.decide(signals)
    assert (d.action, d.reasons) == (Action.NONE, ["watch: 60 NVLink errors on one GPU < reset threshold 100"])
    signals = signals_from_alerts([alert("0", "60"), alert("1", "100")])["n1"]
    assert ENGINE.decide(signals).action is Action.RESET_GPU


def test_watch_signals_give_reasons_but_no_action() -> None:
    d = ENGINE.decide(NodeSignals(sbe_rate_per_hour=240, thermal_violation_ratio=0.4, efa_error_count=3))
    assert d.action is Action.NONE
    assert len(d.reasons) == 3
    assert "240/h > 10/h" in d.reasons[0]
    assert ENGINE.decide(NodeSignals()) == Decision(Action.NONE, [], [])


def test_recurrence_escalates() -> None:
    # Xid 79 again after a reboot in the window: replace (orchestration-05-xid-ecc.md: "repeat -> replace")
    assert ENGINE.decide(NodeSignals(xids=[79], reboots_in_window=1)).action is Action.REPLACE_NODE
    # a third reset in the window becomes a reboot
    assert ENGINE.decide(NodeSignals(xids=[48], resets_in_window=1)).action is Action.RESET_GPU
    d = ENGINE.decide(NodeSignals(xids=[48], resets_in_window=2))
    assert d.action is Action.REBOOT_NODE
    assert d.reasons[-1].startswith("escalated reset -> reboot")
    lenient = HealthEngine(HealthPolicy(resets_to_reboot=5))
    assert lenient.decide(NodeSignals(xids=[48], resets_in_window=2)).action is Action.RESET_GPU


def test_repeated_restart_job_escalates_to_a_reset_then_follows_the_reset_rules() -> None:
    """Xid catalog, Xid 13 / 31: "restart job; repeated on same GPU -> diag" (orchestration-05-xid-ecc.md;
    observability.md section 7: "Repeated restart_job on same GPU within window: escalate one level")."""
    assert ENGINE.decide(NodeSignals(xids=[13])).action is Action.RESTART_JOB
    d = ENGINE.decide(NodeSignals(xids=[13], restarts_in_window=1))
    assert d.action is Action.RESET_GPU
    assert d.deciding_reason == "escalated restart -> reset: 1 job restarts already in the window"
    # the reset it became is escalated like any reset: two resets already -> reboot, and a reboot already -> replace
    d = ENGINE.decide(NodeSignals(xids=[31], restarts_in_window=3, resets_in_window=2))
    assert d.action is Action.REBOOT_NODE
    assert (
        d.deciding_reason.startswith("escalated restart -> reset: 3 job restarts")
        and "reset -> reboot" in d.deciding_reason
    )
    assert ENGINE.decide(NodeSignals(xids=[13], restarts_in_window=1, resets_in_window=2,
                                     reboots_in_window=1)).action is Action.REPLACE_NODE  # fmt: skip
    # an Xid that takes no action is not a restart, so it never escalates
    assert ENGINE.decide(NodeSignals(xids=[45], restarts_in_window=5)).action is Action.NONE
    lenient = HealthEngine(HealthPolicy(restarts_to_reset=3))
    assert lenient.decide(NodeSignals(xids=[13], restarts_in_window=2)).action is Action.RESTART_JOB


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match=r"resets_to_reboot\(0\)"):
        HealthPolicy(resets_to_reboot=0)
    with pytest.raises(ValueError, match=r"restarts_to_reset\(0\)"):
        HealthPolicy(restarts_to_reset=0)


_signals = st.builds(
    NodeSignals,
    xids=st.lists(st.sampled_from(sorted(load_xid_catalog())), max_size=4),
    row_remap_failure=st.booleans(),
    pending_row_remap=st.booleans(),
    gpu_diag_failed=st.booleans(),
    dbe_volatile_count=st.integers(0, 3),
    gpus_visible=st.integers(6, 8),
    gpus_expected=st.just(8),
    nvlink_error_count=st.integers(0, 200),
    restarts_in_window=st.integers(0, 2),
    resets_in_window=st.integers(0, 3),
    reboots_in_window=st.integers(0, 2),
)


@given(_signals, st.sampled_from(sorted(load_xid_catalog())))
def test_more_evidence_never_lowers_the_action(s: NodeSignals, extra_xid: int) -> None:
    before = ENGINE.decide(s).action
    if extra_xid == 154:  # defers to the recovery action the driver announces
        return
    s.xids = [*s.xids, extra_xid]
    assert ENGINE.decide(s).action >= before


def test_slurm_rendering() -> None:
    reboot = ENGINE.decide(NodeSignals(xids=[79]))
    assert render_slurm("n1", reboot) == [
        "scontrol reboot ASAP nextstate=resume reason='fmstack reboot_node: xid 79 "
        "(ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS): catalog RESTART_BM -> reboot_node' n1"
    ]
    reset = ENGINE.decide(NodeSignals(dbe_volatile_count=2))
    assert render_slurm("gpu-st-p5-7", reset) == [
        "scontrol update nodename=gpu-st-p5-7 state=drain reason='fmstack reset_gpu: 2 uncorrected (DBE) ECC errors'"
    ]
    assert render_slurm("n1", ENGINE.decide(NodeSignals(xids=[13]))) == []
    assert render_slurm_resume("n1") == ["scontrol update nodename=n1 state=resume"]


def test_k8s_rendering_uses_hyperpod_statuses() -> None:
    cases = {
        Action.NONE: "Schedulable",
        Action.RESTART_JOB: "Schedulable",
        Action.RESET_GPU: "Unschedulable",
        Action.REBOOT_NODE: "UnschedulablePendingReboot",
        Action.REPLACE_NODE: "UnschedulablePendingReplacement",
    }
    for action, status in cases.items():
        state = k8s_node_state(Decision(action, ["why: it broke"], []))
        assert state["labels"][HEALTH_LABEL] == status
        assert bool(state["add_taints"]) == (status != "Schedulable")
        for value in state["labels"].values():
            assert len(value) <= 63
    cmds = render_k8s("n1", ENGINE.decide(NodeSignals(row_remap_failure=True)))
    assert cmds[0].startswith(
        f"kubectl label node n1 --overwrite {HEALTH_LABEL}=UnschedulablePendingReplacement "
        "sagemaker.amazonaws.com/fault-types=REPLACE_NODE"
    )
    assert cmds[1] == f"kubectl taint node n1 --overwrite {HEALTH_LABEL}=UnschedulablePendingReplacement:NoSchedule"
    healthy = render_k8s("n1", ENGINE.decide(NodeSignals()))
    # removing an absent taint fails in kubectl: the removal runs only when the taint is there
    assert healthy[1].startswith("if kubectl get node n1 -o jsonpath=")
    assert healthy[1].endswith(f"; then kubectl taint node n1 {HEALTH_LABEL}:NoSchedule-; fi")


def test_signals_from_dict_names_the_field() -> None:
    s = signals_from_dict({"node": "n1", "xids": [79, 13], "gpus_visible": 7, "gpus_expected": 8})
    assert s.xids == [79, 13] and s.gpus_visible == 7
    with pytest.raises(InputError, match=r"signals\.colour: unknown field; allowed: node, xids"):
        signals_from_dict({"colour": 1})
    with pytest.raises(InputError, match=r"signals\.xids: expected a list of integer"):
        signals_from_dict({"xids": "79"})
    with pytest.raises(InputError, match=r"thermal_violation_ratio: is a fraction 0..1, got 2"):
        signals_from_dict({"thermal_violation_ratio": 2})
    with pytest.raises(InputError, match=r"row_remap_failure: expected true or false"):
        signals_from_dict({"row_remap_failure": 1})
    with pytest.raises(InputError, match="not a valid node name"):
        signals_from_dict({"node": "n1 && reboot"})


def test_signals_from_alerts() -> None:
    alerts = [
        {"state": "firing", "labels": {"alertname": "FmstackGpuXidRebootRequired", "Hostname": "n1", "xid": "79"}},
        {"state": "firing", "labels": {"alertname": "FmstackGpuRowRemapFailure", "Hostname": "n2"}},
        {"state": "pending", "labels": {"alertname": "FmstackGpuEccDbe", "Hostname": "n3"}},
        {"state": "firing", "labels": {"alertname": "FmstackEfaDeviceMissing", "Hostname": "n4"}},
    ]
    by_node = signals_from_alerts(alerts)
    assert sorted(by_node) == ["n1", "n2", "n4"]
    assert ENGINE.decide(by_node["n4"]).action is Action.REBOOT_NODE
    assert ENGINE.decide(by_node["n1"]).action is Action.REBOOT_NODE
    assert ENGINE.decide(by_node["n2"]).action is Action.REPLACE_NODE


def test_xid154_without_its_text_says_so() -> None:
    """Xid 154 seen (e.g. from an alert) without the recovery text: no action, and the reason must not claim the
    driver announced 'None'."""
    d = ENGINE.decide(NodeSignals(xids=[154]))
    assert d.action is Action.NONE
    assert d.reasons == ["xid 154 (GPU_RECOVERY_ACTION_CHANGED): recovery action not given -> none"]
    announced = ENGINE.decide(NodeSignals(xids=[154], xid154_action="Node Reboot Required")).reasons
    assert announced == ["xid 154 (GPU_RECOVERY_ACTION_CHANGED) announces 'Node Reboot Required' -> reboot_node"]
