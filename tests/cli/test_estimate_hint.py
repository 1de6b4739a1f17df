"""A configuration that does not fit says which part is largest and which flags shrink it."""

from __future__ import annotations

from fmstack.catalog import load_catalog
from fmstack.catalog.topology import build_cluster
from fmstack.cli.estimate_cmd import memory_hint
from fmstack.perfmodel.config import fill_defaults
from fmstack.perfmodel.training import estimate_training


def _est(model: str, **given: object):  # type: ignore[no-untyped-def]
    cat = load_catalog()
    cluster = build_cluster(cat, "p5.48xlarge", 1)
    return estimate_training(cat.model(model), cluster, fill_defaults(cluster.num_gpus, given))


def test_hint_names_the_largest_part_and_its_levers() -> None:
    # Llama 3.1 70B on 8 GPUs with ZeRO-1: fp32 gradients, 4 B x 70.6e9 = 263 GiB per GPU, are the largest part
    est = _est("llama3.1-70b", seq_len=8192)
    assert not est.memory.fits
    hint = memory_hint(est)
    assert "the largest part is gradients (262.8 GiB)" in hint and "--sharding fsdp" in hint
    # Llama 3.1 8B at 128k tokens, FSDP: the activations dominate, so recomputation and splitting the sequence help
    long = _est("llama3.1-8b", seq_len=131072, sharding="fsdp")
    assert not long.memory.fits
    assert "the largest part is activations" in memory_hint(long) and "--recompute selective or full" in memory_hint(
        long
    )


def test_hint_does_not_suggest_the_sharding_already_used() -> None:
    # Llama 3.1 405B on 8 GPUs with FSDP does not fit: the hint offers model parallelism or more nodes, not FSDP again
    est = _est("llama3.1-405b", seq_len=8192, sharding="fsdp")
    assert not est.memory.fits
    hint = memory_hint(est)
    assert "--sharding" not in hint and "more --tp / --pp, or more nodes" in hint


def test_hint_does_not_suggest_the_recompute_or_micro_batch_already_used() -> None:
    """Session 14: at --recompute selective --micro-batch 1 the hint still offered 'selective' and a smaller
    micro-batch; it now offers full recompute and model parallelism only, and nothing of recompute at full."""
    sel = _est("llama3.1-8b", seq_len=131072, sharding="fsdp", recompute="selective", micro_batch=1)
    assert not sel.memory.fits
    hint = memory_hint(sel)
    assert "try --recompute full, or more --tp (with --sp), --cp or --pp" in hint and "micro-batch" not in hint
    full = _est("llama3.1-8b", seq_len=262144, sharding="fsdp", recompute="full", micro_batch=1)
    assert not full.memory.fits
    assert "largest part is activations" in memory_hint(
        full
    ) and "try more --tp (with --sp), --cp or --pp" in memory_hint(full)
