"""RequirementsDeclarer: the job's waiting slot requests declared as counts, one declaration in
flight, at most one per loop turn."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sparkmill.common.core.errors import RpcError, UnavailableError, UnimplementedError
from sparkmill.common.core.ids import AllocationID, JobID, ResourceID, new_job_id
from sparkmill.common.core.resources import UNKNOWN_PROFILE, ResourceProfile
from sparkmill.common.v1 import common_pb2, resource_manager_pb2
from sparkmill.services.jobmaster.slotpool import slot_requests
from sparkmill.services.jobmaster.slotpool.slot_requests import RequirementsDeclarer

BIG = ResourceProfile(8.0, 8192)


class TestingResourceManager:
    """Records the declarations that reach it (as plain tuples); refuses entries of a profile
    it is told to, fails while ``down``, answers only once ``answer`` is set."""

    __test__ = False

    def __init__(self, refuse_cpu: float | None = None) -> None:
        self.declarations: list[resource_manager_pb2.DeclareRequiredResourcesRequest] = []
        self.refuse_cpu = refuse_cpu
        self.down = False
        self.answer = asyncio.Event()
        self.answer.set()

    async def declare_required_resources(self, request: Any) -> Any:
        await self.answer.wait()
        if self.down:
            raise UnavailableError("resource manager unreachable")
        self.declarations.append(request)
        reply = resource_manager_pb2.DeclareRequiredResourcesResponse()
        for index, requirement in enumerate(request.requirements):
            if requirement.resource_profile.cpu_cores == self.refuse_cpu:
                reply.refused.add(
                    index=index,
                    error=common_pb2.ErrorInfo(
                        code=common_pb2.RESOURCE_EXHAUSTED, message="no such slot anywhere"
                    ),
                )
        return reply

    def pictures(self) -> list[list[tuple[float, int, tuple[str, ...]]]]:
        return [
            sorted(
                (r.resource_profile.cpu_cores, r.count, tuple(r.excluded_task_executors))
                for r in d.requirements
            )
            for d in self.declarations
        ]


Script = Callable[[RequirementsDeclarer], Awaitable[None]]


def drive(rm: TestingResourceManager, script: Script) -> list[tuple[str, RpcError]]:
    refused: list[tuple[str, RpcError]] = []

    async def main() -> None:
        tasks: list[asyncio.Task[None]] = []
        declarer = RequirementsDeclarer(
            JobID(new_job_id()),
            lambda: rm,  # type: ignore[arg-type,return-value]
            session_id=lambda: "0" * 32,
            timeout_ms=1000,
            spawn=lambda coro, name: tasks.append(asyncio.create_task(coro)),
            on_refused=lambda aid, exc: refused.append((aid, exc)),
        )
        await script(declarer)
        await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)

    asyncio.run(main())
    return refused


def aid(name: str) -> AllocationID:
    return AllocationID(name)


def test_one_turns_changes_go_out_as_one_declaration_of_counts() -> None:
    rm = TestingResourceManager()

    async def script(d: RequirementsDeclarer) -> None:
        for name in ("a", "b", "c"):
            d.request(aid(name), UNKNOWN_PROFILE, frozenset())
        d.request(aid("x"), UNKNOWN_PROFILE, frozenset({ResourceID("te-1")}))
        d.withdraw(aid("b"))  # served by a reused slot within the same turn
        await asyncio.sleep(0.01)
        d.withdraw(aid("a"))
        d.withdraw(aid("c"))
        d.received(["f" * 32])

    assert drive(rm, script) == []
    assert rm.pictures() == [[(0.0, 1, ("te-1",)), (0.0, 2, ())], [(0.0, 1, ("te-1",))]]
    assert [d.version for d in rm.declarations] == [1, 2]
    assert list(rm.declarations[1].received_allocation_ids) == ["f" * 32]
    assert rm.declarations[0].timeout_ms == 1000


def test_what_changes_while_a_declaration_is_unanswered_goes_out_after_it_as_one() -> None:
    rm = TestingResourceManager()

    async def script(d: RequirementsDeclarer) -> None:
        rm.answer.clear()
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())
        await asyncio.sleep(0.01)
        for name in ("b", "c", "d"):  # three turns while the first is unanswered
            d.request(aid(name), UNKNOWN_PROFILE, frozenset())
            await asyncio.sleep(0)
        d.withdraw(aid("a"))
        assert rm.declarations == []
        rm.answer.set()
        await asyncio.sleep(0.01)

    drive(rm, script)
    assert rm.pictures() == [[(0.0, 1, ())], [(0.0, 3, ())]]


def test_a_refused_entry_fails_the_requests_waiting_for_it_and_leaves_the_picture() -> None:
    rm = TestingResourceManager(refuse_cpu=8.0)

    async def script(d: RequirementsDeclarer) -> None:
        d.request(aid("small"), UNKNOWN_PROFILE, frozenset())
        d.request(aid("big-1"), BIG, frozenset())
        d.request(aid("big-2"), BIG, frozenset())
        await asyncio.sleep(0.01)
        assert d.waiting() == 1

    refused = drive(rm, script)
    assert sorted(a for a, _ in refused) == ["big-1", "big-2"]
    assert "no such slot anywhere" in str(refused[0][1])
    assert rm.pictures() == [[(0.0, 1, ()), (8.0, 2, ())], [(0.0, 1, ())]]


def test_an_undelivered_declaration_is_sent_again_with_its_acknowledgements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rm = TestingResourceManager()
    monkeypatch.setattr(slot_requests, "RETRY_DELAY_S", 0.02)

    async def script(d: RequirementsDeclarer) -> None:
        rm.down = True
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())
        d.received(["e" * 32])
        await asyncio.sleep(0.01)
        assert rm.declarations == []
        rm.down = False
        await asyncio.sleep(0.1)

    assert drive(rm, script) == []
    assert rm.pictures() == [[(0.0, 1, ())]]
    assert list(rm.declarations[0].received_allocation_ids) == ["e" * 32]


def test_a_reset_forgets_the_picture_and_counts_each_request_once() -> None:
    rm = TestingResourceManager()

    async def script(d: RequirementsDeclarer) -> None:
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())  # counted once
        await asyncio.sleep(0.01)
        d.reset()
        assert d.waiting() == 0
        d.withdraw(aid("a"))  # unknown by now: nothing to send
        await asyncio.sleep(0.01)

    drive(rm, script)
    assert rm.pictures() == [[(0.0, 1, ())]]


def switchable_declarer(
    connected: list[Any], tasks: list[asyncio.Task[None]], refused: list[str]
) -> RequirementsDeclarer:
    """A declarer whose resource manager is ``connected[0]`` (``None``: not registered yet);
    its sends go to ``tasks``, its refusals to ``refused``."""
    return RequirementsDeclarer(
        JobID(new_job_id()),
        lambda: connected[0],
        session_id=lambda: "0" * 32,
        timeout_ms=1000,
        spawn=lambda coro, name: tasks.append(asyncio.create_task(coro)),
        on_refused=lambda aid, exc: refused.append(aid),
    )


def test_after_a_reset_the_new_picture_does_not_wait_for_the_old_leaders_answer() -> None:
    old, new = TestingResourceManager(), TestingResourceManager()
    connected = [old]
    refused: list[str] = []

    async def main() -> None:
        tasks: list[asyncio.Task[None]] = []
        d = switchable_declarer(connected, tasks, refused)
        old.answer.clear()  # the old leader never answers in time
        old.refuse_cpu = 0.0  # and would refuse everything if it did
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())
        await asyncio.sleep(0.01)
        d.reset()
        connected[0] = new
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())  # the pool re-sends its requests
        await asyncio.sleep(0.01)
        assert new.pictures() == [[(0.0, 1, ())]]
        old.answer.set()  # its late answer changes nothing
        await asyncio.gather(*tasks)
        assert refused == [] and d.waiting() == 1

    asyncio.run(main())


class OldResourceManager(TestingResourceManager):
    """A resource manager of a version before declared requirements."""

    __test__ = False

    async def declare_required_resources(self, request: Any) -> Any:
        raise UnimplementedError("ResourceManagerGateway has no method 'DeclareRequiredResources'")


def test_an_older_resource_manager_is_named_as_the_thing_to_upgrade(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def script(d: RequirementsDeclarer) -> None:
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())
        await asyncio.sleep(0.01)

    with caplog.at_level(logging.ERROR, logger=slot_requests.__name__):
        assert drive(OldResourceManager(), script) == []  # nothing fails: the need waits
    assert "upgrade the resource managers" in caplog.text


def test_the_first_declaration_rides_on_the_registration_and_the_rest_follows_on_its_own() -> None:
    rm = TestingResourceManager(refuse_cpu=8.0)
    connected: list[TestingResourceManager | None] = [None]  # registering: no client yet
    refused: list[str] = []

    async def main() -> None:
        tasks: list[asyncio.Task[None]] = []
        d = switchable_declarer(connected, tasks, refused)
        assert d.declaration_for_registration() is None  # nothing to declare yet
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())
        d.request(aid("big"), BIG, frozenset())
        await asyncio.sleep(0.01)  # without a client nothing goes out on its own
        first = d.declaration_for_registration()
        assert first is not None and first.version == 1
        assert sorted(r.resource_profile.cpu_cores for r in first.requirements) == [0.0, 8.0]
        assert d.declaration_for_registration() is None  # one at a time
        # The first attempt fails: the next one carries the picture again, with a new version.
        d.registration_answered(first.version, None)
        d.request(aid("b"), UNKNOWN_PROFILE, frozenset())
        second = d.declaration_for_registration()
        assert second is not None and second.version == 2
        assert sorted(r.count for r in second.requirements) == [1, 2]
        # Registered: the resource manager refused the big entry and took the rest.
        connected[0] = rm
        answer = resource_manager_pb2.DeclareRequiredResourcesResponse()
        big_index = [r.resource_profile.cpu_cores for r in second.requirements].index(8.0)
        answer.refused.add(
            index=big_index, error=common_pb2.ErrorInfo(code=common_pb2.RESOURCE_EXHAUSTED)
        )
        d.registration_answered(first.version, answer)  # an attempt given up before: no effect
        assert refused == [] and d.waiting() == 3
        d.registration_answered(second.version, answer)
        assert refused == ["big"] and d.waiting() == 2
        await asyncio.sleep(0.01)
        # Only what changed since (the withdrawn big request) is declared on its own.
        assert rm.pictures() == [[(0.0, 2, ())]]
        await asyncio.gather(*tasks)

    asyncio.run(main())


def test_a_registration_answered_after_a_reset_changes_nothing() -> None:
    refused: list[str] = []

    async def main() -> None:
        d = switchable_declarer([None], [], refused)
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())
        riding = d.declaration_for_registration()
        assert riding is not None
        d.reset()  # another resource manager leader meanwhile
        answer = resource_manager_pb2.DeclareRequiredResourcesResponse()
        answer.refused.add(index=0, error=common_pb2.ErrorInfo(code=common_pb2.RESOURCE_EXHAUSTED))
        d.registration_answered(riding.version, answer)
        assert refused == []
        d.request(aid("a"), UNKNOWN_PROFILE, frozenset())  # the pool re-sends its requests
        again = d.declaration_for_registration()
        assert again is not None and [r.count for r in again.requirements] == [1]

    asyncio.run(main())
