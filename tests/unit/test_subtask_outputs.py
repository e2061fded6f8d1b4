"""How a subtask with several outputs writes them: from the first exchange output's files, or
from a persisted result where reading files back would change what an output gets."""

from __future__ import annotations

from typing import Any

from sparkmill.common.pipeline import plan as S
from sparkmill.services.taskexecutor.spark.runner import OutputOrder, has_order, output_order

HASH = S.ExchangeOutput("d1", S.HASH, ("k",), 4)
FORWARD = S.ExchangeOutput("d2", S.FORWARD, (), 2)
SINK = S.SinkOutput("csv", "/out/x", "overwrite")
DATABASE = S.JdbcSinkOutput("jdbc:postgresql://db/x", "t", "append")
COLLECT = S.CollectOutput("rows", 10)


def test_one_output_is_written_straight_from_the_result() -> None:
    for output in (HASH, SINK, DATABASE, COLLECT):
        assert output_order([output], ordered=True) == OutputOrder([output])
    assert output_order([], ordered=False) == OutputOrder([])


def test_an_exchange_output_is_written_first_and_read_back_for_the_others() -> None:
    order = output_order([SINK, COLLECT, HASH, FORWARD], ordered=False)
    assert order.read_back and not order.persist
    assert order.outputs == [HASH, SINK, COLLECT, FORWARD]


def test_two_exchange_outputs_keep_their_order() -> None:
    order = output_order([FORWARD, HASH], ordered=False)
    assert order == OutputOrder([FORWARD, HASH], read_back=True)


def test_a_result_in_order_is_persisted_instead() -> None:
    order = output_order([SINK, HASH], ordered=True)
    assert order == OutputOrder([SINK, HASH], persist=True)


def test_without_an_exchange_output_the_result_is_persisted() -> None:
    order = output_order([SINK, COLLECT], ordered=False)
    assert order == OutputOrder([SINK, COLLECT], persist=True)


def test_a_database_sink_is_never_written_from_files_read_back() -> None:
    order = output_order([HASH, DATABASE], ordered=False)
    assert order == OutputOrder([HASH, DATABASE], persist=True)


class _NoPlan:
    """A DataFrame whose plan cannot be read (e.g. of another Spark client)."""


def test_a_result_whose_order_cannot_be_read_counts_as_ordered() -> None:
    assert has_order(_NoPlan())


def test_a_footer_schema_becomes_nullable_as_spark_infers_it() -> None:
    from sparkmill.services.taskexecutor.spark.sources import _nullable

    footer: dict[str, Any] = {
        "type": "struct",
        "fields": [
            {"name": "k", "type": "integer", "nullable": False, "metadata": {"nullable": 1}},
            {
                "name": "tags",
                "type": {"type": "array", "elementType": "string", "containsNull": False},
                "nullable": False,
                "metadata": {},
            },
            {
                "name": "m",
                "type": {
                    "type": "map",
                    "keyType": "string",
                    "valueType": {
                        "type": "struct",
                        "fields": [
                            {"name": "x", "type": "long", "nullable": False, "metadata": {}}
                        ],
                    },
                    "valueContainsNull": False,
                },
                "nullable": True,
                "metadata": {},
            },
        ],
    }
    result = _nullable(footer)
    k, tags, m = result["fields"]
    assert k == {"name": "k", "type": "integer", "nullable": True, "metadata": {"nullable": 1}}
    assert tags["nullable"] and tags["type"]["containsNull"]
    assert m["type"]["valueContainsNull"]
    assert m["type"]["valueType"]["fields"][0]["nullable"]
    assert footer["fields"][0]["nullable"] is False  # the input is left alone


def test_a_footer_schema_is_whole_only_for_files_directly_in_the_source_directory() -> None:
    from sparkmill.services.taskexecutor.spark.sources import InputFile, _flat

    flat = [InputFile("file:/data/t/part-0.parquet", 1), InputFile("file:///data/t/b.parquet", 2)]
    assert _flat(flat, "/data/t") and _flat(flat, "file:/data/t/")
    nested = [*flat, InputFile("file:/data/t/k=1/part-0.parquet", 1)]
    assert not _flat(nested, "/data/t")
