"""``sparkmill run`` starts one task executor holding every slot: one Spark JVM per machine, its
session started with the task executor and no warm-up job in front of (or beside) the job's
tasks."""

from __future__ import annotations

from sparkmill.cli.jobs import run_cluster_config
from sparkmill.cli.main import build_parser
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings, settings_from_config
from sparkmill.services.taskexecutor.spark.session import SERVICE_KEY, SparkSessionManager
from sparkmill.services.taskexecutor.task_services import install_task_services


def test_run_starts_one_task_executor_with_four_slots_by_default() -> None:
    args = build_parser().parse_args(["run", "pipeline.py"])
    assert (args.task_executors, args.slots) == (1, 4)


def test_run_still_takes_an_explicit_layout() -> None:
    args = build_parser().parse_args(
        ["run", "pipeline.py", "--task-executors", "2", "--slots", "2"]
    )
    assert (args.task_executors, args.slots) == (2, 2)


def test_run_starts_a_pyspark_pipelines_session_eagerly_without_a_warm_up_job() -> None:
    import sparkmill as sm

    config = run_cluster_config(sm.Pipeline("p", parallelism=1))
    assert config == {"spark.session.start": "eager", "spark.session.warm-up": False}


def test_run_starts_no_spark_session_for_a_pipeline_of_test_operators() -> None:
    assert run_cluster_config(object()) == {}


def _installed_manager(settings: ClusterSettings) -> SparkSessionManager:
    services: dict[str, object] = {}
    install_task_services(services, settings, ServiceRuntime("task-executor"))
    manager = services[SERVICE_KEY]
    assert isinstance(manager, SparkSessionManager)
    return manager


def test_the_warm_up_setting_reaches_the_task_executors_session_manager() -> None:
    # spark.session.start lazy: nothing starts a JVM here
    default = ClusterSettings(spark_session_start="lazy")
    assert _installed_manager(default).warm_up is True
    off = ClusterSettings(spark_session_start="lazy", spark_session_warm_up=False)
    assert _installed_manager(off).warm_up is False


def test_the_warm_up_option_reads_from_the_configuration() -> None:
    config = Configuration.from_mapping({"spark.session.warm-up": False})
    assert settings_from_config(config).spark_session_warm_up is False
    assert settings_from_config(Configuration.from_mapping({})).spark_session_warm_up is True
