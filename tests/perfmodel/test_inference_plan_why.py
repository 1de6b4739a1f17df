"""`plan serve` without a candidate names the real reason (session 13 review: it always said "no deployment meets
SLO"): a precision no searched GPU has, a model no replica within ``--max-nodes-per-replica`` holds (with the
smallest that would), or the SLO."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.params import count_params
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_kv import DEFAULT_RESERVE_GIB
from fmstack.perfmodel.inference_plan import plan_serve

SLO_OK = SLO(ttft_s=1.0, itl_s=0.05)


def _why(catalog: Catalog, model: str, **kw: object) -> InputError:
    args: dict[str, object] = {"qps": 2.0, "input_len": 512, "output_len": 128, "slo": SLO_OK} | kw
    with pytest.raises(InputError) as err:
        plan_serve(catalog, catalog.model(model), **args)  # type: ignore[arg-type]
    return err.value


def test_a100_has_no_fp8(catalog: Catalog) -> None:
    assert build_cluster(catalog, "p4d.24xlarge", 1).gpu.fp8_dense_tflops is None
    err = _why(catalog, "llama3.1-70b", instances=("p4d.24xlarge",), precisions=("fp8",))
    assert err.field == "precision"
    assert err.message.startswith("A100-40GB (p4d.24xlarge) has no 'fp8' peak; it has bf16, fp16")
    assert "no deployment meets" not in err.message


def test_405b_needs_four_a100_nodes(catalog: Catalog) -> None:
    """By hand: 405.9e9 parameters x 2 B over 16 A100-40GB (two nodes) is 47.3 GiB per GPU, more than the 40;
    over 32 (four nodes) 23.6 GiB, which leaves room for KV beside the 4 GiB reserve. TP 32 is the first layout
    searched at four nodes (then TP 8 x PP 4)."""
    gib = count_params(catalog.model("llama3.1-405b")).total * 2 / 2**30
    assert gib / 16 > 40 > gib / 32 + DEFAULT_RESERVE_GIB
    err = _why(catalog, "llama3.1-405b", instances=("p4d.24xlarge",), max_nodes_per_replica=1)
    assert err.field == "max-nodes-per-replica"
    assert "holds one 640-token sequence" in err.message
    assert err.message.endswith("the smallest replica that holds one sequence: 4 x p4d.24xlarge (tp 32 bf16); use "
                                "--max-nodes-per-replica 4")  # fmt: skip


def test_an_impossible_slo_is_the_slo(catalog: Catalog) -> None:
    err = _why(catalog, "llama3.1-8b", instances=("p5.48xlarge",), slo=SLO(ttft_s=1e-4, itl_s=0.05))
    assert err.field == "slo" and "no deployment meets TTFT 0.0001 s" in err.message
    assert "not searched" not in err.message
    # with an instance left out for its precision, the SLO is still the reason, and the message says what was skipped
    err = _why(catalog, "llama3.1-8b", instances=("p5.48xlarge", "p4d.24xlarge"), precisions=("fp8",),
               slo=SLO(ttft_s=1e-4, itl_s=0.05))  # fmt: skip
    assert err.field == "slo" and err.message.endswith("(not searched: A100-40GB (p4d.24xlarge) has no 'fp8' peak; it "
                                                       "has bf16, fp16)")  # fmt: skip
