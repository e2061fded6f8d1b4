"""Unit tests: speculative execution of slow subtasks and the blocklist (issue 27, item 4).

The scheduler scenarios use the scheduler harness (a real scheduler, slot pool and execution
graph; hand-written fakes for the task executors and the resource manager) with a manual clock:
the slow-task check is called directly, as its timer would.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from sparkmill.cli.output import details_json, speculation_text
from sparkmill.common.core.ids import ResourceID, new_allocation_id, new_resource_id
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.resources import ResourceProfile
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.common.ha.progress_log import BLOCKED, LogId, ProgressEvent, SessionLog, replay
from sparkmill.common.jobgraph.model import JobGraph
from sparkmill.common.runtime.settings import SpeculativeSettings
from sparkmill.services.dispatcher.rest_json import job_details_json
from sparkmill.services.jobmaster.executiongraph.execution_graph import Execution
from sparkmill.services.jobmaster.job_details import render_job_details
from sparkmill.services.jobmaster.scheduler.restart_strategy import FixedDelayRestartStrategy
from sparkmill.services.jobmaster.scheduler.speculative_execution import (
    Blocklist,
    SlowTaskDetector,
    racing_attempts,
)
from sparkmill.services.jobmaster.slotpool.slot_pool import SlotOffer, TaskExecutorInfo
from tests.unit.scheduler_harness import (
    A2A,
    BLOCKING,
    PIPELINED,
    SEPARATE,
    Harness,
    build_graph,
    run,
    settle,
)
from tests.unit.test_lost_results import RecordingProgress

ES = ExecutionState
SETTINGS = SpeculativeSettings(
    enabled=True,
    max_concurrent_executions=2,
    block_duration_s=60.0,
    check_interval_s=1.0,
    baseline_lower_bound_s=5.0,
    baseline_ratio=0.75,
    baseline_multiplier=1.5,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _job() -> JobGraph:
    return build_graph({"src": 4, "dst": 1}, [("src", "dst", A2A, BLOCKING)], groups=SEPARATE)


def _report(h: Harness, execution: Execution, state: ES, **kwargs: object) -> bool:
    return h.scheduler.update_task_execution_state(execution.attempt_id, state, **kwargs)  # type: ignore[arg-type]


def _state(execution: Execution) -> ES:
    """An attempt's state (a call, so that the type checker does not narrow it)."""
    return execution.state


def _run_attempt(h: Harness, execution: Execution) -> None:
    assert _report(h, execution, ES.INITIALIZING)
    assert _report(h, execution, ES.RUNNING)


async def _three_of_four_finished_after(h: Harness, clock: Clock, seconds: float) -> None:
    """src deployed at the clock's start; subtasks 0-2 finish ``seconds`` later, 3 runs on."""
    h.scheduler.start_scheduling()
    h.offer()
    await settle()
    for i in range(4):
        h.run("src", i)
    clock.now += seconds
    for i in range(3):
        assert h.report("src", i, ES.FINISHED)


async def _racing(h: Harness, clock: Clock) -> tuple[Execution, Execution]:
    """src 3 found slow 30 s in, its speculative attempt deployed on another executor."""
    await _three_of_four_finished_after(h, clock, 10)
    clock.now += 20
    h.scheduler.speculation.check()
    vertex = h.vertex("src", 3)
    (speculative,) = vertex.speculative_executions
    h.offer(te=_te("te-2"))
    await settle()
    return vertex.current_execution, speculative


def _te(name: str) -> TaskExecutorInfo:
    return TaskExecutorInfo(new_resource_id(), f"{name}:6123")


def _check_views(h: Harness, racing_subtask: int) -> None:
    """``jobs status`` (text and JSON) and the REST API show the race and the blocklist."""
    details = render_job_details(
        name="test-job",
        status=h.status(),
        submitted_at=0.0,
        ended_at=0.0,
        job_master_address="jm:1",
        graph=h.graph,
        scheduler=h.scheduler,
    )
    src = details.vertices[0]
    assert (src.speculative_attempts, src.speculative_wins) == (1, 0)
    expected = [0, 0, 0, 0]
    expected[racing_subtask] = 1
    assert list(src.subtask_speculative_running) == expected
    assert speculation_text(src) == "; 1 speculative attempt (0 won, 1 running)"
    assert [b.resource_id for b in details.blocked_task_executors] == [h.te.resource_id]
    assert details_json(details)["blocked_task_executors"] == {
        h.te.resource_id: details.blocked_task_executors[0].until
    }
    rest = job_details_json(details, None, now=0.0)
    assert rest["blocked-taskmanagers"][0]["id"] == h.te.resource_id
    assert rest["vertices"][0]["speculative-attempts"] == 1
    assert rest["vertices"][0]["subtasks"][racing_subtask]["speculative-running"] == 1


# ------------------------------------------------------------------------------- the detector


def test_the_baseline_needs_the_ratio_finished_and_respects_the_lower_bound() -> None:
    clock = Clock()

    async def scenario(h: Harness) -> None:
        detector = SlowTaskDetector(SETTINGS)
        src = h.graph.job_vertices[0]
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        for i in range(4):
            h.run("src", i)
        clock.now += 10
        assert h.report("src", 0, ES.FINISHED)
        assert h.report("src", 1, ES.FINISHED)
        assert detector.baseline(src, clock.now) is None  # 2 of 4 < 75 %
        assert h.report("src", 2, ES.FINISHED)
        assert detector.baseline(src, clock.now) == 15.0  # median 10 s x 1.5
        assert detector.slow_attempts(h.graph, clock.now) == {}
        clock.now += 5.1  # src 3 has run 15.1 s
        slow = detector.slow_attempts(h.graph, clock.now)
        assert list(slow) == [h.vertex("src", 3)]
        low = SlowTaskDetector(replace(SETTINGS, baseline_lower_bound_s=60.0))
        assert low.baseline(src, clock.now) == 60.0
        assert low.slow_attempts(h.graph, clock.now) == {}

    run(_job(), scenario, speculative=SETTINGS, clock=clock)


def test_a_pipelined_region_is_never_speculated() -> None:
    clock = Clock()
    job = build_graph({"src": 4, "dst": 4}, [("src", "dst", A2A, PIPELINED)])

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        for name in ("src", "dst"):
            for i in range(4):
                h.run(name, i)
        clock.now += 100
        for i in range(3):
            assert h.report("src", i, ES.FINISHED)
        clock.now += 1_000
        assert SlowTaskDetector(SETTINGS).slow_attempts(h.graph, clock.now) == {}

    run(job, scenario, speculative=SETTINGS, clock=clock)


# ------------------------------------------------------------------------------- the race


def test_a_slow_subtask_races_a_speculative_attempt_elsewhere_and_the_first_to_finish_wins() -> (
    None
):
    clock = Clock()
    progress = RecordingProgress()

    async def scenario(h: Harness) -> None:
        await _three_of_four_finished_after(h, clock, 10)
        original = h.execution("src", 3)
        h.scheduler.speculation.check()
        assert h.vertex("src", 3).speculative_executions == ()  # 0 s: not slow yet
        clock.now += 6  # 16 s > 15 s
        requests_before = len(h.rm.requested)
        h.scheduler.speculation.check()
        vertex = h.vertex("src", 3)
        (speculative,) = vertex.speculative_executions
        assert speculative.attempt_number == 1 and _state(speculative) is ES.SCHEDULED
        assert vertex.current_execution is original  # the original stays current meanwhile
        # Its own slot, requested away from the slow attempt's executor, which is blocked.
        assert len(h.rm.requested) == requests_before + 1
        assert h.rm.excluded[h.rm.requested[-1]] == {h.te.resource_id}
        assert h.scheduler.speculation.blocklist.blocked() == {h.te.resource_id}
        assert progress.events[-1] == f"blocked {[h.te.resource_id]}"
        # An unrequested slot of the blocked executor serves nothing.
        stray = SlotOffer(new_allocation_id(), 9, ResourceProfile())
        assert h.pool.offer_slots(h.te, [stray]) == []
        other = _te("te-2")
        assert h.offer(te=other) == 1
        await settle()
        assert (
            _state(speculative) is ES.DEPLOYING
            and speculative.task_executor_id == other.resource_id
        )
        h.scheduler.speculation.check()
        assert len(vertex.speculative_executions) == 1  # at most 2 racing attempts
        _check_views(h, vertex.subtask_index)
        _run_attempt(h, speculative)
        assert _report(h, speculative, ES.FINISHED, io=IOCounters(records_in=7))
        # The speculative attempt is the subtask's attempt now; the original is cancelled.
        assert vertex.current_execution is speculative
        assert _state(original) is ES.CANCELING
        assert [e for e, _ in h.actions.cancelled] == [original]
        assert progress.events.count("finished src (4/4)") == 1
        assert h.scheduler.speculation.attempts_won == {vertex.job_vertex.id: 1}
        assert h.scheduler.speculation.attempts_started == {vertex.job_vertex.id: 1}
        h.offer(te=other)
        await settle()
        assert h.state("dst", 0) is ES.DEPLOYING  # reads the winner's output
        # The original's late report: cancelled, and its work does not count.
        assert _report(h, original, ES.FINISHED, io=IOCounters(records_in=1_000))
        assert _state(original) is ES.CANCELED and vertex.speculative_executions == ()
        assert h.scheduler.io["src"].records_in == 7
        h.finish("dst", 0)
        assert h.status() is JobStatus.FINISHED
        assert h.scheduler.restarts == 0

    run(_job(), scenario, speculative=SETTINGS, clock=clock, progress=progress)


def test_when_the_original_finishes_first_the_speculative_attempt_is_withdrawn() -> None:
    clock = Clock()

    async def scenario(h: Harness) -> None:
        await _three_of_four_finished_after(h, clock, 10)
        clock.now += 20
        h.scheduler.speculation.check()
        (speculative,) = h.vertex("src", 3).speculative_executions
        request = h.rm.requested[-1]
        assert h.report("src", 3, ES.FINISHED)
        await settle()
        assert _state(speculative) is ES.CANCELED  # it had no slot yet: withdrawn at once
        assert request in h.rm.cancelled
        assert h.vertex("src", 3).speculative_executions == ()
        h.offer(te=_te("te-2"))
        await settle()
        h.finish("dst", 0)
        assert h.status() is JobStatus.FINISHED

    run(_job(), scenario, speculative=SETTINGS, clock=clock)


def test_a_failure_of_one_racing_attempt_is_its_own() -> None:
    clock = Clock()

    async def scenario(h: Harness) -> None:
        original, speculative = await _racing(h, clock)
        vertex = original.vertex
        _run_attempt(h, speculative)
        # The speculative attempt fails: the original runs on, nothing restarts.
        assert _report(h, speculative, ES.FAILED, message="disk full")
        assert h.status() is JobStatus.RUNNING and h.scheduler.restarts == 0
        assert vertex.current_execution is original and _state(original) is ES.RUNNING
        assert [f.message for f in h.scheduler.exceptions] == ["disk full"]
        # A second one races it; now the original fails: the speculative one takes over.
        clock.now += 1
        h.scheduler.speculation.check()
        (second,) = vertex.speculative_executions
        h.offer(te=_te("te-3"))
        await settle()
        assert _report(h, original, ES.FAILED, message="executor hung")
        assert vertex.current_execution is second and h.scheduler.restarts == 0
        assert h.status() is JobStatus.RUNNING
        _run_attempt(h, second)
        assert _report(h, second, ES.FINISHED)
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    restarts = FixedDelayRestartStrategy(attempts=1, delay_s=0.0)
    run(_job(), scenario, speculative=SETTINGS, clock=clock, restart_strategy=restarts)


def test_the_last_racing_attempt_to_fail_goes_to_the_restart_strategy() -> None:
    clock = Clock()

    async def scenario(h: Harness) -> None:
        original, speculative = await _racing(h, clock)
        assert _report(h, original, ES.FAILED, message="first")
        assert h.status() is JobStatus.RUNNING
        assert _report(h, speculative, ES.FAILED, message="second")
        assert h.status() is JobStatus.FAILED  # no restart allowed

    run(_job(), scenario, speculative=SETTINGS, clock=clock)


def test_a_failure_no_restart_can_fix_fails_the_job_and_cancels_the_racing_attempt() -> None:
    clock = Clock()

    async def scenario(h: Harness) -> None:
        original, speculative = await _racing(h, clock)
        _run_attempt(h, speculative)
        assert _report(h, original, ES.FAILED, message="boom", suppress_restarts=True)
        assert h.status() is JobStatus.FAILING
        assert _state(speculative) is ES.CANCELING
        assert speculative in [e for e, _ in h.actions.cancelled]
        assert _report(h, speculative, ES.CANCELED)
        assert h.status() is JobStatus.FAILED

    run(_job(), scenario, speculative=SETTINGS, clock=clock)


def test_a_failover_through_a_racing_subtask_cancels_all_its_attempts() -> None:
    clock = Clock()
    job = build_graph(
        {"a": 1, "src": 4, "dst": 1},
        [("a", "src", A2A, BLOCKING), ("src", "dst", A2A, BLOCKING)],
        groups={"a": "a-group", **SEPARATE},
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.finish("a", 0)
        h.offer()
        await settle()
        for i in range(4):
            h.run("src", i)
        clock.now += 10
        for i in range(3):
            assert h.report("src", i, ES.FINISHED)
        clock.now += 20
        h.scheduler.speculation.check()
        vertex = h.vertex("src", 3)
        original = vertex.current_execution
        (speculative,) = vertex.speculative_executions
        h.offer(te=_te("te-2"))
        await settle()
        _run_attempt(h, speculative)
        a = h.execution("a", 0)
        lost = [(str(h.graph.job_vertices[0].produced_results[0].id), 0, str(a.attempt_id))]
        # The original lost its input: that is no failure of its own, a restart produces it.
        assert _report(h, original, ES.FAILED, message="input gone", lost_partitions=lost)
        assert _state(speculative) is ES.CANCELING
        assert _report(h, speculative, ES.CANCELED)
        h.timers.advance(1.0)
        await settle()
        assert h.scheduler.restarts == 1
        assert vertex.current_execution.attempt_number == 2  # after #0 and the speculative #1
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    restarts = FixedDelayRestartStrategy(attempts=1, delay_s=0.0)
    run(job, scenario, speculative=SETTINGS, clock=clock, restart_strategy=restarts)


def test_speculation_off_starts_nothing() -> None:
    clock = Clock()

    async def scenario(h: Harness) -> None:
        await _three_of_four_finished_after(h, clock, 10)
        clock.now += 1_000
        h.scheduler.speculation.start()  # start_scheduling called it too
        assert h.scheduler.speculation._timer is None  # no check ever runs
        assert h.vertex("src", 3).speculative_executions == ()

    run(_job(), scenario, speculative=replace(SETTINGS, enabled=False), clock=clock)


# ------------------------------------------------------------------------------- the blocklist


def test_blocks_expire_and_a_successor_restores_only_what_is_still_blocked() -> None:
    blocklist = Blocklist()
    a, b = ResourceID("te-a"), ResourceID("te-b")
    assert blocklist.block(a, 100.0)
    assert not blocklist.block(a, 50.0)  # an earlier end never shortens a block
    assert blocklist.block(b, 200.0)
    assert not blocklist.expire(99.0)
    assert blocklist.expire(100.0) and blocklist.blocked() == {b}

    clock = Clock()

    async def scenario(h: Harness) -> None:
        h.scheduler.speculation.restore_blocklist(
            {"te-old": clock.now - 1, "te-slow": clock.now + 30, "../bad": clock.now + 30}
        )
        assert h.scheduler.speculation.blocklist.blocked() == {"te-slow"}
        clock.now += 31
        h.scheduler.speculation.check()
        assert h.scheduler.speculation.blocklist.blocked() == set()

    run(_job(), scenario, speculative=SETTINGS, clock=clock)


def test_the_progress_log_keeps_the_last_blocklist() -> None:
    own = LogId(1, "s1")
    events = [
        ProgressEvent("leader", "s1", seq=1),
        ProgressEvent("adopted", "s1", seq=2),
        ProgressEvent(BLOCKED, "s1", blocked=(("te-a", 10.0),), seq=3),
        ProgressEvent(BLOCKED, "s1", blocked=(("te-a", 10.0), ("te-b", 20.5)), seq=4),
    ]
    parsed = [ProgressEvent.from_record(e.to_record()[:-1]) for e in events]
    assert parsed == events
    recovered = replay([SessionLog(own, parsed)], LogId(2, "s2"))
    assert recovered.blocked == {"te-a": 10.0, "te-b": 20.5}


def test_racing_attempts_leave_out_those_being_cancelled() -> None:
    clock = Clock()

    async def scenario(h: Harness) -> None:
        await _three_of_four_finished_after(h, clock, 10)
        clock.now += 20
        h.scheduler.speculation.check()
        vertex = h.vertex("src", 3)
        assert len(list(racing_attempts(vertex))) == 2
        h.offer(te=_te("te-2"))
        await settle()
        h.scheduler.cancel()
        assert list(racing_attempts(vertex)) == []

    run(_job(), scenario, speculative=SETTINGS, clock=clock)


@pytest.mark.parametrize("blocked_first", [True, False])
def test_the_slot_pool_serves_no_request_from_a_blocked_or_excluded_executor(
    blocked_first: bool,
) -> None:
    async def scenario(h: Harness) -> None:
        slow, fast = h.te, _te("te-2")
        profile = ResourceProfile()
        # An idle slot of the slow executor...
        idle = h.pool.request_slot(profile)
        h.offer(te=slow)
        h.pool.release_slot(idle.future.result().allocation_id)
        assert h.pool.num_available_slots() == 1
        if blocked_first:
            h.pool.block_task_executors(frozenset({slow.resource_id}))
            assert h.pool.num_available_slots() == 0  # ...is freed once its executor is blocked
            request = h.pool.request_slot(profile)
        else:
            request = h.pool.request_slot(profile, frozenset({slow.resource_id}))
            assert h.pool.num_available_slots() == 1  # ...is not taken by an excluding request
        assert not request.future.done()
        assert h.rm.excluded[request.allocation_id] == {slow.resource_id}
        stray = SlotOffer(new_allocation_id(), 7, profile)
        assert h.pool.offer_slots(slow, [stray]) == []
        assert h.offer(te=fast) == 1
        assert request.future.result().task_executor == fast

    run(_job(), scenario)


def test_a_consumer_does_not_join_a_shared_slot_on_a_blocked_executor() -> None:
    """The next vertex's subtask of a slow one's slot sharing group gets a slot elsewhere:
    the slow attempt (being cancelled) still holds its group's slot on the blocked executor."""
    clock = Clock()
    job = build_graph({"src": 4, "dst": 4}, [("src", "dst", A2A, BLOCKING)])  # one group
    slow, fast = _te("te-slow"), _te("te-fast")

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer(count=3, te=fast)
        h.offer(te=slow)
        await settle()
        for i in range(4):
            h.run("src", i)
        clock.now += 10
        for i in range(3):
            assert h.report("src", i, ES.FINISHED)
        assert h.execution("src", 3).task_executor_id == slow.resource_id
        clock.now += 20
        h.scheduler.speculation.check()
        (speculative,) = h.vertex("src", 3).speculative_executions
        h.offer(te=fast)
        await settle()
        _run_attempt(h, speculative)
        assert _report(h, speculative, ES.FINISHED)
        await settle()
        assert h.states("dst")[:3] == [ES.DEPLOYING] * 3  # their groups' slots, on fast
        assert h.state("dst", 3) is ES.SCHEDULED  # not the slow attempt's shared slot
        assert h.rm.excluded[h.open_requests()[-1]] == {slow.resource_id}
        h.offer(te=fast)
        await settle()
        assert h.execution("dst", 3).task_executor_id == fast.resource_id

    run(job, scenario, speculative=SETTINGS, clock=clock)
