"""A job's own configuration: typed values in, validated canonical strings out.

A job graph carries its configuration as string pairs (the wire form). Users write it as a
Python mapping, naturally with typed values (``{"restart-strategy.fixed-delay.attempts": 3,
"restart-strategy.fixed-delay.delay": timedelta(seconds=2)}``), so this module turns ints,
floats, booleans and ``timedelta`` durations into the strings the cluster parses, and checks
every entry against the option registry with job scope: the key must exist, must be one a job
may override, and its value must parse. The client runs this when a pipeline is built, so a
mistake is reported before anything is submitted; the dispatcher and the JobMaster run the same
check on what arrives over the wire.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError

JobConfigValue = str | int | float | bool | timedelta

# The job configuration key that carries a pipeline file's arguments (a JSON list of strings).
PIPELINE_ARGS_KEY = "pipeline.args"
# The job graph's limit on one configuration value (validation.MAX_CONFIG_VALUE_LENGTH).
MAX_PIPELINE_ARGS_LENGTH = 16 * 1024


def config_value_text(key: str, value: object) -> str:
    """The wire text of one typed value; :class:`ConfigurationError` for other types."""
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise ConfigurationError(key, f"{value!r} is not a duration: it is negative")
        micros = value // timedelta(microseconds=1)
        return f"{micros // 1000} ms" if micros % 1000 == 0 else f"{micros} us"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigurationError(
        key,
        f"{value!r} is a {type(value).__name__}; a job configuration value is a string, an int, "
        "a float, a bool or a datetime.timedelta",
    )


def normalize_job_config(config: Mapping[str, object]) -> dict[str, str]:
    """``config`` as validated wire strings (raises :class:`ConfigurationError` naming the key)."""
    texts: dict[str, str] = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise ConfigurationError(repr(key), "a job configuration key must be a string")
        texts[key] = config_value_text(key, value)
    # Job scope: unknown keys, cluster-wide keys and values that do not parse are refused here,
    # with the same messages the cluster would give.
    Configuration().with_overrides(texts, job_scope=True, source="the job's configuration")
    return texts


def encode_pipeline_args(args: Sequence[str]) -> str:
    """``args`` as the value of :data:`PIPELINE_ARGS_KEY`; :class:`ConfigurationError` when
    the encoded list is longer than a job configuration value may be."""
    text = json.dumps(list(args), ensure_ascii=False)
    if len(text) > MAX_PIPELINE_ARGS_LENGTH:
        raise ConfigurationError(
            PIPELINE_ARGS_KEY,
            f"the pipeline arguments take {len(text)} characters as JSON, more than the maximum "
            f"of {MAX_PIPELINE_ARGS_LENGTH} (pass a file name instead of the data)",
        )
    return text


def decode_pipeline_args(config: Mapping[str, str]) -> list[str]:
    """The pipeline arguments a job configuration carries ([] if none, or if the value is not
    a JSON list of strings: a view shows what it can rather than failing)."""
    text = config.get(PIPELINE_ARGS_KEY, "")
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return [text]
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        return [text]
    return value
