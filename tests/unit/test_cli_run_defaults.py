"""``sparkmill run`` starts one task executor holding every slot: one Spark JVM per machine, its
session started with the task executor and no warm-up job in front of (or beside) the job's
tasks."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkmill.cli.jobs import run_cluster_config, run_owned_key, run_user_config
from sparkmill.cli.main import build_parser
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError, SparkmillError
from sparkmill.common.runtime.actor import ServiceRuntime
from sparkmill.common.runtime.settings import ClusterSettings, settings_from_config
from sparkmill.services.taskexecutor.pipeline.link import SERVICE_KEY, PipelineWorkerLink
from sparkmill.services.taskexecutor.task_services import install_task_services


def test_run_is_elastic_with_one_task_executor_of_four_slots_by_default() -> None:
    from sparkmill.cli.jobs import run_layout
    from sparkmill.testing import noop_pipeline

    args = build_parser().parse_args(["run", "pipeline.py"])
    assert (args.max_task_executors, args.slots) == (1, 4)
    layout, _ = run_layout(args, noop_pipeline("p", parallelism=2).build_job_graph())
    assert layout["elastic"] is True
    assert layout["extra_config"] == {"slotmanager.number-of-slots.min": 2}


def test_run_still_takes_an_explicit_layout() -> None:
    from sparkmill.cli.jobs import run_layout
    from sparkmill.testing import noop_pipeline

    graph = noop_pipeline("p", parallelism=2).build_job_graph()
    args = build_parser().parse_args(
        ["run", "pipeline.py", "--task-executors", "2", "--slots", "2"]
    )
    assert (args.task_executors, args.slots) == (2, 2)
    assert run_layout(args, graph)[0] == {"task_executors": 2}
    fixed = build_parser().parse_args(["run", "pipeline.py", "--no-elastic"])
    assert run_layout(fixed, graph)[0] == {"task_executors": 1}
    both = build_parser().parse_args(["run", "p.py", "--elastic", "--task-executors", "2"])
    with pytest.raises(SparkmillError, match="does not go with --elastic"):
        run_layout(both, graph)


def test_run_starts_a_pyspark_pipelines_session_eagerly_without_a_warm_up_job() -> None:
    import sparkmill as sm

    config = run_cluster_config(sm.Pipeline("p", parallelism=1))
    assert config == {
        "spark.session.start": "eager",
        "spark.session.warm-up": False,
        # The one-pipeline cluster runs the user's own code as the user (their files).
        "taskmanager.pipeline-worker.user": "same-user",
    }


def test_run_starts_no_spark_session_for_a_pipeline_of_test_operators() -> None:
    assert run_cluster_config(object()) == {}


def _installed_link(settings: ClusterSettings) -> PipelineWorkerLink:
    services: dict[str, object] = {}
    install_task_services(services, settings, ServiceRuntime("task-executor"))
    link = services[SERVICE_KEY]
    assert isinstance(link, PipelineWorkerLink)
    return link


def test_the_warm_up_setting_reaches_the_task_executors_pipeline_worker() -> None:
    # spark.session.start lazy: nothing starts a worker or a JVM here
    default = ClusterSettings(spark_session_start="lazy")
    assert _installed_link(default).setup.warm_up is True
    assert _installed_link(default).setup.start_eagerly is False
    off = ClusterSettings(spark_session_start="lazy", spark_session_warm_up=False)
    assert _installed_link(off).setup.warm_up is False


def test_the_warm_up_option_reads_from_the_configuration() -> None:
    config = Configuration.from_mapping({"spark.session.warm-up": False})
    assert settings_from_config(config).spark_session_warm_up is False
    assert settings_from_config(Configuration.from_mapping({})).spark_session_warm_up is True


# -- run --config / -D: the same options as every other command, laid over its local cluster ----


def _run_args(*argv: str) -> object:
    return build_parser().parse_args(list(argv))


def test_run_takes_config_and_d_options_after_and_before_the_subcommand(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("restart-strategy.type: none\nheartbeat.interval: 2 s\n")
    args = _run_args("run", "p.py", "--config", str(config), "-D", "heartbeat.interval=3 s")
    values = run_user_config(args)  # type: ignore[arg-type]
    assert values["restart-strategy.type"] == "none"
    assert (
        values["heartbeat.interval"]
        == Configuration.from_mapping({"heartbeat.interval": "3 s"}).to_strings()[
            "heartbeat.interval"
        ]
    )  # -D wins over the file
    before = _run_args("--config", str(config), "run", "p.py")
    assert run_user_config(before)["restart-strategy.type"] == "none"  # type: ignore[arg-type]


def test_run_without_config_sets_nothing_and_ignores_the_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other-cluster.yaml"
    other.write_text("dispatcher.rpc-address: tcp://10.0.0.1:6123\n")
    monkeypatch.setenv("SPARKMILL_CONFIG", str(other))
    assert run_user_config(_run_args("run", "p.py")) == {}  # type: ignore[arg-type]


def test_run_refuses_a_bad_key_before_starting_anything() -> None:
    with pytest.raises(ConfigurationError, match=r"restart-strategy\.typ"):
        run_user_config(_run_args("run", "p.py", "-D", "restart-strategy.typ=none"))  # type: ignore[arg-type]


def test_run_refuses_a_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(SparkmillError, match="does not exist"):
        run_user_config(_run_args("run", "p.py", "--config", str(tmp_path / "nope.yaml")))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "value", "advice"),
    [
        ("dispatcher.rpc-address", "tcp://127.0.0.1:6123", "free loopback port"),
        ("taskmanager.numberOfTaskSlots", "8", "--slots"),
        ("high-availability.mode", "zookeeper", "--ha zookeeper"),
        ("security.curve.enabled", "false", "CurveZMQ"),
    ],
)
def test_run_refuses_the_keys_it_lays_its_cluster_out_with(
    key: str, value: str, advice: str
) -> None:
    with pytest.raises(ConfigurationError, match=advice) as raised:
        run_user_config(_run_args("run", "p.py", "-D", f"{key}={value}"))  # type: ignore[arg-type]
    assert key in str(raised.value)
    assert run_owned_key("restart-strategy.type") == ""


def test_run_elastic_asks_for_the_jobs_slots_as_the_minimum_within_the_maximum() -> None:
    from sparkmill.cli.jobs import job_slot_need, run_layout
    from sparkmill.testing import noop_pipeline

    graph = noop_pipeline("p", parallelism=6, vertices=2).build_job_graph()
    assert job_slot_need(graph) == 6  # one slot sharing group: its largest vertex
    split = noop_pipeline("q", 3, vertices=2, slot_sharing_groups=("a", "b")).build_job_graph()
    assert job_slot_need(split) == 6  # two groups of 3

    args = build_parser().parse_args(["run", "p.py", "--elastic", "--max-task-executors", "2"])
    layout, described = run_layout(args, graph)
    assert layout == {
        "elastic": True,
        "max_task_executors": 2,
        "extra_config": {"slotmanager.number-of-slots.min": 6},
    }
    assert described.startswith("task executors on demand: 2 x 4 slots for the job's 6")
    one = build_parser().parse_args(["run", "p.py", "--elastic"])
    layout, described = run_layout(one, graph)
    assert layout["extra_config"] == {"slotmanager.number-of-slots.min": 4}  # at most 1 x 4
    assert "it could use 6" in described and "--max-task-executors" in described
