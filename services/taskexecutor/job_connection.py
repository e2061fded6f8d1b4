"""A task executor's connection to one job's JobMaster, and offering slots over it.

Slots allocated for the job (``RequestSlot``) are offered to its JobMaster in batches
(``OfferSlots``, after registering once); accepted ones become ACTIVE, rejected ones are freed.
The connection stays while the task executor holds a slot *or* a result of the job (see
``result_partitions``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkmill.common.core.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    RpcError,
    UnavailableError,
)
from sparkmill.common.core.ids import AllocationID, JobID, ResourceID, short
from sparkmill.common.core.proto_convert import profile_to_proto
from sparkmill.common.v1 import job_master_pb2, task_executor_pb2
from sparkmill.common.v1.gateways import JobMasterClient
from sparkmill.services.taskexecutor.slot_table import TaskSlotTable
from sparkmill.services.taskexecutor.task import Task

log = logging.getLogger(__name__)

OFFER_RETRIES = 3
# How long non-final state updates wait for others to join their batch (see batching_window).
UPDATE_BATCH_WINDOW_S = 0.002


@dataclass
class JobConnection:
    """A task executor's connection to the JobMaster of one job (Flink's JobTable entry)."""

    job_id: JobID
    address: str
    session_id: str
    client: JobMasterClient
    pending_offers: set[AllocationID] = field(default_factory=set)
    offer_task: asyncio.Task[None] | None = None
    # Queued state updates; None where a final state replaced an earlier one (see queue_update).
    updates: list[job_master_pb2.TaskExecutionState | None] = field(default_factory=list)
    # Where each attempt's not-yet-sent non-final updates sit in ``updates``.
    queued_at: dict[str, list[int]] = field(default_factory=dict)
    final_queued: bool = False
    _window: asyncio.Future[None] | None = field(default=None, repr=False)
    flush_task: asyncio.Task[None] | None = None
    # Ended attempts whose final state the JobMaster has not acknowledged: still reported as
    # hosted, so heartbeat reconciliation never mistakes an update in flight for a lost task.
    unacknowledged: set[str] = field(default_factory=set)
    # Finished attempts here that produced results of the job (Flink's partition tracker):
    # while there are any, the connection stays although no slot of the job is left, so the
    # JobMaster's heartbeats are still answered and it does not write these results off.
    result_partitions: set[str] = field(default_factory=set)

    def holds_results(self) -> bool:
        return bool(self.result_partitions)

    def queue_update(self, update: job_master_pb2.TaskExecutionState, *, final: bool) -> None:
        """Queue a state update for the next batch to the JobMaster.

        A final state replaces whatever the same attempt still has waiting in the queue (its
        INITIALIZING and RUNNING): a task that ends within one batching window reports one
        update instead of three, and the JobMaster takes DEPLOYING -> FINISHED (or FAILED) in
        one step, as Flink's Execution does. Only not-yet-sent updates are replaced: what the
        JobMaster has seen still arrives in order.
        """
        if not final:
            self.queued_at.setdefault(update.attempt_id, []).append(len(self.updates))
            self.updates.append(update)
            return
        self.final_queued = True
        if self._window is not None:
            _end(self._window)  # the JobMaster waits for this one: send it now
        earlier = self.queued_at.pop(update.attempt_id, None)
        if not earlier:
            self.updates.append(update)
            return
        self.updates[earlier[0]] = update
        for index in earlier[1:]:
            self.updates[index] = None

    def take_updates(self) -> list[job_master_pb2.TaskExecutionState]:
        """The queued updates, in order, for one batch; the queue is empty afterwards."""
        batch, self.updates = self.updates, []
        self.queued_at.clear()
        self.final_queued = False
        return [update for update in batch if update is not None]

    async def batching_window(self) -> None:
        """Wait before sending the queued updates, so that those of other tasks join the batch.

        Non-final updates (INITIALIZING, RUNNING) wait up to ``UPDATE_BATCH_WINDOW_S``: a short
        task's final state then replaces them. A final state is what the JobMaster waits for
        to release the slot and schedule the consumers, so it ends the wait at once; it still
        waits one loop turn, for the other updates posted in the same turn. (While a batch is
        in flight, what is queued meanwhile goes out when it returns: under load, batches grow
        by themselves.)"""
        loop = asyncio.get_running_loop()
        if self.final_queued:
            await asyncio.sleep(0)
            return
        self._window = window = loop.create_future()
        timer = loop.call_later(UPDATE_BATCH_WINDOW_S, _end, window)
        try:
            await window
        finally:
            timer.cancel()
            self._window = None

    def requeue_updates(self, batch: list[job_master_pb2.TaskExecutionState]) -> None:
        """Put a batch that could not be sent back in front of what was queued since.

        The positions of what is queued shift, so nothing queued so far is replaced any more
        (a later final state is appended after its earlier updates: still in order)."""
        self.updates[:0] = batch
        self.queued_at.clear()


def _end(window: asyncio.Future[None]) -> None:
    if not window.done():
        window.set_result(None)


FreeSlot = Callable[[AllocationID, str], None]


async def offer_slots(
    connection: JobConnection,
    table: TaskSlotTable[Task],
    resource_id: ResourceID,
    address: str,
    *,
    is_current: Callable[[], bool],
    free_slot: FreeSlot,
) -> None:
    """Offer the connection's pending slots until none is left (or the connection is no longer
    the job's, ``is_current``); slots that cannot be offered are freed."""
    # Yield once so that slot requests arriving together are offered in one RPC.
    await asyncio.sleep(0)
    try:
        # No RegisterTaskExecutor first: the offer connects this task executor to the JobMaster
        # (one round trip less before a job's first task can be deployed here).
        while connection.pending_offers and is_current():
            batch = list(connection.pending_offers)
            connection.pending_offers.clear()
            offers = []
            for allocation_id in batch:
                info = table.slot_info(allocation_id)
                if info is not None:
                    offers.append(
                        job_master_pb2.SlotOffer(
                            allocation_id=allocation_id,
                            slot_index=info.index,
                            resource_profile=profile_to_proto(info.resource_profile),
                        )
                    )
            if offers:
                await _offer_batch(connection, table, resource_id, address, offers, free_slot)
    except RpcError as exc:
        log.warning(
            "could not offer slots to the JobMaster of %s: %s", short(connection.job_id), exc
        )
        for allocation_id in list(connection.pending_offers):
            free_slot(allocation_id, f"offering it to the JobMaster failed: {exc}")
        connection.pending_offers.clear()


async def _offer_batch(
    connection: JobConnection,
    table: TaskSlotTable[Task],
    resource_id: ResourceID,
    address: str,
    offers: list[job_master_pb2.SlotOffer],
    free_slot: FreeSlot,
) -> None:
    request = job_master_pb2.OfferSlotsRequest(
        job_id=connection.job_id, resource_id=resource_id, address=address, offers=offers
    )
    reply = None
    for attempt in range(OFFER_RETRIES):
        try:
            reply = await connection.client.offer_slots(request)
            break
        except RpcError as exc:
            # Only a missing answer is worth another try; a refusal is final.
            retriable = isinstance(exc, DeadlineExceededError | UnavailableError)
            if attempt == OFFER_RETRIES - 1 or not retriable:
                for offer in offers:
                    free_slot(
                        AllocationID(offer.allocation_id),
                        f"the JobMaster did not take the offer: {exc}",
                    )
                return
    assert reply is not None
    accepted = {o.allocation_id for o in reply.accepted}
    for offer in offers:
        allocation_id = AllocationID(offer.allocation_id)
        if allocation_id in accepted:
            if table.slot_info(allocation_id) is not None:
                table.mark_slot_active(allocation_id)
        else:
            free_slot(allocation_id, "the JobMaster rejected the slot offer")


def job_id_of(request: object) -> JobID:
    """The job a JobMaster-originated request is about (its fencing token is that job's)."""
    if isinstance(request, task_executor_pb2.SubmitTaskRequest):
        return JobID(request.tdd.job_id)
    if isinstance(request, task_executor_pb2.SubmitTasksRequest):
        # One JobMaster's batch: fenced with that job's session, so every task must be its.
        jobs = {task.tdd.job_id for task in request.tasks}
        if len(jobs) != 1:
            raise InvalidArgumentError(
                f"SubmitTasks must carry tasks of exactly one job (got {len(jobs)})"
            )
        return JobID(jobs.pop())
    job_id = getattr(request, "job_id", "")
    if not job_id:
        raise InvalidArgumentError(f"{type(request).__name__} names no job")
    return JobID(job_id)


__all__ = ["OFFER_RETRIES", "JobConnection", "job_id_of", "offer_slots"]
