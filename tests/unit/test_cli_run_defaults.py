"""``sparkmill run`` starts one task executor holding every slot: one Spark JVM per machine."""

from __future__ import annotations

from sparkmill.cli import build_parser


def test_run_starts_one_task_executor_with_four_slots_by_default() -> None:
    args = build_parser().parse_args(["run", "pipeline.py"])
    assert (args.task_executors, args.slots) == (1, 4)


def test_run_still_takes_an_explicit_layout() -> None:
    args = build_parser().parse_args(
        ["run", "pipeline.py", "--task-executors", "2", "--slots", "2"]
    )
    assert (args.task_executors, args.slots) == (2, 2)
