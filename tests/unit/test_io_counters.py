from __future__ import annotations

from sparkmill.common.core.io_counters import NO_IO, IOCounters, io_from_proto, io_to_proto
from sparkmill.common.v1 import job_master_pb2


def test_counters_add_field_by_field() -> None:
    total = NO_IO + IOCounters(1, 2, 3, 4) + IOCounters(10, 20, 30, 40)
    assert total == IOCounters(records_in=11, records_out=22, bytes_in=33, bytes_out=44)
    assert total.as_tuple() == (11, 22, 33, 44)


def test_counters_survive_the_task_status_message() -> None:
    message = job_master_pb2.IOMetrics()
    io_to_proto(IOCounters(1, 2, 3, 4), message)
    assert io_from_proto(message) == IOCounters(1, 2, 3, 4)
