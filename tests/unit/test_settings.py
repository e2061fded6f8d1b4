"""The typed settings (common/runtime/settings.py): one source of truth with the options."""

from __future__ import annotations

import dataclasses

import pytest

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.runtime.retry import RetryPolicy
from sparkmill.common.runtime.settings import (
    ClusterSettings,
    JobSettings,
    RestartSettings,
    job_settings_from_config,
    settings_from_config,
)
from sparkmill.services.jobmaster.scheduler.restart_strategy import (
    ExponentialDelayRestartStrategy,
    FixedDelayRestartStrategy,
    NoRestartStrategy,
    restart_strategy_from_settings,
)


@pytest.mark.parametrize("cls", [ClusterSettings, JobSettings, RestartSettings])
def test_every_default_is_what_a_configuration_without_keys_gives(cls: type) -> None:
    empty = Configuration()
    from_config = (
        settings_from_config(empty)
        if cls is ClusterSettings
        else job_settings_from_config(empty)
        if cls is JobSettings
        else job_settings_from_config(empty).restart
    )
    built = cls()
    for f in dataclasses.fields(cls):
        assert getattr(built, f.name) == getattr(from_config, f.name), f.name
    assert built == from_config


def test_every_cluster_setting_comes_from_the_configuration() -> None:
    # A field the factory forgot would keep its default here: each one is set differently.
    config = Configuration.from_mapping(
        {
            "rpc.bind-host": " 0.0.0.0 ",
            "heartbeat.rpc-failure-threshold": "-1",
            "cluster.registration.initial-timeout": "200 ms",
            "taskmanager.memory.process.size": "2 gb",
            "jobmanager.job-graph.max-vertices": "7",
            "metrics.address": " host-a ",
            "metrics.labels.team": "data",
            "rest.port": "50100-50200",
            "rest.auth.token-file": " /etc/tokens ",
            "web.grafana-url": " http://g:3000/ ",
            "exchange.storage": "local",
            "spark.conf.spark.sql.shuffle.partitions": "4",
            "log.level": "DEBUG",
        }
    )
    settings = settings_from_config(config)
    assert settings.bind_host == "0.0.0.0"
    assert settings.heartbeat_rpc_failure_threshold == 0  # Flink's -1: the fast path is off
    assert settings.registration == dataclasses.replace(RetryPolicy(), initial_timeout_s=0.2)
    assert settings.task_executor_memory_mb == 2048
    assert settings.job_graph_limits.max_vertices == 7
    assert settings.metrics_address == "host-a"
    assert settings.metrics_labels == {"team": "data"}
    assert (settings.rest_port, settings.rest_auth_token_file) == ("50100-50200", "/etc/tokens")
    assert settings.web_grafana_url == "http://g:3000"
    assert settings.results_lost_with_executor
    assert settings.spark_conf == {"spark.sql.shuffle.partitions": "4"}
    assert settings.log_level == "DEBUG"
    # Mutable defaults are never shared between instances.
    assert ClusterSettings().spark_conf is not ClusterSettings().spark_conf


def test_an_invalid_resource_id_is_refused_at_start() -> None:
    with pytest.raises(ConfigurationError, match=r"taskmanager\.resource-id"):
        settings_from_config(Configuration.from_mapping({"taskmanager.resource-id": "a/b"}))


def test_a_job_overrides_its_settings_and_restart_strategy() -> None:
    cluster = Configuration.from_mapping({"restart-strategy.type": "fixed-delay"})
    assert isinstance(
        restart_strategy_from_settings(job_settings_from_config(cluster).restart),
        FixedDelayRestartStrategy,
    )
    job = cluster.with_overrides(
        {
            "restart-strategy.type": "exponential-delay",
            "restart-strategy.exponential-delay.max-backoff": "2 s",
            "slot.request.timeout": "5 s",
            "jobmanager.execution.failover-strategy": "full",
        },
        job_scope=True,
    )
    settings = job_settings_from_config(job)
    assert (settings.slot_request_timeout_s, settings.failover_strategy) == (5.0, "full")
    strategy = restart_strategy_from_settings(settings.restart)
    assert isinstance(strategy, ExponentialDelayRestartStrategy) and strategy.max_s == 2.0
    # The defaults restart (exponential-delay, see restart-strategy.type); "none" restarts nothing.
    default = restart_strategy_from_settings(RestartSettings())
    assert isinstance(default, ExponentialDelayRestartStrategy)
    assert isinstance(restart_strategy_from_settings(RestartSettings("none")), NoRestartStrategy)
