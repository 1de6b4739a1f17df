"""`estimate serve --prefill-replicas P --decode-replicas D --qps R`: one simulated disaggregated split, the run
`plan serve` checks a split row with (:func:`fmstack.perfmodel.inference_plan_disagg.run_split`, same seed, same
requests: the row's p99 exactly)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from fmstack.catalog.loader import Catalog
from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster, build_cluster
from fmstack.cli.common import console
from fmstack.cli.serve_offload import offload_text
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.inference import ServeConfig
from fmstack.perfmodel.inference_disagg_spec import pools_text
from fmstack.perfmodel.inference_prefix import PrefixWorkload
from fmstack.perfmodel.inference_prefix_offload import KvOffload
from fmstack.perfmodel.inference_router import ROUTERS_AFFINITY
from fmstack.perfmodel.inference_router_kv import KvRouterConfig
from fmstack.perfmodel.inference_session import SessionWorkload


def split_json(
    cat: Catalog, arch: ModelArch, instance: str, cfg: ServeConfig, split: tuple[int, int], seed: int, spread: float,
    decode_cfg: ServeConfig | None = None, efficiency_for: EfficiencyFor | None = None,
    prefix: PrefixWorkload | None = None, router: str = "round-robin", kv_router: KvRouterConfig | None = None,
    sessions: SessionWorkload | None = None, kv_offload: KvOffload | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The ``disaggregated_simulation`` object: the colocated simulation's percentile and mean keys
    (``ttft_p99_s``, ``ttft_mean_s_sim``, ...), the pools (``prefill_replicas``, ``decode_replicas``,
    ``prefill_utilisation``, ``decode_batch_mean``, ``decode_slots_in_use``, ``decode_slots``, ``bottleneck``) and
    the KV transfer (``kv_bytes_per_request``; ``kv_transfer_s`` and ``kv_link``: the best pair's, NVLink when a
    prefill and a decode replica fit one NVLink domain, the plan row's figure; per pair by placement:
    ``kv_transfer_s_by_link`` (seconds per link the placement uses), ``kv_pairs_nvlink_share`` (share of the
    ``P x D`` pairs in one NVLink domain), ``kv_requests_nvlink_share`` and ``kv_transfer_mean_s`` (the measured
    requests' transfers), ``prefill_domains`` / ``decode_domains`` (each replica's NVLink domain, null: it spans
    several)), and each pool's layout
    (``prefill_tp``, ``prefill_pp``, ``decode_tp``, ``decode_pp``, ``decode_ep``, ``prefill_attention_dp``,
    ``decode_attention_dp``; ``decode_cfg``: heterogeneous pools, else the same as the prefill pool's);
    ``efficiency_for``: the replicas' efficiency (a calibration profile's; None: the default curves). ``prefix``: a
    shared-prefix workload cached by the prefill replicas behind ``router`` (adds ``prefix_hit_rate_simulated``,
    ``prefix_token_hit_rate_simulated``, ``prefill_router``: the routing rule of the prefill pool). Speculative
    decoding (``cfg.speculative``): ``speculative`` (the method, null without), ``speculative_pools`` (which pool
    speculates, in words) and ``spec_tokens_per_iteration`` (the decode pool's mean tokens per sequence and
    iteration, :attr:`~fmstack.perfmodel.inference_speculative.SpecDecode.mean_tokens_per_step`; null without).
    ``sessions``: a multi-turn workload, each turn's history cached by the prefill replicas behind ``router``
    (adds ``sessions``: the colocated run's block of first and later turns' TTFT and hits, with the KV moved and the
    prompt tokens computed per turn, and ``prefill_router``; ``kv_bytes_per_request`` stays a first turn's).
    ``kv_offload``: a host-memory tier under each prefill replica's cache (adds the colocated ``kv_offload`` block
    over the measured requests)."""
    from fmstack.perfmodel.inference_plan_disagg import run_split

    clusters: dict[tuple[str, int], Cluster] = {}

    def cluster_of(name: str, nodes: int) -> Cluster:
        if (name, nodes) not in clusters:
            clusters[name, nodes] = build_cluster(cat, name, nodes, part_of_domain=True)
        return clusters[name, nodes]

    qps = cfg.request_rate_per_s or 0.0
    run = run_split(cluster_of, arch, cfg, instance, qps, split[0], split[1], seed, spread, decode_cfg,
                    efficiency_for=efficiency_for, prefix=prefix, router=router, kv_router=kv_router,
                    sessions=sessions, kv_offload=kv_offload)  # fmt: skip
    dc = cfg if decode_cfg is None else decode_cfg
    st, spec = run.stats, cfg.speculative
    return {
        **run.result.percentiles(), **run.result.means(),
        "prefill_replicas": split[0], "decode_replicas": split[1], "request_rate_per_s": qps,
        "prefill_s": run.prefill_s, "prefill_utilisation": st.prefill_utilisation,
        "prefill_wait_p99_s": st.prefill_wait_p99_s, "decode_batch_mean": st.decode_batch_mean,
        "decode_batch_little": run.decode_batch_mean_field, "decode_slots_in_use": st.decode_slots_in_use,
        "decode_slots": st.decode_slots, "slot_wait_share": st.slot_wait_share, "bottleneck": st.bottleneck,
        "kv_bytes_per_request": run.kv_bytes, "kv_transfer_s": run.kv_transfer_s, "kv_link": run.kv_link,
        "kv_transfer_s_by_link": dict(run.kv.by_link), "kv_pairs_nvlink_share": run.kv.nvlink_pairs_share,
        "kv_requests_nvlink_share": st.kv_fastest_share if run.kv.nvlink_pairs_share > 0 else 0.0,
        "kv_transfer_mean_s": st.kv_transfer_mean_s, "prefill_domains": list(run.kv.placement.prefill_domain),
        "decode_domains": list(run.kv.placement.decode_domain),
        "warmup_requests": run.warmup_requests, "num_requests": run.num_requests, "seed": seed,
        "prefill_tp": cfg.tp, "prefill_pp": cfg.pp, "decode_tp": dc.tp, "decode_pp": dc.pp, "decode_ep": dc.ep,
        "prefill_attention_dp": cfg.attention_dp, "decode_attention_dp": dc.attention_dp,
        "speculative": None if spec is None else spec.method, "speculative_pools": pools_text(spec),
        "spec_tokens_per_iteration": None if spec is None else spec.mean_tokens_per_step,
    } | ({} if prefix is None else {
        "prefix_hit_rate_simulated": st.prefix_hit_rate, "prefix_token_hit_rate_simulated": st.prefix_token_hit_rate,
        "prefill_router": router if router in ROUTERS_AFFINITY else "global-queue",
    }) | ({} if run.sessions is None else {"sessions": run.sessions, "prefill_router": router}) | (
        {} if st.kv_offload is None else {"kv_offload": st.kv_offload})  # fmt: skip


def render_split(z: dict[str, Any], *, one_token: bool = False) -> None:
    """The split's percentile table and a line on its pools; ITL is '-' with one output token (no gap; the JSON
    keeps its 0.0), as in the colocated table."""
    out = console()
    table = Table("metric", "mean (sim)", "p50 (sim)", "p90 (sim)", "p99 (sim)", title_justify="left",
                  title=f"disaggregated split {_label(z)} at "
                  f"{z['request_rate_per_s']:g} req/s (simulated, s)")  # fmt: skip
    for name in ("ttft", "itl", "latency"):
        cells = [f"{z[f'{name}_mean_s_sim']:.4f}", *(f"{z[f'{name}_p{q}_s']:.4f}" for q in (50, 90, 99))]
        table.add_row(name, *(["-"] * 4 if name == "itl" and one_token else cells))
    out.print(table)
    out.print(
        f"prefill pool: {z['prefill_utilisation'] * 100:.0f} % busy (one prompt alone {z['prefill_s'] * 1e3:.0f} ms, "
        f"p99 queue wait {z['prefill_wait_p99_s'] * 1e3:.0f} ms); decode pool: {z['decode_batch_mean']:.1f} sequences "
        f"per iteration, {z['decode_slots_in_use']:.1f} of {z['decode_slots']} slots in use per replica "
        f"({z['slot_wait_share'] * 100:.0f} % of prompts waited for one); bottleneck: {z['bottleneck']}; KV "
        f"{z['kv_bytes_per_request'] / 1e6:.0f} MB per {'first turn' if z.get('sessions') else 'request'} "
        f"{_links(z)}; {z['requests_measured_sim']:.0f} "
        f"requests measured after {z['warmup_requests']} warm-up"
    )
    if z.get("kv_offload"):
        out.print(f"prefill pool's {offload_text(z)}", markup=False, soft_wrap=True)
    if z.get("speculative_pools"):
        out.print(f"speculative decoding: {z['speculative_pools']} ({z['spec_tokens_per_iteration']:.2f} tokens per "
                  "iteration and sequence on average)", markup=False)  # fmt: skip
    if "prefix_hit_rate_simulated" in z:
        out.print(
            f"prefill prefix caches ({z['prefill_router']}): {z['prefix_hit_rate_simulated'] * 100:.1f} % of requests "
            f"hit, {z['prefix_token_hit_rate_simulated'] * 100:.1f} % of prompt tokens not computed; every prompt's "
            "whole KV is moved"
        )
    if "sessions" in z:
        from fmstack.cli.serve_session import split_session_text

        out.print(split_session_text(z), markup=False)


def _links(z: dict[str, Any]) -> str:
    """``in 1.82 ms over NVLink (...)``, or with pairs on both links each link's time and the shares."""
    links: dict[str, float] = z["kv_transfer_s_by_link"]
    if len(links) < 2:
        return f"in {z['kv_transfer_s'] * 1e3:.2f} ms over {z['kv_link']}"
    each = ", ".join(f"{s * 1e3:.2f} ms over {name}" for name, s in sorted(links.items(), key=lambda kv: kv[1]))
    return (f"in {each} ({z['kv_pairs_nvlink_share'] * 100:.0f} % of the prefill/decode pairs in one NVLink "
            f"domain, {z['kv_requests_nvlink_share'] * 100:.0f} % of the requests over NVLink)")  # fmt: skip


def _label(z: dict[str, Any]) -> str:
    adp_p, adp_d = z["prefill_attention_dp"], z["decode_attention_dp"]
    if (z["decode_tp"], z["decode_pp"], adp_d) == (z["prefill_tp"], z["prefill_pp"], adp_p):
        return f"{z['prefill_replicas']}P:{z['decode_replicas']}D" + (" attn-dp" if adp_p else "")
    pp_p, pp_d = (
        (f" pp{z['prefill_pp']}" if z["prefill_pp"] > 1 else "") + (" attn-dp" if adp_p else ""),
        (f" pp{z['decode_pp']}" if z["decode_pp"] > 1 else "") + (" attn-dp" if adp_d else ""),
    )
    return f"{z['prefill_replicas']}P(tp{z['prefill_tp']}{pp_p}):{z['decode_replicas']}D(tp{z['decode_tp']}{pp_d})"
