"""Where a task goes: node and devices. One engine for every action of the cycle (allocate,
consolidate, reclaim, preempt), scored by the registered placement policy the settings name
(`gpupool.core.policies`; the packing benchmark runs the same classes).

The placer finds candidates through the session's capacity indexes and filters them (node
selector, taints, CPU and memory, devices pinned by bursting fractions); the policy scores each
candidate node for the task and chooses its devices there.
"""

from __future__ import annotations

import bisect
from typing import Final

from gpupool.core.candidates import RotatingPick
from gpupool.core.capacity import Pins, SessionCapacity, pinned_devices
from gpupool.core.model import (
    MILLI_PER_GPU,
    GpuRequestKind,
    Toleration,
    Workload,
)
from gpupool.core.policies import create_policy
from gpupool.core.policies.base import PodShape, PolicyContext, Scored, TypicalShape
from gpupool.core.session import Session, TaskAlloc, task_alloc

# Enum members as module globals: reading one from its class costs ten times as much in
# Python 3.11, and a search reads them for every task placed.
_WHOLE: Final = GpuRequestKind.WHOLE
_FRACTION: Final = GpuRequestKind.FRACTION
_MEMORY: Final = GpuRequestKind.MEMORY


class _ShapeScores:
    """One shape's score on each node (None: does not fit), valid while the node's version
    (`Session.node_version`) is its `scored_at`: two flat lists, so that a candidate's memo is
    two list reads rather than a dict lookup (compiled, a boxed key hashed per candidate)."""

    def __init__(self, nodes: int) -> None:
        self.scores: list[Scored | None] = [None] * nodes
        self.scored_at: list[int] = [-1] * nodes


NodeSelector = tuple[tuple[str, tuple[str, ...]], ...]


class Placer:
    """Finds task placements in a session. One per cycle; holds per-cycle caches only.

    A node is a candidate for a new placement when it matches the workload's node selector and
    the workload tolerates every NoSchedule / NoExecute taint on it (PreferNoSchedule is not
    acted on). Work already placed on a node stays valid whatever its taints. A device is also
    kept from new placements while a dynamic fraction that may not be moved off it runs there
    physically (see `_pin_burst_devices`).
    """

    def __init__(self, session: Session, typical: tuple[TypicalShape, ...] = ()) -> None:
        self.session = session
        self._selector_nodes: dict[NodeSelector, frozenset[int]] = {}
        self._repelling = tuple(
            i for i, node in enumerate(session.nodes) if any(t.repels for t in node.taints)
        )
        """Nodes with a NoSchedule / NoExecute taint: the only ones tolerations can matter on."""
        self._untolerated: dict[tuple[Toleration, ...], frozenset[int]] = {}
        self._admitted: dict[
            tuple[NodeSelector, tuple[Toleration, ...]], tuple[frozenset[int] | None]
        ] = {}
        self._repelling_taints: dict[
            tuple[NodeSelector, tuple[Toleration, ...]], tuple[int, tuple[str, ...]]
        ] = {}
        self._pins: Pins = {}
        self._pin_burst_devices()
        self._shapes: dict[tuple[int, int, int, int, int], PodShape] = {}
        models: dict[str | None, int] = {}
        self._model_of = [models.setdefault(n.gpu_model, len(models)) for n in session.nodes]
        self._models_allowed: dict[frozenset[int] | None, int] = {None: len(models)}
        self._memos: dict[int, _ShapeScores] = {}
        """Per shape (`id` of a `PodShape` from `_shapes`, which keeps them all for the cycle),
        the policy's score of each node it was asked about. A policy scores a node from that
        node's own state alone (`policies.base`), so a node nothing changed on since scores
        the same: most candidates of one search were scored by an earlier one."""
        self._marks = [0] * len(session.nodes)
        self._stamp = 0
        """`_marks[node] == _stamp`: the node is already among the current search's candidates
        (`_shared_candidates` starts a search with a new stamp)."""
        self.capacity = SessionCapacity(session, self._pins)
        self._pick = RotatingPick(session.snapshot.now_s)
        self.policy = create_policy(
            session.settings.placement,
            PolicyContext(tuple(self.capacity.nodes), typical, self._pick),
        )

    # --- node filters ---------------------------------------------------------------------

    def _allowed(self, workload: Workload) -> frozenset[int] | None:
        """Nodes the selector and the taints admit; None when every node is admitted."""
        selector = workload.node_selector
        if not self._repelling:
            if not selector:
                return None
            key: tuple[NodeSelector, tuple[Toleration, ...]] = (selector, ())
        else:
            key = (selector, workload.tolerations)
        cached = self._admitted.get(key)
        if cached is None:
            nodes = self._selected(selector) if selector else None
            untolerated = self._untolerated_nodes(key[1]) if self._repelling else frozenset()
            if untolerated:
                everything = frozenset(range(len(self.session.nodes)))
                nodes = (everything if nodes is None else nodes) - untolerated
            cached = self._admitted[key] = (nodes,)
        return cached[0]

    def _selected(self, selector: NodeSelector) -> frozenset[int]:
        """Nodes whose labels match `selector` (taints aside)."""
        nodes = self._selector_nodes.get(selector)
        if nodes is None:
            nodes = frozenset(
                i
                for i, node in enumerate(self.session.nodes)
                if all(node.label(key) in values for key, values in selector)
            )
            self._selector_nodes[selector] = nodes
        return nodes

    def _untolerated_nodes(self, tolerations: tuple[Toleration, ...]) -> frozenset[int]:
        """Nodes with a NoSchedule / NoExecute taint that `tolerations` do not tolerate."""
        nodes = self._untolerated.get(tolerations)
        if nodes is None:
            all_nodes = self.session.nodes
            nodes = frozenset(i for i in self._repelling if not all_nodes[i].admits(tolerations))
            self._untolerated[tolerations] = nodes
        return nodes

    def selector_matches_any(self, workload: Workload) -> bool:
        """Whether any node matches the node selector (taints aside)."""
        selector = workload.node_selector
        return not selector or bool(self._selected(selector))

    def admits_any(self, workload: Workload) -> bool:
        """Whether any node admits the workload (selector and taints)."""
        allowed = self._allowed(workload)
        return allowed is None or bool(allowed)

    def admitted_nodes(self, workload: Workload) -> frozenset[int] | None:
        """Nodes that are candidates for new tasks of `workload` (selector and taints); None
        when every node is."""
        return self._allowed(workload)

    def tolerated_on(self, workload: Workload, node: int) -> bool:
        """Whether the workload tolerates the NoSchedule / NoExecute taints of `node`."""
        return not self._repelling or node not in self._untolerated_nodes(workload.tolerations)

    def repelling_taints(self, workload: Workload) -> tuple[int, tuple[str, ...]]:
        """(how many nodes matching the selector have taints the workload does not tolerate,
        the keys of those taints), for the pending reason."""
        if not self._repelling:
            return 0, ()
        key = (workload.node_selector, workload.tolerations)
        cached = self._repelling_taints.get(key)
        if cached is None:
            untolerated = self._untolerated_nodes(workload.tolerations)
            if workload.node_selector:
                untolerated = untolerated & self._selected(workload.node_selector)
            keys = {
                taint.key
                for i in untolerated
                for taint in self.session.nodes[i].untolerated_taints(workload.tolerations)
            }
            cached = self._repelling_taints[key] = (len(untolerated), tuple(sorted(keys)))
        return cached

    # --- devices kept from new placements -------------------------------------------------

    def _pin_burst_devices(self) -> None:
        """Keep new placements off the idle device a dynamic fraction bursts on when it could
        not be packed back if that device were claimed: it is not movable, or its node now has
        taints it does not tolerate (packing back is a restart there). The pin holds while the
        task stays placed (an eviction frees the device)."""
        session = self.session
        for index in session.burstable_works:
            work = session.works[index]
            for task, alloc in work.allocs.items():
                if alloc.burst_device is None:
                    continue
                if work.spec.movable and self.tolerated_on(work.spec, alloc.node):
                    continue
                self._pins.setdefault(alloc.node, []).append((work, task, alloc.burst_device))

    def _pinned(self, node: int) -> set[int]:
        """Devices of `node` that pinned burst tasks still run on."""
        return pinned_devices(self._pins, node)

    def _node_fits(
        self,
        node: int,
        workload: Workload,
        allowed: frozenset[int] | None,
        excluded: int | None,
        count_cpu_memory: bool = True,
    ) -> bool:
        s = self.session
        return (
            node != excluded
            and (allowed is None or node in allowed)
            and (
                not count_cpu_memory
                or (
                    s.cpu_free[node] >= workload.cpu_milli
                    and s.memory_free[node] >= workload.memory_mib
                )
            )
        )

    # --- search ---------------------------------------------------------------------------

    def find(
        self,
        workload: Workload,
        task_index: int,
        excluded: int | None = None,
        max_milli: int | None = None,
    ) -> TaskAlloc | None:
        """A placement for one task of `workload`, or None. `excluded` is a node to avoid;
        `max_milli` the most GPU the task may be charged (a memory request costs more on a
        smaller device).

        The candidates come from the session's indexes in the policy's order (fewest empty
        devices first, or most for a loose policy; for a fraction, already shared devices
        tightest first, then nodes with an empty device), at most `placement_candidates` of
        each kind, as kube-scheduler scores a bounded share of the feasible nodes; the policy
        scores each and the lowest score wins, the lowest-numbered node on a tie. A policy whose
        order is its score is offered only the first candidate that fits (whole GPUs with
        `whole_in_offered_order`; with `empty_device_in_offered_order`, an empty device for a
        fraction that no shared device took)."""
        request = workload.gpu
        policy = self.policy
        if request.kind is _WHOLE:
            if request.amount > self.session.max_gpus_per_node:
                return None
            candidates: list[int] = self._whole_candidates(
                workload, excluded, request.amount, policy.whole_in_offered_order
            )
            best = self._best(workload, candidates) if candidates else None
        else:
            if max_milli is not None and request.kind is _FRACTION and request.amount > max_milli:
                return None
            two_steps = policy.empty_device_in_offered_order
            found = self._shared_candidates(workload, excluded, max_milli, not two_steps)
            best = self._best(workload, found) if found else None
            if best is None and two_steps:
                # no shared device took it: the first node with an empty device that does
                shared = len(found)
                self._empty_candidates(workload, excluded, max_milli, found, True)
                if len(found) > shared:
                    best = self._best(workload, found[shared:])
                    if best is None:  # that node refused it after all (its devices' memory)
                        self._empty_candidates(workload, excluded, max_milli, found, False)
                        best = self._best(workload, found[shared + 1 :])
        if best is None:
            return None
        _, node, devices, shape = best
        devices = policy.finish(self.capacity, node, shape, devices)
        device_memory = self.session.nodes[node].gpu_memory_mib
        return task_alloc(
            task_index,
            node,
            devices,
            shape.gpu_milli,
            request.memory_mib_on(device_memory) if request.is_shared else device_memory,
        )

    def _best(
        self, workload: Workload, candidates: list[int]
    ) -> tuple[float, int, tuple[int, ...], PodShape] | None:
        """The candidate the policy scores lowest (with the devices and the shape it scored)."""
        request = workload.gpu
        policy = self.policy
        view = self.capacity
        # Ties go to the lowest-numbered node: a fixed priority, so equal scores keep filling the
        # same nodes (as the FGD artifact's ties do; worth 2 points on gpuspec10 for `default`),
        # except for a policy that chooses at random, whose ties follow a rotated candidate list.
        rotate = policy.random_ties
        if rotate and len(candidates) > 1:
            first = self._pick(len(candidates))
            candidates = candidates[first:] + candidates[:first]
        per_node = request.kind is _MEMORY
        shape = self._shape(workload, 0)
        memo = self._memo(shape)  # one lookup per search, not per candidate
        scores = memo.scores
        scored_at = memo.scored_at
        shared = request.is_shared
        # the best so far as plain locals, not a tuple read back for every candidate
        best_score = 0.0
        best_node = -1
        best_devices: tuple[int, ...] = ()
        best_shape = shape
        versions = self.session.node_version
        for node in candidates:
            # the candidates fit (devices, CPU, memory, selector): only the score is asked for
            if per_node:
                shape = self._shape(workload, node)
                memo = self._memo(shape)
                scores = memo.scores
                scored_at = memo.scored_at
            version = versions[node]
            if scored_at[node] == version:
                scored = scores[node]
            else:
                scored = scores[node] = policy.score(view, node, shape)
                scored_at[node] = version
            if scored is None:
                continue
            score: float = scored[0]  # unboxed once: the comparisons below are on C doubles
            if best_node >= 0 and (
                score > best_score or (score == best_score and (rotate or node > best_node))
            ):
                continue
            devices = scored[1]
            if shared and not self._memory_fits(workload, node, devices):
                continue
            best_score = score
            best_node = node
            best_devices = devices
            best_shape = shape
        if best_node < 0:
            return None
        return best_score, best_node, best_devices, best_shape

    def _memo(self, shape: PodShape) -> _ShapeScores:
        memo = self._memos.get(id(shape))
        if memo is None:
            memo = self._memos[id(shape)] = _ShapeScores(len(self.session.nodes))
        return memo

    def _shape(self, workload: Workload, node: int) -> PodShape:
        """The task as a policy sees it on `node` (a memory request's share depends on the
        node's device memory; node selectors and GPU models are the placer's filters)."""
        request = workload.gpu
        if request.kind is _MEMORY:
            milli = request.milli_on(self.session.nodes[node].gpu_memory_mib)
        else:
            milli = request.amount if request.is_shared else MILLI_PER_GPU
        kind = request.kind
        # The kind as a number: hashing an enum member runs Python code.
        code = 0 if kind is _WHOLE else 1 if kind is _FRACTION else 2
        key = (workload.cpu_milli, workload.memory_mib, request.amount, milli, code)
        shape = self._shapes.get(key)
        if shape is None:
            count = 1 if request.is_shared else request.amount
            shape = self._shapes[key] = PodShape(
                workload.cpu_milli, workload.memory_mib, count, milli
            )
        return shape

    def _memory_fits(self, workload: Workload, node: int, devices: tuple[int, ...]) -> bool:
        device_memory = self.session.nodes[node].gpu_memory_mib
        memory = workload.gpu.memory_mib_on(device_memory)
        used = self.session.device_memory_used[node]
        return all(used[d] + memory <= device_memory for d in devices)

    def _buckets_with_empty(self, at_least: int) -> list[dict[int, None]]:
        """The session's buckets of nodes with `at_least` empty devices or more, in the
        policy's order (fewest first, or most for a loose policy). The scans loop over each
        bucket's nodes themselves: a chained iterator is a generic call per node compiled."""
        s = self.session
        buckets = s.nodes_by_empty[at_least:]
        if self.policy.loose:
            buckets.reverse()
        return buckets

    def _offer(self, allowed: frozenset[int] | None) -> tuple[list[int], int]:
        """A fresh count of the candidates taken per GPU model, and how many models the
        workload may use: the candidate scans stop once each of them has
        `placement_candidates`. Per model, because a fragmentation-aware policy decides between
        models (which nodes to keep free for work that needs a scarce one) only if it sees them.
        The scans count inline: they take a candidate tens of thousands of times a cycle."""
        models = self._models_allowed.get(allowed)
        if models is None:
            assert allowed is not None
            models = self._models_allowed[allowed] = len({self._model_of[n] for n in allowed})
        return [0] * self._models_allowed[None], models

    def _whole_candidates(
        self, workload: Workload, excluded: int | None, needed: int, first_only: bool = False
    ) -> list[int]:
        """Nodes with `needed` empty devices the task may use, in the policy's order; the first
        only, or `placement_candidates` of each GPU model."""
        allowed = self._allowed(workload)
        pins = self._pins
        taken, left = self._offer(allowed)
        limit = self.session.settings.placement_candidates
        model_of = self._model_of
        found: list[int] = []
        # `_node_fits`, inline: this loop runs for every whole-GPU task placed
        cpu_free = self.session.cpu_free
        memory_free = self.session.memory_free
        cpu = workload.cpu_milli
        memory = workload.memory_mib
        skip = -1 if excluded is None else excluded  # an int compares natively compiled
        for bucket in self._buckets_with_empty(needed):
            for node in bucket:
                if (
                    node == skip
                    or (allowed is not None and node not in allowed)
                    or cpu_free[node] < cpu
                    or memory_free[node] < memory
                ):
                    continue
                if pins and node in pins:
                    used = self.session.device_used[node]
                    pinned = self._pinned(node)
                    if (
                        sum(1 for d in range(len(used)) if used[d] == 0 and d not in pinned)
                        < needed
                    ):
                        continue
                if first_only:
                    return [node]
                model = model_of[node]
                count = taken[model] + 1
                if count > limit:
                    continue
                taken[model] = count
                found.append(node)
                if count == limit:
                    left -= 1
                    if left <= 0:
                        return found
        return found

    def _shared_candidates(
        self,
        workload: Workload,
        excluded: int | None,
        max_milli: int | None,
        empty: bool = True,
    ) -> list[int]:
        """Nodes with an already shared device the task fits on (tightest first), then (with
        `empty`) nodes with an empty device; at most `placement_candidates` of each kind and
        GPU model."""
        s = self.session
        request = workload.gpu
        allowed = self._allowed(workload)
        smallest = request.milli_on(s.max_device_memory_mib)
        # `_node_fits`, inline: this loop runs for every fraction placed
        cpu_free = s.cpu_free
        memory_free = s.memory_free
        cpu = workload.cpu_milli
        memory = workload.memory_mib
        # a fraction costs the same on every device; a memory request depends on the node's
        per_node = request.kind is _MEMORY
        milli = request.amount
        nodes = s.nodes
        found: list[int] = []
        # membership in `found` by a mark per node (no set of boxed ints per search)
        self._stamp += 1
        stamp = self._stamp
        marks = self._marks
        keys = s.shared_free_keys
        by_free = s.shared_by_free
        limit = s.settings.placement_candidates
        model_of = self._model_of
        taken, left = self._offer(allowed)
        skip = -1 if excluded is None else excluded
        for free in keys[bisect.bisect_left(keys, smallest) :]:
            for node, _device in by_free[free]:
                if (
                    marks[node] == stamp
                    or node == skip
                    or (allowed is not None and node not in allowed)
                    or cpu_free[node] < cpu
                    or memory_free[node] < memory
                ):
                    continue
                if per_node:
                    milli = request.milli_on(nodes[node].gpu_memory_mib)
                if milli > free or (max_milli is not None and milli > max_milli):
                    continue
                model = model_of[node]
                count = taken[model] + 1
                if count > limit:
                    continue
                taken[model] = count
                found.append(node)
                marks[node] = stamp
                if count == limit:
                    left -= 1
                    if left <= 0:
                        break
            if left <= 0:
                break
        if empty:
            self._empty_candidates(workload, excluded, max_milli, found, False)
        return found

    def _empty_candidates(
        self,
        workload: Workload,
        excluded: int | None,
        max_milli: int | None,
        found: list[int],
        first_only: bool,
    ) -> None:
        """Nodes with an empty device the task may use, not in `found` (marked with the current
        stamp by `_shared_candidates`), in the policy's order, added to `found`: the first only,
        or `placement_candidates` of each GPU model."""
        s = self.session
        request = workload.gpu
        allowed = self._allowed(workload)
        cpu_free = s.cpu_free
        memory_free = s.memory_free
        cpu = workload.cpu_milli
        memory = workload.memory_mib
        limit = s.settings.placement_candidates
        model_of = self._model_of
        taken, left = self._offer(allowed)
        pins = self._pins
        skip = -1 if excluded is None else excluded
        stamp = self._stamp
        marks = self._marks
        for bucket in self._buckets_with_empty(1):
            for node in bucket:
                if (
                    marks[node] == stamp
                    or node == skip
                    or (allowed is not None and node not in allowed)
                    or cpu_free[node] < cpu
                    or memory_free[node] < memory
                ):
                    continue
                if pins and node in pins:
                    used = s.device_used[node]
                    pinned = self._pinned(node)
                    if all(used[d] or d in pinned for d in range(len(used))):
                        continue
                if (
                    max_milli is not None
                    and request.milli_on(s.nodes[node].gpu_memory_mib) > max_milli
                ):
                    continue
                if first_only:
                    found.append(node)
                    marks[node] = stamp
                    return
                model = model_of[node]
                count = taken[model] + 1
                if count > limit:
                    continue
                taken[model] = count
                found.append(node)
                marks[node] = stamp
                if count == limit:
                    left -= 1
                    if left <= 0:
                        return

    # --- what the pending reason can say --------------------------------------------------

    def largest_empty_block(self, workload: Workload, count_cpu_memory: bool = True) -> int:
        """Most empty devices on one node the workload may use (with room for its CPU/memory).
        For the pending reason only: a pinned burst device counts as empty here."""
        s = self.session
        allowed = self._allowed(workload)
        for count in range(s.max_gpus_per_node, 0, -1):
            for node in s.nodes_by_empty[count]:
                if self._node_fits(node, workload, allowed, None, count_cpu_memory):
                    return count
        return 0

    def largest_free_fraction(self, workload: Workload, count_cpu_memory: bool = True) -> int:
        """Largest free part of one device the workload may use, in milli-GPU."""
        s = self.session
        allowed = self._allowed(workload)
        if self.largest_empty_block(workload, count_cpu_memory) > 0:
            return MILLI_PER_GPU
        for free in reversed(s.shared_free_keys):
            for node, _device in s.shared_by_free[free]:
                if self._node_fits(node, workload, allowed, None, count_cpu_memory):
                    return free
        return 0
