"""`fmstack plan train`'s GPU counts (``--gpus 512,1024 | 512-4096[:step]``) and the clusters they give per instance,
and the node counts of the report's scaling sweep (shared with `fmstack scale` through plan_cmd.py)."""

from __future__ import annotations

from fmstack.catalog.loader import Catalog
from fmstack.catalog.topology import Cluster, build_cluster, check_cluster_gpus, resolve_instance
from fmstack.cli.common import whole_nodes_hint
from fmstack.errors import InputError
from fmstack.perfmodel.pricing import priced_name

MAX_GPU_COUNTS = 64
"""GPU counts one search takes (a doubling range from 1 to 2^63 is 64 counts; a step range can ask for millions)."""


def parse_gpus(text: str) -> list[int]:
    """'512', '512,1024', '512-4096' (doubling) or '512-2048:512' (step)."""
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part:
                lo_text, hi_text = part.split("-", 1)
                step = None
                if ":" in hi_text:
                    hi_text, step_text = hi_text.split(":", 1)
                    step = int(step_text)
                lo, hi = int(lo_text), int(hi_text)
                _check_range(text, part, lo, hi, step)
                value = lo
                while value <= hi:
                    out.append(value)
                    value = value + step if step else value * 2
            else:
                count = float(part)  # 1e3 is a count; 8.9 is not
                if not count.is_integer():
                    raise InputError("gpus", f"{part!r} is not a whole number of GPUs")
                out.append(int(count))
    except InputError:
        raise
    except ValueError:
        raise InputError("gpus", f"{text!r} is not a count, a list (512,1024) or a range (512-4096[:step])") from None
    if not out or any(v <= 0 for v in out):
        raise InputError("gpus", f"must be positive GPU counts, got {text!r}")
    check_cluster_gpus(max(out))
    return list(dict.fromkeys(out))  # '64,64' or '512,256-1024' name a count twice: search it once


def _check_range(text: str, part: str, lo: int, hi: int, step: int | None) -> None:
    """A range must start at 1 or more, end at or after its start, and step forward (a start of 0 doubled, or a
    step <= 0, never reaches the end: the loop ran until memory ran out)."""
    if lo < 1:
        raise InputError("gpus", f"range {part!r} must start at 1 or more GPUs, got {lo}")
    if hi < lo:
        raise InputError("gpus", f"range {part!r} ends ({hi}) before it starts ({lo})")
    if step is not None and step < 1:
        raise InputError("gpus", f"range {part!r} needs a step of 1 or more GPUs, got {step}")
    count = (hi - lo) // step + 1 if step else (hi // lo).bit_length()
    if count > MAX_GPU_COUNTS:
        raise InputError(
            "gpus", f"{text!r} asks for {count:,} GPU counts; at most {MAX_GPU_COUNTS} per search (use a larger step)"
        )


def build_clusters(cat: Catalog, instances: str, gpus: str) -> tuple[list[Cluster], list[str]]:
    """Every valid (instance, GPU count) cluster, and a one-line note for each pair skipped for its shape.

    A pair is skipped when the count is not whole nodes or whole UltraServers of that instance (2048 GPUs of a
    72-GPU UltraServer), so a comparison of several instances still plans the others; InputError (the first
    pair's) only when no pair is valid. An unknown instance name is an error at once.
    """
    names = list(dict.fromkeys(n.strip() for n in instances.split(",") if n.strip()))
    if not names:
        raise InputError("instance", f"give at least one instance name, got {instances!r}")
    counts = parse_gpus(gpus)
    clusters: list[Cluster] = []
    skipped: list[str] = []
    first: InputError | None = None
    seen: set[tuple[str, int]] = set()  # an alias and its name are one cluster (it was ranked once per spelling)
    for name in names:
        inst = resolve_instance(cat, name)
        per_node, canonical = inst.num_gpus, inst.ultraserver or inst.name
        for count in counts:
            try:
                if count % per_node:
                    hint = whole_nodes_hint(count, per_node)
                    raise InputError("gpus", f"{count} is not a multiple of {per_node} GPUs per {name} node{hint}")
                if (canonical, count) not in seen:
                    clusters.append(build_cluster(cat, name, count // per_node))
                    seen.add((canonical, count))
            except InputError as exc:
                first = first or exc
                skipped.append(f"{name} at {count} GPUs skipped: {exc}")
    if not clusters:
        assert first is not None
        raise first
    return clusters, skipped


SWEEP_POINTS = 4
"""Sizes in the HTML report's scaling sweep around the best row."""


def sweep_nodes(cluster: Cluster) -> list[int]:
    """Node counts for the report's scaling sweep around ``cluster``: a quarter, half, once and twice its size, in
    whole NVLink domains when its instance is named by its UltraServer (18 nodes of u-p6e-gb200x72: a quarter of
    one was 4 nodes, which the sweep skipped), and doubling further up until there are ``SWEEP_POINTS`` sizes (one
    node or one UltraServer has no quarter or half: the report showed one or two points)."""
    inst = cluster.instance
    whole = inst.ultraserver is not None and cluster.name.lower() == inst.ultraserver.lower()
    unit = max(1, cluster.gpus_per_domain // inst.num_gpus) if whole else 1
    units = max(1, cluster.num_nodes // unit)
    sizes = sorted({max(1, units // 4), max(1, units // 2), units, units * 2})
    while len(sizes) < SWEEP_POINTS:
        sizes.append(sizes[-1] * 2)
    return [s * unit for s in sizes]


def _priced_only(clusters: list[Cluster], skipped: list[str]) -> tuple[list[Cluster], list[str]]:
    """For ``--objective cost``: the clusters with a price, the others skipped with a note (as ``plan rl`` does), so
    that one unpriced instance in a comparison does not stop it; all unpriced is the planner's error."""
    priced = [c for c in clusters if c.instance.price_per_hour_usd is not None]
    if not priced:
        return clusters, skipped
    notes = [f"{c.name} at {c.num_gpus} GPUs skipped: --objective cost needs a price for {priced_name(c)} in a "
             "--catalog file" for c in clusters if c.instance.price_per_hour_usd is None]  # fmt: skip
    return priced, skipped + notes
