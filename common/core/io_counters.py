"""Records and bytes a task read and wrote: one type from Spark's task metrics up to the job's
details (task outcome, task-executor metrics, task status report, scheduler totals, progress
log)."""

from __future__ import annotations

from dataclasses import dataclass

from sparkmill.common.v1 import job_master_pb2


@dataclass(frozen=True, slots=True)
class IOCounters:
    records_in: int = 0
    records_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0

    def __add__(self, other: IOCounters) -> IOCounters:
        return IOCounters(
            self.records_in + other.records_in,
            self.records_out + other.records_out,
            self.bytes_in + other.bytes_in,
            self.bytes_out + other.bytes_out,
        )

    def as_tuple(self) -> tuple[int, int, int, int]:
        """(records in, records out, bytes in, bytes out), e.g. for a JSON list."""
        return (self.records_in, self.records_out, self.bytes_in, self.bytes_out)


NO_IO = IOCounters()


def io_to_proto(counters: IOCounters, message: job_master_pb2.IOMetrics) -> None:
    """Fill ``message`` (e.g. a task status update's ``io_metrics``) from ``counters``."""
    message.records_in = counters.records_in
    message.records_out = counters.records_out
    message.bytes_in = counters.bytes_in
    message.bytes_out = counters.bytes_out


def io_from_proto(message: job_master_pb2.IOMetrics) -> IOCounters:
    return IOCounters(message.records_in, message.records_out, message.bytes_in, message.bytes_out)
