"""Slurm Fair Tree (default since 19.05): rank users by Level Fairshare, walking the account tree.

Slurm doc/html/fair_tree.shtml: at each level, LF = S / U with S and U normalised among siblings (LF infinite
with no usage); children are sorted by LF descending and the tree is walked depth-first; users are ranked in
that order and the fair-share factor is rank / number_of_users (the first user gets 1.0). Sibling users with equal
LF share a rank. (Slurm also merges the children of sibling accounts with equal LF; this implementation keeps
them apart and orders them by name.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from fmstack.errors import InputError


@dataclass(kw_only=True, slots=True)
class Assoc:
    """An account (with children) or a user (a leaf) with raw shares and raw usage."""

    name: str
    shares: float = 1.0
    usage: float = 0.0
    """Raw usage of a user; an account's usage is the sum of its children's."""
    children: list[Assoc] = field(default_factory=list)

    @property
    def is_user(self) -> bool:
        return not self.children

    def total_usage(self) -> float:
        return self.usage if self.is_user else sum(c.total_usage() for c in self.children)


def level_fairshare(node: Assoc, siblings: list[Assoc]) -> float:
    """LF = S / U among siblings (``siblings`` includes ``node``)."""
    s_tot = sum(a.shares for a in siblings)
    u_tot = sum(a.total_usage() for a in siblings)
    if s_tot <= 0:
        raise InputError("shares", f"siblings of {node.name!r} have no shares")
    s = node.shares / s_tot
    u = node.total_usage() / u_tot if u_tot > 0 else 0.0
    return math.inf if u == 0 else s / u


def fair_tree_factors(root: Assoc) -> dict[str, float]:
    """Fair-share factor per user name: rank / number of users, highest first."""
    ordered: list[tuple[str, float]] = []

    def walk(node: Assoc) -> None:
        kids = sorted(node.children, key=lambda c: (-level_fairshare(c, node.children), c.name))
        for kid in kids:
            if kid.is_user:
                ordered.append((kid.name, level_fairshare(kid, node.children)))
            else:
                walk(kid)

    walk(root)
    n = len(ordered)
    if n == 0:
        raise InputError("accounts", "the association tree has no users")
    factors: dict[str, float] = {}
    for i, (name, lf) in enumerate(ordered):
        tied = i > 0 and lf == ordered[i - 1][1] and _same_parent(root, name, ordered[i - 1][0])
        if tied:
            factors[name] = factors[ordered[i - 1][0]]
        else:
            factors[name] = (n - i) / n
    return factors


def _parent_of(node: Assoc, name: str) -> Assoc | None:
    for c in node.children:
        if c.name == name and c.is_user:
            return node
        if not c.is_user:
            found = _parent_of(c, name)
            if found is not None:
                return found
    return None


def _same_parent(root: Assoc, a: str, b: str) -> bool:
    return _parent_of(root, a) is _parent_of(root, b)
