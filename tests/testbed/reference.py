"""Word counts the plain-PySpark way, and the rows of Parquet outputs, as JSON on stdout.

    python -m tests.testbed.reference INPUT_GLOB OUTPUT_DIR...
    python -m tests.testbed.reference INPUT_GLOB -     # the outputs on stdin, one per line

Runs in a process of its own (a local Spark session on loopback) so the test process stays
small; one session serves every output to compare. With ``-`` the session starts at once and
the input and outputs are read when stdin ends: a test starts it beside the jobs it checks, and
the JVM's start-up is not added to the test's time.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main(argv: list[str]) -> None:
    source, outputs = argv[0], argv[1:]
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    if outputs == ["-"]:
        outputs = [line.strip() for line in sys.stdin if line.strip()]
    try:
        reference = (
            spark.read.text(source)
            .select(F.explode(F.split(F.lower("value"), r"\s+")).alias("word"))
            .where(F.col("word") != "")
            .groupBy("word")
            .agg(F.count("*").alias("count"))
        )

        def rows(df: object) -> list[list[object]]:
            return sorted([r["word"], r["count"]] for r in df.collect())  # type: ignore[attr-defined]

        result = {
            "reference": rows(reference),
            "outputs": {path: rows(spark.read.parquet(path)) for path in outputs},
        }
    finally:
        spark.stop()
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
