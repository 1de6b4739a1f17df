"""Pipeline parallelism in serving: the batch splits into at most one micro-batch per sequence, so one prompt
crosses the stages in order (no faster than on one stage's GPUs), and every stage waits for the micro-batch that
holds a whole prompt; with at least ``pp`` decodes the iteration is ``pp`` stage-times of ``1/pp`` of the batch."""

from __future__ import annotations

import pytest

from fmstack.catalog import Catalog, load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.perfmodel.inference import ServeConfig, deployment
from fmstack.perfmodel.inference_step import Deployment, step_time


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog()


def _dep(cat: Catalog, pp: int) -> Deployment:
    cluster = build_cluster(cat, "p5.48xlarge", 1)
    return deployment(cat.model("llama3.1-8b"), cluster, ServeConfig(tp=1, pp=pp, input_len=8192, output_len=16))


def _compute(parts: object) -> float:
    """Everything but the stage-to-stage transfers and the per-stage launch overhead."""
    p = parts
    total = float(p.total_s)  # type: ignore[attr-defined]
    return total - float(p.pp_comm_s) - float(p.overhead_s)  # type: ignore[attr-defined]


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_one_prompt_takes_the_whole_model_time_at_any_pp(cat: Catalog, pp: int) -> None:
    """8,192 prompt tokens, one sequence: pp stages of layers / pp each, one after the other, so the compute is
    the single-stage compute (it was 1/pp of it: the prompt was split over pp micro-batches)."""
    ctx = 8192 * 8193 / 2
    one = step_time(_dep(cat, 1), 0.0, 0.0, 8192.0, ctx, 1.0)
    staged = step_time(_dep(cat, pp), 0.0, 0.0, 8192.0, ctx, 1.0)
    assert _compute(staged) == pytest.approx(_compute(one), rel=1e-9)
    assert float(staged.pp_comm_s) > 0.0


def test_decodes_fill_the_pipeline_from_pp_sequences(cat: Catalog) -> None:
    """With 64 decodes and pp 4 each stage runs 16 of them per stage-time, 4 stage-times per iteration."""
    d1, d4 = _dep(cat, 1), _dep(cat, 4)
    one, four = step_time(d1, 64.0, 1024.0), step_time(d4, 64.0, 1024.0)
    # memory-bound decode: every micro-batch re-reads its stage's weights, pp x (weights / pp) = the whole model,
    # and the last stage reads the LM head (bf16, 128,256 x 4,096) for each of the 4 micro-batches: 3 reads more
    head_bytes = 128256 * 4096 * 2.0
    extra = 3 * head_bytes / (3350e9 * d4.efficiency.weight_read_memory)
    assert float(four.weights_s) == pytest.approx(float(one.weights_s) + extra, rel=1e-9)
    # the KV cache is split with the layers: each stage-time reads 16 sequences' cache of 8 layers, a 16th of it,
    # so the 4 stage-times read a quarter of what one GPU reads for all 64 sequences and 32 layers
    assert float(four.kv_read_s) == pytest.approx(float(one.kv_read_s) / 4, rel=1e-9)
    # two decodes on pp 4: two micro-batches of one sequence, two stages idle in every stage-time
    two = step_time(d4, 2.0, 1024.0)
    assert float(two.kv_read_s) == pytest.approx(float(step_time(d1, 1.0, 1024.0).kv_read_s), rel=1e-9)


def test_a_prompt_among_decodes_sets_the_stage_time(cat: Catalog) -> None:
    """1 prompt of 2,048 tokens with 63 decodes on pp 4: the micro-batch holding the prompt carries 2,048 + 63 / 4
    tokens, and every stage waits for it, so the iteration is no shorter than the prompt alone on pp 1."""
    d1, d4 = _dep(cat, 1), _dep(cat, 4)
    ctx = 2048 * 2049 / 2
    alone = _compute(step_time(d1, 0.0, 0.0, 2048.0, ctx, 1.0))
    mixed = _compute(step_time(d4, 63.0, 1024.0, 2048.0, ctx, 1.0))
    assert mixed >= alone
