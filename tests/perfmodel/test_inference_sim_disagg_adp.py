"""The disaggregated simulation with attention DP: hand-priced TTFT and ITL at no load (a prompt on one rank, one
sequence on one rank), prompts spread over the prefill ranks, the decode placement bound, determinism, and the
non-attention-DP simulation refusing attention-DP pools."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fmstack.catalog import Catalog
from fmstack.catalog.topology import build_cluster
from fmstack.errors import InputError
from fmstack.perfmodel.inference import ServeConfig, deployment, max_concurrency
from fmstack.perfmodel.inference_disagg import kv_move
from fmstack.perfmodel.inference_sim import SimConfig
from fmstack.perfmodel.inference_sim_disagg import DisaggSim, simulate_disagg
from fmstack.perfmodel.inference_sim_disagg_adp import AdpDisaggSim
from fmstack.perfmodel.inference_step import Deployment, RankLoad, step_time

ISL, OSL, CHUNK = 4096, 128, 2048


@pytest.fixture(scope="module")
def pools(catalog: Catalog) -> tuple[Deployment, Deployment, ServeConfig, ServeConfig, float]:
    """DeepSeek-V3 fp8 on p5en: an attention-DP TP 8 / EP 8 replica and the same without attention DP."""
    model = catalog.model("deepseek-v3")
    cluster = build_cluster(catalog, "p5en.48xlarge", 1)
    adp = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK,
                      attention_dp=True)  # fmt: skip
    tp8 = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK)
    d_adp, d_tp8 = deployment(model, cluster, adp), deployment(model, cluster, tp8)
    _, kv, _, _ = kv_move(model, build_cluster(catalog, "p5en.48xlarge", 2), adp, d_adp)
    return d_adp, d_tp8, adp, tp8, kv


def _sim(rate: float, seed: int = 0, n: int = 60) -> SimConfig:
    return SimConfig(request_rate_per_s=rate, num_requests=n, warmup_requests=5, seed=seed)


def _one_rank_decode_s(d: Deployment, ctx: float) -> float:
    """One sequence on one rank: that rank runs its dense layers and attention alone, the experts see one token."""
    return float(step_time(d, 1.0, ctx, busiest=RankLoad(decode_seqs=1.0, decode_ctx=ctx)).total_s)


def test_alone_ttft_is_one_rank_prefill_transfer_and_one_rank_decode(
    pools: tuple[Deployment, Deployment, ServeConfig, ServeConfig, float],
) -> None:
    d, _, cfg, _, kv = pools
    # 4096 prompt tokens on one rank in two 2048-token iterations (that rank's budget); chunk k attends
    # 2048 k + 1 .. 2048 (k + 1); the other seven ranks idle, the experts see the chunk's tokens only
    prefill = 0.0
    for k in range(2):
        ctx = CHUNK * CHUNK * k + CHUNK * (CHUNK + 1) / 2
        busy = RankLoad(prefill_tokens=float(CHUNK), prefill_token_ctx=ctx, prefill_seqs=float(k == 1))
        prefill += float(step_time(d, 0.0, 0.0, float(CHUNK), ctx, float(k == 1), busiest=busy).total_s)
    first = _one_rank_decode_s(d, float(ISL))
    r = simulate_disagg(d, cfg, _sim(1e-4), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)
    assert r.ttft_s[50] == pytest.approx(prefill + kv + first, abs=1e-8)
    # the gap before token t is one rank's iteration at context 4096 + t - 1, t = 2 .. 128: the median is t = 65
    assert r.itl_s[50] == pytest.approx(_one_rank_decode_s(d, float(ISL + 64)), abs=1e-8)
    # one sequence on one of 8 ranks reads the whole non-expert weights on that GPU: slower than TP 8 splits them
    assert _one_rank_decode_s(d, float(ISL)) > float(step_time(pools[1], 1.0, float(ISL)).total_s)
    # the KV cache of a prompt leaves one rank: the MLA latent is not split in either layout, the same bytes
    assert kv > 0


def test_a_burst_spreads_over_the_prefill_ranks(
    pools: tuple[Deployment, Deployment, ServeConfig, ServeConfig, float],
) -> None:
    """Nine 2048-token prompts at once: the first starts alone on rank 0; the other eight, queued behind it, go one
    to each rank in the next iteration (each fills its rank's 2048-token budget), priced at the busiest rank."""
    d, _, _, _, kv = pools
    short = ServeConfig(tp=8, ep=8, precision="fp8", input_len=CHUNK, output_len=OSL, max_num_tokens=CHUNK,
                        attention_dp=True)  # fmt: skip
    s = AdpDisaggSim(d, short, _sim(1e9, n=9), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)
    s.run()
    log = s._prefill_log
    assert len(log) == 2
    ctx = CHUNK * (CHUNK + 1) / 2
    alone = RankLoad(prefill_tokens=float(CHUNK), prefill_token_ctx=ctx, prefill_seqs=1.0)
    assert log[0][1] == pytest.approx(float(step_time(d, 0.0, 0.0, float(CHUNK), ctx, 1.0, busiest=alone).total_s))
    full = np.full(8, 1.0)
    eight = RankLoad(decode_seqs=0 * full, decode_ctx=0 * full, prefill_tokens=CHUNK * full,
                     prefill_token_ctx=ctx * full, prefill_seqs=full)  # fmt: skip
    t8 = float(np.max(step_time(d, 0.0, 0.0, 8.0 * CHUNK, 8 * ctx, 8.0, busiest=eight).total_s))
    assert log[1][1] == pytest.approx(t8)
    assert log[1][1] > log[0][1]  # the experts see eight prompts' tokens


def test_placement_lands_on_a_least_loaded_rank(
    pools: tuple[Deployment, Deployment, ServeConfig, ServeConfig, float],
) -> None:
    """Every prefilled request takes a slot on a rank holding at most ceil(reserved / ranks) slots (of the whole
    decode pool's 2 x 8 ranks) once it is placed."""
    d, _, cfg, _, kv = pools
    s = AdpDisaggSim(d, cfg, _sim(40.0, n=300), prefill_replicas=3, decode_replicas=2, kv_transfer_s=kv)
    s.run()
    units = 2 * d.tp
    assert len(s.placements) == 300
    assert all(held <= math.ceil(total / units) for held, total in s.placements)
    assert s.rank_slots == max_concurrency(d, cfg) // d.tp
    assert s._cap == s.rank_slots * d.tp


def test_decode_ranks_hold_their_share_of_the_slots(
    pools: tuple[Deployment, Deployment, ServeConfig, ServeConfig, float], catalog: Catalog
) -> None:
    """``max_batch`` 16 over 8 ranks: 2 slots a rank; the 17th prefilled request waits for a completion."""
    d, _, _, _, kv = pools
    small = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK,
                        attention_dp=True, max_batch=16)  # fmt: skip
    s = AdpDisaggSim(d, small, _sim(1e9, n=40), prefill_replicas=4, decode_replicas=1, kv_transfer_s=kv)
    s.run()
    assert s.rank_slots == 2
    assert max(held for held, _ in s.placements) == 2
    assert max(total for _, total in s.placements) == 16
    assert sum(1 for w in s.slot_wait_s if w > 0) >= 40 - 16
    tiny = ServeConfig(tp=8, ep=8, precision="fp8", input_len=ISL, output_len=OSL, max_num_tokens=CHUNK,
                       attention_dp=True, max_batch=4)  # fmt: skip
    with pytest.raises(InputError, match="fewer than one per each of its 8 ranks"):
        AdpDisaggSim(d, tiny, _sim(1.0), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)


def test_same_seed_same_result_and_mixed_pools(
    pools: tuple[Deployment, Deployment, ServeConfig, ServeConfig, float],
) -> None:
    d, d8, cfg, tp8, kv = pools
    a = simulate_disagg(d, cfg, _sim(8.0, seed=3), prefill_replicas=2, decode_replicas=1, kv_transfer_s=kv)
    b = simulate_disagg(d, cfg, _sim(8.0, seed=3), prefill_replicas=2, decode_replicas=1, kv_transfer_s=kv)
    assert a.percentiles() == b.percentiles() and a.means() == b.means()
    # attention DP in one pool only: prefill ADP -> decode TP 8, and TP 8 prefill -> ADP decode; alone, the TTFT is
    # each pool's own price
    lone_tp8 = float(step_time(d8, 1.0, float(ISL)).total_s)
    one = simulate_disagg(d, cfg, _sim(1e-4), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv,
                          decode=d8, decode_cfg=tp8)  # fmt: skip
    both = simulate_disagg(d, cfg, _sim(1e-4), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)
    assert one.ttft_s[50] - both.ttft_s[50] == pytest.approx(lone_tp8 - _one_rank_decode_s(d, float(ISL)), abs=1e-8)
    other = simulate_disagg(d8, tp8, _sim(1e-4), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv,
                            decode=d, decode_cfg=cfg)  # fmt: skip
    assert other.itl_s[50] == pytest.approx(both.itl_s[50], abs=1e-8)


def test_the_plain_simulation_refuses_attention_dp_pools(
    pools: tuple[Deployment, Deployment, ServeConfig, ServeConfig, float],
) -> None:
    d, _, cfg, _, kv = pools
    with pytest.raises(InputError, match="attention-DP pools have ranks"):
        DisaggSim(d, cfg, _sim(1.0), prefill_replicas=1, decode_replicas=1, kv_transfer_s=kv)
