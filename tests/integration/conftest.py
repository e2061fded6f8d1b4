"""Fixtures that run real sparkmill clusters: real processes on loopback, real RPC.

A test that fails gets every service log of its cluster appended to its report.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkmill.client import ClusterClient
from sparkmill.local_cluster import LocalCluster
from tests.conftest import FAILED_KEY

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


class RunningCluster:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.client = ClusterClient.from_config_file(cluster.config_path)

    @property
    def config_path(self) -> Path:
        return self.cluster.config_path

    def close(self) -> None:
        self.client.close()
        self.cluster.stop()


SPARK_SESSIONS = {"spark.session.start": "eager", "spark.master": "local[1]"}
"""Task executors with a small Spark session each, started with the process."""


WORKER_AS_TEST_USER = {"taskmanager.pipeline-worker.user": "same-user"}
"""Pipeline workers of the tests' own user: a test's files live in pytest's private temporary
directories, which the pipeline user could not read (test_pipeline_user.py runs the separate
user, with directories made for it)."""


def start_local_cluster(tmp: Path, wait_timeout_s: float = 90, **kwargs: Any) -> LocalCluster:
    """A started local cluster; if it does not come up, its logs are printed and it is stopped."""
    kwargs["extra_config"] = {**WORKER_AS_TEST_USER, **kwargs.get("extra_config", {})}
    cluster = LocalCluster(tmp, **kwargs)
    try:
        cluster.start(wait_timeout_s=wait_timeout_s)
    except Exception:
        print(cluster.logs())
        cluster.stop()
        raise
    return cluster


def _start(tmp: Path, **kwargs: Any) -> RunningCluster:
    return RunningCluster(start_local_cluster(tmp, **kwargs))


@pytest.fixture(scope="module")
def client(cluster: LocalCluster) -> Iterator[ClusterClient]:
    """A client of the module's ``cluster`` (a LocalCluster fixture of the module)."""
    with ClusterClient.from_config_file(cluster.config_path) as c:
        yield c


def reference_session() -> Any:
    """The reference: one plain PySpark session in the test process, started on first use and
    kept for the whole run (``held_pipeline.output_rows`` reads results with it too). Each
    start is a JVM's start-up and its first job's class loading, 10-15 s of CPU on this kind of
    machine; idle in between, it costs nothing but memory."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("sparkmill-reference")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


@pytest.fixture(scope="session")
def _reference_spark() -> Iterator[Any]:
    session = reference_session()
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark(_reference_spark: Any) -> Any:
    """The reference session (``reference_session``). Requested by a module's tests after the
    module's cluster fixture, so on first use it starts after that cluster's Spark sessions."""
    return _reference_spark


@pytest.fixture(scope="module")
def shared_cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[RunningCluster]:
    """3 task executors x 4 slots, shared by the tests of a module."""
    running = _start(tmp_path_factory.mktemp("cluster"), task_executors=3, slots=4)
    yield running
    running.close()


@pytest.fixture(autouse=True)
def _dump_logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    # Resolve the clusters now: at teardown their fixtures may be gone (the log files stay).
    holders = [
        request.getfixturevalue(name)
        for name in ("shared_cluster", "cluster_factory", "cluster")
        if name in request.fixturenames
    ]
    yield
    if not request.node.stash.get(FAILED_KEY, False):
        return
    for holder in holders:
        if isinstance(holder, ClusterFactory):
            clusters = [running.cluster for running in holder.started]
        elif isinstance(holder, LocalCluster):
            clusters = [holder]
        else:  # RunningCluster, or a module's wrapper with a ``cluster`` attribute
            clusters = [c for c in [getattr(holder, "cluster", None)] if c is not None]
        for cluster in clusters:
            print(cluster.logs())


class ClusterFactory:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.started: list[RunningCluster] = []

    def __call__(self, **kwargs: Any) -> RunningCluster:
        running = _start(self.tmp / f"cluster-{len(self.started)}", **kwargs)
        self.started.append(running)
        return running


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Generator[ClusterFactory]:
    factory = ClusterFactory(tmp_path)
    yield factory
    for running in factory.started:
        running.close()


def eventually(check: Callable[[], Any], timeout: float = 30.0, interval: float = 0.2) -> Any:
    """Poll ``check`` until it returns a truthy value (returned) or raise with its last result."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s; last result: {last!r}")


def holding(markers: Path, release: Path, held: tuple[int, ...]) -> Any:
    """The n-th run (0-based, over all attempts) waits for ``release`` if n is in ``held``."""

    def hold(df: Any) -> Any:
        import itertools

        markers.mkdir(parents=True, exist_ok=True)
        # This run's number is the first run-N marker it creates exclusively: two subtasks
        # entering at the same moment never both count the same markers (and both run on).
        for run in itertools.count():
            try:
                (markers / f"run-{run}").open("x").close()
                break
            except FileExistsError:
                continue
        if run in held:
            (markers / f"held-{uuid.uuid4().hex}").touch()
            deadline = time.monotonic() + 300
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        return df

    return hold
