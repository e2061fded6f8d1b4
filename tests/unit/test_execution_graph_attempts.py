"""The execution graph's attempts: resets and versions, legal transitions, failure causes,
timestamps, and the state counts that follow them."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.states import ExecutionState
from sparkmill.services.jobmaster.executiongraph.execution_graph import (
    MAX_PRIOR_ATTEMPTS_KEPT,
)
from tests.unit.execution_graph_builders import (
    ALL_TO_ALL,
    E,
    finish,
    progress,
    run_to,
    subtasks,
    two_vertex_graph,
)

# ------------------------------------------------------------------ attempts


def test_reset_creates_a_new_attempt_and_bumps_the_version():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    ev = subtasks(graph, b, "src")[0]
    first = ev.current_execution
    assert graph.execution(first.attempt_id) == first  # identity: no __eq__ override
    run_to(first, E.SCHEDULED, E.DEPLOYING)
    first.mark_failed("lost the task executor", ConnectionError("gone"))
    second = graph.reset_vertex_for_new_execution(ev)
    assert ev.current_execution is second
    assert second.attempt_number == 1 and ev.vertex_version == 1
    assert second.state is E.CREATED and second.attempt_id != first.attempt_id
    assert second.assigned_resource is None and second.failure_info is None
    assert graph.execution(first.attempt_id) is None
    assert graph.execution(second.attempt_id) is second
    assert not first.is_current and second.is_current
    assert ev.prior_executions == [first]
    second.transition_to(E.CANCELED)
    third = graph.reset_vertex_for_new_execution(ev)
    assert (third.attempt_number, ev.vertex_version) == (2, 2)
    assert ev.prior_executions == [first, second]


def test_prior_attempt_history_is_bounded():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    ev = subtasks(graph, b, "src")[0]
    for _ in range(MAX_PRIOR_ATTEMPTS_KEPT + 5):
        ev.current_execution.transition_to(E.CANCELED)
        graph.reset_vertex_for_new_execution(ev)
    history = ev.prior_executions
    assert len(history) == MAX_PRIOR_ATTEMPTS_KEPT
    assert history[-1].attempt_number == ev.current_execution.attempt_number - 1


@pytest.mark.parametrize("state", [E.CREATED, E.SCHEDULED, E.RUNNING, E.CANCELING])
def test_resetting_a_non_terminal_attempt_is_a_bug(state):
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    ev = subtasks(graph, b, "src")[0]
    path = {
        E.CREATED: [],
        E.SCHEDULED: [E.SCHEDULED],
        E.RUNNING: [E.SCHEDULED, E.DEPLOYING, E.INITIALIZING, E.RUNNING],
        E.CANCELING: [E.SCHEDULED, E.DEPLOYING, E.CANCELING],
    }[state]
    run_to(ev.current_execution, *path)
    with pytest.raises(IllegalStateBug, match="not terminal"):
        graph.reset_vertex_for_new_execution(ev)
    assert ev.vertex_version == 0 and ev.current_execution.attempt_number == 0


def test_illegal_execution_transition_raises_and_changes_nothing():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    execution = subtasks(graph, b, "src")[0].current_execution
    with pytest.raises(IllegalStateBug, match="CREATED -> RUNNING"):
        execution.transition_to(E.RUNNING)
    assert execution.state is E.CREATED
    assert graph.state_counts()[E.CREATED] == 2
    finish(execution.vertex)
    with pytest.raises(IllegalStateBug, match="src \\(1/1\\) attempt #0"):
        execution.transition_to(E.FAILED)
    assert not execution.can_transition_to(E.CANCELING)


def test_a_failure_cause_belongs_only_to_failed():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    execution = subtasks(graph, b, "src")[0].current_execution
    with pytest.raises(IllegalStateBug, match="failure cause"):
        execution.transition_to(E.SCHEDULED, failure="nope")
    assert execution.state is E.CREATED


def test_states_are_timestamped_and_failures_recorded_with_the_graph_clock():
    now = [100.0]
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL, clock=lambda: now[0])
    execution = subtasks(graph, b, "src")[0].current_execution
    assert execution.state_timestamp(E.CREATED) == 100.0
    now[0] = 101.5
    execution.transition_to(E.SCHEDULED)
    now[0] = 103.0
    execution.mark_failed("no slot", TimeoutError("slot request timed out"))
    assert execution.state_timestamp(E.SCHEDULED) == 101.5
    assert execution.state_timestamp(E.FAILED) == 103.0
    assert execution.state_timestamp(E.RUNNING) is None
    info = execution.failure_info
    assert info is not None
    assert (info.message, info.timestamp, info.exception_class) == (
        "no slot",
        103.0,
        "TimeoutError",
    )


def test_a_superseded_attempt_stays_terminal():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    ev = subtasks(graph, b, "src")[0]
    old = ev.current_execution
    old.transition_to(E.CANCELED)
    graph.reset_vertex_for_new_execution(ev)
    with pytest.raises(IllegalStateBug):
        old.transition_to(E.RUNNING)


def test_assigned_resource_is_kept_opaque():
    graph, b = two_vertex_graph(1, 1, ALL_TO_ALL)
    execution = subtasks(graph, b, "src")[0].current_execution
    slot = object()
    execution.assigned_resource = slot
    found = graph.execution(execution.attempt_id)
    assert found is not None and found.assigned_resource is slot


# ------------------------------------------------------------------ state counts


def test_state_counts_follow_transitions_and_resets():
    graph, b = two_vertex_graph(2, 3, ALL_TO_ALL)
    counts = graph.state_counts()
    assert counts[E.CREATED] == 5 and sum(counts.values()) == 5
    assert set(counts) == set(ExecutionState)
    src = subtasks(graph, b, "src")
    run_to(src[0].current_execution, E.SCHEDULED, E.DEPLOYING)
    finish(src[1])
    counts = graph.state_counts()
    assert (counts[E.CREATED], counts[E.DEPLOYING], counts[E.FINISHED]) == (3, 1, 1)
    src[0].current_execution.mark_failed("boom")
    graph.reset_vertex_for_new_execution(src[0])
    counts = graph.state_counts()
    assert (counts[E.CREATED], counts[E.FAILED], counts[E.FINISHED]) == (4, 0, 1)
    assert sum(counts.values()) == 5
    # The returned dict is a snapshot.
    counts[E.CREATED] = 99
    assert graph.state_counts()[E.CREATED] == 4


def test_all_vertices_finished_and_terminal():
    graph, _ = two_vertex_graph(1, 2, ALL_TO_ALL)
    vertices = list(graph.all_execution_vertices())
    assert progress(graph) == (False, False)
    finish(vertices[0])
    finish(vertices[1])
    vertices[2].current_execution.transition_to(E.CANCELED)
    assert progress(graph) == (True, False)
    graph.reset_vertex_for_new_execution(vertices[2])
    assert progress(graph) == (False, False)
    finish(vertices[2])
    assert progress(graph) == (True, True)
