"""`--calibration` on estimate serve / plan serve / estimate rl / plan rl: a measured profile prices serving and RL.

The profile is synthetic, an H100 (catalog GPU ``H100``: 989.5 TFLOP/s BF16 dense, 3.35 TB/s HBM) measured at half
the default Hopper fractions: copy bandwidth 1,340 GB/s of its 3,350 GB/s peak (0.4, the default is 0.8) and a flat
BF16 GEMM curve at 0.38 (the default plateau is 0.76, so the attention fraction 0.4 scales to 0.4 x 0.38 / 0.76 =
0.2). The numbers below are the roofline of ``fmstack.perfmodel.inference_step`` by hand for llama3.1-8b on one
GPU (32 layers, hidden 4096, 8 KV heads of 128, FFN 14336, vocabulary 128256, bf16).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.common import calibration_for
from fmstack.cli.plan_serve_render import plan_serve_json
from fmstack.perfmodel.calibration import CalibrationProfile, Curve, DeviceInfo
from fmstack.perfmodel.efficiency import default_efficiency, efficiency_from_profile
from fmstack.perfmodel.inference import ServeConfig, estimate_serve
from fmstack.perfmodel.inference_disagg import SLO, compare_disaggregation
from fmstack.perfmodel.inference_plan import plan_serve
from fmstack.perfmodel.inference_plan_candidate import config_of
from fmstack.perfmodel.rl import RLConfig, estimate_rl
from tests.cli.test_plan_ux import _invoke_split

H100 = DeviceInfo(name="NVIDIA H100 80GB HBM3", kind="cuda", catalog_gpu="H100", peak_memory_bw_gbps=3350.0)
HALF = CalibrationProfile(device=H100, measured_at=datetime(2026, 11, 23),
                          gemm_efficiency={"bf16": Curve(x=[1e6, 1e13], y=[0.38, 0.38])},
                          memory_bw_gbps=Curve(x=[1e6, 1e9], y=[1340.0, 1340.0]))  # fmt: skip
SOURCE = "calibration profile of NVIDIA H100 80GB HBM3 measured 2026-11-23"

# llama3.1-8b, one iteration on one H100 (bf16, tp 1)
LINEAR_PARAMS = 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336)  # q, o; k, v; SwiGLU: 6,979,321,856
NORM_PARAMS = 32 * 2 * 4096 + 4096  # two RMSNorms a layer and the final one
HEAD_PARAMS = 128256 * 4096  # the untied LM head
WEIGHT_BYTES = 2 * (LINEAR_PARAMS + NORM_PARAMS + HEAD_PARAMS)  # read once an iteration: 15,009,849,344 B
KV_BYTES_PER_TOKEN = 2 * 32 * 1024 * 2  # K and V, 32 layers, 8 heads x 128, 2 B: 131,072
ELEMENTWISE_BYTES_PER_TOKEN = 32 * (20 * 4096 + 6 * 14336)  # norms and residuals 20 h, SwiGLU 6 ffn, per layer
OVERHEAD_S = 1e-3 + 32 * 8e-6  # ITERATION_OVERHEAD_S + 32 layers x LAYER_OVERHEAD_S
PEAK_FLOPS, HBM_BPS = 989.5e12, 3.35e12
PROMPT, OUTPUT = 1024, 128

SERVE = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--input-len", str(PROMPT),
         "--output-len", str(OUTPUT), "--concurrency", "1", "--scheduler", "static", "--no-simulate", "--json"]  # fmt: skip
RL = ["estimate", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--prompts", "64", "--samples", "8",
      "--prompt-len", "512", "--response-len", "512", "--rollout-tp", "1", "--train-tp", "1", "--json"]  # fmt: skip


@pytest.fixture
def half(tmp_path: Path) -> Path:
    path = tmp_path / "h100.json"
    path.write_text(HALF.model_dump_json())
    return path


def _json(*args: str) -> dict[str, object]:
    code, out, err = _invoke_split(*args)
    assert code == 0, err
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def _decode_s(memory: float) -> float:
    """One decode token at batch 1 (static batching: the ITL), context prompt + output / 2: the weights, the KV cache
    and the new token's K and V, the elementwise kernels, all at ``memory`` x 3.35 TB/s, plus the fixed overhead."""
    kv = (PROMPT + OUTPUT // 2 + 1) * KV_BYTES_PER_TOKEN
    return (WEIGHT_BYTES + kv + ELEMENTWISE_BYTES_PER_TOKEN) / (HBM_BPS * memory) + OVERHEAD_S


def test_estimate_serve_takes_the_profiles_hbm_gemm_and_attention_fractions(half: Path) -> None:
    default = _json(*SERVE)
    calibrated = _json(*SERVE, "--calibration", str(half))
    assert "efficiency_source" not in default and calibrated["efficiency_source"] == SOURCE
    # decode at batch 1 reads every weight once: 15.01 GB at 0.8 x 3.35 TB/s = 5.60 ms, at 0.4: 11.20 ms
    assert default["itl_s"] == pytest.approx(_decode_s(0.8), rel=1e-12)  # 6.912 ms
    assert calibrated["itl_s"] == pytest.approx(_decode_s(0.4), rel=1e-12)  # 12.568 ms
    assert calibrated["itl_s"] - OVERHEAD_S == pytest.approx(2 * (default["itl_s"] - OVERHEAD_S), rel=1e-12)
    # the 1024-token prompt (static batching: TTFT is its iteration) is compute-bound: its linear layers (and the LM
    # head on its last token) at 0.38 of 989.5 TFLOP/s, its causal attention at 0.2, its K / V writes and
    # elementwise kernels at 0.4 of the HBM bandwidth
    gemm = (PROMPT * 2 * LINEAR_PARAMS + 2 * HEAD_PARAMS) / (PEAK_FLOPS * 0.38)
    attention = PROMPT * (PROMPT + 1) / 2 * 4 * 4096 * 32 / (PEAK_FLOPS * 0.2)
    memory = PROMPT * (KV_BYTES_PER_TOKEN + ELEMENTWISE_BYTES_PER_TOKEN) / (HBM_BPS * 0.4)
    assert calibrated["ttft_s"] == pytest.approx(gemm + attention + memory + OVERHEAD_S, rel=1e-12)  # 44.87 ms


def test_disagg_and_split_use_the_profile(half: Path) -> None:
    args = ["estimate", "serve", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--tp", "1",
            "--input-len", "2048", "--output-len", "256", "--no-simulate", "--json"]  # fmt: skip
    disagg = [*args, "--disagg", "--ttft-slo", "1", "--itl-slo", "0.05"]
    default, calibrated = _json(*disagg), _json(*disagg, "--calibration", str(half))
    d0, d1 = default["disaggregation"], calibrated["disaggregation"]
    assert isinstance(d0, dict) and isinstance(d1, dict) and calibrated["efficiency_source"] == SOURCE
    # the prompt alone: each part at the calibrated fraction, GEMMs 0.38 for 0.72-0.76 at this size, attention 0.2 for
    # 0.4, HBM 0.4 for 0.8; the fixed overhead as it was: between 1.89 and 2 times as long
    assert 1.5 < d1["prefill_s"] / d0["prefill_s"] < 2.0 and d1["disagg_rps"] < d0["disagg_rps"]
    split = [*args, "--qps", "20", "--prefill-replicas", "4", "--decode-replicas", "4"]
    s0, s1 = _json(*split)["disaggregated_simulation"], _json(*split, "--calibration", str(half))
    z1 = s1["disaggregated_simulation"]
    assert isinstance(s0, dict) and isinstance(z1, dict) and s1["efficiency_source"] == SOURCE
    assert z1["prefill_s"] == d1["prefill_s"]  # the same replica's prompt, priced with the same profile
    assert z1["itl_p50_s"] > s0["itl_p50_s"]


def test_plan_serve_prices_with_the_profile_and_its_commands_reapply_it(half: Path) -> None:
    args = ["plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
            "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.4xlarge", "--json"]  # fmt: skip
    default, calibrated = _json(*args), _json(*args, "--calibration", str(half))
    assert "efficiency_source" not in default and calibrated["efficiency_source"] == SOURCE
    best = calibrated["best"]
    assert isinstance(best, dict) and isinstance(default["best"], dict)
    assert best["rate_per_replica_rps"] < default["best"]["rate_per_replica_rps"]
    rows = calibrated["candidates"]
    assert isinstance(rows, list)
    assert all(r["estimate_command"].endswith(f"--calibration {half}") for r in rows)
    # the best row's command, run, prices the same replica at the same point (calibrated as the plan priced it)
    again = _json(*shlex.split(str(calibrated["estimate_command"]))[1:], "--json")
    assert again["requests_per_s"] == pytest.approx(best["rate_per_replica_rps"], rel=1e-9)
    assert again["itl_s"] == pytest.approx(best["mean_itl_s"], rel=1e-9)


def test_estimate_rl_calibrates_the_rollout_and_the_training(half: Path) -> None:
    default, calibrated = _json(*RL), _json(*RL, "--calibration", str(half))
    assert "efficiency_source" not in default and calibrated["efficiency_source"] == SOURCE
    p0, p1 = default["parts_s"], calibrated["parts_s"]
    assert isinstance(p0, dict) and isinstance(p1, dict)
    assert p1["rollout"] > 1.5 * p0["rollout"]  # generation: mostly weight reads at half the bandwidth
    assert p1["actor_train"] > 1.5 * p0["actor_train"]  # training: GEMMs at half the fraction
    # the training step is estimate train's, on the same layout with the same profile
    step, cfg = calibrated["train_step"], calibrated["train_step"]["config"]  # type: ignore[index]
    train = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--tp", str(cfg["tp"]),
             "--pp", str(cfg["pp"]), "--dp", str(cfg["dp"]), "--micro-batch", str(cfg["micro_batch"]),
             "--global-batch", str(cfg["global_batch"]), "--seq-len", str(cfg["seq_len"]), "--recompute",
             cfg["recompute"], "--sharding", cfg["sharding"], "--master-weights", cfg["master_weights"],
             "--optimizer-state", cfg["optimizer_state_dtype"], "--calibration", str(half), "--json"]  # fmt: skip
    estimated = _json(*train)
    assert estimated["step_time_s"] == step["step_time_s"]  # type: ignore[index]
    assert estimated["efficiency_source"] == SOURCE


def test_plan_rl_commands_reapply_the_profile(half: Path) -> None:
    args = ["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--prompts", "64",
            "--samples", "8", "--prompt-len", "512", "--response-len", "512", "--top", "3", "--json"]  # fmt: skip
    default, calibrated = _json(*args), _json(*args, "--calibration", str(half))
    assert "efficiency_source" not in default and calibrated["efficiency_source"] == SOURCE
    rows = calibrated["ranked"]
    assert isinstance(rows, list) and isinstance(default["ranked"], list)
    assert rows[0]["step_time_s"] > default["ranked"][0]["step_time_s"]
    assert all(r["estimate_command"].endswith(f"--calibration {half}") for r in rows)
    again = _json(*shlex.split(rows[0]["estimate_command"])[1:], "--json")
    assert again["step_time_s"] == rows[0]["step_time_s"]


def test_plan_train_json_names_the_efficiency_source(half: Path) -> None:
    args = ["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12",
            "--top", "2", "--json"]  # fmt: skip
    default, calibrated = _json(*args), _json(*args, "--calibration", str(half))
    assert "efficiency_source" not in default and calibrated["efficiency_source"] == SOURCE
    assert "efficiency_source" not in _json("estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge",
                                            "--json")  # fmt: skip


def test_the_tables_say_which_efficiency_priced_them(half: Path) -> None:
    plans = (
        ["plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
         "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.4xlarge"],
        ["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--prompts", "64",
         "--samples", "8", "--prompt-len", "512", "--response-len", "512", "--top", "1"],
        ["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens", "1e12"],
        ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge"],
    )  # fmt: skip
    for args in (SERVE[:-1], RL[:-1], *plans):
        code, out, err = _invoke_split(*args, "--calibration", str(half))
        assert code == 0, err
        assert f"efficiency: {SOURCE}" in out.splitlines()
        code, out, err = _invoke_split(*args)
        assert code == 0 and "efficiency:" not in out


def test_a_profile_that_measures_the_defaults_changes_nothing(catalog: Catalog) -> None:
    """The Hopper default curves measured back (GEMM curves as ``efficiency.yaml``, copy bandwidth 0.8 x 3,350 GB/s):
    serving and RL estimates through the calibrated path are the default path's, bit for bit."""
    h100 = catalog.gpu("H100")
    base = default_efficiency(h100)
    same = CalibrationProfile(device=H100, measured_at=datetime(2026, 11, 23), gemm_efficiency=dict(base.gemm),
                              memory_bw_gbps=Curve(x=[1e9], y=[0.8 * 3350.0]))  # fmt: skip
    eff = efficiency_from_profile(same, h100)
    assert (eff.gemm, eff.attention, eff.memory) == (base.gemm, base.attention, base.memory)
    model, cluster = catalog.model("llama3.1-8b"), build_cluster(catalog, "p5.48xlarge", 2)
    cfg = ServeConfig(input_len=512, output_len=128, concurrency=16)
    assert estimate_serve(model, cluster, cfg, efficiency=eff) == estimate_serve(model, cluster, cfg)
    rl = RLConfig(prompts_per_step=64, samples_per_prompt=8, prompt_len=512, response_len=512, rollout_tp=1,
                  train_tp=1, length_spread=0.2)  # fmt: skip
    for placement in ("colocated", "split"):
        one = replace(rl, placement=placement)
        assert estimate_rl(model, cluster, one, efficiency=eff) == estimate_rl(model, cluster, one)


def test_plan_serve_prices_and_simulates_every_deployment_with_the_profile(catalog: Catalog, half: Path) -> None:
    """Analytic rows, simulated rows (colocated and split) and the mean-field comparison all use the profile: a
    split row's command (with --calibration) reproduces its simulated percentiles bit for bit, and the comparison
    is estimate serve --disagg's with the profile."""
    model, slo = catalog.model("llama3.1-8b"), SLO(ttft_s=1.0, itl_s=0.05)
    eff_for = calibration_for(half, [build_cluster(catalog, "p5.48xlarge", 1)], False)
    assert eff_for is not None
    plan = plan_serve(catalog, model, qps=40, input_len=2048, output_len=256, slo=slo, instances=("p5.48xlarge",),
                      efficiency_for=eff_for)  # fmt: skip
    default = plan_serve(catalog, model, qps=40, input_len=2048, output_len=256, slo=slo, instances=("p5.48xlarge",))
    assert plan.best.sim != default.best.sim
    best = plan.best
    cfg = config_of(best, 2048, 256)
    cluster = build_cluster(catalog, "p5.48xlarge", best.nodes)
    assert plan.disaggregation == compare_disaggregation(model, cluster, cfg, slo, efficiency=eff_for(cluster))
    data = plan_serve_json(plan, "llama3.1-8b", len(plan.candidates), None, extra=["--calibration", str(half)])
    splits = [r for r in data["candidates"] if r["mode"] == "disaggregated" and r["sim"] is not None]
    assert splits
    for r in splits:
        z = _json(*shlex.split(r["estimate_command"])[1:], "--json")["disaggregated_simulation"]
        assert isinstance(z, dict)
        for key, value in r["sim"].items():
            assert z[key] == value, key


def test_the_html_reports_say_which_efficiency_priced_them(half: Path, tmp_path: Path) -> None:
    """The three planners' --html pages carry the profile in their subtitle (review, 2026-11-24)."""
    plans = {
        "serve": ["plan", "serve", "--model", "llama3.1-8b", "--qps", "5", "--input-len", "512", "--output-len", "128",
                  "--ttft-p99", "0.5", "--itl-p99", "0.05", "--instance", "p5.4xlarge"],
        "rl": ["plan", "rl", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--prompts",
               "64", "--samples", "8", "--prompt-len", "512", "--response-len", "512", "--top", "1"],
        "train": ["plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8", "--tokens",
                  "1e12", "--top", "1"],
    }  # fmt: skip
    for name, args in plans.items():
        page = tmp_path / f"{name}.html"
        code, _, err = _invoke_split(*args, "--calibration", str(half), "--html", str(page))
        assert code == 0, err
        assert f"efficiencies from the {SOURCE}" in page.read_text() or f"priced with the {SOURCE}" in page.read_text()
        plain = tmp_path / f"{name}-default.html"
        code, _, err = _invoke_split(*args, "--html", str(plain))
        assert code == 0 and "calibration profile" not in plain.read_text()
