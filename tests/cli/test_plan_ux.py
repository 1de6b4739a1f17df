"""Planning / calibration / catalog UX: what a user review found, each with the behaviour a user expects."""

from __future__ import annotations

import contextlib
import io
import json
import shlex
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.main import main
from fmstack.errors import InputError
from fmstack.perfmodel.calibration import CalibrationProfile, Curve, DeviceInfo
from fmstack.perfmodel.config import fill_defaults
from fmstack.perfmodel.efficiency import efficiency_from_profile
from fmstack.perfmodel.training import estimate_training


def _invoke_split(*args: str) -> tuple[int, str, str]:
    """The real entry point in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def _invoke(*args: str) -> tuple[int, str]:
    """The real entry point in this process: (exit code, stdout + stderr)."""
    code, out, err = _invoke_split(*args)
    return code, out + err


def _profile(device: DeviceInfo) -> CalibrationProfile:
    """A profile as `fmstack bench all --quick` writes on a CPU: an fp32 GEMM curve and a copy-bandwidth curve."""
    fp32 = Curve(x=[1e6, 1e9], y=[0.3, 0.6])
    copy = Curve(x=[1e6, 1e9], y=[12.0, 18.0])
    return CalibrationProfile(device=device, measured_at=datetime(2026, 11, 23), gemm_efficiency={"fp32": fp32},
                              memory_bw_gbps=copy)  # fmt: skip


CPU = DeviceInfo(name="AMD EPYC 7B13", kind="cpu", peak_memory_bw_gbps=20.0)
H100 = DeviceInfo(name="NVIDIA H100 80GB HBM3", kind="cuda", catalog_gpu="H100", peak_memory_bw_gbps=3350.0)


def test_profile_of_another_device_is_refused_naming_both(catalog: Catalog) -> None:
    with pytest.raises(InputError, match=r"'AMD EPYC 7B13' \(cpu, no catalog GPU\) but the cluster's GPU is H100") as e:
        efficiency_from_profile(_profile(CPU), catalog.gpu("H100"))
    assert e.value.field == "calibration" and "--calibration-force" not in e.value.message  # no use for a CPU's
    with pytest.raises(InputError, match=r"catalog GPU H100\) but the cluster's GPU is B200") as e:
        efficiency_from_profile(_profile(H100), catalog.gpu("B200"))
    assert "--calibration-force" in e.value.message
    # the profile's own GPU takes it; the fp32 curve replaces fp32, bf16 keeps its default
    own = efficiency_from_profile(_profile(H100), catalog.gpu("H100"))
    assert own.gemm["fp32"].y == [0.3, 0.6]


def test_estimate_refuses_a_cpu_profile_even_forced_and_force_applies_another_gpus(tmp_path: Path) -> None:
    """A CPU profile's efficiencies are fractions of the CPU's own best rate (about 1.0 at the top by construction):
    forced onto an H100 it predicted about 100 % of the H100's peak (bench review, session 8), so force no longer
    applies it; force still applies a profile of another catalog GPU, as the user asked."""
    path = tmp_path / "profile.json"
    path.write_text(_profile(CPU).model_dump_json())
    base = ["estimate", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--nodes", "1", "--json"]
    code, out = _invoke(*base)
    assert code == 0
    code, err = _invoke(*base, "--calibration", str(path))
    assert code == 2 and "calibration: profile measured on 'AMD EPYC 7B13'" in err
    assert "--calibration-force to apply it anyway" not in err
    code, err = _invoke(*base, "--calibration", str(path), "--calibration-force")
    assert code == 2 and "cannot calibrate a GPU even with --calibration-force" in err
    b200 = DeviceInfo(name="NVIDIA B200", kind="cuda", catalog_gpu="B200", peak_memory_bw_gbps=8000.0)
    path.write_text(_profile(b200).model_dump_json())
    code, err = _invoke(*base, "--calibration", str(path))
    assert code == 2 and "--calibration-force to apply it anyway" in err
    code, forced = _invoke(*base, "--calibration", str(path), "--calibration-force")
    assert code == 0
    assert json.loads(forced)["mfu"] != json.loads(out)["mfu"]  # applied, as the user asked


def test_plan_refuses_a_cpu_profile_before_searching(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text(_profile(CPU).model_dump_json())
    code, err = _invoke("plan", "train", "--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "8",
                        "--tokens", "1e12", "--calibration", str(path))  # fmt: skip
    assert code == 2 and "cluster's GPU is H100" in err


def test_plan_skips_an_instance_the_gpu_count_does_not_fit_and_plans_the_others() -> None:
    args = ["plan", "train", "--model", "llama3.1-8b", "--instance", "p6-b200.48xlarge,u-p6e-gb200x72",
            "--gpus", "2048", "--tokens", "1e12", "--top", "3"]  # fmt: skip
    code, out = _invoke(*args, "--json")
    assert code == 0, out
    data = json.loads(out)
    # 2048 GPUs = 512 nodes of 4 GPUs, not a whole number of 18-node (72-GPU) UltraServers
    assert len(data["skipped"]) == 1
    assert data["skipped"][0].startswith("u-p6e-gb200x72 at 2048 GPUs skipped: nodes: num_nodes(512) must be a "
                                         "multiple of 18")  # fmt: skip
    assert {r["instance"] for r in data["ranked"]} == {"p6-b200.48xlarge"}
    code, text = _invoke(*args)
    assert code == 0
    notes = [line for line in text.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: {data['skipped'][0]}"]


def test_catalog_show_instance_finds_an_ultraserver() -> None:
    code, out = _invoke("catalog", "show", "instance", "u-p6e-gb200x72", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["kind"] == "ultraserver" and data["name"] == "u-p6e-gb200x72" and data["num_gpus"] == 72
    code, text = _invoke("catalog", "show", "instance", "u-p6e-gb200x72")
    assert code == 0 and text.lstrip().startswith("ultraserver u-p6e-gb200x72")


def test_model_file_without_kind_is_a_model(catalog: Catalog, tmp_path: Path) -> None:
    data = catalog.model("llama3.1-8b").model_dump(mode="json", exclude_none=True)
    del data["kind"]
    path = tmp_path / "my8b.yaml"
    path.write_text(yaml.safe_dump({**data, "name": "my8b", "aliases": []}))
    arch = catalog.model(str(path))
    cluster = build_cluster(catalog, "p5.48xlarge", 1)
    cfg = fill_defaults(8, {})
    mine = estimate_training(arch, cluster, cfg).step_time_s
    assert arch.name == "my8b" and mine == estimate_training(catalog.model("llama3.1-8b"), cluster, cfg).step_time_s


def test_default_global_batch_is_what_help_says() -> None:
    # help: dp * mb (Megatron-LM's default, arguments.py), dp * mb * 4 * pp with pp > 1
    code, text = _invoke("estimate", "train", "--help")
    assert code == 0
    flat = " ".join(text.split())
    assert "[dp * mb, one micro-batch per replica as Megatron's default; with pp > 1, dp * mb * 4 * pp" in flat
    assert fill_defaults(8, {}).global_batch == 8  # dp 8, mb 1, pp 1
    assert fill_defaults(8, {"micro_batch": 2}).global_batch == 16
    assert fill_defaults(16, {"pp": 2}).global_batch == 8 * 1 * 4 * 2  # dp 8, 8 micro-batches: bubble 1/8


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "llama3.1-8b", "--instance", "p5.48xlarge", "--gpus", "64", "--tokens", "1e12"],
        ["--model", "llama3.1-70b", "--instance", "p5.48xlarge", "--gpus", "256", "--tokens", "1e12",
         "--global-batch", "512", "--seq-len", "4096"],
        ["--model", "qwen3-30b-a3b", "--instance", "p5.48xlarge", "--gpus", "64", "--tokens", "1e12"],
    ],
)  # fmt: skip
def test_plan_prints_the_estimate_command_that_reproduces_its_best(args: list[str]) -> None:
    code, out = _invoke("plan", "train", *args, "--top", "2", "--json")
    assert code == 0, out
    plan = json.loads(out)
    best = plan["ranked"][0]
    assert plan["estimate_command"] == best["estimate_command"]
    argv = shlex.split(best["estimate_command"])
    assert argv[:3] == ["fmstack", "estimate", "train"] and "--seq-len" in argv
    code, out = _invoke(*argv[1:], "--json")
    assert code == 0, out
    est = json.loads(out)
    assert est["config"] == best["config"]
    assert est["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-12)
    assert argv[argv.index("--tokens") + 1] == "1e12"  # the plan's token budget, so checkpoints and goodput follow
    code, text = _invoke("plan", "train", *args, "--top", "1")
    assert code == 0
    lines = text.splitlines()
    assert lines[lines.index("reproduce the best with:") + 1] == best["estimate_command"]
    seq = best["config"]["seq_len"]
    assert any(line.startswith("best: ") and f" seq{seq} " in line for line in lines)
