"""Unit tests of the slot sharing strategy and the shared slot's logical-slot bookkeeping."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import JobVertexID
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.core.states import ExecutionState as ES
from sparkmill.common.core.states import JobStatus
from sparkmill.common.jobgraph.model import (
    DEFAULT_SLOT_SHARING_GROUP,
    DistributionPattern,
    ResultPartitionType,
)
from sparkmill.services.jobmaster.executiongraph.execution_topology import ExecutionVertexID
from sparkmill.services.jobmaster.scheduler.restart_strategy import FixedDelayRestartStrategy
from sparkmill.services.jobmaster.slotpool.slot_sharing import SlotSharingStrategy
from tests.unit.scheduler_harness import Harness, build_graph, run, settle

A2A = DistributionPattern.ALL_TO_ALL
PIPELINED = ResultPartitionType.PIPELINED
BLOCKING = ResultPartitionType.BLOCKING


@dataclass
class TestingVertex:
    __test__ = False

    id: JobVertexID
    parallelism: int
    slot_sharing_group: str = DEFAULT_SLOT_SHARING_GROUP
    resource_profile: ResourceProfile = UNKNOWN_PROFILE


def _ev(name: str, i: int) -> ExecutionVertexID:
    return ExecutionVertexID(JobVertexID(name), i)


def test_three_vertices_parallelism_four_need_four_shared_slots() -> None:
    strategy = SlotSharingStrategy([TestingVertex(JobVertexID(n), 4) for n in "abc"])
    assert len(strategy.groups) == 4
    for group in strategy.groups:
        vertices = [m.job_vertex_id for m in group.members]
        assert sorted(vertices) == ["a", "b", "c"]  # at most one subtask per job vertex
        assert {m.subtask_index for m in group.members} == {group.id.index}


def test_separate_groups_need_separate_slots() -> None:
    strategy = SlotSharingStrategy(
        [TestingVertex(JobVertexID("a"), 2), TestingVertex(JobVertexID("b"), 3, "other")]
    )
    assert len(strategy.groups) == 5
    assert strategy.group_of(_ev("a", 0)) is not strategy.group_of(_ev("b", 0))


def test_different_parallelism_fills_lower_indices() -> None:
    strategy = SlotSharingStrategy(
        [TestingVertex(JobVertexID("a"), 1), TestingVertex(JobVertexID("b"), 3)]
    )
    assert [len(g.members) for g in strategy.groups] == [2, 1, 1]


def test_declared_profiles_add_up_and_unknown_ones_add_nothing() -> None:
    known = SlotSharingStrategy(
        [
            TestingVertex(JobVertexID("a"), 1, resource_profile=ResourceProfile(1.0, 100)),
            TestingVertex(JobVertexID("b"), 1, resource_profile=ResourceProfile(0.5, 50)),
        ]
    )
    assert known.groups[0].resource_profile == ResourceProfile(1.5, 150)
    mixed = SlotSharingStrategy(
        [
            TestingVertex(JobVertexID("a"), 1, resource_profile=ResourceProfile(1.0, 100)),
            TestingVertex(JobVertexID("b"), 1),
        ]
    )
    # An impossible declared need must still rule the shared slot out (fail fast).
    assert mixed.groups[0].resource_profile == ResourceProfile(1.0, 100)
    unknown = SlotSharingStrategy([TestingVertex(JobVertexID("a"), 1)])
    assert unknown.groups[0].resource_profile.is_unknown


def test_unknown_subtask_is_a_bug() -> None:
    strategy = SlotSharingStrategy([TestingVertex(JobVertexID("a"), 1)])
    with pytest.raises(IllegalStateBug):
        strategy.group_of(_ev("a", 5))


# -- the scheduler with slot sharing (hand-written fakes of tests/unit/scheduler_harness.py)


def _by_slot(h: Harness) -> dict[str, list[str]]:
    tasks: dict[str, list[str]] = {}
    for execution, slot in h.actions.submitted:
        tasks.setdefault(slot.allocation_id, []).append(execution.description)
    return {k: sorted(v) for k, v in tasks.items()}


def test_pipelined_region_runs_in_one_shared_slot_per_subtask_index() -> None:
    job_graph = build_graph({"src": 2, "dst": 2}, [("src", "dst", A2A, PIPELINED)])

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert len(h.rm.requested) == 2  # one request per execution slot sharing group
        assert h.offer(2) == 2
        await settle()
        assert h.states("src") + h.states("dst") == [ES.DEPLOYING] * 4
        groups = sorted(_by_slot(h).values())
        assert len(groups) == 2
        assert all(len(tasks) == 2 for tasks in groups)  # one src and one dst per slot
        h.finish("src", 0)
        await settle()
        assert h.pool.num_allocated_slots() == 2  # dst 0 still holds a logical slot
        h.finish("dst", 0)
        await settle()
        assert h.pool.num_allocated_slots() == 1  # the last logical slot frees the slot
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario)


def test_blocking_consumers_reuse_the_shared_slots() -> None:
    job_graph = build_graph({"a": 2, "b": 2}, [("a", "b", A2A, BLOCKING)])

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert h.offer(2) == 2
        await settle()
        h.finish("a", 0)
        h.finish("a", 1)
        await settle()
        assert h.states("b") == [ES.DEPLOYING] * 2
        assert len(h.rm.requested) == 2  # b reused a's slots, nothing new was requested
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario)


def test_separate_groups_request_separate_slots() -> None:
    job_graph = build_graph(
        {"src": 2, "dst": 2}, [("src", "dst", A2A, PIPELINED)], groups={"dst": "other"}
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert len(h.rm.requested) == 4

    run(job_graph, scenario)


def test_a_lost_shared_slot_fails_all_its_logical_slots() -> None:
    job_graph = build_graph({"src": 1, "dst": 1}, [("src", "dst", A2A, PIPELINED)])

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert h.offer(1) == 1
        await settle()
        h.run("src", 0)
        h.run("dst", 0)
        old = [h.execution("src", 0), h.execution("dst", 0)]
        (slot,) = {s.allocation_id for _, s in h.actions.submitted}
        h.pool.fail_slot(slot, ConnectionError("task executor vanished"))
        await settle()
        # src fails first; the region failover cancels dst, whose slot is gone as well.
        assert [e.state for e in old] == [ES.FAILED, ES.CANCELED]
        assert all(not e.is_current for e in old)
        assert h.scheduler.restarts == 1
        # The restarted region requests a fresh shared slot instead of the lost one.
        await settle()
        assert len(h.rm.requested) == 2

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_groups_are_made_on_demand_and_are_the_ones_listed() -> None:
    strategy = SlotSharingStrategy(
        [TestingVertex(JobVertexID("a"), 3), TestingVertex(JobVertexID("b"), 5)]
    )
    late = strategy.group_of(_ev("b", 4))  # made first, alone
    assert [m.job_vertex_id for m in late.members] == ["b"]
    early = strategy.group_of(_ev("b", 1))
    assert strategy.group_of(_ev("a", 1)) is early
    assert [m.job_vertex_id for m in early.members] == ["a", "b"]  # job order
    listed = strategy.groups
    assert [g.id.index for g in listed] == [0, 1, 2, 3, 4]  # job order, whatever came first
    assert listed[1] is early and listed[4] is late
    for unknown in (_ev("c", 0), _ev("a", 3), _ev("b", -1)):
        with pytest.raises(IllegalStateBug, match="not a subtask"):
            strategy.group_of(unknown)
