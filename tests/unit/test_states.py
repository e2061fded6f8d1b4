"""Job status and execution state: stable values, terminal sets and the allowed transitions."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from sparkmill.common.core.errors import ErrorCode, IllegalStateBug, InvalidArgumentError
from sparkmill.common.core.proto_convert import (
    error_code_to_proto,
    execution_state_from_proto,
    execution_state_to_proto,
    job_status_from_proto,
    job_status_to_proto,
)
from sparkmill.common.core.state_machine import TransitionTable
from sparkmill.common.core.states import (
    EXECUTION_STATE_TRANSITIONS,
    JOB_STATUS_TRANSITIONS,
    UNKNOWN_STATE_NAME,
    ExecutionState,
    JobStatus,
    execution_state_name,
    execution_state_of,
    job_status_name,
    job_status_of,
)
from sparkmill.common.v1 import common_pb2

J = JobStatus
E = ExecutionState


def walk(table: TransitionTable[Any], path: list[Any]) -> None:
    for current, target in itertools.pairwise(path):
        table.check(current, target)


def test_job_status_values_are_stable_and_in_declaration_order():
    names = [
        "INITIALIZING",
        "CREATED",
        "RUNNING",
        "FAILING",
        "FAILED",
        "CANCELLING",
        "CANCELED",
        "FINISHED",
        "RESTARTING",
        "SUSPENDED",
    ]
    assert [(s.name, s.value) for s in JobStatus] == [(n, i + 1) for i, n in enumerate(names)]


def test_execution_state_values_are_stable_and_in_declaration_order():
    names = [
        "CREATED",
        "SCHEDULED",
        "DEPLOYING",
        "INITIALIZING",
        "RUNNING",
        "FINISHED",
        "CANCELING",
        "CANCELED",
        "FAILED",
    ]
    assert [(s.name, s.value) for s in ExecutionState] == [(n, i + 1) for i, n in enumerate(names)]


def test_job_status_terminal_sets():
    assert {s for s in JobStatus if s.is_globally_terminal} == {J.FINISHED, J.FAILED, J.CANCELED}
    assert {s for s in JobStatus if s.is_terminal} == {
        J.FINISHED,
        J.FAILED,
        J.CANCELED,
        J.SUSPENDED,
    }


def test_execution_state_terminal_set():
    assert {s for s in ExecutionState if s.is_terminal} == {E.FINISHED, E.CANCELED, E.FAILED}


@pytest.mark.parametrize(
    ("table", "enum_type"),
    [(JOB_STATUS_TRANSITIONS, JobStatus), (EXECUTION_STATE_TRANSITIONS, ExecutionState)],
)
def test_tables_cover_every_state_and_agree_with_is_terminal(table, enum_type):
    assert set(table.states()) == set(enum_type)
    for state in enum_type:
        assert table.is_terminal(state) == state.is_terminal, state


@pytest.mark.parametrize(
    "path",
    [
        [J.INITIALIZING, J.CREATED, J.RUNNING, J.FINISHED],
        [J.RUNNING, J.FAILING, J.RESTARTING, J.RUNNING],
        [J.RUNNING, J.RESTARTING, J.CREATED, J.RUNNING],
        [J.RUNNING, J.FAILING, J.FAILED],
        [J.RUNNING, J.CANCELLING, J.CANCELED],
        [J.CREATED, J.CANCELLING, J.CANCELED],
        [J.RESTARTING, J.CANCELED],
        [J.FAILING, J.CANCELLING, J.CANCELED],
        [J.INITIALIZING, J.FAILED],
        [J.INITIALIZING, J.CANCELED],
    ],
)
def test_legal_job_status_paths(path):
    walk(JOB_STATUS_TRANSITIONS, path)


def test_every_non_terminal_job_status_can_be_suspended():
    for status in JobStatus:
        if not status.is_terminal:
            assert JOB_STATUS_TRANSITIONS.can_transition(status, J.SUSPENDED), status


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (J.FINISHED, J.RUNNING),
        (J.FAILED, J.RESTARTING),
        (J.CANCELED, J.RUNNING),
        (J.SUSPENDED, J.RUNNING),
        (J.CREATED, J.FINISHED),
        (J.RUNNING, J.CANCELED),  # cancelling has to wait for the tasks
        (J.RUNNING, J.CREATED),
        (J.CANCELLING, J.RUNNING),
        (J.INITIALIZING, J.RUNNING),
    ],
)
def test_illegal_job_status_transitions_raise(current, target):
    assert not JOB_STATUS_TRANSITIONS.can_transition(current, target)
    with pytest.raises(IllegalStateBug, match=f"{current.name} -> {target.name}"):
        JOB_STATUS_TRANSITIONS.check(current, target)


@pytest.mark.parametrize(
    "path",
    [
        [E.CREATED, E.SCHEDULED, E.DEPLOYING, E.INITIALIZING, E.RUNNING, E.FINISHED],
        [E.CREATED, E.CANCELED],
        [E.SCHEDULED, E.CANCELED],
        [E.DEPLOYING, E.FAILED],
        [E.DEPLOYING, E.FINISHED],  # a very fast task
        [E.RUNNING, E.CANCELING, E.CANCELED],
        [E.RUNNING, E.CANCELED],  # cancelled by the task executor itself
        [E.SCHEDULED, E.FAILED],
    ],
)
def test_legal_execution_state_paths(path):
    walk(EXECUTION_STATE_TRANSITIONS, path)


def test_active_execution_states_may_fail_or_start_cancelling():
    for state in ExecutionState:
        if state.is_terminal or state is E.CANCELING:
            continue
        assert EXECUTION_STATE_TRANSITIONS.can_transition(state, E.FAILED), state
        assert EXECUTION_STATE_TRANSITIONS.can_transition(state, E.CANCELING), state


def test_canceling_only_completes_as_canceled():
    assert EXECUTION_STATE_TRANSITIONS.allowed_from(E.CANCELING) == frozenset({E.CANCELED})


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (E.CREATED, E.RUNNING),
        (E.CREATED, E.DEPLOYING),
        (E.SCHEDULED, E.RUNNING),
        (E.DEPLOYING, E.RUNNING),
        (E.FINISHED, E.FAILED),
        (E.FINISHED, E.CREATED),
        (E.FAILED, E.RUNNING),
        (E.CANCELED, E.CANCELING),
        (E.CANCELING, E.FAILED),
        (E.CANCELING, E.RUNNING),
        (E.RUNNING, E.INITIALIZING),
    ],
)
def test_illegal_execution_state_transitions_raise(current, target):
    assert not EXECUTION_STATE_TRANSITIONS.can_transition(current, target)
    with pytest.raises(IllegalStateBug, match=f"{current.name} -> {target.name}"):
        EXECUTION_STATE_TRANSITIONS.check(current, target)


# -- the wire enums ------------------------------------------------------------------------------


def test_the_wire_enums_mirror_the_python_enums_number_for_number() -> None:
    # proto_convert's *_to_proto functions rely on this: one number, one name, on both sides.
    job_wire = {n: v for n, v in common_pb2.JobStatus.items() if v}
    assert job_wire == {s.name: job_status_to_proto(s) for s in JobStatus}
    # ExecutionState's proto names carry an EXECUTION_ prefix where JobStatus has the same name.
    exec_wire = {n.removeprefix("EXECUTION_"): v for n, v in common_pb2.ExecutionState.items() if v}
    assert exec_wire == {s.name: execution_state_to_proto(s) for s in ExecutionState}
    code_wire = dict(common_pb2.ErrorCode.items())
    assert code_wire == {c.name: error_code_to_proto(c) for c in ErrorCode}


def test_state_numbers_decode_to_members_or_a_typed_refusal() -> None:
    for status in JobStatus:
        assert job_status_from_proto(status.value) is status is job_status_of(status.value)
        assert job_status_name(status.value) == status.name
    for state in ExecutionState:
        assert execution_state_from_proto(state.value) is state is execution_state_of(state.value)
        assert execution_state_name(state.value) == state.name
    for number in (0, -1, 11, 1000):
        assert job_status_of(number) is None and job_status_name(number) == UNKNOWN_STATE_NAME
        with pytest.raises(InvalidArgumentError, match=rf"^status: {number} is not a job status"):
            job_status_from_proto(number)
    for number in (0, 10):
        assert execution_state_of(number) is None
        assert execution_state_name(number) == UNKNOWN_STATE_NAME
        with pytest.raises(InvalidArgumentError, match=r"^updates\.state: "):
            execution_state_from_proto(number, field="updates.state")
