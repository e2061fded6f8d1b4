"""The POINTWISE connection rule, in one place.

With S producer and T consumer subtasks (Flink's ``EdgeManagerBuildUtil.connectPointwise``):

* S >= T: consumer ``i`` reads the contiguous partitions ``[i*S//T, (i+1)*S//T)``, so every
  partition has exactly one reader;
* S < T: partition ``p`` is read by the contiguous consumers ``[ceil(p*T/S), ceil((p+1)*T/S))``
  and it is split among them.

The execution graph wires its consumers with it and the exchange splits and reads partitions
with it, so what a producer writes for its readers and what the graph tells each reader to read
cannot disagree.
"""

from __future__ import annotations

from sparkmill.common.core.errors import IllegalStateBug


def pointwise_readers(partition: int, producers: int, consumers: int) -> range:
    """The consumer subtasks that read ``partition`` of a POINTWISE connection."""
    if producers < 1 or consumers < 1:
        raise IllegalStateBug(
            f"a POINTWISE connection of {producers} producers and {consumers} consumers"
        )
    if not 0 <= partition < producers:
        raise IllegalStateBug(f"partition {partition} does not exist among {producers} producers")
    if producers >= consumers:
        # The consumer i with i*S//T <= p < (i+1)*S//T, i.e. i = ceil((p+1)*T/S) - 1.
        reader = -(-(partition + 1) * consumers // producers) - 1
        return range(reader, reader + 1)
    first = -(-partition * consumers // producers)
    end = -(-(partition + 1) * consumers // producers)
    return range(first, end)
