"""TaskSubmissionBatcher: one SubmitTasks per task executor and loop turn, outcomes per task."""

from __future__ import annotations

import asyncio
from typing import Any

from sparkmill.common.core.errors import UnavailableError
from sparkmill.common.core.ids import ResourceID
from sparkmill.common.v1 import common_pb2, task_executor_pb2
from sparkmill.services.jobmaster.scheduler.task_submissions import TaskSubmissionBatcher


class TestingTaskExecutor:
    """Records each SubmitTasks; refuses the attempts it is told to, or is unreachable."""

    __test__ = False

    def __init__(self, refuse: set[str] | None = None, down: bool = False) -> None:
        self.batches: list[list[str]] = []
        self.refuse = refuse or set()
        self.down = down

    async def submit_tasks(self, request: Any, timeout: float) -> Any:
        ids = [t.tdd.attempt_id for t in request.tasks]
        self.batches.append(ids)
        if self.down:
            raise UnavailableError("task executor unreachable")
        reply = task_executor_pb2.SubmitTasksResponse()
        for aid in ids:
            if aid in self.refuse:
                reply.refused.add(
                    attempt_id=aid,
                    error=common_pb2.ErrorInfo(code=common_pb2.NOT_FOUND, message="no slot"),
                )
        return reply


def task(attempt_id: str) -> task_executor_pb2.SubmitTaskRequest:
    return task_executor_pb2.SubmitTaskRequest(
        tdd=task_executor_pb2.TaskDeploymentDescriptor(attempt_id=attempt_id)
    )


def outcomes(executors: dict[str, TestingTaskExecutor], plan: list[tuple[str, str]]) -> list[str]:
    async def main() -> list[str]:
        spawned: list[asyncio.Task[None]] = []
        batcher = TaskSubmissionBatcher(
            spawn=lambda coro, name: spawned.append(asyncio.create_task(coro)), timeout_s=5.0
        )
        futures = [
            batcher.submit(ResourceID(te), executors[te], task(aid))  # type: ignore[arg-type]
            for te, aid in plan
        ]
        results = await asyncio.gather(*futures, return_exceptions=True)
        await asyncio.gather(*spawned)
        return ["ok" if r is None else type(r).__name__ for r in results]

    return asyncio.run(main())


def test_one_rpc_per_task_executor_per_turn_with_each_tasks_own_outcome() -> None:
    one, two = TestingTaskExecutor(refuse={"b"}), TestingTaskExecutor(down=True)
    results = outcomes(
        {"te1": one, "te2": two}, [("te1", "a"), ("te2", "x"), ("te1", "b"), ("te1", "c")]
    )
    assert results == ["ok", "UnavailableError", "NotFoundError", "ok"]
    assert one.batches == [["a", "b", "c"]]
    assert two.batches == [["x"]]


def test_a_large_wave_is_split_into_bounded_batches() -> None:
    te = TestingTaskExecutor()
    results = outcomes({"te": te}, [("te", f"t{i}") for i in range(600)])
    assert results == ["ok"] * 600
    assert [len(b) for b in te.batches] == [256, 256, 88]
