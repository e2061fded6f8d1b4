"""Unit tests of the slot sharing strategy and the shared slot's logical-slot bookkeeping."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sparkmill.common.errors import IllegalStateBug
from sparkmill.common.ids import JobVertexID
from sparkmill.common.jobgraph import DEFAULT_SLOT_SHARING_GROUP
from sparkmill.common.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.services.jobmaster.execution_topology import ExecutionVertexID
from sparkmill.services.jobmaster.slot_sharing import SharedSlot, SlotSharingStrategy


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


def test_profiles_add_up_and_unknown_stays_unknown() -> None:
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
    assert mixed.groups[0].resource_profile.is_unknown


def test_unknown_subtask_is_a_bug() -> None:
    strategy = SlotSharingStrategy([TestingVertex(JobVertexID("a"), 1)])
    with pytest.raises(IllegalStateBug):
        strategy.group_of(_ev("a", 5))


def test_physical_slot_released_only_when_unused_and_unneeded() -> None:
    strategy = SlotSharingStrategy([TestingVertex(JobVertexID(n), 1) for n in "ab"])
    shared = SharedSlot(strategy.groups[0])
    assert not shared.can_release_physical  # members still need it before they ran
    assert shared.allocate(_ev("a", 0))
    assert not shared.allocate(_ev("a", 0))  # one logical slot per member
    shared.release(_ev("a", 0), still_needed=False)
    assert not shared.can_release_physical  # b still needs the slot
    assert shared.allocate(_ev("b", 0))
    shared.release(_ev("b", 0), still_needed=True)  # region failover: b restarts
    assert not shared.can_release_physical
    assert shared.allocate(_ev("b", 0))
    shared.release(_ev("b", 0), still_needed=False)
    assert shared.can_release_physical


def test_lost_physical_slot_fails_all_logical_slots() -> None:
    strategy = SlotSharingStrategy([TestingVertex(JobVertexID(n), 1) for n in "ab"])
    shared = SharedSlot(strategy.groups[0])
    shared.allocate(_ev("a", 0))
    shared.allocate(_ev("b", 0))
    assert shared.fail_all() == [_ev("a", 0), _ev("b", 0)]
    assert shared.logical_slots_in_use == frozenset()
