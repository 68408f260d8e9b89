"""Hierarchical fair share: water-filling with priority buckets, weights and limits.

All amounts are integers (milli-GPU, millicores, MiB). Each level of the project tree divides
what it received among its children:

1. every child is deserved `min(quota, limit, demand)`; when the quotas are overcommitted (the
   deserved amounts sum to more than the parent received) they are cut in proportion to quota;
2. the rest goes to children with unmet demand, highest `priority` bucket first, in proportion to
   `over_quota_weight`, each capped at `min(demand, limit)`, repeating while anyone was capped.

Remainders of integer division go one unit at a time to the largest fractional parts, ties to the
earlier child in name order, so the result is deterministic and sums exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpupool.core.model import Limits, Project, Resources


@dataclass(frozen=True, slots=True)
class _Member:
    quota: int
    cap: int
    weight: int
    priority: int


def water_fill(amount: int, weights: Sequence[int], caps: Sequence[int]) -> list[int]:
    """Divide `amount` in proportion to `weights`, nobody above its cap; returns the split.

    Members with weight 0 or cap 0 get nothing. What cannot be given (everyone capped) is left.
    """
    count = len(weights)
    given = [0] * count
    active = [i for i in range(count) if weights[i] > 0 and caps[i] > 0]
    left = amount
    while active and left > 0:
        total_weight = sum(weights[i] for i in active)
        capped = [i for i in active if caps[i] - given[i] <= left * weights[i] // total_weight]
        if capped:
            for i in capped:
                left -= caps[i] - given[i]
                given[i] = caps[i]
            capped_set = set(capped)
            active = [i for i in active if i not in capped_set]
            continue
        handed = 0
        for i in active:
            share = left * weights[i] // total_weight
            given[i] += share
            handed += share
        remainder = left - handed
        by_fraction = sorted(active, key=lambda i: (-(left * weights[i] % total_weight), i))
        for i in by_fraction[:remainder]:
            given[i] += 1
        left = 0
    return given


def _divide(amount: int, members: Sequence[_Member]) -> list[int]:
    caps = [m.cap for m in members]
    deserved = [min(m.quota, m.cap) for m in members]
    if sum(deserved) > amount:
        deserved = water_fill(amount, [m.quota for m in members], deserved)
    left = amount - sum(deserved)
    shares = list(deserved)
    for priority in sorted({m.priority for m in members}, reverse=True):
        if left <= 0:
            break
        bucket = [i for i, m in enumerate(members) if m.priority == priority]
        extra = water_fill(
            left, [members[i].weight for i in bucket], [caps[i] - shares[i] for i in bucket]
        )
        for i, amount_given in zip(bucket, extra, strict=True):
            shares[i] += amount_given
            left -= amount_given
    return shares


_RESOURCES = ("gpu_milli", "cpu_milli", "memory_mib")


def compute_fair_shares(
    projects: Sequence[Project],
    leaf_demand: Mapping[str, Resources],
    capacity: Resources,
) -> dict[str, Resources]:
    """Fair share of every project and department, per resource.

    `leaf_demand` is what each leaf project holds plus what it waits for. A department's demand
    is the sum of its children's, each capped by the child's limit.
    """
    children: dict[str | None, list[Project]] = {}
    for project in sorted(projects, key=lambda p: p.name):
        children.setdefault(project.parent, []).append(project)

    demand: dict[str, list[int]] = {}
    for root in children.get(None, []):
        _total_demand(root, children, leaf_demand, demand)

    shares: dict[str, list[int]] = {p.name: [0, 0, 0] for p in projects}
    root_amounts = [
        capacity.gpu_milli,
        capacity.cpu_milli,
        capacity.memory_mib,
    ]
    _divide_among(None, root_amounts, children, demand, shares)
    return {name: Resources(s[0], s[1], s[2]) for name, s in shares.items()}


# The two walks are module functions, not closures: a nested function that calls itself is a
# reference cycle (function -> cell -> function), which outlives the cycle with the collector
# paused and holds what it refers to.


def _total_demand(
    project: Project,
    children: dict[str | None, list[Project]],
    leaf_demand: Mapping[str, Resources],
    demand: dict[str, list[int]],
) -> list[int]:
    """`project`'s demand (a department's: its children's, each capped by its limit), stored
    in `demand` for it and every project below it."""
    kids = children.get(project.name)
    if kids:
        sums = [0, 0, 0]
        for kid in kids:
            kid_demand = _total_demand(kid, children, leaf_demand, demand)
            for r in range(3):
                sums[r] += _capped(kid_demand[r], kid.limit, r)
        demand[project.name] = sums
    else:
        d = leaf_demand.get(project.name, Resources())
        demand[project.name] = [d.gpu_milli, d.cpu_milli, d.memory_mib]
    return demand[project.name]


def _divide_among(
    parent: str | None,
    amounts: list[int],
    children: dict[str | None, list[Project]],
    demand: dict[str, list[int]],
    shares: dict[str, list[int]],
) -> None:
    """Divide what `parent` received among its children, then theirs, into `shares`."""
    kids = children.get(parent, [])
    if not kids:
        return
    for r, field in enumerate(_RESOURCES):
        members = [
            _Member(
                quota=getattr(kid.quota, field),
                cap=_capped(demand[kid.name][r], kid.limit, r),
                weight=kid.over_quota_weight,
                priority=kid.priority,
            )
            for kid in kids
        ]
        for kid, share in zip(kids, _divide(amounts[r], members), strict=True):
            shares[kid.name][r] = share
    for kid in kids:
        _divide_among(kid.name, shares[kid.name], children, demand, shares)


def _capped(amount: int, limit: Limits, resource_index: int) -> int:
    cap = getattr(limit, _RESOURCES[resource_index])
    return amount if cap is None else min(amount, cap)
