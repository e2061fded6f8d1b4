"""The resource manager's accounting of the task executors it starts itself (ActiveWorkers),
driven by hand through a testing driver, a hand-written slot demand and manual time."""

from __future__ import annotations

import asyncio

import pytest

from sparkmill.common.core.errors import IllegalStateBug
from sparkmill.common.core.ids import AllocationID, InstanceID, JobID, ResourceID
from sparkmill.common.core.resources import UNKNOWN_PROFILE
from sparkmill.common.runtime.timers import ManualTimerService
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.services.resourcemanager.active_workers import (
    ActiveWorkers,
    ActiveWorkerSettings,
)
from sparkmill.services.resourcemanager.slot_requests import SlotRequest
from sparkmill.services.resourcemanager.worker_driver import (
    WORKER_STATE_TRANSITIONS,
    WorkerSpec,
    WorkerState,
)
from tests.unit.active_workers_harness import SPEC, Harness, TestingWorkerDriver, worker_samples
from tests.unit.resource_manager_harness import (
    TestingResourceManagerState,
    call_context,
    leading_resource_manager,
    registration_request,
)


def test_no_worker_without_demand() -> None:
    h = Harness()
    assert h.driver.events is h.workers
    assert h.ask(0) == 0
    assert h.driver.requested == []


def test_requests_workers_for_the_slots_missing_counting_those_starting() -> None:
    h = Harness()
    assert h.ask(3) == 2  # 3 slots missing, 2 slots per worker
    assert len(h.driver.requested) == 2
    assert h.workers.counts().pending == 2
    # Still 3 waiting: the 4 slots of the starting workers cover them.
    assert h.ask(3) == 0
    assert h.ask(5) == 1
    assert h.workers.counts().requested_total == 3


def test_registered_workers_stop_counting_as_pending() -> None:
    h = Harness()
    h.ask(2)
    resource_id = h.driver.requested[0]
    h.register(resource_id)
    counts = h.workers.counts()
    assert (counts.pending, counts.registered) == (0, 1)
    assert h.workers.workers() == {resource_id: WorkerState.REGISTERED}


def test_the_maximum_bounds_registered_and_starting_slots() -> None:
    h = Harness(max_slots=6)
    h.demand.registered = 2  # a task executor someone else started
    assert h.ask(10) == 2  # 2 + 2 x 2 = 6 slots: no room for a third
    assert h.ask(10) == 0
    assert len(h.driver.requested) == 2


def test_a_timed_out_request_is_told_the_maximum_and_the_failed_starts() -> None:
    h = Harness(max_slots=4, start_retry_interval_s=1.0)
    h.ask(6)
    h.workers.on_worker_start_failed(h.driver.requested[0], "no such file")
    advice = h.workers.more_slots_advice()
    assert "resourcemanager.driver: testing" in advice
    assert "slotmanager.number-of-slots.max = 4 slot(s); its workers have 2 now" in advice
    assert "1 start(s) failed" in advice
    assert advice.endswith("or lower the job's parallelism or slot profile")


def test_the_minimum_is_kept_without_demand() -> None:
    h = Harness(min_slots=3)
    assert len(h.driver.requested) == 2  # at start: 3 slots need two workers of 2


def test_a_worker_that_does_not_register_is_stopped_and_replaced_after_the_cool_down() -> None:
    h = Harness(registration_timeout_s=30.0, start_retry_interval_s=3.0)
    h.ask(2)
    first = h.driver.requested[0]
    h.workers.on_worker_started(first)
    h.timers.advance(29.0)
    assert h.driver.released == []
    h.timers.advance(1.0)
    assert h.driver.released == [first]
    assert first in h.demand.closed  # forgotten before it is stopped
    assert h.workers.counts().failed_total == 1
    assert h.workers.workers() == {first: WorkerState.RELEASING}
    assert len(h.driver.requested) == 1  # cooling down
    h.timers.advance(3.0)
    assert len(h.driver.requested) == 2
    replacement = h.driver.requested[1]
    assert replacement != first
    # The stopped worker's end is expected: not one more failure.
    h.workers.on_worker_terminated(first, "exit code -15")
    assert h.workers.counts().failed_total == 1
    assert h.workers.workers() == {replacement: WorkerState.REQUESTED}


def test_registering_cancels_the_registration_timeout() -> None:
    h = Harness(registration_timeout_s=30.0)
    resource_id = h.registered_worker()
    h.timers.advance(60.0)
    assert h.driver.released == []
    assert h.workers.workers() == {resource_id: WorkerState.REGISTERED}


def test_start_failures_pause_new_requests_for_the_retry_interval() -> None:
    h = Harness(start_retry_interval_s=5.0)
    h.ask(2)
    h.workers.on_worker_start_failed(h.driver.requested[0], "no such file")
    assert h.workers.counts().failed_total == 1
    assert h.workers.counts().pending == 0
    assert h.ask(2) == 0  # still cooling down
    h.timers.advance(4.9)
    assert len(h.driver.requested) == 1
    h.timers.advance(0.1)  # the cool-down's end checks the demand again
    assert len(h.driver.requested) == 2


def test_a_worker_killed_while_starting_is_replaced() -> None:
    h = Harness(start_retry_interval_s=1.0)
    h.ask(2)
    killed = h.driver.requested[0]
    h.workers.on_worker_started(killed)
    h.workers.on_worker_terminated(killed, "exit code -9")
    assert h.workers.counts().failed_total == 1
    assert h.driver.released == []
    h.timers.advance(1.0)
    assert len(h.driver.requested) == 2


def test_a_registered_worker_that_ends_is_forgotten_and_replaced_at_once() -> None:
    h = Harness()
    h.ask(2)
    resource_id = h.driver.requested[0]
    h.register(resource_id)
    h.demand.registered = 0  # its registration is closed with it
    h.demand.waiting = 2  # its slots' requests wait again
    h.workers.on_worker_terminated(resource_id, "exit code 1")
    assert resource_id in h.demand.closed
    assert h.workers.counts().failed_total == 1
    assert len(h.driver.requested) == 2  # no cool-down: it had started fine


def test_an_idle_worker_is_released() -> None:
    h = Harness()
    resource_id = h.registered_worker()
    h.demand.idle.add(resource_id)
    h.workers.on_idle(resource_id)
    assert h.driver.released == [resource_id]
    assert resource_id in h.demand.closed
    assert h.workers.counts().released_total == 1
    h.workers.on_worker_terminated(resource_id, "exit code 0")
    assert h.workers.workers() == {}
    assert h.workers.counts().failed_total == 0


def test_an_idle_worker_used_again_is_kept() -> None:
    h = Harness()
    resource_id = h.registered_worker()
    h.workers.on_idle(resource_id)  # the slot manager's news is stale: a slot is in use
    h.workers.on_slot_report(resource_id, holds_results=False)
    assert h.driver.released == []


def test_no_release_while_the_worker_holds_results() -> None:
    h = Harness()
    resource_id = h.registered_worker()
    h.demand.idle.add(resource_id)
    h.workers.on_slot_report(resource_id, holds_results=True)
    h.workers.on_idle(resource_id)
    h.workers.on_slot_report(resource_id, holds_results=True)
    assert h.driver.released == []
    h.workers.on_slot_report(resource_id, holds_results=False)
    assert h.driver.released == [resource_id]


def test_results_do_not_hold_a_worker_when_release_does_not_wait_for_them() -> None:
    h = Harness(wait_result_consumed=False)
    resource_id = h.registered_worker()
    h.demand.idle.add(resource_id)
    h.workers.on_slot_report(resource_id, holds_results=True)
    h.workers.on_idle(resource_id)
    assert h.driver.released == [resource_id]


def test_no_idle_release_below_the_minimum() -> None:
    h = Harness(min_slots=2)
    resource_id = h.driver.requested[0]
    h.register(resource_id)
    h.demand.idle.add(resource_id)
    h.workers.on_idle(resource_id)
    assert h.driver.released == []


def test_task_executors_started_by_others_are_never_released() -> None:
    h = Harness()
    stranger = ResourceID("someone-elses")
    h.demand.idle.add(stranger)
    h.workers.on_idle(stranger)
    h.workers.on_task_executor_lost(stranger, "heartbeat timeout")
    assert h.driver.released == []


def test_a_lost_worker_is_stopped_and_counted_failed() -> None:
    h = Harness()
    resource_id = h.registered_worker()
    h.workers.on_task_executor_lost(resource_id, "heartbeat timeout")
    assert h.driver.released == [resource_id]
    assert h.workers.counts().failed_total == 1


def test_close_forgets_the_workers_without_stopping_them_and_requests_nothing_more() -> None:
    h = Harness()
    h.ask(2)
    asyncio.run(h.workers.close())
    assert h.driver.closed
    assert h.driver.released == []  # they wait for the next leader
    assert h.ask(4) == 0
    assert h.workers.workers() == {}


def test_a_worker_released_while_starting_whose_start_fails_is_gone_not_failed() -> None:
    h = Harness(registration_timeout_s=10.0)
    h.ask(2)
    [resource_id] = h.driver.requested
    h.timers.advance(10.0)  # released: it did not register
    assert h.workers.workers() == {resource_id: WorkerState.RELEASING}
    h.workers.on_worker_start_failed(resource_id, "the host did not answer")
    assert resource_id not in h.workers.workers()
    assert h.workers.counts().failed_total == 1  # the timeout, not twice


# ------------------------------------------------------------------ adoption after a failover


def test_nothing_is_requested_until_the_driver_reported_the_running_workers() -> None:
    h = Harness(recovered=None, min_slots=2)
    assert h.ask(4) == 0
    assert h.driver.requested == []
    h.workers.on_previous_workers_recovered([ResourceID("old-1")])
    # The recovered worker's 2 slots count as starting: one more worker for the other 2.
    assert len(h.driver.requested) == 1
    assert h.workers.workers()[ResourceID("old-1")] is WorkerState.STARTED
    assert h.workers.counts().pending == 2
    assert h.workers.recovered_total == 1
    assert h.workers.counts().requested_total == 1  # adopting is not requesting


def test_recovered_workers_cover_the_demand_while_they_re_register() -> None:
    old = [ResourceID("old-1"), ResourceID("old-2")]
    h = Harness(recovered=old)
    assert h.ask(4) == 0  # their 4 slots will come back: no duplicate
    h.register(old[0])
    h.register(old[1])
    assert h.workers.counts().registered == 2
    h.timers.advance(3600.0)  # registered: no recovery timeout any more
    assert h.driver.released == []


def test_a_recovered_worker_that_does_not_register_is_released_not_failed() -> None:
    old = ResourceID("old-1")
    h = Harness(recovered=[old], recovery_timeout_s=20.0, start_retry_interval_s=5.0)
    h.ask(2)
    assert h.driver.requested == []
    h.timers.advance(19.9)
    assert h.driver.released == []
    h.timers.advance(0.1)
    assert h.driver.released == [old]
    assert old in h.demand.closed
    counts = h.workers.counts()
    assert (counts.failed_total, counts.released_total) == (0, 1)
    assert len(h.driver.requested) == 1  # replaced at once: no cool-down
    h.workers.on_worker_terminated(old, "stopped")
    assert h.workers.counts().failed_total == 0


def test_a_recovered_worker_that_ends_before_registering_starts_no_cool_down() -> None:
    old = ResourceID("old-1")
    h = Harness(recovered=[old], start_retry_interval_s=5.0)
    h.demand.waiting = 2
    h.workers.on_worker_terminated(old, "it was stopping")
    assert h.workers.counts().failed_total == 0
    assert len(h.driver.requested) == 1


def test_a_worker_registered_before_the_report_is_adopted_as_registered_and_idle() -> None:
    h = Harness(recovered=None)
    early, stranger = ResourceID("old-1"), ResourceID("someone-elses")
    h.demand.registered = 4
    h.workers.on_worker_registered(early)
    h.workers.on_worker_registered(stranger)
    h.demand.idle.update({early, stranger})
    h.workers.on_idle(early)
    h.workers.on_idle(stranger)
    h.workers.on_previous_workers_recovered([early])
    assert h.workers.workers() == {early: WorkerState.RELEASING}  # idle: released at once
    assert h.driver.released == [early]  # never the task executor it did not find


def test_the_recovery_wait_is_bounded() -> None:
    h = Harness(recovered=None, recovery_timeout_s=10.0)
    assert h.ask(2) == 0
    h.timers.advance(10.0)
    assert len(h.driver.requested) == 1


def test_a_report_after_the_bound_still_adopts_its_workers() -> None:
    """A host slow to answer must not leave a previous leader's workers registered for ever
    with nobody to release them: the late report adopts them, and an idle one goes."""
    h = Harness(recovered=None, recovery_timeout_s=10.0)
    slow, gone, stranger = ResourceID("old-1"), ResourceID("old-2"), ResourceID("someone-elses")
    h.demand.registered = 6
    for resource_id in (slow, gone, stranger):
        h.workers.on_worker_registered(resource_id)
    h.workers.on_task_executor_closed(gone)  # disconnected before the report
    h.demand.idle.update({slow, stranger})
    h.workers.on_idle(slow)
    h.workers.on_idle(stranger)
    h.timers.advance(10.0)  # the bound passed without a report
    assert h.driver.released == []
    h.workers.on_previous_workers_recovered([slow, gone])
    assert h.workers.workers() == {slow: WorkerState.RELEASING, gone: WorkerState.STARTED}
    assert h.driver.released == [slow]  # idle: released; never the stranger
    assert h.workers.counts().recovered_total == 2
    h.timers.advance(10.0)  # the one not registered gets its recovery timeout
    assert h.driver.released == [slow, gone]


def test_the_recovery_timeout_defaults_from_the_settings() -> None:
    from sparkmill.common.runtime.settings import ClusterSettings

    settings = ClusterSettings(previous_worker_recovery_timeout_s=7.0)
    assert ActiveWorkerSettings.of(settings).recovery_timeout_s == 7.0
    assert ClusterSettings().previous_worker_recovery_timeout_s == 50.0


def test_worker_transitions_are_checked() -> None:
    assert WORKER_STATE_TRANSITIONS.is_terminal(WorkerState.TERMINATED)
    assert not WORKER_STATE_TRANSITIONS.can_transition(
        WorkerState.RELEASING, WorkerState.REGISTERED
    )
    with pytest.raises(IllegalStateBug):
        WORKER_STATE_TRANSITIONS.check(WorkerState.TERMINATED, WorkerState.STARTED)


def test_a_worker_spec_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="at least one slot"):
        WorkerSpec(slots=0, cpu_cores=1.0, memory_mb=1)


def test_worker_metrics_count_pending_registered_failed_and_released() -> None:
    h = Harness(start_retry_interval_s=0.0)
    h.ask(4)
    first, second = h.driver.requested
    h.register(first)
    h.workers.on_worker_start_failed(second, "boom")  # and a replacement is requested
    h.demand.idle.add(first)
    h.workers.on_idle(first)
    samples = worker_samples(TestingResourceManagerState(h.workers).collector())
    assert samples[("sparkmill_resource_manager_workers", "pending")] == 1
    assert samples[("sparkmill_resource_manager_workers", "registered")] == 0
    assert samples[("sparkmill_resource_manager_workers", "releasing")] == 1
    assert samples[("sparkmill_resource_manager_workers_started_total", "")] == 3
    assert samples[("sparkmill_resource_manager_workers_failed_total", "")] == 1
    assert samples[("sparkmill_resource_manager_workers_released_total", "")] == 1
    assert samples[("sparkmill_resource_manager_workers_recovered_total", "")] == 0


def test_the_worker_metric_families_keep_their_names_types_and_labels() -> None:
    """Dashboards and alert rules name these families: what the collector exposes stays put."""
    families = {
        (metric.name, metric.type, tuple(sorted({k for s in metric.samples for k in s.labels})))
        for metric in TestingResourceManagerState(Harness().workers).collector().collect()
    }
    prefix = "sparkmill_resource_manager_"
    assert families == {
        ("sparkmill_leader", "gauge", ()),
        (prefix + "task_executors", "gauge", ()),
        (prefix + "job_masters", "gauge", ()),
        ("sparkmill_heartbeat_timeouts", "counter", ("peer",)),
        (prefix + "workers", "gauge", ("state",)),
        (prefix + "workers_started", "counter", ()),
        (prefix + "workers_failed", "counter", ()),
        (prefix + "workers_released", "counter", ()),
        (prefix + "workers_recovered", "counter", ()),
        (prefix + "worker_starts_paused", "gauge", ()),
    }


def test_the_resource_manager_feeds_the_accounting_and_releases_through_it() -> None:
    """Wired into a leading ResourceManager: a waiting slot request asks for a worker, the
    worker's registration and its heartbeat's holds_result_partitions reach the accounting, and
    the release forgets the task executor before the driver stops it."""

    async def scenario() -> None:
        rm = leading_resource_manager()
        assert rm.slot_manager is not None
        driver = TestingWorkerDriver()
        rm.active_workers = ActiveWorkers(
            driver, ManualTimerService(), rm, ActiveWorkerSettings(spec=SPEC)
        )
        rm.active_workers.start()
        rm.active_workers.on_previous_workers_recovered([])
        request = SlotRequest(JobID("job-1"), AllocationID("alloc-1"), UNKNOWN_PROFILE, "")
        rm.slot_manager.register_slot_request(request)
        assert rm.waiting_slot_requests() == 1
        rm.active_workers.check_resource_needs()
        [resource_id] = driver.requested
        rm.slot_manager.unregister_slot_request(request.allocation_id)

        context = call_context()
        reply = await rm.register_task_executor(registration_request(resource_id), context)

        async def report(holds_results: bool) -> None:
            await rm.send_slot_report(
                resource_manager_pb2.SendSlotReportRequest(
                    instance_id=reply.instance_id,
                    slot_report=common_pb2.SlotReport(
                        slots=[common_pb2.SlotStatus(slot_index=i) for i in range(4)],
                        holds_result_partitions=holds_results,
                    ),
                ),
                context,
            )

        await report(holds_results=True)
        assert rm.active_workers.workers() == {resource_id: WorkerState.REGISTERED}
        assert rm.registered_slots() == 4 and rm.is_idle(resource_id)
        rm.notify_idle_task_executor(InstanceID(reply.instance_id))
        assert driver.released == []  # it holds results
        await report(holds_results=False)
        assert driver.released == [resource_id]
        assert resource_id not in rm.task_executors
        status = await rm.get_cluster_status(
            resource_manager_pb2.GetClusterStatusRequest(), context
        )
        assert status.workers.driver == "testing"
        assert (status.workers.releasing, status.workers.released_total) == (1, 1)
        await rm.clients.close()

    asyncio.run(scenario())


def test_a_worker_adopted_after_its_report_of_held_results_is_not_released() -> None:
    """The slot report of a task executor registered before the driver's report is kept: the
    adopted worker still holds results a job may read, so idleness does not release it."""
    h = Harness(recovered=None)
    old = ResourceID("old-1")
    h.demand.registered = 6
    h.workers.on_worker_registered(old)
    h.workers.on_slot_report(old, True)
    h.demand.idle.add(old)
    h.workers.on_idle(old)
    h.workers.on_previous_workers_recovered([old])
    assert h.workers.workers() == {old: WorkerState.REGISTERED}
    assert h.driver.released == []
    h.workers.on_slot_report(old, False)  # its results were read: now it goes
    assert h.driver.released == [old]


def test_a_worker_that_registers_while_it_is_released_gets_no_slots() -> None:
    h = Harness(registration_timeout_s=10.0)
    h.ask(2)
    late = h.driver.requested[0]
    h.workers.on_worker_started(late)
    h.timers.advance(10.0)  # its registration timed out: released
    assert h.workers.workers()[late] is WorkerState.RELEASING
    h.demand.closed.clear()
    h.workers.on_worker_registered(late)  # it registers on its way out
    assert h.demand.closed == [late]
    assert h.workers.workers()[late] is WorkerState.RELEASING


def test_jobs_waiting_during_the_recovery_are_told_why() -> None:
    h = Harness(recovered=None)
    assert "previous leader" in h.workers.wait_reason()
    assert "resourcemanager.previous-worker.recovery.timeout" in h.workers.wait_reason()
    h.workers.on_previous_workers_recovered([])
    assert "previous leader" not in h.workers.wait_reason()


def test_a_driver_without_room_is_asked_again_after_a_pause_without_counting_a_failure() -> None:
    h = Harness(start_retry_interval_s=5.0, max_start_failure_rate=1.0)
    h.ask(2)
    full = h.driver.requested[0]
    h.workers.on_worker_start_refused(full, "no host has 2 free slot(s): every host is full")
    counts = h.workers.counts()
    assert (counts.failed_total, counts.recent_failures, counts.starts_paused) == (0, 0, False)
    assert h.workers.workers() == {}
    assert "every host is full" in h.workers.wait_reason()
    assert h.workers.check_resource_needs() == 0  # not at once: it would be refused again
    h.timers.advance(5.0)
    assert len(h.driver.requested) == 2  # asked again after the pause
    h.workers.on_worker_started(h.driver.requested[1])
    assert "every host is full" not in h.workers.wait_reason()
