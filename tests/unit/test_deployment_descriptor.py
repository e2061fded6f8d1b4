"""Task deployment descriptors: the cached wire form of shared input gates equals a fresh one."""

from __future__ import annotations

from sparkmill.common.deployment import TaskDeployment
from sparkmill.common.ids import AllocationID, JobID
from sparkmill.services.jobmaster.deployment_descriptor import (
    InputGateCache,
    deployment_of,
    deployment_proto_of,
)
from sparkmill.services.jobmaster.execution_graph import ExecutionGraph
from tests.unit.test_execution_graph import (
    ALL_TO_ALL,
    POINTWISE,
    E,
    finish,
    run_to,
    subtasks,
    two_vertex_graph,
)

ALLOCATION = AllocationID("a" * 32)


def fresh(graph: ExecutionGraph, vertex: object) -> TaskDeployment:
    return deployment_of(
        vertex.current_execution,  # type: ignore[attr-defined]
        ALLOCATION,
        job_id=JobID(graph.job_id),
        job_name="j",
        job_master_epoch=7,
        job_config={"k": "v"},
    )


def cached(graph: ExecutionGraph, vertex: object, gates: InputGateCache) -> TaskDeployment:
    proto = deployment_proto_of(
        vertex.current_execution,  # type: ignore[attr-defined]
        ALLOCATION,
        gates,
        job_id=JobID(graph.job_id),
        job_name="j",
        job_master_epoch=7,
        job_config={"k": "v"},
    )
    return TaskDeployment.from_proto(proto)


def test_consumers_of_an_all_to_all_edge_share_one_cached_gate_equal_to_a_fresh_one() -> None:
    graph, b = two_vertex_graph(20, 5, ALL_TO_ALL)
    for producer in subtasks(graph, b, "src"):
        producer.current_execution.task_executor_id = f"te-{producer.subtask_index % 3}"
        finish(producer)
    gates = InputGateCache()
    for consumer in subtasks(graph, b, "dst"):
        assert cached(graph, consumer, gates) == fresh(graph, consumer)
    assert len(gates) == 1
    partitions = cached(graph, subtasks(graph, b, "dst")[0], gates).inputs[0].partitions
    assert [p.producer_resource_id for p in partitions[:4]] == ["te-0", "te-1", "te-2", "te-0"]


def test_a_producer_that_runs_again_is_seen_with_its_new_attempt() -> None:
    graph, b = two_vertex_graph(10, 2, ALL_TO_ALL)
    producers = subtasks(graph, b, "src")
    for producer in producers:
        finish(producer)
    consumer = subtasks(graph, b, "dst")[0]
    gates = InputGateCache()
    before = cached(graph, consumer, gates).inputs[0].partitions[3].producer_attempt_id
    graph.reset_vertex_for_new_execution(producers[3])
    again = producers[3].current_execution
    again.task_executor_id = "te-new"
    run_to(again, E.SCHEDULED, E.DEPLOYING, E.INITIALIZING, E.RUNNING, E.FINISHED)
    after = cached(graph, consumer, gates).inputs[0].partitions[3]
    assert after.producer_attempt_id == again.attempt_id != before
    assert after.producer_resource_id == "te-new"
    assert cached(graph, consumer, gates) == fresh(graph, consumer)


def test_unconsumable_and_small_gates_are_built_fresh_every_time() -> None:
    graph, b = two_vertex_graph(10, 10, POINTWISE)
    for producer in subtasks(graph, b, "src"):
        finish(producer)
    gates = InputGateCache()
    for consumer in subtasks(graph, b, "dst"):
        assert cached(graph, consumer, gates) == fresh(graph, consumer)
    assert len(gates) == 0  # one partition per gate: not worth keeping
    wide, wb = two_vertex_graph(10, 2, ALL_TO_ALL)
    finish(subtasks(wide, wb, "src")[0])  # 1 of 10 finished: not consumable yet
    assert cached(wide, subtasks(wide, wb, "dst")[0], gates) == fresh(
        wide, subtasks(wide, wb, "dst")[0]
    )
    assert len(gates) == 0
