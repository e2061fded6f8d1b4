"""Loading a pipeline file: mistakes are reported with what to do about them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmill.cli.pipeline_loading import PipelineLoadError, load_pipeline

PYSPARK_OUTSIDE_TRANSFORM = """
import sparkmill as sm
from pyspark.sql import functions as F

pipeline = sm.Pipeline("p")
pipeline.range(10).where({expression})
"""


@pytest.mark.parametrize("expression", ['F.col("id") > 3', 'F.count("*") > 1'])
def test_pyspark_functions_outside_transform_get_advice(tmp_path: Path, expression: str) -> None:
    # F.col fails with a bare AssertionError inside PySpark, F.count with
    # [SESSION_OR_CONTEXT_NOT_EXISTS]: both must say what to do instead.
    path = tmp_path / "pipeline.py"
    path.write_text(PYSPARK_OUTSIDE_TRANSFORM.format(expression=expression))
    with pytest.raises(PipelineLoadError) as caught:
        load_pipeline(path)
    message = str(caught.value)
    assert f"{path}:6:" in message
    assert "from sparkmill import functions as F" in message
    assert ".transform(fn)" in message


def test_other_errors_get_no_pyspark_advice(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.py"
    path.write_text("raise AssertionError('mine')\n")
    with pytest.raises(PipelineLoadError) as caught:
        load_pipeline(path)
    assert "AssertionError: mine" in str(caught.value)
    assert "SparkSession" not in str(caught.value)


def test_sparkmill_functions_outside_transform_load(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.py"
    path.write_text(
        PYSPARK_OUTSIDE_TRANSFORM.replace(
            "from pyspark.sql import functions as F", "from sparkmill import functions as F"
        ).format(expression='F.col("id") > 3')
    )
    assert load_pipeline(path).name == "p"
