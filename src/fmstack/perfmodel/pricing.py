"""What a training run costs at the catalog's price: one rule for ``plan train``'s rows and ``estimate train``.

The catalog holds an on-demand list price per instance-hour (``price_per_hour_usd``; an UltraServer's price per
UltraServer-hour is divided over its instances, ``catalog.topology``); a cluster costs that times its nodes.
"""

from __future__ import annotations

from typing import Any

from fmstack.catalog.topology import Cluster


def priced_name(cluster: Cluster) -> str:
    """Where a price goes: the instance, or for a cluster named by its UltraServer either entry."""
    inst = cluster.instance
    if inst.ultraserver is not None and cluster.name.lower() == inst.ultraserver.lower():
        return (
            f"{inst.ultraserver}: set price_per_hour_usd on ultraserver {inst.ultraserver} (per UltraServer-hour) "
            f"or on instance {inst.name} (per instance-hour)"
        )
    return f"{inst.name}: set price_per_hour_usd"


def cost_json(cluster: Cluster, ideal_s: float, time_s: float) -> dict[str, Any]:
    """What the run costs at the catalog's on-demand price (None without one), as ``plan train`` prices its rows:
    ``cost_per_hour_usd`` = price per instance-hour x ``num_nodes``; ``ideal_cost_usd`` without failures (``plan
    train``'s ``cost_usd``), ``cost_usd`` with them (``plan train --objective time-with-failures``)."""
    price = cluster.instance.price_per_hour_usd
    hourly = None if price is None else price * cluster.num_nodes
    return {
        "num_nodes": cluster.num_nodes,
        "price_per_node_hour_usd": price,
        "cost_per_hour_usd": hourly,
        "ideal_cost_usd": None if hourly is None else ideal_s / 3600.0 * hourly,
        "cost_usd": None if hourly is None else time_s / 3600.0 * hourly,
    }
