"""SlotRequestBatcher: one RequestSlots / CancelSlotRequests per loop turn, in order."""

from __future__ import annotations

import asyncio
from typing import Any

from sparkmill.common.core.errors import RpcError, UnavailableError
from sparkmill.common.core.ids import AllocationID
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.services.jobmaster.slotpool.slot_requests import MAX_BATCH, SlotRequestBatcher


class TestingResourceManager:
    """Records what reaches it; refuses allocation ids it is told to."""

    __test__ = False

    def __init__(self, refuse: set[str] | None = None, down: bool = False) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.refuse = refuse or set()
        self.down = down

    async def request_slots(self, request: Any) -> Any:
        ids = [r.allocation_id for r in request.requests]
        self.calls.append(("request", ids))
        if self.down:
            raise UnavailableError("resource manager unreachable")
        reply = resource_manager_pb2.RequestSlotsResponse()
        for aid in ids:
            if aid in self.refuse:
                reply.refused.add(
                    allocation_id=aid,
                    error=common_pb2.ErrorInfo(
                        code=common_pb2.RESOURCE_EXHAUSTED, message="no such slot anywhere"
                    ),
                )
        return reply

    async def cancel_slot_requests(self, request: Any) -> Any:
        self.calls.append(("cancel", list(request.allocation_ids)))
        return common_pb2.Empty()


def drive(rm: TestingResourceManager, script: Any) -> list[tuple[str, RpcError]]:
    refused: list[tuple[str, RpcError]] = []

    async def main() -> None:
        tasks: list[asyncio.Task[None]] = []
        batcher = SlotRequestBatcher(
            lambda: rm,  # type: ignore[arg-type,return-value]
            spawn=lambda coro, name: tasks.append(asyncio.create_task(coro)),
            on_refused=lambda aid, exc: refused.append((aid, exc)),
        )
        await script(batcher)
        await asyncio.sleep(0)
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return refused


def request(aid: str) -> resource_manager_pb2.RequestSlotRequest:
    return resource_manager_pb2.RequestSlotRequest(job_id="j", allocation_id=aid)


def test_one_turns_requests_go_out_as_one_rpc_and_a_withdrawn_one_never_leaves() -> None:
    rm = TestingResourceManager()

    async def script(batcher: SlotRequestBatcher) -> None:
        for aid in ("a", "b", "c"):
            batcher.request(request(aid))
        batcher.cancel(AllocationID("b"))  # fulfilled by a reused slot within the same turn
        await asyncio.sleep(0.01)
        batcher.cancel(AllocationID("a"))  # sent already: cancelled at the RM
        batcher.cancel(AllocationID("c"))
        batcher.request(request("d"))

    assert drive(rm, script) == []
    assert rm.calls == [("request", ["a", "c"]), ("request", ["d"]), ("cancel", ["a", "c"])]


def test_refusals_reach_their_own_requests_and_a_failed_rpc_fails_the_whole_batch() -> None:
    rm = TestingResourceManager(refuse={"y"})

    async def script(batcher: SlotRequestBatcher) -> None:
        batcher.request(request("x"))
        batcher.request(request("y"))

    refused = drive(rm, script)
    assert [(aid, type(exc).__name__) for aid, exc in refused] == [("y", "ResourceExhaustedError")]
    assert "no such slot anywhere" in str(refused[0][1])

    down = TestingResourceManager(down=True)
    refused = drive(down, script)
    assert [aid for aid, _ in refused] == ["x", "y"]
    assert all(isinstance(exc, UnavailableError) for _, exc in refused)


class SlowResourceManager(TestingResourceManager):
    """Answers a RequestSlots only when the test says so."""

    __test__ = False

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def request_slots(self, request: Any) -> Any:
        reply = await super().request_slots(request)
        await self.answer.wait()
        return reply


def test_what_is_asked_while_a_batch_is_unanswered_goes_out_after_it_in_one_batch() -> None:
    rm = SlowResourceManager()

    async def script(batcher: SlotRequestBatcher) -> None:
        batcher.request(request("a"))
        batcher.request(request("b"))
        await asyncio.sleep(0.01)
        for aid in ("c", "d", "e"):  # three turns while the first batch is unanswered
            batcher.request(request(aid))
            await asyncio.sleep(0)
        batcher.cancel(AllocationID("a"))  # sent already: cancelled after the reply
        batcher.cancel(AllocationID("d"))  # still here: never sent
        await asyncio.sleep(0.01)
        assert rm.calls == [("request", ["a", "b"])]
        rm.answer.set()
        await asyncio.sleep(0.01)

    assert drive(rm, script) == []
    assert rm.calls == [("request", ["a", "b"]), ("request", ["c", "e"]), ("cancel", ["a"])]


def test_a_burst_larger_than_a_batch_goes_out_one_batch_at_a_time_in_order() -> None:
    rm = TestingResourceManager()
    ids = [f"r{i}" for i in range(MAX_BATCH * 2 + 1)]

    async def script(batcher: SlotRequestBatcher) -> None:
        for aid in ids:
            batcher.request(request(aid))
        await asyncio.sleep(0.01)

    assert drive(rm, script) == []
    assert [len(sent) for _, sent in rm.calls] == [MAX_BATCH, MAX_BATCH, 1]
    assert [aid for _, sent in rm.calls for aid in sent] == ids
