"""The DefaultScheduler scheduling: regions in order (blocking and pointwise inputs), a slice of
regions per loop turn, deployment once every slot of a region is assigned, slot reuse, superseded
deployments, slot request and deploy failures."""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.common.core.errors import UnavailableError
from sparkmill.common.core.ids import (
    short,
)
from sparkmill.common.core.states import JobStatus
from sparkmill.services.jobmaster.scheduler.default_scheduler import (
    SCHEDULING_SLICE,
)
from sparkmill.services.jobmaster.scheduler.restart_strategy import (
    FixedDelayRestartStrategy,
)
from tests.unit.scheduler_harness import (
    A2A,
    BLOCKING,
    ES,
    PIPELINED,
    POINTWISE,
    REQUEST_TIMEOUT,
    SEPARATE,
    Harness,
    build_graph,
    chain,
    run,
    settle,
)

# ------------------------------------------------------------------------------------ scheduling


def test_sources_first_then_consumers_once_all_blocking_producers_finished() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert h.status() is JobStatus.RUNNING
        # Only the sources ask for slots; everything downstream waits.
        assert h.states("noop-0") == [ES.SCHEDULED, ES.SCHEDULED]
        assert h.states("noop-1") == [ES.CREATED, ES.CREATED]
        assert h.states("noop-2") == [ES.CREATED, ES.CREATED]
        assert len(h.rm.requested) == 2
        assert h.actions.submitted == []

        assert h.offer() == 2
        await settle()
        assert h.actions.submitted_tasks == ["noop-0 (1/2)", "noop-0 (2/2)"]
        assert h.states("noop-0") == [ES.DEPLOYING, ES.DEPLOYING]

        # ALL_TO_ALL: one finished producer is not enough for any consumer.
        h.finish("noop-0", 0)
        await settle()
        assert h.states("noop-1") == [ES.CREATED, ES.CREATED]
        assert len(h.actions.submitted) == 2

        h.finish("noop-0", 1)
        await settle()
        # Both consumers go, in the slots the producers gave back: no new RM request.
        assert h.states("noop-1") == [ES.DEPLOYING, ES.DEPLOYING]
        assert h.states("noop-2") == [ES.CREATED, ES.CREATED]
        assert len(h.rm.requested) == 2
        assert h.actions.submitted_tasks[2:] == ["noop-1 (1/2)", "noop-1 (2/2)"]

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.actions.status_names == ["RUNNING", "FINISHED"]
        assert len(h.actions.submitted) == 6
        assert h.pool.num_allocated_slots() == 0
        assert h.pool.num_available_slots() == 2

    run(chain(2, 3), scenario)


def test_a_burst_of_regions_is_scheduled_a_slice_per_loop_turn() -> None:
    sources = 2 * SCHEDULING_SLICE + 10

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        # The loop gets control back after each slice (heartbeats, RPCs are answered).
        assert h.states("noop-0").count(ES.SCHEDULED) == SCHEDULING_SLICE
        await asyncio.sleep(0)
        assert h.states("noop-0").count(ES.SCHEDULED) == 2 * SCHEDULING_SLICE
        await settle()
        assert h.states("noop-0") == [ES.SCHEDULED] * sources
        assert len(h.rm.requested) == sources
        assert h.offer() == sources
        await settle()
        assert len(h.actions.submitted) == sources

    run(chain(sources, 1), scenario)


def test_regions_cancelled_before_their_slice_came_are_never_scheduled() -> None:
    sources = SCHEDULING_SLICE + 10

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.scheduler.cancel()
        await settle()
        assert h.status() is JobStatus.CANCELED
        assert h.states("noop-0") == [ES.CANCELED] * sources
        assert len(h.rm.requested) == SCHEDULING_SLICE  # the rest never asked for a slot
        assert h.offer() == 0

    run(chain(sources, 1), scenario)


@pytest.mark.parametrize(
    ("producers", "consumers", "reads", "finish_order"),
    [
        # S < T: partition p is read by consumers [ceil(p*T/S), ceil((p+1)*T/S)).
        (3, 7, {0: {0}, 1: {0}, 2: {0}, 3: {1}, 4: {1}, 5: {2}, 6: {2}}, [1, 2, 0]),
        # S > T: consumer i reads partitions [i*S//T, (i+1)*S//T).
        (7, 3, {0: {0, 1}, 1: {2, 3}, 2: {4, 5, 6}}, [0, 2, 4, 5, 1, 6, 3]),
    ],
    ids=["3-to-7", "7-to-3"],
)
def test_pointwise_consumers_start_when_their_own_producers_finished(
    producers: int, consumers: int, reads: dict[int, set[int]], finish_order: list[int]
) -> None:
    job_graph = build_graph(
        {"src": producers, "dst": consumers}, [("src", "dst", POINTWISE, BLOCKING)]
    )

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        assert h.states("src") == [ES.DEPLOYING] * producers
        assert h.states("dst") == [ES.CREATED] * consumers
        finished: set[int] = set()
        for producer in finish_order:
            h.finish("src", producer)
            finished.add(producer)
            h.offer()
            await settle()
            expected = {c for c, needs in reads.items() if needs <= finished}
            started = {c for c in range(consumers) if h.state("dst", c) is not ES.CREATED}
            assert started == expected, f"after producers {sorted(finished)} finished"
            for c in started:
                assert h.state("dst", c) is ES.DEPLOYING
        assert started == set(range(consumers))
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario)


def test_a_region_is_deployed_only_once_all_its_slots_are_assigned() -> None:
    # PIPELINED: the four subtasks form one region and must run together.
    job_graph = build_graph({"src": 2, "dst": 2}, [("src", "dst", A2A, PIPELINED)], groups=SEPARATE)

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert len(h.graph.pipelined_regions()) == 1
        assert len(h.rm.requested) == 4
        assert h.states("src") + h.states("dst") == [ES.SCHEDULED] * 4

        assert h.offer(3) == 3
        await settle()
        assert h.pool.num_allocated_slots() == 3
        assert h.actions.submitted == []
        assert h.states("src") + h.states("dst") == [ES.SCHEDULED] * 4

        assert h.offer(1) == 1
        await settle()
        assert sorted(h.actions.submitted_tasks) == [
            "dst (1/2)",
            "dst (2/2)",
            "src (1/2)",
            "src (2/2)",
        ]
        assert h.states("src") + h.states("dst") == [ES.DEPLOYING] * 4
        slots = {slot.allocation_id for _, slot in h.actions.submitted}
        assert len(slots) == 4  # each subtask in a slot of its own
        for execution, slot in h.actions.submitted:
            assert execution.assigned_resource is slot

        await h.finish_all()
        assert h.status() is JobStatus.FINISHED

    run(job_graph, scenario)


def test_more_subtasks_than_slots_finish_by_reusing_released_slots() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert len(h.rm.requested) == 4  # one per source subtask
        assert h.offer(2) == 2  # ... but the cluster only ever has two slots
        await settle()
        assert h.actions.submitted_tasks == ["noop-0 (1/4)", "noop-0 (2/4)"]

        h.finish("noop-0", 0)
        await settle()
        # The released slot serves the oldest pending request at once; its RM request goes.
        assert h.state("noop-0", 2) is ES.DEPLOYING
        assert h.actions.submitted[2][1].allocation_id == h.actions.submitted[0][1].allocation_id
        assert h.rm.cancelled == [h.rm.requested[2]]

        # Never offer again: everything else must run in the two slots already held.
        while h.status() is JobStatus.RUNNING:
            deployed = [
                v
                for v in h.graph.all_execution_vertices()
                if v.current_execution.state is ES.DEPLOYING
            ]
            assert deployed, "no progress possible"
            h.finish(deployed[0].job_vertex.name, deployed[0].subtask_index)
            await settle()

        assert h.status() is JobStatus.FINISHED
        assert h.accepted == 2
        assert len(h.actions.submitted) == 8
        assert len({slot.allocation_id for _, slot in h.actions.submitted}) == 2
        # 4 source requests + 2 sink requests the idle slots could not serve at once; every RM
        # request was either fulfilled by one of the two offers or cancelled by slot reuse.
        assert len(h.rm.requested) == 6
        assert len(h.rm.cancelled) == 4
        assert len(h.rm.requested) - len(h.rm.cancelled) == h.accepted
        assert h.pool.num_pending_requests() == 0
        assert h.pool.num_available_slots() == 2

    run(chain(4, 2), scenario)


def test_deployment_superseded_by_cancel_releases_its_slot_and_deploys_nothing() -> None:
    job_graph = build_graph({"src": 1, "dst": 1}, [("src", "dst", A2A, PIPELINED)], groups=SEPARATE)

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        src_request, dst_request = h.rm.requested
        assert h.offer(1) == 1  # src's slot arrives; dst's is still pending
        await settle()
        assert h.pool.num_allocated_slots() == 1
        assert h.actions.submitted == []

        h.scheduler.cancel()
        await settle()
        assert h.state("src", 0) is ES.CANCELED
        assert h.state("dst", 0) is ES.CANCELED
        assert h.status() is JobStatus.CANCELED
        assert h.actions.submitted == []
        assert h.actions.cancelled == []  # nothing was deployed, nothing to cancel remotely
        # The pending request is withdrawn at the RM; the granted slot is handed back.
        assert h.rm.cancelled == [dst_request]
        assert h.pool.num_pending_requests() == 0
        assert h.pool.num_allocated_slots() == 0
        assert [s.allocation_id for s in h.pool.available_slots()] == [src_request]

    run(job_graph, scenario)


def test_deployment_superseded_by_a_restart_releases_its_slot_and_deploys_nothing() -> None:
    # src got its slot, dst's request times out: dst fails, the region {src, dst} restarts, and
    # src's already granted slot must go back instead of deploying the cancelled attempt.
    job_graph = build_graph({"src": 1, "dst": 1}, [("src", "dst", A2A, PIPELINED)], groups=SEPARATE)

    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        assert h.offer(1) == 1
        await settle()
        old_src, old_dst = h.execution("src", 0), h.execution("dst", 0)

        h.timers.advance(REQUEST_TIMEOUT)
        await settle()
        assert old_dst.state is ES.FAILED
        assert old_dst.failure_info is not None
        assert "could not allocate a slot" in old_dst.failure_info.message
        assert old_dst.failure_info.exception_class == "DeadlineExceededError"
        assert old_src.state is ES.CANCELED
        assert h.actions.submitted == []
        assert h.scheduler.restarts == 1

        # Restarted (back-off 0): the new src attempt gets the slot given back, dst asks anew.
        new_src, new_dst = h.execution("src", 0), h.execution("dst", 0)
        assert (new_src.attempt_number, new_dst.attempt_number) == (1, 1)
        assert h.vertex("src", 0).vertex_version == 1
        assert new_src.state is ES.SCHEDULED and new_dst.state is ES.SCHEDULED
        assert h.pool.num_allocated_slots() == 1
        assert h.pool.num_available_slots() == 0
        assert len(h.rm.requested) == 3

        assert h.offer() == 1
        await settle()
        assert [e.attempt_number for e, _ in h.actions.submitted] == [1, 1]
        assert {e.attempt_id for e, _ in h.actions.submitted} == {
            new_src.attempt_id,
            new_dst.attempt_id,
        }
        await h.finish_all()
        assert h.status() is JobStatus.FINISHED
        assert h.actions.status_names == ["RUNNING", "FINISHED"]

    run(job_graph, scenario, restart_strategy=FixedDelayRestartStrategy(1, 0.0))


def test_slot_request_timeout_without_restarts_fails_the_job() -> None:
    async def scenario(h: Harness) -> None:
        h.scheduler.start_scheduling()
        await settle()
        h.timers.advance(REQUEST_TIMEOUT)
        await settle()
        assert h.status() is JobStatus.FAILED
        assert "could not allocate a slot" in h.scheduler.failure_cause
        assert h.states("noop-1") == [ES.CANCELED]
        assert h.actions.submitted == []

    run(chain(1, 2), scenario)


def test_deploy_rpc_failure_fails_the_attempt_naming_task_and_task_executor() -> None:
    async def scenario(h: Harness) -> None:
        h.actions.fail_submission("noop-0 (2/2)", UnavailableError("connection refused"))
        h.scheduler.start_scheduling()
        h.offer()
        await settle()
        failed = h.execution("noop-0", 1)
        assert failed.state is ES.FAILED
        assert failed.failure_info is not None
        message = failed.failure_info.message
        assert "could not deploy noop-0 (2/2) attempt #0" in message
        assert short(failed.attempt_id) in message
        assert short(h.te.resource_id) in message
        assert "te-1:6123" in message
        assert "UnavailableError: connection refused" in message
        assert failed.failure_info.exception_class == "UnavailableError"

        record = h.scheduler.exceptions[0]
        assert (record.vertex_name, record.subtask_index, record.attempt_number) == ("noop-0", 1, 0)
        assert record.task_executor == h.te.resource_id
        assert record.exception_type == "UnavailableError"
        # No restarts: the job fails, the other (deployed) subtask is cancelled remotely.
        assert h.status() is JobStatus.FAILING
        assert [e.vertex.subtask_index for e, _ in h.actions.cancelled] == [0]
        assert h.report("noop-0", 0, ES.CANCELED)
        assert h.status() is JobStatus.FAILED
        assert "could not deploy noop-0 (2/2)" in h.scheduler.failure_cause
        assert h.pool.num_allocated_slots() == 0

    run(chain(2, 1), scenario)
