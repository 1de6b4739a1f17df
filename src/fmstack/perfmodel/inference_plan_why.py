"""Why `plan serve` found no candidate: the SLO, or nothing could run at all (no searched GPU has the precision, or
no layout within ``--max-nodes-per-replica`` holds one sequence; then the smallest replica that would)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fmstack.catalog.schema import ModelArch
from fmstack.catalog.topology import Cluster
from fmstack.errors import InputError
from fmstack.perfmodel.efficiency import EfficiencyFor
from fmstack.perfmodel.inference import ServeConfig, deployment_for, max_concurrency, no_fit, validate_serve
from fmstack.perfmodel.inference_disagg import SLO
from fmstack.perfmodel.inference_plan_candidate import ClusterOf

PRECISIONS = ("bf16", "fp16", "fp8", "fp4")
"""Weight precisions `plan serve --precision` takes (the GPU must have a dense peak in it)."""
FIT_NODES_MAX = 64
"""Nodes per replica the diagnosis tries at most (doubling) for the smallest replica that holds one sequence."""

Layouts = Callable[[ModelArch, int, int, int], list[tuple[int, int, int]]]
"""(model, nodes, GPUs per node, GPUs per NVLink domain) -> (tp, pp, ep) of one replica (``inference_plan.layouts``)."""


@dataclass(slots=True)
class Tried:
    """What the search met before any candidate: instances without the precisions asked for, layouts whose weights
    leave no room for one sequence (the last one tried is priced in the message)."""

    no_precision: list[tuple[str, str, list[str]]] = field(default_factory=list)
    """(instance, GPU, the precisions it has)."""
    fitted: int = 0
    """Layouts that hold at least one sequence."""
    unfit: list[tuple[str, int, ServeConfig]] = field(default_factory=list)
    """(instance, nodes per replica, layout) that hold none."""

    def fits(self, cfg: ServeConfig, cluster: Cluster, model: ModelArch, name: str, nodes: int,
             efficiency_for: EfficiencyFor | None) -> bool:  # fmt: skip
        """Whether one sequence of ``cfg`` fits a replica on ``cluster`` (checked as `estimate serve` checks it);
        counted."""
        validate_serve(cfg, model, cluster)
        d = deployment_for(model, cluster, cfg, efficiency_for)
        if max_concurrency(d, cfg) >= 1:
            self.fitted += 1
            return True
        self.unfit.append((name, nodes, cfg))
        return False


def nothing_found(
    tried: Tried, cluster_of: ClusterOf, model: ModelArch, layouts: Layouts, wanted: tuple[str, ...] | None,
    max_nodes: int, slo: SLO, isl: int, osl: int, efficiency_for: EfficiencyFor | None = None,
) -> InputError:  # fmt: skip
    """The error for a search without candidates: ``precision`` when no searched instance has a precision asked for,
    ``max-nodes-per-replica`` (or ``model``) when no layout held one sequence, else ``slo``."""
    asked = wanted or ("bf16", "fp8")
    skipped = "; ".join(f"{gpu} ({name}) has no {' or '.join(repr(p) for p in asked)} peak; it has "
                        f"{', '.join(has)}" for name, gpu, has in tried.no_precision)  # fmt: skip
    if not tried.fitted and not tried.unfit:
        if tried.no_precision:
            return InputError("precision", f"{skipped}: no searched instance runs {' or '.join(asked)}; give "
                              "--precision from what the GPU has, or an --instance whose GPU has it")  # fmt: skip
        return InputError("tp", f"no TP / PP layout of up to {max_nodes} node(s) per replica accepts {model.name}")
    if not tried.fitted:
        name, nodes, cfg = tried.unfit[-1]
        d = deployment_for(model, cluster_of(name, nodes), cfg, efficiency_for)
        why = (f"no replica of up to {max_nodes} node(s) on a searched instance holds one {isl + osl}-token sequence; "
               f"the last tried: {no_fit(d, cfg)}")  # fmt: skip
        smallest = _smallest_fit(tried, cluster_of, model, layouts, max_nodes, efficiency_for)
        if smallest is None:
            return InputError("model", f"{why}; no replica of up to {FIT_NODES_MAX} nodes holds it")
        name, nodes, cfg = smallest
        pp = f" x pp {cfg.pp}" if cfg.pp > 1 else ""
        return InputError(
            "max-nodes-per-replica", f"{why}; the smallest replica that holds one sequence: {nodes} x {name} "
            f"(tp {cfg.tp}{pp} {cfg.precision}); use --max-nodes-per-replica {nodes}",
        )  # fmt: skip
    return InputError(
        "slo", f"no deployment meets TTFT {slo.ttft_s:g} s and ITL {slo.itl_s:g} s for {model.name} at {isl}/{osl} "
        f"tokens on any priced instance, precision and TP / PP layout of up to {max_nodes} node(s) per replica "
        "(even one request at a time)" + (f" (not searched: {skipped})" if skipped else ""),
    )  # fmt: skip


def _smallest_fit(
    tried: Tried, cluster_of: ClusterOf, model: ModelArch, layouts: Layouts, max_nodes: int,
    efficiency_for: EfficiencyFor | None,
) -> tuple[str, int, ServeConfig] | None:  # fmt: skip
    """The fewest nodes per replica (doubling past ``max_nodes``) at which a layout of an instance and precision the
    search tried holds one sequence: (instance, nodes, layout); ties go to the first searched."""
    pairs = list(dict.fromkeys((name, cfg.precision) for name, _, cfg in tried.unfit))
    base = tried.unfit[0][2]
    nodes = max_nodes * 2
    while nodes <= FIT_NODES_MAX:
        for name, precision in pairs:
            c = cluster_of(name, nodes)
            for tp, pp, ep in layouts(model, nodes, c.instance.num_gpus, c.gpus_per_domain):
                cfg = ServeConfig(tp=tp, pp=pp, ep=ep, precision=precision, input_len=base.input_len,
                                  output_len=base.output_len)  # fmt: skip
                try:
                    validate_serve(cfg, model, c)
                except InputError:
                    continue
                if max_concurrency(deployment_for(model, c, cfg, efficiency_for), cfg) >= 1:
                    return name, nodes, cfg
        nodes *= 2
    return None
