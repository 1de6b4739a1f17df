"""Routers that pick a replica for each request from the replicas' state at its arrival
(:mod:`fmstack.perfmodel.inference_sim_fleet` simulates the replicas together behind one).

- ``round-robin``: replica ``i mod N`` for the ``i``-th request (Dynamo's frontend default ``--router-mode
  round-robin``; vLLM production-stack's RoundRobinRouter; SGLang router ``round_robin``).
- ``random``: a uniformly random replica (Dynamo ``--router-mode random``; a Kubernetes Service via kube-proxy's
  iptables mode).
- ``least-loaded``: the replica with the fewest requests in flight (sent and not finished, as the router counts
  them: SGLang router's ``Worker::load``), the lowest index on ties (Rust's ``min_by_key`` keeps the first minimum):
  the shortest-queue rule SGLang's router (sgl-router ``policies/cache_aware.rs``) and the vLLM Router forked from
  it fall back to under imbalance; Envoy's LEAST_REQUEST without its two-choice sampling. Dynamo's KV router with
  ``--kv-overlap-score-weight 0`` balances on active KV blocks instead of requests (not modelled apart).
- ``power-of-two``: SGLang router's ``power_of_two`` policy (sgl-router ``src/policies/power_of_two.rs``,
  :func:`power_of_two`): two distinct replicas drawn uniformly at random, the one with fewer requests in flight, the
  first drawn on ties (``load1 <= load2``); one replica is taken without a draw. Its fallback load, the router's
  ``Worker::load``, is modelled; the token load that sgl-router's load monitor polls from each worker's
  ``/get_load`` (preferred when both workers reported it and differ) is not, nor the monitor's polling delay.
- ``cache-aware``: SGLang router's ``cache_aware`` policy (sgl-router ``src/policies/cache_aware.rs``). The load is
  imbalanced when ``max - min > balance_abs_threshold`` and ``max > min x balance_rel_threshold``; then the
  least-loaded replica. Otherwise the router's own approximate radix tree of every request it sent to each worker
  gives the best prefix match: if the matched share of the prompt exceeds ``cache_threshold``, the replica that
  matched; else the replica whose tree is smallest ("most available cache capacity"). The request is then inserted
  into that replica's tree. Defaults of ``sglang_router`` (``router_args.py``): ``cache_threshold`` 0.3,
  ``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5. Simplified: the tree is kept per prefix group (a
  request matches ``prefix_len`` of its ``input_len`` tokens where its group was sent before, nothing otherwise;
  tokens stand for the router's characters); among several holders the one sent the group last (the newer tree
  keeps a node's last tenant); the tree is never trimmed (``max_tree_size`` 2^26 characters, evicted every 120 s,
  is millions of tokens per worker, more than a run inserts).
- ``session`` (multi-turn workloads, :mod:`fmstack.perfmodel.inference_session`): sticky session affinity, every
  turn of a session to the replica of its first turn, the first turns round-robin over the sessions. As an ingress
  with cookie affinity (ingress-nginx ``nginx.ingress.kubernetes.io/affinity: cookie``: the first request balanced by
  the default round-robin, the cookie pins the rest) or llm-d's session-affinity scorer (llm-d-inference-scheduler
  ``docs``: "subsequent requests from the same client are routed to the same inference pod", by a session cookie);
  blind to load and to the caches.
- ``kv``: NVIDIA Dynamo's KV router (:mod:`fmstack.perfmodel.inference_router_kv`): the lowest ``overlap_weight x
  prefill blocks + active blocks`` from the replicas' prefix caches and the requests it sent them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fmstack.perfmodel.inference_router_kv import KvRouter, KvRouterConfig

ROUTERS_JOINT = ("least-loaded", "power-of-two", "cache-aware", "kv")
"""Routers whose choice depends on the replicas' state: simulated with the replicas together."""
ROUTERS_AFFINITY = ("cache-aware", "kv")
"""Routers that send a prefix where it is cached (`plan serve`'s screening pools the replicas' caches for them)."""

CACHE_THRESHOLD = 0.3
"""sglang_router ``--cache-threshold`` default (``RouterArgs.cache_threshold``)."""
BALANCE_ABS_THRESHOLD = 64
"""sglang_router ``--balance-abs-threshold`` default."""
BALANCE_REL_THRESHOLD = 1.5
"""sglang_router ``--balance-rel-threshold`` default."""


@dataclass(slots=True)
class Router:
    """One router's state over ``replicas`` replicas (mutable, one per simulation)."""

    name: str
    replicas: int
    rng: np.random.Generator
    sent: int = 0
    tree_tokens: list[int] = field(default_factory=list)
    """cache-aware: tokens in each replica's approximate tree."""
    holders: dict[int, list[int]] = field(default_factory=dict)
    """cache-aware: prefix group -> the replicas whose tree holds it, the last sent it last."""
    imbalanced: int = 0
    """cache-aware: requests routed by the shortest-queue rule."""
    kv_config: KvRouterConfig = field(default_factory=KvRouterConfig)
    kv: KvRouter | None = None
    """kv: the KV router's state (its own ``pick``, :meth:`KvRouter.pick`)."""
    session_replica: dict[int, int] = field(default_factory=dict)
    """session: each session's replica (its first turn's)."""

    def __post_init__(self) -> None:
        self.tree_tokens = [0] * self.replicas
        if self.name == "kv":
            self.kv = KvRouter(self.kv_config, self.replicas, self.rng)

    def pick(self, loads: list[int], group: int, prefix_len: int, input_len: int) -> int:
        """The replica for the next request: ``loads`` (requests in flight per replica), its prefix ``group`` (-1:
        none) of ``prefix_len`` tokens in a prompt of ``input_len``."""
        n = self.replicas
        self.sent += 1
        if self.name == "round-robin":
            return (self.sent - 1) % n
        if self.name == "random":
            return int(self.rng.integers(n))
        if self.name == "power-of-two":
            return power_of_two(loads, self.rng)
        low = min(loads)
        least = loads.index(low)
        if self.name == "least-loaded":
            return least
        high = max(loads)
        if high - low > BALANCE_ABS_THRESHOLD and high > low * BALANCE_REL_THRESHOLD:
            self.imbalanced += 1
            k = least
        else:
            held = self.holders.get(group, []) if group >= 0 else []
            if held and prefix_len / input_len > CACHE_THRESHOLD:
                k = held[-1]
            else:
                k = self.tree_tokens.index(min(self.tree_tokens))
        self._insert(k, group, prefix_len, input_len)
        return k

    def pick_session(self, session: int) -> int:
        """``session``: the replica of ``session``'s first turn; a first turn to the next replica in turn."""
        self.sent += 1
        k = self.session_replica.get(session)
        if k is None:
            k = self.session_replica[session] = len(self.session_replica) % self.replicas
        return k

    def remember(self, key: int, k: int) -> None:
        """cache-aware: replica ``k``'s tree now holds ``key`` too (a session's first turn, routed by its system
        prefix group or by tree size: its prompt becomes the session's prefix in that tree); no-op otherwise."""
        if self.name != "cache-aware":
            return
        held = self.holders.setdefault(key, [])
        if k in held:
            held.remove(k)
        held.append(k)

    def _insert(self, k: int, group: int, prefix_len: int, input_len: int) -> None:
        """The request's prompt joins replica ``k``'s tree: its own tokens, and the prefix if new there."""
        if group < 0:
            self.tree_tokens[k] += input_len
            return
        held = self.holders.setdefault(group, [])
        if k in held:
            held.remove(k)
            self.tree_tokens[k] += input_len - prefix_len
        else:
            self.tree_tokens[k] += input_len
        held.append(k)


def power_of_two(loads: list[int], rng: np.random.Generator) -> int:
    """SGLang router's power-of-two choice over ``loads`` (requests in flight per replica): a first replica ``a``
    uniform over all, a second ``b = (a + 1 + u) mod n`` with ``u`` uniform over ``n - 1`` (so ``b != a``, uniform
    over the rest: sgl-router ``policies/power_of_two.rs``, ``idx2``), then ``a`` if ``loads[a] <= loads[b]`` else
    ``b``. One replica: replica 0, no draw (sgl-router returns the lone healthy worker before sampling)."""
    n = len(loads)
    if n == 1:
        return 0
    a = int(rng.integers(n))
    b = (a + 1 + int(rng.integers(n - 1))) % n
    return a if loads[a] <= loads[b] else b
