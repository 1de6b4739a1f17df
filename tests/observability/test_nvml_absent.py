"""NVML that cannot start on a node that should have GPUs: the exporter serves, the GPU source reports down.

A p5 node whose driver did not load after a reboot (or whose GPU fell off the bus at boot) answers nvmlInit with an
error. Refusing to start left only ``up == 0`` (FmstackExporterDown, action none) and took the EFA and Lustre
series with it; with ``--expected-gpus`` the exporter now serves ``fmstack_exporter_source_up{source="gpu"} 0``, so
FmstackGpuSourceDown fires and the health engine reboots the node. Without ``--expected-gpus`` (a node that may have
no GPU) it is still one line, exit 2.
"""

from __future__ import annotations

import shutil
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from fmstack.cli.main import cli
from fmstack.errors import InputError
from fmstack.observability.node import build_node_exporter
from tests.observability.test_nvml import NVML_CONSTS


class _Err(Exception):
    pass


def _pynvml(state: dict[str, bool]) -> types.ModuleType:
    """nvmlInit fails until ``state["driver"]``; then one GPU whose every optional getter is unsupported."""
    m = types.ModuleType("pynvml")

    def init() -> None:
        if not state["driver"]:
            raise _Err("Driver Not Loaded")

    def unsupported(*_a: object) -> None:
        raise _Err("not supported")

    ns = types.SimpleNamespace
    funcs: dict[str, object] = dict(
        NVMLError=_Err, nvmlInit=init, nvmlShutdown=lambda: None, nvmlEventSetCreate=unsupported,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetUUID=lambda h: "GPU-0",
        nvmlDeviceGetPciInfo=lambda h: ns(busId=b"00000000:53:00.0"), nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetTemperature=lambda h, s: 61, **NVML_CONSTS,
    )  # fmt: skip
    for name in [
        "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetClockInfo", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows", "nvmlDeviceGetViolationStatus", "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetNvLinkState", "nvmlGpmQueryDeviceSupport",
    ]:  # fmt: skip
        funcs[name] = unsupported
    for k, v in funcs.items():
        setattr(m, k, v)
    return m


def test_nvml_down_with_expected_gpus_serves_the_gpu_source_down(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = {"driver": False}
    monkeypatch.setitem(sys.modules, "pynvml", _pynvml(state))
    warnings: list[str] = []
    exp = build_node_exporter(
        hostname="n1", backend="nvml", sysfs_root=tmp_path, expected_gpus=8, efa=False, warn=warnings.append
    )
    text = exp.render().decode()
    assert 'fmstack_exporter_source_up{source="gpu",Hostname="n1"} 0.0' in text
    assert 'fmstack_exporter_source_up{source="lustre",Hostname="n1"} 1.0' in text  # the rest is still served
    assert "DCGM_FI_" not in text and "fmstack_gpus{" not in text  # no GPU value is made up
    assert "Driver Not Loaded" in exp.last_error["gpu"]
    assert len(warnings) == 1 and "Driver Not Loaded" in warnings[0] and "reports down" in warnings[0]
    state["driver"] = True  # the driver comes up (e.g. after a GPU reset): the next scrape reads the GPU
    text = exp.render().decode()
    assert 'fmstack_exporter_source_up{source="gpu",Hostname="n1"} 1.0' in text
    assert 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0"' in text
    assert 'fmstack_gpus{Hostname="n1"} 1.0' in text and 'fmstack_gpus_expected{Hostname="n1"} 8.0' in text


def test_nvml_down_without_expected_gpus_is_an_input_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _pynvml({"driver": False}))
    with pytest.raises(InputError, match="--backend: nvml: NVML init failed: Driver Not Loaded"):
        build_node_exporter(hostname="n1", backend="nvml", sysfs_root=tmp_path, efa=False)
    with pytest.raises(InputError, match="--backend"):  # expecting 0 GPUs is no reason to wait for NVML
        build_node_exporter(hostname="n1", backend="nvml", sysfs_root=tmp_path, expected_gpus=0, efa=False)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_cli_on_this_gpu_less_machine(tmp_path: Path) -> None:
    """The real nvidia-ml-py (or its absence) on a machine without a driver: exit 0, GPU source down, no GPU values."""
    pytest.importorskip("pynvml")
    result = CliRunner().invoke(
        cli,
        ["exporter", "--expected-gpus", "8", "--no-efa", "--sysfs-root", str(tmp_path), "--hostname", "n1", "--once"],
    )
    assert result.exit_code == 0, result.output
    assert 'fmstack_exporter_source_up{source="gpu",Hostname="n1"} 0.0' in result.stdout
    assert "DCGM_FI_" not in result.stdout
    assert "GPU source reports down" in result.stderr


@pytest.mark.parametrize("backend", ["fake", "none"])
def test_the_gpu_backend_is_in_the_scrape(backend: str, tmp_path: Path) -> None:
    """A fake node looks like a real H100 node under the real host name: the scrape says which backend served it
    (fmstack_exporter_build_info{gpu_backend}), and a fake one is announced on stderr."""
    import fmstack

    warnings: list[str] = []
    exp = build_node_exporter(hostname="n1", backend=backend, sysfs_root=tmp_path, efa=False, warn=warnings.append)
    text = exp.render().decode()
    line = f'fmstack_exporter_build_info{{version="{fmstack.__version__}",gpu_backend="{backend}",Hostname="n1"}} 1.0'
    assert line in text.splitlines()
    assert ("fake GPU data" in " ".join(warnings)) is (backend == "fake")
