"""A job's own configuration: typed values, validated before anything is submitted."""

from __future__ import annotations

from datetime import timedelta

import pytest

import sparkmill as sm
from sparkmill.common.core.errors import ConfigurationError, PipelineError
from sparkmill.common.jobgraph.job_config import normalize_job_config
from sparkmill.testing import noop_pipeline


def test_typed_values_become_the_strings_the_cluster_parses() -> None:
    config = normalize_job_config(
        {
            "restart-strategy.type": "fixed-delay",
            "restart-strategy.fixed-delay.attempts": 3,
            "restart-strategy.fixed-delay.delay": timedelta(seconds=2),
            "slot.request.timeout": timedelta(milliseconds=1500),
            "restart-strategy.exponential-delay.backoff-multiplier": 1.5,
        }
    )
    assert config == {
        "restart-strategy.type": "fixed-delay",
        "restart-strategy.fixed-delay.attempts": "3",
        "restart-strategy.fixed-delay.delay": "2000 ms",
        "slot.request.timeout": "1500 ms",
        "restart-strategy.exponential-delay.backoff-multiplier": "1.5",
    }


def test_a_pipeline_takes_typed_values() -> None:
    pipeline = sm.Pipeline("p", config={"restart-strategy.fixed-delay.attempts": 3})
    assert pipeline.config["restart-strategy.fixed-delay.attempts"] == "3"
    graph = noop_pipeline("n", 1, config={"restart-strategy.fixed-delay.attempts": 2})
    assert graph.build_job_graph().config["restart-strategy.fixed-delay.attempts"] == "2"


def test_a_bad_value_is_refused_at_build_time_naming_the_key() -> None:
    with pytest.raises(PipelineError, match=r"restart-strategy\.type"):
        sm.Pipeline("p", config={"restart-strategy.type": "bogus"})
    with pytest.raises(PipelineError, match="is not an integer"):
        sm.Pipeline("p", config={"restart-strategy.fixed-delay.attempts": 2.5})


def test_a_misspelt_key_gets_a_suggestion() -> None:
    with pytest.raises(ConfigurationError, match=r"did you mean 'restart-strategy\.type'"):
        normalize_job_config({"restart-strategy.typ": "none"})


def test_a_cluster_wide_key_cannot_be_set_by_a_job() -> None:
    with pytest.raises(ConfigurationError, match="cannot override"):
        normalize_job_config({"heartbeat.interval": "1 s"})


def test_values_of_other_types_and_negative_durations_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="a job configuration value is a string"):
        normalize_job_config({"restart-strategy.fixed-delay.attempts": [3]})
    with pytest.raises(ConfigurationError, match="negative"):
        normalize_job_config({"slot.request.timeout": timedelta(seconds=-1)})


def test_booleans_become_true_and_false() -> None:
    from sparkmill.common.jobgraph.job_config import config_value_text

    assert config_value_text("k", True) == "true"
    assert config_value_text("k", False) == "false"
