"""Task deployment descriptors: the cached wire form of shared input gates equals a fresh one;
large shared gates are offloaded and served only at their current generation."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import FailedPreconditionError, IllegalStateBug, NotFoundError
from sparkmill.common.core.ids import AllocationID, JobID, SharedGateID
from sparkmill.common.deployment.descriptor import (
    TaskDeployment,
    input_gate_from_proto,
    shared_gate_keys,
)
from sparkmill.common.v1 import task_executor_pb2
from sparkmill.services.jobmaster.executiongraph.deployment_descriptor import (
    InputGateCache,
    deployment_of,
    deployment_proto_of,
)
from sparkmill.services.jobmaster.executiongraph.execution_graph import ExecutionGraph
from tests.unit.execution_graph_builders import (
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


def descriptor(
    graph: ExecutionGraph, vertex: object, gates: InputGateCache
) -> task_executor_pb2.TaskDeploymentDescriptor:
    """The descriptor the JobMaster sends for ``vertex``'s current execution."""
    return deployment_proto_of(
        vertex.current_execution,  # type: ignore[attr-defined]
        ALLOCATION,
        gates,
        job_id=JobID(graph.job_id),
        job_name="j",
        job_master_epoch=7,
        job_config={"k": "v"},
    )


def cached(graph: ExecutionGraph, vertex: object, gates: InputGateCache) -> TaskDeployment:
    return TaskDeployment.from_proto(descriptor(graph, vertex, gates))


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


def offloaded(
    graph: ExecutionGraph, vertex: object, gates: InputGateCache
) -> tuple[task_executor_pb2.TaskDeploymentDescriptor, TaskDeployment]:
    """A descriptor as the JobMaster sends it, and what a task executor that fetched its
    offloaded gates from ``gates`` makes of it."""
    proto = descriptor(graph, vertex, gates)
    fetched = {
        key: input_gate_from_proto(gates.shared_gate(*key)) for key in shared_gate_keys(proto)
    }
    return proto, TaskDeployment.from_proto(proto, fetched)


def test_a_large_shared_gate_is_offloaded_and_served_whole() -> None:
    graph, b = two_vertex_graph(20, 5, ALL_TO_ALL)
    for producer in subtasks(graph, b, "src"):
        finish(producer)
    gates = InputGateCache(offload_min_partitions=20)
    keys = set()
    for consumer in subtasks(graph, b, "dst"):
        proto, deployment = offloaded(graph, consumer, gates)
        (gate,) = proto.inputs
        assert gate.shared_gate_id and not gate.partitions  # a reference, nothing else
        keys.update(shared_gate_keys(proto))
        assert deployment == fresh(graph, consumer)
    assert len(keys) == 1  # every consumer refers to the same gate
    # Below the threshold the gate stays inline.
    inline = cached(graph, subtasks(graph, b, "dst")[0], InputGateCache(offload_min_partitions=21))
    assert len(inline.inputs[0].partitions) == 20


def test_an_offloaded_gate_is_served_only_at_its_current_generation() -> None:
    graph, b = two_vertex_graph(10, 2, ALL_TO_ALL)
    producers = subtasks(graph, b, "src")
    for producer in producers:
        finish(producer)
    consumer = subtasks(graph, b, "dst")[0]
    gates = InputGateCache(offload_min_partitions=8)
    old_proto, _ = offloaded(graph, consumer, gates)
    ((gate_id, generation),) = shared_gate_keys(old_proto)
    with pytest.raises(NotFoundError):
        gates.shared_gate(SharedGateID("f" * 32), generation)

    graph.reset_vertex_for_new_execution(producers[3])
    again = producers[3].current_execution
    with pytest.raises(FailedPreconditionError):  # a producer runs again: nothing to serve
        gates.shared_gate(gate_id, generation)
    again.task_executor_id = "te-new"
    run_to(again, E.SCHEDULED, E.DEPLOYING, E.INITIALIZING, E.RUNNING, E.FINISHED)
    with pytest.raises(FailedPreconditionError):  # a stale reference is refused
        gates.shared_gate(gate_id, generation)

    new_proto, deployment = offloaded(graph, consumer, gates)
    ((new_id, new_generation),) = shared_gate_keys(new_proto)
    assert new_id == gate_id and new_generation > generation
    assert deployment.inputs[0].partitions[3].producer_attempt_id == again.attempt_id
    assert deployment == fresh(graph, consumer)


def test_reading_an_offloaded_gate_that_was_not_fetched_is_a_bug() -> None:
    graph, b = two_vertex_graph(10, 2, ALL_TO_ALL)
    for producer in subtasks(graph, b, "src"):
        finish(producer)
    proto, _ = offloaded(graph, subtasks(graph, b, "dst")[0], InputGateCache(8))
    with pytest.raises(IllegalStateBug):
        TaskDeployment.from_proto(proto)


def test_an_offload_threshold_below_the_cache_minimum_offloads_small_gates_too() -> None:
    graph, b = two_vertex_graph(3, 3, POINTWISE)
    for producer in subtasks(graph, b, "src"):
        finish(producer)
    gates = InputGateCache(offload_min_partitions=1)
    for consumer in subtasks(graph, b, "dst"):
        proto, deployment = offloaded(graph, consumer, gates)
        assert len(shared_gate_keys(proto)) == 1
        assert deployment == fresh(graph, consumer)
