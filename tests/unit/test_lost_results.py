"""Unit tests: lost intermediate results cost a partial re-run (issue 5).

A task that cannot read an input names the lost partitions; a task executor whose storage held
finished results (``exchange.storage: local``) loses them with it. Either way the producers of
what is still needed run again - with their consumers - and nothing else does.

Same harness as the scheduler tests (tests/unit/scheduler_harness.py): a real scheduler, slot
pool and execution graph, hand-written fakes for the outside world.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkmill.common.core.ids import ResourceID, new_resource_id
from sparkmill.common.core.io_counters import IOCounters
from sparkmill.common.core.states import ExecutionState, JobStatus
from sparkmill.services.jobmaster.executiongraph.execution_graph import Execution, ExecutionVertex
from sparkmill.services.jobmaster.scheduler.restart_strategy import FixedDelayRestartStrategy
from sparkmill.services.jobmaster.slotpool.slot_pool import TaskExecutorInfo
from tests.unit.scheduler_harness import (
    A2A,
    BLOCKING,
    Harness,
    build_graph,
    run,
    settle,
)

ES = ExecutionState


def attempts(h: Harness, name: str) -> list[int]:
    return [
        v.current_execution.attempt_number
        for jv in h.graph.job_vertices
        if jv.name == name
        for v in jv.task_vertices
    ]


def lost(h: Harness, name: str, index: int) -> tuple[str, int, str]:
    vertex = h.vertex(name, index)
    return (
        vertex.produced_partitions[0].result.id,
        vertex.subtask_index,
        vertex.current_execution.attempt_id,
    )


async def a_finished_b_running(h: Harness) -> None:
    """Both subtasks of ``a`` finished (one slot, reused), ``b``'s only subtask runs."""
    h.scheduler.start_scheduling()
    h.offer()
    await settle()
    h.finish("a", 0)
    h.finish("a", 1)
    h.offer()
    await settle()
    h.run("b", 0)


def test_a_lost_input_reruns_its_producer_and_the_consumers_only() -> None:
    job_graph = build_graph({"a": 3, "b": 2}, [("a", "b", A2A, BLOCKING)])

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        for i in range(3):
            h.offer()
            await settle()
            h.finish("a", i)
        h.offer()
        await settle()
        h.run("b", 0)
        h.run("b", 1)
        gone = lost(h, "a", 1)

        assert h.report(
            "b",
            0,
            ES.FAILED,
            message="cannot read 1 input partition(s)",
            exception_type="PartitionNotFoundError",
            lost_partitions=[gone],
        )
        await settle()
        # b1 read the same partition: its region restarts too; a0 and a2 are intact.
        assert h.state("b", 1) is ES.CANCELING
        assert h.report("b", 1, ES.CANCELED)
        await settle()
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert attempts(h, "a") == [0, 1, 0]
        assert attempts(h, "b") == [1, 1]
        assert h.scheduler.restarts == 1
        assert h.scheduler.exceptions[-1].exception_type == "PartitionNotFoundError"

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_a_report_about_a_superseded_producer_attempt_reruns_only_the_consumer() -> None:
    job_graph = build_graph({"a": 2, "b": 1}, [("a", "b", A2A, BLOCKING)])

    async def scenario(h: Harness) -> None:
        await a_finished_b_running(h)
        dataset, number, _ = lost(h, "a", 0)
        assert h.report(
            "b", 0, ES.FAILED, message="x", lost_partitions=[(dataset, number, "not-current")]
        )
        await settle()
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert attempts(h, "a") == [0, 0]
        assert attempts(h, "b") == [1]

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_results_lost_with_a_task_executor_rerun_what_is_still_needed() -> None:
    # a (2) -> b (2) -> c (1), all ALL_TO_ALL and BLOCKING.
    job_graph = build_graph(
        {"a": 2, "b": 2, "c": 1}, [("a", "b", A2A, BLOCKING), ("b", "c", A2A, BLOCKING)]
    )
    other = TaskExecutorInfo(new_resource_id(), "te-2:6123")

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer(1)  # a0 on te-1
        h.offer(1, te=other)  # a1 on te-2
        await settle()
        assert h.execution("a", 0).task_executor_id == h.te.resource_id
        assert h.execution("a", 1).task_executor_id == other.resource_id
        h.finish("a", 0)
        h.finish("a", 1)
        h.offer(te=other)  # b0, b1 on te-2
        await settle()
        h.run("b", 0)
        h.finish("b", 1)

        # te-1 is lost: a0's result is still needed by b0 (running), so a0 runs again with
        # b0 and b1 (b1 read a0 too). a1's result (on te-2) is intact.
        h.scheduler.results_lost_with_task_executor(h.te.resource_id, "heartbeat timeout")
        await settle()
        assert h.state("b", 0) is ES.CANCELING
        assert h.report("b", 0, ES.CANCELED)
        await settle()
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert attempts(h, "a") == [1, 0]
        assert attempts(h, "b") == [1, 1]
        assert attempts(h, "c") == [0]  # it had not started: it simply ran once b was done
        record = h.scheduler.exceptions[-1]
        assert record.exception_type == "ResultPartitionLost"
        assert "lost with task executor" in record.message

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_results_nobody_needs_any_more_are_not_produced_again() -> None:
    job_graph = build_graph(
        {"a": 1, "b": 1, "c": 1}, [("a", "b", A2A, BLOCKING), ("b", "c", A2A, BLOCKING)]
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.finish("a", 0)
        await settle()  # b0 reuses a0's slot: both ran on te-1
        h.finish("b", 0)
        await settle()
        h.run("c", 0)
        assert h.execution("b", 0).task_executor_id == h.te.resource_id
        h.scheduler.results_lost_with_task_executor(h.te.resource_id, "gone")
        await settle()
        # b0's result is still needed by c0. a0's only consumer (b0) had finished, but b0
        # runs again and needs a0's result, which is lost too: both run again.
        assert h.report("c", 0, ES.CANCELED)
        await settle()
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert attempts(h, "a") == [1]
        assert attempts(h, "b") == [1]
        assert attempts(h, "c") == [1]

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


def test_a_finished_result_whose_consumers_all_finished_is_not_produced_again() -> None:
    # a -> b, and an independent d that keeps the job running on another executor.
    job_graph = build_graph(
        {"a": 1, "b": 1, "d": 1}, [("a", "b", A2A, BLOCKING)], groups={"d": "d-group"}
    )
    other = TaskExecutorInfo(new_resource_id(), "te-2:6123")

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer(1)
        h.offer(1, te=other)
        await settle()
        assert h.execution("a", 0).task_executor_id == h.te.resource_id
        assert h.execution("d", 0).task_executor_id == other.resource_id
        h.finish("a", 0)
        await settle()  # b0 reuses a0's slot on te-1
        h.finish("b", 0)
        h.run("d", 0)
        h.scheduler.results_lost_with_task_executor(h.te.resource_id, "gone")
        await settle()
        assert h.scheduler.restarts == 0
        assert h.state("d", 0) is ES.RUNNING
        h.finish("d", 0)
        assert h.status() is JobStatus.FINISHED
        assert attempts(h, "a") == [0]
        assert attempts(h, "b") == [0]

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))


class RecordingProgress:
    __test__ = False

    def __init__(self) -> None:
        self.events: list[str] = []
        self.ranges: dict[str, tuple[int, ...]] = {}

    def attempt_finished(
        self, execution: Execution, accumulator: bytes, io: IOCounters | None
    ) -> None:
        self.events.append(f"finished {execution.vertex.task_name_with_subtask}")

    def attempts_invalidated(self, vertices: list[ExecutionVertex]) -> None:
        names = ", ".join(v.task_name_with_subtask for v in vertices)
        self.events.append(f"invalidated {names}")

    def vertex_decided(
        self, vertex_id: str, parallelism: int, reason: str, ranges: tuple[int, ...] = ()
    ) -> None:
        self.events.append(f"decided {vertex_id} {parallelism}")
        self.ranges[vertex_id] = ranges

    def blocklist_changed(self, until: Mapping[ResourceID, float]) -> None:
        self.events.append(f"blocked {sorted(until)}")


def test_progress_is_told_of_finished_and_voided_attempts_in_order() -> None:
    job_graph = build_graph({"a": 1, "b": 1}, [("a", "b", A2A, BLOCKING)])
    progress = RecordingProgress()

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        h.finish("a", 0)
        h.offer()
        await settle()
        h.run("b", 0)
        assert h.report("b", 0, ES.FAILED, message="x", lost_partitions=[lost(h, "a", 0)])
        await settle()
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0), progress=progress)
    assert progress.events == [
        "finished a (1/1)",
        "invalidated a (1/1)",
        "finished a (1/1)",
        "finished b (1/1)",
    ]


def test_a_failure_of_a_vertex_awaiting_restart_does_not_reset_it_twice() -> None:
    job_graph = build_graph({"a": 2, "b": 1}, [("a", "b", A2A, BLOCKING)])

    async def scenario(h: Harness) -> None:
        await a_finished_b_running(h)
        gone = [lost(h, "a", 0), lost(h, "a", 1)]
        assert h.report("b", 0, ES.FAILED, message="x", lost_partitions=gone)
        # A second loss while the first restart waits (a0 and a1 are already part of it).
        h.scheduler.results_lost_with_task_executor(h.te.resource_id, "gone")
        await settle()
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert attempts(h, "a") == [1, 1]
        assert attempts(h, "b") == [1]

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(3, 0.0))
