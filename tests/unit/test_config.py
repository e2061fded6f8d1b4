"""Unit tests of the cluster configuration: parsers, validation, loading, overrides, docs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sparkmill.common.config import options as opts
from sparkmill.common.config.configuration import FILE_KEY, Configuration
from sparkmill.common.config.kinds import (
    ADDRESS,
    BOOL,
    DURATION,
    DURATION_SECONDS,
    FLOAT,
    INT,
    MEMORY,
    STRING,
)
from sparkmill.common.config.registry import REGISTRY
from sparkmill.common.config.schema import ConfigOption
from sparkmill.common.core.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def _error(mapping: dict[str, Any]) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as info:
        Configuration.from_mapping(mapping)
    return info.value


# --------------------------------------------------------------------------------------------
# defaults and declarations


def test_defaults_follow_flink_where_the_concept_exists() -> None:
    conf = Configuration()
    assert conf.get(opts.TASK_MANAGER_NUM_TASK_SLOTS) == 1
    assert conf.get(opts.HEARTBEAT_INTERVAL) == 10.0
    assert conf.get(opts.HEARTBEAT_TIMEOUT) == 50.0
    assert conf.get(opts.RPC_ASK_TIMEOUT) == 10.0
    assert conf.get(opts.RPC_MAX_MESSAGE_SIZE) == 64 * MIB
    assert conf.get(opts.TASK_MANAGER_MEMORY_PROCESS_SIZE) == 1728 * MIB
    assert conf.get(opts.REGISTRATION_INITIAL_TIMEOUT) == pytest.approx(0.1)
    assert conf.get(opts.SLOT_REQUEST_TIMEOUT) == 300.0
    assert conf.get(opts.JOB_STORE_EXPIRATION_TIME) == 3600.0
    assert conf.get(opts.DISPATCHER_RPC_ADDRESS) == "tcp://127.0.0.1:6123"
    assert conf.get(opts.RESOURCE_MANAGER_RPC_ADDRESS) == "tcp://127.0.0.1:6124"
    # Not Flink's "none": a batch job restarts from its finished regions (see the option).
    assert conf.get(opts.RESTART_STRATEGY_TYPE) == "exponential-delay"
    assert conf.get(opts.FAILOVER_STRATEGY) == "region"
    assert conf.get(opts.HA_MODE) == "none"
    assert conf.get(opts.HA_ZOOKEEPER_ROOT) == "/sparkmill"
    assert conf.get(opts.CLUSTER_EVENLY_SPREAD_OUT_SLOTS) is True
    assert conf.get(opts.SPARK_MASTER) == "local[2]"
    assert conf.get(opts.LOG_LEVEL) == "INFO"
    assert conf.get(opts.EXCHANGE_DIR).endswith("sparkmill-exchange")
    assert conf.to_strings() == {}
    assert not conf.is_set(opts.HEARTBEAT_INTERVAL)
    assert conf.raw("heartbeat.interval") is None


def test_every_default_is_valid_and_round_trips() -> None:
    for option in REGISTRY.options.values():
        assert option.parse(option.format()) == option.default, option.key


def test_every_declared_constant_is_registered_once() -> None:
    constants = {v.key for v in vars(opts).values() if isinstance(v, ConfigOption)}
    assert constants == set(REGISTRY.options)
    assert len(REGISTRY.options) == sum(len(g.options) for g in REGISTRY.groups)


def test_job_overridable_keys() -> None:
    keys = REGISTRY.job_overridable_keys()
    assert "slot.request.timeout" in keys
    assert "jobmanager.execution.failover-strategy" in keys
    assert "jobmanager.deployment.offload-min-partitions" in keys
    others = {
        "slot.request.timeout",
        "jobmanager.execution.failover-strategy",
        "jobmanager.deployment.offload-min-partitions",
        "pipeline.args",
    }
    assert all(
        k.startswith(
            (
                "restart-strategy.",
                "execution.batch.adaptive.auto-parallelism.",
                "execution.batch.speculative.",
                "slow-task-detector.",
                "table.optimizer.skewed-join-optimization.",
            )
        )
        for k in keys
        if k not in others
    )
    assert "execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task" in keys
    restart = {k for k in REGISTRY.options if k.startswith("restart-strategy.")}
    assert restart <= set(keys)
    assert "heartbeat.interval" not in keys


# --------------------------------------------------------------------------------------------
# parsers


def _option(kind: Any, default: Any, **extra: Any) -> ConfigOption[Any]:
    return ConfigOption("test.key", kind, default, "a test option", **extra)


@pytest.mark.parametrize(
    ("kind", "raw", "expected"),
    [
        (INT, 4, 4),
        (INT, "4", 4),
        (INT, " -1 ", -1),
        (FLOAT, 1.5, 1.5),
        (FLOAT, 2, 2.0),
        (FLOAT, "0.25", 0.25),
        (BOOL, True, True),
        (BOOL, "yes", True),
        (BOOL, "No", False),
        (BOOL, 1, True),
        (BOOL, "0", False),
        (BOOL, "TRUE", True),
        (STRING, "local[2]", "local[2]"),
        (STRING, 12, "12"),
        (STRING, False, "false"),
        (DURATION, "10 s", 10.0),
        (DURATION, "500 ms", 0.5),
        (DURATION, "5 min", 300.0),
        (DURATION, "5m", 300.0),
        (DURATION, "1h", 3600.0),
        (DURATION, "2d", 172800.0),
        (DURATION, "3 seconds", 3.0),
        (DURATION, "1.5 s", 1.5),
        (DURATION, 500, 0.5),  # a bare number is milliseconds, as in Flink
        (DURATION, "250", 0.25),
        (DURATION, "100 us", 0.0001),
        (DURATION_SECONDS, 3600, 3600.0),  # this variant reads a bare number as seconds
        (DURATION_SECONDS, "2 h", 7200.0),
        (MEMORY, "512m", 512 * MIB),
        (MEMORY, "1g", 1024 * MIB),
        (MEMORY, "1024 mb", 1024 * MIB),
        (MEMORY, "2 GB", 2048 * MIB),
        (MEMORY, "64 kb", 64 * 1024),
        (MEMORY, 4096, 4096),  # a bare number is bytes, as in Flink
        (MEMORY, "100 bytes", 100),
        (ADDRESS, "localhost:6123", "tcp://localhost:6123"),
        (ADDRESS, "tcp://10.0.0.1:0", "tcp://10.0.0.1:0"),
        (ADDRESS, "tcp://*:5000", "tcp://*:5000"),
        (ADDRESS, "[::1]:80", "tcp://[::1]:80"),
    ],
)
def test_parsers_accept(kind: Any, raw: object, expected: object) -> None:
    assert _option(kind, expected).parse(raw) == expected


@pytest.mark.parametrize(
    ("kind", "raw", "message"),
    [
        (INT, "four", "'four' is not an integer"),
        (INT, "4.0", "'4.0' is not an integer"),
        (INT, True, "True is not an integer"),
        (FLOAT, "fast", "'fast' is not a number"),
        (FLOAT, "nan", "'nan' is not a number"),
        (BOOL, "maybe", "'maybe' is not a boolean (expected true/false, yes/no or 1/0)"),
        (BOOL, 2, "2 is not a boolean"),
        (STRING, [1, 2], "[1, 2] is not a single value"),
        (
            DURATION,
            "5 parsecs",
            "'5 parsecs' is not a duration (examples: '500 ms', '10 s', '2 min')",
        ),
        (DURATION, "s", "'s' is not a duration"),
        (DURATION, True, "True is not a duration"),
        (DURATION, "-5 s", "durations cannot be negative"),
        (MEMORY, "12 parsecs", "'12 parsecs' is not a memory size (examples: '512 mb'"),
        (MEMORY, "-1m", "is not a memory size"),
        (ADDRESS, "localhost", "'localhost' is not an address (expected 'host:port' or"),
        (ADDRESS, "ipc://x:1", "is not an address"),
        (ADDRESS, "host:70000", "port 0-65535"),
    ],
)
def test_parsers_reject_with_clear_messages(kind: Any, raw: object, message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        _option(kind, None).parse(raw)
    assert str(info.value).startswith("configuration key 'test.key': ")
    assert message in str(info.value)


def test_a_key_without_a_value_is_an_error() -> None:
    error = _error({"rpc.ask-timeout": None})
    assert error.key == "rpc.ask-timeout"
    assert "has no value (remove the key to use the default '10 s')" in str(error)


def test_the_example_message_from_the_brief() -> None:
    error = _error({"heartbeat.timeout": "5 parsecs"})
    assert error.key == "heartbeat.timeout"
    assert str(error) == (
        "configuration key 'heartbeat.timeout': '5 parsecs' is not a duration "
        "(examples: '500 ms', '10 s', '2 min')"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(10.0, "10 s"), (0.1, "100 ms"), (300.0, "5 min"), (3600.0, "1 h"), (0.0, "0 s")],
)
def test_durations_format_canonically(seconds: float, text: str) -> None:
    assert DURATION.format(seconds) == text
    assert DURATION.parse(text) == pytest.approx(seconds)


def test_memory_formats_canonically() -> None:
    assert MEMORY.format(64 * MIB) == "64 mb"
    assert MEMORY.format(1024 * MIB) == "1 gb"
    assert MEMORY.format(1536) == "1536 bytes"


def test_ranges_are_checked_with_the_value_and_the_bound() -> None:
    error = _error({"taskmanager.numberOfTaskSlots": 0})
    assert error.key == "taskmanager.numberOfTaskSlots"
    assert "0 is out of range: must be at least 1" in str(error)
    assert "must be between 0 and 65535" in str(_error({"metrics.port": 70000}))
    assert "must be at least 1 ms" in str(_error({"heartbeat.interval": "0 ms"}))
    error = _error({"restart-strategy.exponential-delay.jitter-factor": 1.5})
    assert "must be between 0.0 and 1.0" in str(error)


def test_choices_are_case_insensitive_and_canonical() -> None:
    conf = Configuration.from_mapping(
        {
            "high-availability.mode": "NONE",
            "log.level": "warn",
            "restart-strategy.type": "FixedDelay",
            "jobmanager.execution.failover-strategy": "FULL",
        }
    )
    assert conf.get(opts.HA_MODE) == "none"
    assert conf.get(opts.LOG_LEVEL) == "WARNING"
    assert conf.get(opts.RESTART_STRATEGY_TYPE) == "fixed-delay"
    assert conf.get(opts.FAILOVER_STRATEGY) == "full"
    for alias in ("off", "disable", "none"):
        conf = Configuration.from_mapping({"restart-strategy.type": alias})
        assert conf.get(opts.RESTART_STRATEGY_TYPE) == "none"
    error = _error({"high-availability.mode": "kubernetes"})
    assert "'kubernetes' is not one of: none, zookeeper" in str(error)


# --------------------------------------------------------------------------------------------
# keys


def test_unknown_key_suggests_the_closest_known_key() -> None:
    error = _error({"taskmanager.numberOfTaskslots": 4})
    assert error.key == "taskmanager.numberOfTaskslots"
    assert "unknown key" in str(error)
    assert "did you mean 'taskmanager.numberOfTaskSlots'?" in str(error)
    error = _error({"heartbeat.intervall": "1 s"})
    assert "did you mean 'heartbeat.interval'?" in str(error)
    error = _error({"spark.cnof.spark.sql.shuffle.partitions": 8})
    assert "did you mean 'spark.conf.spark.sql.shuffle.partitions'?" in str(error)
    error = _error({"spark.sql.shuffle.partitions": 8})  # the spark.conf. prefix forgotten
    assert "did you mean 'spark.conf.spark.sql.shuffle.partitions'?" in str(error)
    error = _error({"high-availability.type": "zookeeper"})  # Flink's newer key name
    assert "did you mean 'high-availability.mode'?" in str(error)


def test_unknown_key_without_a_close_match() -> None:
    error = _error({"completely.different": 1})
    assert "unknown key" in str(error)
    assert "did you mean" not in str(error)


def test_free_form_spark_conf_and_metrics_labels_pass_through() -> None:
    conf = Configuration.from_mapping(
        {
            "spark.conf.spark.sql.shuffle.partitions": 8,
            "spark.conf.spark.sql.adaptive.enabled": True,
            "metrics.labels.region": "eu",
        }
    )
    assert conf.prefixed(opts.SPARK_CONF) == {
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.shuffle.partitions": "8",
    }
    assert conf.prefixed("metrics.labels.") == {"region": "eu"}
    assert conf.raw("spark.conf.spark.sql.shuffle.partitions") == "8"
    assert "empty name" in str(_error({"spark.conf.": "x"}))
    assert "not a single value" in str(_error({"metrics.labels.x": [1]}))


def test_nested_mappings_flatten_with_dots() -> None:
    conf = Configuration.from_mapping(
        {
            "taskmanager": {"numberOfTaskSlots": 4, "memory": {"process.size": "2g"}},
            "restart-strategy": {"type": "fixed-delay", "fixed-delay": {"attempts": 3}},
            "spark": {"conf": {"spark.sql.shuffle.partitions": 8}},
        }
    )
    assert conf.get(opts.TASK_MANAGER_NUM_TASK_SLOTS) == 4
    assert conf.get(opts.TASK_MANAGER_MEMORY_PROCESS_SIZE) == 2048 * MIB
    assert conf.get(opts.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS) == 3
    assert conf.prefixed(opts.SPARK_CONF) == {"spark.sql.shuffle.partitions": "8"}
    error = _error({"heartbeat.interval": "1 s", "heartbeat": {"interval": "2 s"}})
    assert error.key == "heartbeat.interval"
    assert "given twice" in str(error)


# --------------------------------------------------------------------------------------------
# files


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sparkmill.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_load_reads_flat_and_nested_yaml(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "taskmanager.numberOfTaskSlots: 4\n"
        "heartbeat:\n  interval: 2 s\n  timeout: 20 s\n"
        "high-availability.mode: ZOOKEEPER\n"
        "high-availability.zookeeper.quorum: zk1:2181,zk2\n"
        "high-availability.storageDir: /shared/ha\n"
        "spark.conf.spark.sql.shuffle.partitions: 8\n",
    )
    conf = Configuration.load(path)
    assert conf.source == str(path)
    assert conf.get(opts.TASK_MANAGER_NUM_TASK_SLOTS) == 4
    assert conf.get(opts.HEARTBEAT_INTERVAL) == 2.0
    assert conf.get(opts.HEARTBEAT_TIMEOUT) == 20.0
    assert conf.get(opts.HA_MODE) == "zookeeper"
    assert conf.raw("high-availability.mode") == "ZOOKEEPER"
    assert conf.origin("heartbeat.timeout") == f"{path}:4"


def test_empty_file_means_all_defaults(tmp_path: Path) -> None:
    assert Configuration.load(_write(tmp_path, "# nothing here\n")) == Configuration()


def test_value_errors_in_a_file_name_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "metrics.port: 1\nheartbeat:\n  timeout: 5 parsecs\n")
    with pytest.raises(ConfigurationError) as info:
        Configuration.load(path)
    assert info.value.key == "heartbeat.timeout"
    assert "'5 parsecs' is not a duration" in str(info.value)
    assert f"{path}:3" in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration.load(tmp_path / "absent.yaml")
    assert info.value.key == FILE_KEY
    assert "absent.yaml: no such file" in str(info.value)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration.load(tmp_path)  # a directory
    assert info.value.key == FILE_KEY
    assert "cannot read the file" in str(info.value)


def test_invalid_yaml_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "metrics.port: 1\nheartbeat.interval: [1 s\n")
    with pytest.raises(ConfigurationError) as info:
        Configuration.load(path)
    assert info.value.key == FILE_KEY
    assert f"{path}:3:" in str(info.value)
    assert "invalid YAML" in str(info.value)


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "metrics.port: 1\nmetrics.port: 2\n")
    with pytest.raises(ConfigurationError) as info:
        Configuration.load(path)
    assert f"{path}:2:" in str(info.value)
    assert "'metrics.port' appears twice" in str(info.value)


def test_non_string_yaml_key_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration.load(_write(tmp_path, "1: x\n"))
    assert "is not a string" in str(info.value)


@pytest.mark.parametrize(("text", "what"), [("- a\n- b\n", "a list"), ("42\n", "single value")])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, what: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration.load(_write(tmp_path, text))
    assert info.value.key == FILE_KEY
    assert "the top level must be a mapping" in str(info.value)
    assert what in str(info.value)


# --------------------------------------------------------------------------------------------
# overrides


def test_job_may_override_job_scoped_keys() -> None:
    cluster = Configuration.from_mapping({"taskmanager.numberOfTaskSlots": 4})
    job = cluster.with_overrides(
        {
            "restart-strategy": {"type": "fixed-delay"},
            "restart-strategy.exponential-delay.initial-backoff": "2 s",
            "slot.request.timeout": "1 min",
            "jobmanager.execution.failover-strategy": "full",
        },
        job_scope=True,
    )
    assert job.get(opts.RESTART_STRATEGY_TYPE) == "fixed-delay"
    assert job.get(opts.RESTART_STRATEGY_EXP_INITIAL_BACKOFF) == 2.0
    assert job.get(opts.SLOT_REQUEST_TIMEOUT) == 60.0
    assert job.get(opts.TASK_MANAGER_NUM_TASK_SLOTS) == 4  # inherited
    # the original (the default) is unchanged
    assert cluster.get(opts.RESTART_STRATEGY_TYPE) == "exponential-delay"


def test_job_may_not_override_cluster_keys() -> None:
    cluster = Configuration()
    with pytest.raises(ConfigurationError) as info:
        cluster.with_overrides({"heartbeat.interval": "1 s"}, job_scope=True, source="job abc")
    message = str(info.value)
    assert info.value.key == "heartbeat.interval"
    assert "only job-scoped keys may be overridden" in message
    assert "restart-strategy.type" in message
    assert "slot.request.timeout" in message
    assert "(job abc)" in message
    with pytest.raises(ConfigurationError):
        cluster.with_overrides({"spark.conf.spark.x": "1"}, job_scope=True)
    # outside job scope (e.g. a test harness or CLI flags) any key may be overridden
    assert cluster.with_overrides({"heartbeat.interval": "1 s"}).get(opts.HEARTBEAT_INTERVAL) == 1


def test_overrides_are_validated() -> None:
    with pytest.raises(ConfigurationError) as info:
        Configuration().with_overrides({"restart-strategy.type": "sometimes"}, job_scope=True)
    assert "'sometimes' is not one of" in str(info.value)
    with pytest.raises(ConfigurationError) as info:
        Configuration().with_overrides({"restart-strategy.typ": "none"}, job_scope=True)
    assert "did you mean 'restart-strategy.type'?" in str(info.value)


# --------------------------------------------------------------------------------------------
# cross-key checks


def test_heartbeat_timeout_must_exceed_interval() -> None:
    error = _error({"heartbeat.timeout": "5 s"})
    assert error.key == "heartbeat.timeout"
    assert "5 s must be greater than heartbeat.interval (10 s)" in str(error)
    _error({"heartbeat.interval": "50 s"})  # equal to the default timeout
    Configuration.from_mapping({"heartbeat.interval": "1 s", "heartbeat.timeout": "2 s"})


def test_zookeeper_mode_requires_quorum_and_storage_dir() -> None:
    error = _error({"high-availability.mode": "zookeeper"})
    assert error.key == "high-availability.zookeeper.quorum"
    assert "must be set when high-availability.mode is zookeeper" in str(error)
    error = _error(
        {"high-availability.mode": "zookeeper", "high-availability.zookeeper.quorum": "zk:2181"}
    )
    assert error.key == "high-availability.storageDir"
    conf = Configuration.from_mapping(
        {
            "high-availability.mode": "zookeeper",
            "high-availability.zookeeper.quorum": "zk1:2181,zk2:2181",
            "high-availability.storageDir": "/shared/ha",
        }
    )
    assert conf.get(opts.HA_ZOOKEEPER_QUORUM) == "zk1:2181,zk2:2181"


def test_zookeeper_quorum_and_root_format() -> None:
    error = _error({"high-availability.zookeeper.quorum": "zk1:2181,zk2:port"})
    assert "bad entry 'zk2:port'" in str(error)
    error = _error({"high-availability.zookeeper.path.root": "sparkmill"})
    assert error.key == "high-availability.zookeeper.path.root"
    assert "start with '/'" in str(error)


def test_exponential_delay_max_backoff_must_cover_initial_backoff() -> None:
    error = _error({"restart-strategy.exponential-delay.initial-backoff": "2 min"})
    assert error.key == "restart-strategy.exponential-delay.max-backoff"
    assert "must be at least restart-strategy.exponential-delay.initial-backoff" in str(error)
    with pytest.raises(ConfigurationError):
        Configuration().with_overrides(
            {"restart-strategy.exponential-delay.max-backoff": "10 ms"}, job_scope=True
        )


def test_registration_and_rpc_failure_threshold_checks() -> None:
    error = _error({"cluster.registration.max-timeout": "50 ms"})
    assert error.key == "cluster.registration.max-timeout"
    assert "-1 to turn it off" in str(_error({"heartbeat.rpc-failure-threshold": 0}))
    conf = Configuration.from_mapping({"heartbeat.rpc-failure-threshold": -1})
    assert conf.get(opts.HEARTBEAT_RPC_FAILURE_THRESHOLD) == -1


# --------------------------------------------------------------------------------------------
# canonical strings


def test_to_strings_round_trips() -> None:
    conf = Configuration.from_mapping(
        {
            "taskmanager.numberOfTaskSlots": "4",
            "heartbeat.interval": 2000,
            "rpc.max-message-size": "128m",
            "taskmanager.cpu.cores": 2.5,
            "dispatcher.rpc-address": "dispatcher:7000",
            "high-availability.mode": "NONE",
            "spark.ui.enabled": "yes",
            "restart-strategy.type": "off",
            "spark.conf.spark.sql.shuffle.partitions": 8,
        }
    )
    strings = conf.to_strings()
    assert strings == {
        "dispatcher.rpc-address": "tcp://dispatcher:7000",
        "heartbeat.interval": "2 s",
        "high-availability.mode": "none",
        "restart-strategy.type": "none",
        "rpc.max-message-size": "128 mb",
        "spark.conf.spark.sql.shuffle.partitions": "8",
        "spark.ui.enabled": "true",
        "taskmanager.cpu.cores": "2.5",
        "taskmanager.numberOfTaskSlots": "4",
    }
    again = Configuration.from_mapping(strings)
    assert again == conf
    assert hash(again) == hash(conf)
    assert again.to_strings() == strings


def test_to_strings_with_defaults_round_trips() -> None:
    everything = Configuration().to_strings(include_defaults=True)
    assert set(everything) == set(REGISTRY.options)
    assert everything["heartbeat.timeout"] == "50 s"
    assert everything["taskmanager.memory.process.size"] == "1728 mb"
    assert everything["jobstore.expiration-time"] == "1 h"
    conf = Configuration.from_mapping(everything)
    for option in REGISTRY.options.values():
        assert conf.get(option) == option.default


# --------------------------------------------------------------------------------------------
# docs


def test_configuration_doc_is_fresh() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_config_docs.py"), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_doc_check_fails_when_stale(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text("# old\n", encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "gen_config_docs.py"),
            "--check",
            "--output",
            str(stale),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "stale" in result.stderr


def test_a_resource_id_that_is_not_a_safe_name_is_refused_at_start() -> None:
    from sparkmill.common.runtime.settings import settings_from_config

    for bad in ("my worker", "../te", ".hidden", "x" * 129):
        config = Configuration.from_mapping({"taskmanager.resource-id": bad})
        with pytest.raises(ConfigurationError, match="is not a valid resource id"):
            settings_from_config(config)
    good = Configuration.from_mapping({"taskmanager.resource-id": "worker7.lab-te-0"})
    assert settings_from_config(good).task_executor_resource_id == "worker7.lab-te-0"
