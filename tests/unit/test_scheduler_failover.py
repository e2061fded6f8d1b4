"""The DefaultScheduler's outcomes and restarts: a finished or failed job, restart strategies
(suppressed restarts, fixed delay, region and full failover) and their back-off."""

from __future__ import annotations

import asyncio

from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.states import JobStatus
from sparkmill.services.jobmaster.scheduler.restart_strategy import (
    FixedDelayRestartStrategy,
)
from tests.unit.scheduler_harness import (
    BLOCKING,
    ES,
    PIPELINED,
    POINTWISE,
    ChangingBackoffStrategy,
    Harness,
    build_graph,
    chain,
    run,
    settle,
)

# ------------------------------------------------------------------------------------ outcomes


def test_job_finishes_when_every_subtask_finished_collecting_io_and_accumulators() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        for index in range(2):
            h.run("noop-0", index)
            assert h.report(
                "noop-0",
                index,
                ES.FINISHED,
                io=IOCounters(records_in=1, records_out=2, bytes_in=10, bytes_out=20),
                accumulator=b"acc-%d" % index,
            )
            await settle()
        assert h.status() is JobStatus.RUNNING  # noop-1 still to run
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.actions.status_names == ["RUNNING", "FINISHED"]
        assert h.scheduler.failure_cause == ""
        assert h.scheduler.exceptions == []
        assert h.scheduler.io["noop-0"] == IOCounters(2, 4, 20, 40)
        assert h.scheduler.accumulators == {"noop-0": {0: b"acc-0", 1: b"acc-1"}}
        assert h.graph.all_vertices_finished

    run(chain(2, 2), scenario)


def test_failure_without_restart_strategy_fails_the_job_with_its_cause() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.run("noop-0", 1)
        assert h.report(
            "noop-0",
            0,
            ES.FAILED,
            message="boom",
            exception_type="ValueError",
            details="Traceback (most recent call last): ...",
        )
        await settle()
        # The job fails; what still runs is cancelled first.
        assert h.status() is JobStatus.FAILING
        assert h.state("noop-0", 1) is ES.CANCELING
        assert [e.vertex.subtask_index for e, _ in h.actions.cancelled] == [1]
        assert h.states("noop-1") == [ES.CANCELED, ES.CANCELED]

        assert h.report("noop-0", 1, ES.CANCELED)
        assert h.status() is JobStatus.FAILED
        assert h.actions.status_names == ["RUNNING", "FAILING", "FAILED"]
        cause = h.scheduler.failure_cause
        assert "noop-0 (1/2) attempt #0" in cause
        assert "boom" in cause
        assert "no restart left" in cause
        assert h.actions.statuses[-1] == (JobStatus.FAILED, cause)
        assert h.scheduler.restarts == 0

        [record] = h.scheduler.exceptions
        assert record.vertex_name == "noop-0"
        assert record.subtask_index == 0
        assert record.attempt_number == 0
        assert record.message == "boom"
        assert record.exception_type == "ValueError"
        assert record.details.startswith("Traceback")
        assert record.task_executor == h.te.resource_id
        assert len(h.actions.submitted) == 2
        assert h.pool.num_allocated_slots() == 0

    run(chain(2, 2), scenario)


# ------------------------------------------------------------------------------------ restarts


def test_a_failure_that_suppresses_restarts_fails_the_job_despite_restarts_left() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.run("noop-0", 1)
        # The report carries the decision; the exception's name plays no part in it.
        assert h.report(
            "noop-0",
            0,
            ES.FAILED,
            message="cannot load",
            exception_type="MyError",
            suppress_restarts=True,
        )
        await settle()
        assert h.status() is JobStatus.FAILING
        assert h.report("noop-0", 1, ES.CANCELED)
        assert h.status() is JobStatus.FAILED
        assert h.scheduler.restarts == 0
        assert "restarting cannot help" in h.scheduler.failure_cause

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_a_failure_named_like_suppress_restarts_without_the_flag_is_restarted() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        assert h.report("noop-0", 0, ES.FAILED, message="x", exception_type="SuppressRestartsError")
        await settle()
        assert h.scheduler.restarts == 1
        assert h.status() is JobStatus.RUNNING

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_fixed_delay_region_failover_retries_only_the_failed_subtask() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.run("noop-0", 0)
        h.run("noop-0", 1)
        untouched = h.execution("noop-0", 1)
        failed = h.execution("noop-0", 0)
        assert h.report("noop-0", 0, ES.FAILED, message="flaky")
        await settle()
        # The back-off (50 ms) has not passed yet.
        assert h.execution("noop-0", 0) is failed
        assert h.scheduler.restarts == 1
        await asyncio.sleep(0.1)
        await settle()

        retried = h.execution("noop-0", 0)
        assert retried is not failed
        assert retried.attempt_number == 1
        assert h.vertex("noop-0", 0).prior_executions == [failed]
        assert retried.state is ES.DEPLOYING  # in the slot its failed attempt gave back
        assert len(h.rm.requested) == 2
        # The other subtask is not part of the failed region: it keeps running undisturbed.
        assert h.execution("noop-0", 1) is untouched
        assert untouched.state is ES.RUNNING
        assert h.actions.cancelled == []
        assert h.states("noop-1") == [ES.CREATED, ES.CREATED]
        assert h.status() is JobStatus.RUNNING
        assert "RESTARTING" not in h.actions.status_names

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert len(h.scheduler.exceptions) == 1
        assert h.actions.status_names == ["RUNNING", "FINISHED"]

    run(chain(2, 2), scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.05))


def test_region_failover_restarts_the_region_and_started_downstream_regions_only() -> None:
    # Region R = {a0, b0, b1} (PIPELINED); c0 and c1 are regions of their own (BLOCKING), c0
    # reading b0 and c1 reading b1.
    job_graph = build_graph(
        {"a": 1, "b": 2, "c": 2},
        [("a", "b", POINTWISE, PIPELINED), ("b", "c", POINTWISE, BLOCKING)],
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert len(h.graph.pipelined_regions()) == 3
        for name, index in (("a", 0), ("b", 0), ("b", 1)):
            h.run(name, index)
        h.finish("b", 0)
        await settle()
        h.run("c", 0)  # c0 started: its input is complete
        assert h.state("c", 1) is ES.CREATED
        requests_before = len(h.rm.requested)
        old = {(n, i): h.execution(n, i) for n, i in (("a", 0), ("b", 0), ("b", 1), ("c", 0))}

        assert h.report("b", 1, ES.FAILED, message="disk full")
        await settle()
        assert h.status() is JobStatus.RUNNING
        assert h.state("a", 0) is ES.CANCELING
        assert h.state("c", 0) is ES.CANCELING
        assert sorted(e.vertex.task_name_with_subtask for e, _ in h.actions.cancelled) == [
            "a (1/1)",
            "c (1/2)",
        ]
        # Nothing restarts before every attempt of the restarted set is terminal.
        assert h.report("a", 0, ES.CANCELED)
        await settle()
        assert h.execution("a", 0) is old["a", 0]
        assert h.report("c", 0, ES.CANCELED)
        await settle()

        for key, execution in old.items():
            assert h.execution(*key).attempt_number == 1, key
            assert h.execution(*key) is not execution
        assert h.execution("c", 1).attempt_number == 0  # never started: left alone
        assert h.state("c", 1) is ES.CREATED
        # Region R runs again in the slots it gave back; c0 waits for b0 to finish again.
        assert [h.state("a", 0), h.state("b", 0), h.state("b", 1)] == [ES.DEPLOYING] * 3
        assert h.state("c", 0) is ES.CREATED
        assert len(h.rm.requested) == requests_before
        assert "RESTARTING" not in h.actions.status_names

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.scheduler.restarts == 1

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_full_failover_restarts_everything_passing_restarting() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.finish("noop-0", 0)
        h.run("noop-0", 1)
        h.run("noop-0", 2)
        await settle()

        assert h.report("noop-0", 2, ES.FAILED, message="oops")
        await settle()
        assert h.status() is JobStatus.RESTARTING
        assert h.state("noop-0", 1) is ES.CANCELING
        assert [e.vertex.subtask_index for e, _ in h.actions.cancelled] == [1]
        assert h.states("noop-1") == [ES.CANCELED] * 3
        assert h.report("noop-0", 1, ES.CANCELED)
        await settle()

        assert h.status() is JobStatus.RUNNING
        assert h.actions.status_names == ["RUNNING", "RESTARTING", "RUNNING"]
        assert h.actions.statuses[1][1].startswith("noop-0 (3/3) attempt #0")
        # Every subtask restarts - also the finished one and the never started consumers.
        for vertex in h.graph.all_execution_vertices():
            assert vertex.current_execution.attempt_number == 1, vertex
        assert h.states("noop-0") == [ES.DEPLOYING] * 3
        assert h.states("noop-1") == [ES.CREATED] * 3

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.actions.status_names == ["RUNNING", "RESTARTING", "RUNNING", "FINISHED"]

    run(
        chain(3, 2),
        scenario,
        restart_strategy=FixedDelayRestartStrategy(2, 0.0),
        failover="full",
    )


def test_job_fails_once_the_fixed_delay_attempts_are_used_up() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.report("noop-0", 0, ES.FAILED, message="first")
        await settle()
        assert h.execution("noop-0", 0).attempt_number == 1
        assert h.status() is JobStatus.RUNNING

        assert h.report("noop-0", 0, ES.FAILED, message="second")
        await settle()
        assert h.status() is JobStatus.FAILED
        assert h.execution("noop-0", 0).attempt_number == 1  # no third attempt
        assert "second" in h.scheduler.failure_cause
        assert "fixed-delay (1 restart attempts" in h.scheduler.failure_cause
        assert [r.message for r in h.scheduler.exceptions] == ["first", "second"]
        assert [r.attempt_number for r in h.scheduler.exceptions] == [0, 1]
        assert h.scheduler.restarts == 1

    run(chain(1, 1), scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_restart_waits_the_back_off_it_asked_for_once() -> None:
    strategy = ChangingBackoffStrategy([0.0, 60.0, 60.0])

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.report("noop-0", 0, ES.FAILED, message="x")
        await settle()
        assert len(strategy.failures) == 1
        assert len(strategy.backoffs) == 2  # asked exactly once per failure
        assert h.execution("noop-0", 0).attempt_number == 1  # restarted after 0 s, not 60 s

    run(chain(1, 1), scenario, restart_strategy=strategy)


def test_cancel_during_restart_back_off_cancels_and_never_restarts() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.report("noop-0", 0, ES.FAILED, message="x")
        await settle()
        assert h.status() is JobStatus.RESTARTING
        h.scheduler.cancel()
        assert h.status() is JobStatus.CANCELED
        await asyncio.sleep(0.1)  # past the back-off
        await settle()
        assert h.execution("noop-0", 0).attempt_number == 0
        assert h.actions.status_names == ["RUNNING", "RESTARTING", "CANCELLING", "CANCELED"]
        assert len(h.actions.submitted) == 1

    run(
        chain(1, 1),
        scenario,
        restart_strategy=FixedDelayRestartStrategy(3, 0.05),
        failover="full",
    )


def test_no_consumer_starts_on_the_output_of_a_producer_awaiting_restart() -> None:
    # c0 reads b0 (in region R = {a0, b0, b1}) and x0. b1 fails after b0 finished; c0 had not
    # started, so it is not restarted - but it must not start during the back-off either, on
    # b0's superseded output: only once b0's new attempt finished.
    job_graph = build_graph(
        {"a": 1, "b": 2, "x": 2, "c": 2},
        [
            ("a", "b", POINTWISE, PIPELINED),
            ("b", "c", POINTWISE, BLOCKING),
            ("x", "c", POINTWISE, BLOCKING),
        ],
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        for name, index in (("a", 0), ("b", 0), ("b", 1), ("x", 0), ("x", 1)):
            h.run(name, index)
        h.finish("b", 0)
        assert h.report("b", 1, ES.FAILED, message="y")
        assert h.report("a", 0, ES.CANCELED)
        await settle()
        assert h.execution("b", 0).attempt_number == 0  # back-off still running

        h.finish("x", 0)  # c0's other input completes during the back-off
        h.offer()
        await settle()
        assert h.state("c", 0) is ES.CREATED

        await asyncio.sleep(0.1)
        await settle()
        assert h.execution("b", 0).attempt_number == 1
        assert h.state("c", 0) is ES.CREATED
        h.run("a", 0)
        h.run("b", 1)
        h.finish("b", 0)
        h.offer()
        await settle()
        assert h.state("c", 0) is ES.DEPLOYING
        assert h.execution("c", 0).attempt_number == 0
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.05))
