"""The calibration profile: Curve interpolation, schema, load errors, atomic save. No torch needed."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fmstack.errors import InputError
from fmstack.perfmodel.calibration import (
    CalibrationProfile,
    CollectiveCurve,
    Curve,
    DeviceInfo,
    load_profile,
    save_profile,
)


def _profile() -> CalibrationProfile:
    return CalibrationProfile(
        device=DeviceInfo(name="cpu x", kind="cpu", peak_tflops={"fp32": 0.1}, peak_source="measured"),
        measured_at=datetime(2026, 1, 1, tzinfo=UTC),
        gemm_tflops={"fp32": Curve(x=[1e6, 1e9], y=[0.01, 0.1])},
        memory_bw_gbps=Curve(x=[1e3, 1e6], y=[10.0, 40.0]),
        collectives={"all_reduce": CollectiveCurve(x=[1e3, 1e6], y=[0.1, 1.0], num_ranks=2, backend="gloo")},
    )


def test_curve_is_linear_in_log10_x_and_clamped() -> None:
    c = Curve(x=[10.0, 1000.0], y=[1.0, 3.0])
    # log10(100) = 2 is halfway between 1 and 3 in log space: y = 2 (hand-checked)
    assert c.at(100.0) == pytest.approx(2.0)
    # log10(31.6227766) = 1.5: a quarter of the way: 1.5
    assert c.at(10**1.5) == pytest.approx(1.5)
    assert c.at(1.0) == 1.0  # clamped below
    assert c.at(1e9) == 3.0  # clamped above
    arr = c.at(np.array([1.0, 100.0, 1e9]))
    assert isinstance(arr, np.ndarray)
    np.testing.assert_allclose(arr, [1.0, 2.0, 3.0])


def test_curve_single_point_is_constant() -> None:
    c = Curve(x=[5.0], y=[7.0])
    assert c.at(1.0) == 7.0 and c.at(1e12) == 7.0


@pytest.mark.parametrize(
    ("x", "y", "msg"),
    [([1.0, 2.0], [1.0], "must match"), ([2.0, 1.0], [1.0, 1.0], "strictly increasing"), ([0.0], [1.0], "> 0")],
)
def test_curve_rejects_bad_points(x: list[float], y: list[float], msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        Curve(x=x, y=y)


def test_round_trip_and_atomic_save(tmp_path: Path) -> None:
    prof = _profile()
    path = save_profile(prof, tmp_path / "p.json")
    assert load_profile(path) == prof
    assert json.loads(path.read_text())["schema_version"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary file left


def test_sections_missing_name_the_field() -> None:
    prof = CalibrationProfile(device=DeviceInfo(name="c", kind="cpu"), measured_at=datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(InputError, match=r"calibration\.gemm_tflops: no curve for dtype 'bf16'"):
        prof.gemm_curve("bf16")
    with pytest.raises(InputError, match=r"calibration\.memory_bw_gbps"):
        prof.memory_curve()
    with pytest.raises(InputError, match=r"calibration\.collectives"):
        prof.collective_curve("all_reduce")


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["device"].pop("kind"), "field 'device.kind': missing required field"),
        (lambda d: d["device"].update(kind="tpu"), "field 'device.kind'"),
        (lambda d: d.update(colour="red"), "field 'colour': unknown field"),
        (lambda d: d.update(schema_version=99), "schema_version 99 unsupported"),
        (lambda d: d["gemm_tflops"]["fp32"].update(y=[1.0]), "field 'gemm_tflops.fp32'"),
        (lambda d: d["collectives"]["all_reduce"].pop("num_ranks"), "collectives.all_reduce.num_ranks"),
    ],
)
def test_malformed_profile_names_the_field(tmp_path: Path, mutate: object, expected: str) -> None:
    data = json.loads(_profile().model_dump_json())
    mutate(data)  # type: ignore[operator]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="calibration") as info:
        load_profile(path)
    assert expected in str(info.value)


def test_not_json_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON at line 1"):
        load_profile(bad)
    with pytest.raises(InputError, match="cannot read"):
        load_profile(tmp_path / "missing.json")


@given(
    st.lists(st.floats(min_value=1e-3, max_value=1e12, allow_nan=False), min_size=1, max_size=8, unique=True),
    st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=8, max_size=8),
    st.floats(min_value=1e-6, max_value=1e15, allow_nan=False),
)
def test_curve_passes_through_its_points_and_stays_in_range(xs: list[float], ys: list[float], q: float) -> None:
    xs = sorted(xs)
    if any(b / a < 1 + 1e-9 for a, b in itertools.pairwise(xs)):
        return  # points closer than float precision in log space are not a meaningful curve
    c = Curve(x=xs, y=ys[: len(xs)])
    for x, y in zip(c.x, c.y, strict=True):
        assert c.at(x) == pytest.approx(y, rel=1e-9, abs=1e-6)
    assert min(c.y) - 1e-6 <= c.at(q) <= max(c.y) + 1e-6
