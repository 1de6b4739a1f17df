"""bench.device.kernel_time_per_call_s: the CUDA-graph path and its fallback, with a stand-in torch (no GPU here)."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator

import pytest

from fmstack.bench import device


class _Graph:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def replay(self) -> None:
        self.log.append("replay")


def _fake_torch(log: list[str], *, capture_fails: bool) -> types.ModuleType:
    @contextlib.contextmanager
    def graph(g: _Graph) -> Iterator[None]:
        log.append("capture")
        if capture_fails:
            raise RuntimeError("operation not permitted when stream is capturing")
        yield

    class Stream:
        def wait_stream(self, other: object) -> None:
            pass

    @contextlib.contextmanager
    def stream(s: object) -> Iterator[None]:
        yield

    cuda = types.SimpleNamespace(
        Stream=Stream, stream=stream, current_stream=Stream, synchronize=lambda: None,
        CUDAGraph=lambda: _Graph(log), graph=graph,
    )  # fmt: skip
    mod = types.ModuleType("torch")
    mod.cuda = cuda  # type: ignore[attr-defined]
    return mod


@pytest.mark.parametrize("capture_fails", [False, True])
def test_graph_replay_or_fallback(monkeypatch: pytest.MonkeyPatch, capture_fails: bool) -> None:
    log: list[str] = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(log, capture_fails=capture_fails))
    calls: list[int] = []
    per_call = device.kernel_time_per_call_s(lambda: calls.append(1), "cuda", min_time_s=0.001, warmup=2)
    assert per_call > 0 and log[0] == "capture"
    if capture_fails:
        # the failed capture is abandoned and the plain timer calls fn itself: no replays
        assert "replay" not in log and len(calls) >= 2 + 1 + 1
    else:
        # 2 warm-up calls + 1 on the side stream + GRAPH_CALLS captured, then only replays
        assert len(calls) == 2 + 1 + device.GRAPH_CALLS and log.count("replay") >= 2


def test_cpu_uses_the_plain_timer() -> None:
    calls: list[int] = []
    assert device.kernel_time_per_call_s(lambda: calls.append(1), "cpu", min_time_s=0.001, warmup=1) > 0
    assert len(calls) >= 2
