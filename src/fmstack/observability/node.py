"""Assemble a node exporter from its sources (what ``fmstack exporter`` runs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fmstack.errors import InputError
from fmstack.observability.app_source import AppDirSource
from fmstack.observability.efa import EfaSource
from fmstack.observability.exporter import Exporter, Source
from fmstack.observability.gpu import GpuBackend, GpuReadError
from fmstack.observability.lustre import LustreSource
from fmstack.observability.sysfs import OsFs


def make_gpu_backend(
    kind: str,
    fake_script: Path | None = None,
    expected_gpus: int | None = None,
    warn: Callable[[str], None] | None = None,
) -> GpuBackend:
    """``nvml``: the real NVML; ``fake``: the scripted fake (8 x H100, or ``fake_script``).

    NVML that does not initialise is bad input (exit 2), unless ``expected_gpus`` says the node has GPUs: then the
    source keeps retrying and reports down until NVML comes up (:class:`~fmstack.observability.gpu.NvmlWhenReady`),
    and ``warn`` is told once."""
    from fmstack.observability.fake import FakeGpuBackend

    if kind == "fake":
        if fake_script is None:
            return FakeGpuBackend(num_gpus=8)
        try:
            return FakeGpuBackend.from_json(fake_script)
        except OSError as exc:
            raise InputError("--fake-script", f"cannot read {fake_script}: {exc.strerror}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError("--fake-script", f"{fake_script}: {exc}") from None
    if kind == "nvml":
        from fmstack.observability.gpu import NvmlBackend

        try:
            return NvmlBackend()
        except ImportError:
            raise InputError("--backend", "nvml needs nvidia-ml-py: pip install 'fmstack[observe]'") from None
        except GpuReadError as exc:
            if expected_gpus:
                from fmstack.observability.gpu import NvmlWhenReady

                if warn is not None:
                    warn(
                        f"fmstack exporter: {exc}; the node should have {expected_gpus} GPUs (--expected-gpus), so the"
                        ' GPU source reports down (fmstack_exporter_source_up{source="gpu"} 0) until NVML starts'
                    )
                return NvmlWhenReady(str(exc))
            raise InputError("--backend", f"nvml: {exc}; on a node without GPUs use --backend none") from None
    raise InputError("--backend", f"unknown backend {kind!r}; allowed: nvml, fake, none")


def build_node_exporter(
    *,
    hostname: str,
    backend: str = "nvml",
    fake_script: Path | None = None,
    sysfs_root: Path = Path("/"),
    app_dir: Path | None = None,
    expected_gpus: int | None = None,
    expected_efa: int | None = None,
    gpu_poll_interval_s: float | None = None,
    gpu_deadline_s: float | None = None,
    app_max_age_s: float | None = None,
    efa: bool = True,
    warn: Callable[[str], None] | None = None,
) -> Exporter:
    """GPU (unless ``backend == "none"``), EFA (unless ``efa`` is false), Lustre and, with ``app_dir``, app sources.

    With ``gpu_poll_interval_s`` the GPU source is read on a background thread every that many seconds
    (:class:`~fmstack.observability.poller.PolledSource`, down once its last good read is older than the interval
    plus ``gpu_deadline_s``); without, it is read inside each scrape (``--once``, tests).
    """
    from fmstack.observability.gpu_source import GpuSource

    sources: list[Source] = []
    if backend != "none":
        gpu_backend = make_gpu_backend(backend, fake_script, expected_gpus, warn)
        gpu: Source = GpuSource(gpu_backend, hostname, expected_gpus)
        if gpu_poll_interval_s is not None:
            from fmstack.observability.poller import PolledSource

            gpu = PolledSource(gpu, gpu_poll_interval_s, gpu_deadline_s)
        sources.append(gpu)
    fs = OsFs(sysfs_root)
    if efa:
        sources.append(EfaSource(fs, hostname, expected_efa))
    sources.append(LustreSource(fs, hostname=hostname))
    if app_dir is not None:
        sources.append(AppDirSource(app_dir) if app_max_age_s is None else AppDirSource(app_dir, app_max_age_s))
    if backend == "fake" and warn is not None:
        warn(f"fmstack exporter: serving fake GPU data (--backend fake) as {hostname}: not a reading of a real GPU")
    return Exporter(sources, hostname=hostname, info={"gpu_backend": backend})
