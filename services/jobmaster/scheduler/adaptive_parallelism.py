"""Deciding a vertex's parallelism once its producers have finished (the deciding part of
Flink's ``AdaptiveBatchScheduler``).

When a job starts, the JobMaster decides its sources from the size of their files and leaves
every other open vertex *late* (``plan_parallelism``): such a vertex has no subtasks yet. Its
producers split what they write for it into as many sub-partitions as it may ever get (its
bound). When the last of them has finished, :meth:`AdaptiveParallelism.decide` counts the
bytes they wrote (what their finished attempts reported), decides the vertex's parallelism
from them (``decide_from_written``), and vertices fed from it by a ``forward`` edge get the
same; the execution graph then creates their subtasks and wires them, and the scheduler
deploys them like any other.

The ranges of sub-partitions its subtasks read are balanced by bytes when every producer
reported what it wrote into each of them (``balanced_bounds`` in
:mod:`sparkmill.common.exchange.subpartitions`; otherwise, e.g. for attempts restored from an
earlier JobMaster, the ranges hold equal numbers of sub-partitions): a hot key's sub-partition
gets a range of its own or a short one, and the decision says how uneven the ranges still are.
A join whose compiled vertex allows it (``JobVertex.skew_splittable_inputs``) goes further: a
skewed sub-partition is read by several subtasks, each from some of the skewed input's
producers (:mod:`sparkmill.common.exchange.skewed_splits`), and the decision names it.

Every decision goes to the progress listener before any subtask of the vertex is deployed:
the job's progress log keeps it ahead of the vertex's finished attempts, so a JobMaster that
takes the job over applies the recorded decisions (:meth:`AdaptiveParallelism.apply_recorded`)
before it restores finished subtasks, and never decides a vertex twice differently while
keeping any output of it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping

from sparkmill.common.core.ids import JobVertexID, short
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.partitions import NO_DATA_PARTITIONER
from sparkmill.common.core.states import ExecutionState
from sparkmill.common.deployment.state_update import Written
from sparkmill.common.exchange.skewed_splits import (
    ReadPlan,
    SkewedSplit,
    plan_skewed_splits,
    read_plan_error,
)
from sparkmill.common.exchange.subpartitions import balanced_bounds, bounds_error
from sparkmill.common.jobgraph.auto_parallelism import (
    AutoParallelismSettings,
    ParallelismDecision,
    decide_from_written,
    format_bytes,
    forward_input,
)
from sparkmill.common.jobgraph.model import JobEdge
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from sparkmill.services.jobmaster.executiongraph.execution_topology import (
    ExecutionJobVertex,
    ExecutionVertex,
    ExecutionVertexID,
    PipelinedRegion,
)
from sparkmill.services.jobmaster.scheduler.scheduler_interfaces import ProgressListener

log = logging.getLogger(__name__)

_FINISHED = ExecutionState.FINISHED
_SPLIT = ("hash", "rebalance")  # the partitioners whose output is split into sub-partitions


class AdaptiveParallelism:
    """The late decisions of one job's scheduler (inert for a graph without late vertices)."""

    def __init__(
        self,
        graph: ExecutionGraph,
        settings: AutoParallelismSettings | None = None,
        own_bytes: Mapping[JobVertexID, int] | None = None,
    ) -> None:
        if graph.late_bounds and settings is None:
            raise ValueError("a graph with vertices decided late needs the settings to decide")
        self.graph = graph
        self.settings = settings
        self.own_bytes = dict(own_bytes or {})
        # Bytes each subtask's finished attempt wrote (only kept while something is open),
        # and per data set the bytes of each sub-partition of its hash or rebalance outputs.
        self._written: dict[ExecutionVertexID, int] = {}
        self._sizes: dict[ExecutionVertexID, dict[str, tuple[int, ...]]] = {}
        # Per producer job vertex: its subtasks before this index were all seen FINISHED.
        self._cursor: dict[JobVertexID, int] = {}
        # Ranges balanced by bytes of the vertices being decided (until they are recorded).
        self._bounds: dict[JobVertexID, tuple[int, ...]] = {}

    def attempt_finished(
        self, vertex: ExecutionVertex, io: IOCounters | None, written: Written = ()
    ) -> None:
        if self.graph.late_bounds:
            self._written[vertex.id] = io.bytes_out if io is not None else 0
            self._sizes[vertex.id] = dict(written)

    def decide(self, progress: ProgressListener) -> list[PipelinedRegion]:
        """Decide every open vertex whose producers have all finished, initialize what that
        makes ready, record the decisions with ``progress``; returns the new subtasks' regions
        whose inputs are consumable (to schedule)."""
        if not self.graph.late_bounds or not self.graph.uninitialized_job_vertices:
            return []
        decisions = self._ready()
        if not decisions:
            return []
        for vertex_id, decision in decisions.items():
            # Recorded before any of its subtasks exists, so before any of them can finish.
            bounds = self._bounds.pop(vertex_id, ())
            progress.vertex_decided(vertex_id, decision.parallelism, decision.text, bounds)
            self._set_bounds(vertex_id, bounds)
        created = self.graph.initialize_vertices(
            {vertex_id: d.parallelism for vertex_id, d in decisions.items()}
        )
        for vertex_id, decision in decisions.items():
            self.graph.parallelism_decisions[vertex_id] = decision.text
            log.info(
                "job %s: vertex %r decided at parallelism %d (%s)",
                short(self.graph.job_id),
                self.graph.job_vertex(vertex_id).name,
                decision.parallelism,
                decision.reason,
            )
        regions = {id(r): r for r in map(self.graph.region_of, created)}
        return [region for region in regions.values() if region.inputs_consumable]

    def apply_recorded(
        self,
        recorded: Mapping[str, tuple[int, str]],
        ranges: Mapping[str, tuple[int, ...]] | None = None,
    ) -> int:
        """Apply what an earlier JobMaster of the job decided (and recorded) for vertices that
        are still open here, with the sub-partition ranges it gave them (``ranges``); returns
        how many were applied. A record that does not fit this graph (an unknown vertex, a
        number or ranges out of its bounds) is ignored: the vertex is then decided anew, and
        nothing of it is restored."""
        ranges = ranges or {}
        applied: dict[JobVertexID, int] = {}
        texts: dict[JobVertexID, str] = {}
        for ejv in self.graph.uninitialized_job_vertices:  # topological order
            record = recorded.get(ejv.id)
            bound = self.graph.late_bounds.get(ejv.id, 0)
            if not ejv.job_vertex.is_auto:
                continue  # a fixed number: initialized once its producers are
            forward = _forward_producer(self.graph, ejv)
            if forward is not None and forward.id in applied:
                # Decided with its producer, always (its producer's partitions are split for
                # it): also when a torn write kept the producer's record and lost this one.
                applied[ejv.id] = applied[forward.id]
                texts[ejv.id] = f"auto: as its forward input {forward.name!r}"
                continue
            if record is None or not 1 <= record[0] <= bound:
                continue
            bounds = ranges.get(ejv.id, ())
            if bounds and self._recorded_plan_error(ejv, bounds, record[0], applied):
                continue
            self._set_bounds(ejv.id, bounds)
            applied[ejv.id] = record[0]
            texts[ejv.id] = record[1]
        if applied:
            self.graph.initialize_vertices(applied)
            self.graph.parallelism_decisions.update(texts)
        return len(applied)

    def _ready(self) -> dict[JobVertexID, ParallelismDecision]:
        settings = self.settings
        assert settings is not None
        graph = self.graph
        decisions: dict[JobVertexID, ParallelismDecision] = {}
        for ejv in graph.uninitialized_job_vertices:  # topological order
            vertex = ejv.job_vertex
            if not vertex.is_auto:
                continue
            forward = _forward_producer(graph, ejv)
            if forward is not None:
                decided = decisions.get(forward.id)
                if decided is not None:
                    decisions[ejv.id] = ParallelismDecision(
                        decided.parallelism, f"as its forward input {forward.name!r}"
                    )
                continue
            producers = [(edge, graph.result(edge.source).producer) for edge in vertex.inputs]
            # Every producer's cursor first (O(1) amortized), the full check only then: a
            # finished wide producer is not scanned again for each subtask of a slower one.
            if not all(self._seen_finished(producer) for _, producer in producers):
                continue
            if not all(self._all_finished(producer) for _, producer in producers):
                continue
            written = self.own_bytes.get(ejv.id, 0)
            for edge, producer in producers:
                if edge.partitioner not in ("broadcast", NO_DATA_PARTITIONER):
                    written += sum(self._written.get(v.id, 0) for v in producer.task_vertices)
            decision = decide_from_written(vertex, written, graph.late_bounds[ejv.id], settings)
            split = self._skewed_split(ejv, producers, decision.parallelism)
            if split is not None:
                plan, found = split
                self._bounds[ejv.id] = plan.encode()
                names = [producer.name for _, producer in producers]
                decisions[ejv.id] = ParallelismDecision(
                    plan.consumers, decision.reason + _skew_text(found, names)
                )
                continue
            sizes = self._sub_partition_sizes(producers, graph.late_bounds[ejv.id])
            if sizes is not None and decision.parallelism < len(sizes):
                bounds = balanced_bounds(sizes, decision.parallelism)
                self._bounds[ejv.id] = bounds
                decision = ParallelismDecision(
                    decision.parallelism, decision.reason + _balance_text(sizes, bounds)
                )
            decisions[ejv.id] = decision
        return decisions

    def _skewed_split(
        self,
        ejv: ExecutionJobVertex,
        producers: list[tuple[JobEdge, ExecutionJobVertex]],
        parallelism: int,
    ) -> tuple[ReadPlan, tuple[SkewedSplit, ...]] | None:
        """A plan splitting the skewed sub-partitions of a join vertex that allows it (see
        :mod:`sparkmill.common.exchange.skewed_splits`); None when there is nothing to split,
        or not every producer reported the bytes of each sub-partition."""
        settings = self.settings
        splittable = ejv.job_vertex.skew_splittable_inputs
        if settings is None or settings.skewed_join_strategy == "none" or not splittable:
            return None
        count = self.graph.late_bounds[ejv.id]
        sizes: list[list[tuple[int, ...]]] = []
        for edge, producer in producers:
            if edge.partitioner not in _SPLIT:
                return None
            per_producer = [
                self._sizes.get(v.id, {}).get(edge.source) for v in producer.task_vertices
            ]
            if any(s is None or len(s) != count for s in per_producer):
                return None
            sizes.append([s for s in per_producer if s is not None])
        return plan_skewed_splits(
            sizes,
            splittable,
            parallelism,
            count,
            settings.skewed_join_factor,
            settings.skewed_join_threshold,
        )

    def _sub_partition_sizes(
        self, producers: list[tuple[JobEdge, ExecutionJobVertex]], count: int
    ) -> list[int] | None:
        """The bytes in each of the ``count`` sub-partitions of the vertex's split inputs,
        summed over every producer subtask and input; None unless all of them reported."""
        totals = [0] * count
        split = False
        for edge, producer in producers:
            if edge.partitioner not in _SPLIT:
                continue
            split = True
            for vertex in producer.task_vertices:
                sizes = self._sizes.get(vertex.id, {}).get(edge.source)
                if sizes is None or len(sizes) != count:
                    return None
                for k, size in enumerate(sizes):
                    totals[k] += size
        return totals if split else None

    def _set_bounds(self, vertex_id: JobVertexID, encoded: tuple[int, ...]) -> None:
        """The ranges every split input of ``vertex_id`` is read in (before it is wired):
        ``encoded`` is a :class:`ReadPlan`'s flat form (its bounds alone without splits)."""
        plan = ReadPlan.decode(encoded)
        for position, edge in enumerate(self.graph.job_vertex(vertex_id).job_vertex.inputs):
            if edge.partitioner in _SPLIT:
                result = self.graph.result(edge.source)
                if plan.splits:
                    result.subpartition_bounds = ()
                    result.set_read_plan(plan, position)
                else:
                    result.subpartition_bounds = plan.bounds
                    result.set_read_plan(None)

    def _recorded_plan_error(
        self,
        ejv: ExecutionJobVertex,
        encoded: tuple[int, ...],
        parallelism: int,
        applied: Mapping[JobVertexID, int],
    ) -> str:
        """What is wrong with a recorded plan for ``ejv`` decided at ``parallelism``."""
        bound = self.graph.late_bounds.get(ejv.id, 0)
        plan = ReadPlan.decode(encoded)
        if not plan.splits:
            return bounds_error(plan.bounds, parallelism, bound)
        counts = []
        for edge in ejv.job_vertex.inputs:
            producer = self.graph.result(edge.source).producer
            if producer.initialized:
                counts.append(len(producer.task_vertices))
            elif producer.id in applied:
                counts.append(applied[producer.id])
            elif not producer.job_vertex.is_auto:
                counts.append(producer.job_vertex.parallelism)
            else:
                return f"the producer {producer.name!r} has no parallelism yet"
        return read_plan_error(
            plan, parallelism, bound, counts, ejv.job_vertex.skew_splittable_inputs
        )

    def _seen_finished(self, producer: ExecutionJobVertex) -> bool:
        """Whether every subtask of ``producer`` was seen FINISHED once: amortized O(1) per
        call, each subtask is passed once by the cursor."""
        if not producer.initialized:
            return False
        subtasks = producer.task_vertices
        index = self._cursor.get(producer.id, 0)
        while index < len(subtasks) and subtasks[index].current_execution.state is _FINISHED:
            index += 1
        self._cursor[producer.id] = index
        return index == len(subtasks)

    def _all_finished(self, producer: ExecutionJobVertex) -> bool:
        """Whether every subtask of ``producer`` is FINISHED now. A restart may have reset one
        behind the cursor since it passed: then the cursor starts over."""
        if all(v.current_execution.state is _FINISHED for v in producer.task_vertices):
            return True
        self._cursor[producer.id] = 0
        return False


def _balance_text(sizes: list[int], bounds: tuple[int, ...]) -> str:
    """``; ranges balanced by bytes: 1.2-1.6 MiB per subtask``, and the largest sub-partition
    when it alone outweighs twice a fair share (a hot key, whose rows stay in one subtask)."""
    per_range = [sum(sizes[a:b]) for a, b in itertools.pairwise(bounds)]
    text = (
        f"; ranges balanced by bytes: {format_bytes(min(per_range))}-"
        f"{format_bytes(max(per_range))} per subtask"
    )
    share = sum(sizes) / (len(bounds) - 1)
    largest = max(range(len(sizes)), key=sizes.__getitem__)
    if share and sizes[largest] > 2 * share:
        text += (
            f"; sub-partition {largest} alone holds {format_bytes(sizes[largest])} "
            "(a key's rows are never split)"
        )
    return text


def _skew_text(found: tuple[SkewedSplit, ...], inputs: list[str]) -> str:
    """``; skewed join: sub-partition 5 of input 'orders' (2.0 GiB, 512x its median of
    4.0 MiB) split across 4 subtasks by producer``, for each split."""
    return "".join(
        f"; skewed join: sub-partition {s.subpartition} of input {inputs[s.input_index]!r} "
        f"({format_bytes(s.size)}, {_against_median(s)}) split across {s.pieces} subtasks by "
        "producer"
        for s in found
    )


def _against_median(split: SkewedSplit) -> str:
    if split.median <= 0:  # most sub-partitions empty: a ratio would say nothing
        return "most of its sub-partitions are empty"
    return f"{split.size / split.median:.0f}x its median of {format_bytes(split.median)}"


def _forward_producer(graph: ExecutionGraph, ejv: ExecutionJobVertex) -> ExecutionJobVertex | None:
    """The producer feeding ``ejv`` through a ``forward`` edge, if any (they share a number)."""
    edge = forward_input(ejv.job_vertex)
    return graph.result(edge.source).producer if edge is not None else None
