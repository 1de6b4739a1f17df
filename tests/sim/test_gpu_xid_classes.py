"""GPU faults by Xid class (session 17): Llama 3 Table 5's GPU rows, each as NVIDIA's node signals, the health
engine deciding the action; shares and down time checked against a hand calculation.

By hand (llama3, 8-GPU p5 nodes, auto-resume; a node with no resets or reboots in its window): of 268 GPU faults
148 are Xid 79 (reboot), 72 HBM3 Xid 48 + 63 (reset), 9.5 SRAM Xid 94 (restart the job), 9.5 SRAM Xid 95 (reset),
17 GSP Xid 119 (reset), 6 silent data corruption (diagnostics fail: replace), 6 thermal (restart the job):
reset 98.5/268 = 0.3675, reboot 148/268 = 0.5522, replace 6/268 = 0.0224, restart 15.5/268 = 0.0578 (before:
reboot 1.0). A node fails 419 / (2,048 x 54) = 3.789 times per 1,000 node-days, 2.423 of them GPU faults; out of
service after detection for reset 600 s, reboot 1,800 s, replace 3,600 s: GPU faults take
2.423 x 8 x (0.3675 x 600 + 0.5522 x 1,800 + 0.0224 x 3,600) / 3,600 = 6.97 GPU-h per 1,000 node-days (before:
2.423 x 8 x 0.5 = 9.69). Repeats on a node escalate (the engine: a third reset reboots, a second reboot
replaces); the simulation test adds that with the exact per-node chain below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.errors import InputError
from fmstack.observability.health import Action, HealthEngine
from fmstack.perfmodel.failures import load_failure_model
from fmstack.sim.config import SimConfig
from fmstack.sim.faults import RepairTimes, decide, engine_action
from fmstack.sim.gpu_faults import GpuFaultMix, draw_gpu_class
from fmstack.sim.metrics import summarise
from fmstack.sim.simulator import Simulator
from fmstack.sim.workload import Job
from tests.sim.conftest import FlatSpeed

ENGINE = HealthEngine()
FIRST = {
    "faulty_gpu_xid79": Action.REBOOT_NODE,
    "hbm3_ecc_remap_pending": Action.RESET_GPU,
    "hbm3_remap_failure": Action.REPLACE_NODE,
    "sram_contained_xid94": Action.RESTART_JOB,
    "sram_uncontained_xid95": Action.RESET_GPU,
    "gsp_xid119": Action.RESET_GPU,
    "silent_data_corruption": Action.REPLACE_NODE,
    "thermal_slowdown": Action.RESTART_JOB,
}


def test_classes_are_table5_gpu_rows() -> None:
    classes = GpuFaultMix().classes()
    assert sum(k.count for k in classes) == 268  # Llama 3 Table 5: 148 + 72 + 19 + 17 + 6 + 6
    by_row: dict[str, float] = {}
    for k in classes:
        by_row[k.row] = by_row.get(k.row, 0.0) + k.count
    assert by_row == {"Faulty GPU": 148, "GPU HBM3 memory": 72, "GPU SRAM memory": 19, "GPU system processor": 17,
                      "Silent data corruption": 6, "GPU thermal interface + sensor": 6}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FIRST))
def test_the_engine_decides_each_class(name: str) -> None:
    k = next(c for c in GpuFaultMix(remap_failure_share=0.5).classes() if c.name == name)
    assert decide(ENGINE, "gpu", k, 8, 0, 0) is FIRST[name]
    # repeats escalate through the engine: a third reset reboots, a second reboot replaces
    if FIRST[name] is Action.RESET_GPU:
        assert decide(ENGINE, "gpu", k, 8, 2, 0) is Action.REBOOT_NODE
    if FIRST[name] is Action.REBOOT_NODE:
        assert decide(ENGINE, "gpu", k, 8, 0, 1) is Action.REPLACE_NODE


def test_the_draw_follows_the_shares_and_the_seed() -> None:
    classes = GpuFaultMix().classes()
    a = [draw_gpu_class(np.random.default_rng(7), classes).name for _ in range(3)]
    assert len(set(a)) == 1  # same seed, same class
    rng, n = np.random.default_rng(0), 200_000
    got = [draw_gpu_class(rng, classes).name for _ in range(n)]
    for k in classes:
        p = k.count / 268
        se = math.sqrt(p * (1 - p) / n)  # binomial standard error
        assert got.count(k.name) / n == pytest.approx(p, abs=4 * se + 1e-12), k.name
    assert got.count("hbm3_remap_failure") == 0  # share 0 by default ([D], module docstring)


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_a_share_outside_0_1_is_refused(bad: float) -> None:
    with pytest.raises(InputError, match="remap_failure_share"):
        GpuFaultMix(remap_failure_share=bad)


def _chain(lam_per_node: float, cat_shares: dict[str, float], mix: GpuFaultMix) -> dict[tuple[str, Action], float]:
    """Expected faults per node by (category, action) over a Poisson(lam_per_node) number of faults, walking the
    twin's per-node counters with a recurrence window of the whole run (``health_window_h=inf``): the engine's
    restart-job adds a restart (a thermal slowdown's restart does not: the engine took no action), a reset a reset,
    a reboot a reboot, a replacement clears them. Exact but for faults dropped while a node is out (about 1e-4 of
    them here)."""
    classes = mix.classes()
    out: dict[tuple[str, Action], float] = {}
    state = {(0, 0, 0): 1.0}
    p_at_least = 1.0 - math.exp(-lam_per_node)  # P(N >= 1)
    pmf = math.exp(-lam_per_node)  # P(N = 0)
    for k in range(1, 60):
        nxt: dict[tuple[int, int, int], float] = {}
        for (q, r, b), ps in state.items():
            for cat, pc in cat_shares.items():
                options = [(x, x.count / 268) for x in classes if x.count > 0] if cat == "gpu" else [(None, 1.0)]
                for gpu_fault, pk in options:
                    raw = engine_action(ENGINE, cat, gpu_fault, 8, r, b, q)
                    action = Action.RESTART_JOB if raw is Action.NONE else raw
                    w = ps * pc * pk
                    out[(cat, action)] = out.get((cat, action), 0.0) + w * p_at_least
                    # the engine compares each count with its threshold only (1, 2, 1): capped, the chain stays exact
                    s = {Action.RESTART_JOB: (1, r, b), Action.RESET_GPU: (q, min(r + 1, 2), b),
                         Action.REBOOT_NODE: (q, r, 1), Action.REPLACE_NODE: (0, 0, 0)}.get(raw, (q, r, b))  # fmt: skip
                    nxt[s] = nxt.get(s, 0.0) + w
        state = nxt
        pmf *= lam_per_node / k
        p_at_least -= pmf
    return out


def test_simulated_actions_and_down_time_match_the_hand_calculation(catalog: Catalog) -> None:
    nodes, days = 2048, 366.0
    # the whole run as the recurrence window (the twin before session 17, restarts now counted too): the chain
    cfg = SimConfig(nodes=nodes, days=days, faults="llama3", planned=False, seed=3, health_window_h=math.inf)
    job = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=1.0, time_limit_s=3600.0)  # the fleet is idle: all down
    sim = Simulator(cfg, catalog, speed=FlatSpeed(), jobs=[job]).run()
    model = load_failure_model("llama3")
    per_node_day = model.node_failures_per_hour(8) * 24.0
    assert per_node_day * 1000 == pytest.approx(419 / (2048 * 54) * 1000, rel=1e-12)  # 3.789
    lam = per_node_day * days  # 1.387 faults per node over the year: repeats escalate
    exp = _chain(lam, model.node_category_shares(8), GpuFaultMix())
    gpu_exp = {a: v for (c, a), v in exp.items() if c == "gpu"}
    gpu_total = sum(gpu_exp.values())
    gpu_log = [f for f in sim.fault_log if f["category"] == "gpu"]
    n = len(gpu_log)
    assert n == pytest.approx(gpu_total * nodes, rel=4 / math.sqrt(gpu_total * nodes))  # 1,817 expected
    for action in (Action.RESET_GPU, Action.REBOOT_NODE, Action.REPLACE_NODE, Action.RESTART_JOB):
        p = gpu_exp.get(action, 0.0) / gpu_total
        got = sum(1 for f in gpu_log if f["action"] == action.name) / n
        se = math.sqrt(p * (1 - p) / n)  # binomial standard error of a share of n faults: 0.005-0.012
        assert got == pytest.approx(p, abs=4 * se), (action, got, p)
    # down GPU-hours (nothing runs: every out-of-service hour is down): detection + repair per fault x 8 GPUs
    rep, det = RepairTimes(), sim.times.detection_s
    hours = {a: (det + rep.out_s(a, sim.times.replacement_s)) * 8 / 3600.0 for a in Action}
    mean = sum(v * hours[a] for (_, a), v in exp.items()) * nodes
    sd = math.sqrt(sum(v * hours[a] ** 2 for (_, a), v in exp.items()) * nodes)  # compound Poisson
    s = summarise(sim)
    assert s["gpu_hours"]["down"] == pytest.approx(mean, abs=4 * sd)
    # first faults alone (no history), per 1,000 node-days: the module docstring's 6.97 GPU-h of GPU repairs
    first = {a: sum(k.count for k in GpuFaultMix().classes() if FIRST[k.name] is a) / 268 for a in Action}
    assert [first[a] for a in (Action.RESET_GPU, Action.REBOOT_NODE, Action.REPLACE_NODE, Action.RESTART_JOB)] == \
        pytest.approx([98.5 / 268, 148 / 268, 6 / 268, 15.5 / 268], rel=1e-12)  # fmt: skip
    gpu_rate = per_node_day * 1000 * 268 / 419
    repair_h = sum(first[a] * rep.out_s(a, 3600.0) for a in Action) * 8 / 3600.0
    assert gpu_rate * repair_h == pytest.approx(6.975, abs=5e-3)
    assert s["failures"]["by_gpu_fault"]["faulty_gpu_xid79"] == sum(
        1 for f in gpu_log if f["gpu_fault"] == "faulty_gpu_xid79"
    )


def test_same_seed_same_classes(catalog: Catalog) -> None:
    cfg = SimConfig(nodes=512, days=60.0, faults="llama3", seed=5)
    a, b = (
        Simulator(cfg, catalog, speed=FlatSpeed(), jobs=[Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=1.0,
                  time_limit_s=3600.0)]).run().fault_log
        for _ in range(2)
    )  # fmt: skip
    assert [f["gpu_fault"] for f in a] == [f["gpu_fault"] for f in b]
    assert any(f["gpu_fault"] for f in a)


def test_with_the_24_h_window_faults_act_as_first_faults(catalog: Catalog) -> None:
    # the default recurrence window (24 h): a node fails 3.789 times per 1,000 node-days, so a fault has an earlier
    # one on its node within the window with probability about 1 - exp(-0.003789) = 0.0038: the GPU faults' actions
    # are the no-history shares (reset 98.5/268, reboot 148/268, replace 6/268, restart 15.5/268) to within that,
    # far below the binomial standard error of about 1,820 faults (0.005-0.012)
    cfg = SimConfig(nodes=2048, days=366.0, faults="llama3", planned=False, seed=3)
    job = Job(job_id=1, submit_s=0.0, num_gpus=8, work_s=1.0, time_limit_s=3600.0)
    sim = Simulator(cfg, catalog, speed=FlatSpeed(), jobs=[job]).run()
    gpu_log = [f for f in sim.fault_log if f["category"] == "gpu"]
    n = len(gpu_log)
    for action, count in ((Action.RESET_GPU, 98.5), (Action.REBOOT_NODE, 148), (Action.REPLACE_NODE, 6),
                          (Action.RESTART_JOB, 15.5)):  # fmt: skip
        p = count / 268
        got = sum(1 for f in gpu_log if f["action"] == action.name) / n
        assert got == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / n) + 0.0038), (action, got, p)
    escalated = sum(summarise(sim)["failures"]["escalations"].values())
    bound = 0.0038 * len(sim.fault_log)  # every fault with an earlier one in its window escalating: 11.1 of 2,922
    assert escalated <= bound + 4 * math.sqrt(bound)  # seed 3: 4
