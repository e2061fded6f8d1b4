"""One SparkSession per task-executor process, shared by all its slots.

Creating a session starts a JVM (~10 s), so it happens once, on a background thread: right when
the task executor starts (``spark.session.start: eager``) or when the first task asks for it
(``lazy``). Tasks wait for it (:meth:`SparkSessionManager.session`) instead of starting their
own, and never block the task executor's event loop.

A fresh JVM runs its first Spark job several times slower than later ones (class loading, JIT),
so the new session runs a tiny warm-up job (the log line "Spark session up and warm" says when
it is done): a job submitted after it runs as fast as the second. Tasks need not
wait for the warm-up: one that arrives meanwhile (``sparkmill run`` submits its job while the
cluster starts) uses the session at once, beside the warm-up, and profits from whatever it has
loaded already instead of queueing behind it. :attr:`is_up` (the ``spark_session_up`` gauge)
means usable, warm or not.

Each slot is a FAIR scheduler pool: a task runs its Spark jobs in the pool of its slot
(:meth:`SparkSessionManager.pool`), so concurrently running tasks share the session's cores
instead of queueing behind each other.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from sparkmill.common.core.errors import SparkSessionUnavailableError, TaskCancelledError
from sparkmill.common.runtime.service_base import http_url
from sparkmill.services.taskexecutor import attempt_logs
from sparkmill.services.taskexecutor.spark.python_worker_logs import PythonWorkerLogReceiver

log = logging.getLogger(__name__)

PYTHON_DAEMON_MODULE = "spark.python.daemon.module"
# Spark's daemon, sending what UDFs print to the attempt logs (see python_daemon).
_DAEMON_MODULE = "sparkmill.services.taskexecutor.spark.python_daemon"

SERVICE_KEY = "spark"
"""Key of the manager in ``TaskContext.services``."""

_QUIET_LOGGERS = ("py4j", "DataFrameQueryContextLogger", "SQLQueryContextLogger")

JDBC_DRIVER_JARS = ("/usr/share/java/postgresql.jar",)
"""JDBC drivers every session loads when they are installed (Debian's
``libpostgresql-jdbc-java``): ``read_jdbc``/``write_jdbc`` need nothing else on the task
executors. Other drivers: add them with ``spark.conf.spark.jars``."""


def jdbc_driver_conf(
    conf: dict[str, str], jars: tuple[str, ...] = JDBC_DRIVER_JARS
) -> dict[str, str]:
    """``conf`` with the installed JDBC driver jars added to ``spark.jars`` (for Spark's tasks)
    and ``spark.driver.extraClassPath`` (for the commit's own connections through
    ``java.sql.DriverManager``), next to whatever the configuration lists already."""
    present = [jar for jar in jars if os.path.isfile(jar)]
    if not present:
        return conf
    merged = dict(conf)
    for key, separator in (("spark.jars", ","), ("spark.driver.extraClassPath", os.pathsep)):
        listed = [p for p in merged.get(key, "").split(separator) if p]
        merged[key] = separator.join([*listed, *(j for j in present if j not in listed)])
    return merged


def default_spark_conf(master: str, app_name: str, ui_enabled: bool) -> dict[str, str]:
    return {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.ui.enabled": "true" if ui_enabled else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.scheduler.mode": "FAIR",
        # Python workers must be this interpreter (it has pyspark and the project on its path).
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # A task's own data is small compared to a whole job: few shuffle partitions, and AQE
        # merges them further.
        "spark.sql.shuffle.partitions": "8",
        # Reading a data set lists one directory per producer: list them on the driver.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "512",
    }


class SparkSessionManager:
    def __init__(
        self,
        master: str,
        *,
        app_name: str = "sparkmill",
        ui_enabled: bool = False,
        conf: dict[str, str] | None = None,
        warm_up: bool = True,
        slots: int = 0,
    ) -> None:
        self.master = master
        self.slots = slots
        self.warm_up = warm_up
        self.conf = jdbc_driver_conf(
            {**default_spark_conf(master, app_name, ui_enabled), **(conf or {})}
        )
        self._ready = threading.Event()  # the session exists (or failed): tasks may use it
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._session: Any = None
        self._error: BaseException | None = None
        self._stopping = False
        self._lanes: set[int] = set()
        self.started_at = 0.0
        self.startup_s = 0.0
        # The session's Spark UI (spark.ui.enabled), read once on the starting thread: the task
        # executor reports it with its heartbeats and must not call into the JVM from its loop.
        self.ui_url = ""
        self._python_logs: PythonWorkerLogReceiver | None = None

    # -- state ------------------------------------------------------------------------------------

    @property
    def is_up(self) -> bool:
        """True once the session is usable (and until it is stopped)."""
        return self._ready.is_set() and self._session is not None and not self._stopping

    @property
    def error(self) -> BaseException | None:
        return self._error

    # -- start ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start creating the session in the background (idempotent, never blocks)."""
        with self._lock:
            if self._thread is not None or self._stopping:
                return
            self.started_at = time.monotonic()
            self._thread = threading.Thread(
                target=self._create, name="spark-session-start", daemon=True
            )
            self._thread.start()

    def _create(self) -> None:
        session: Any = None
        try:
            if self.master.startswith("local"):
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            # PySpark starts its Python workers with $PYSPARK_PYTHON (else whatever "python3"
            # the PATH names, which may lack sparkmill and the pipeline's packages): this one.
            os.environ.setdefault(
                "PYSPARK_PYTHON", self.conf.get("spark.pyspark.python", sys.executable)
            )
            # py4j chatters; PySpark logs every query error a second time (the task reports it).
            logging.getLogger("py4j").setLevel(logging.WARNING)
            for name in _QUIET_LOGGERS[1:]:
                logging.getLogger(name).setLevel(logging.CRITICAL)
            from pyspark.sql import SparkSession

            builder = SparkSession.builder
            conf = dict(self.conf)
            self._receive_python_worker_logs(conf)
            pools_file = ""
            if self.slots > 0 and "spark.scheduler.allocation.file" not in conf:
                pools_file = fair_pools_file(self.slots)
                conf["spark.scheduler.allocation.file"] = f"file://{pools_file}"
            for key, value in conf.items():
                builder = builder.config(key, value)
            try:
                session = builder.getOrCreate()
            finally:
                # Spark reads the allocation file once, while the SparkContext is created
                # (its task scheduler builds the pools then): it is not needed afterwards.
                if pools_file:
                    with contextlib.suppress(OSError):
                        os.unlink(pools_file)
            session.sparkContext.setLogLevel("WARN")
            # None when the UI is off.
            self.ui_url = http_url(session.sparkContext.uiWebUrl)
            log.info(
                "Spark session created in %.1fs (master %s, Spark %s)",
                time.monotonic() - self.started_at,
                self.master,
                session.version,
            )
            if self._stopping:
                session.stop()
                return
            self._session = session
        except BaseException as exc:
            log.exception("the Spark session could not be started")
            self._error = exc
            return
        finally:
            self._ready.set()
        try:
            if self.warm_up:
                _warm_up(session)
        finally:
            self.startup_s = time.monotonic() - self.started_at
            log.info("Spark session up and warm in %.1fs", self.startup_s)

    def _receive_python_worker_logs(self, conf: dict[str, str]) -> None:
        """Have the Python workers send what UDFs print to the attempts' logs (a local master
        only: a remote Spark's workers run on other hosts, where the receiver is not)."""
        store = attempt_logs.installed()
        if store is None or not self.master.startswith("local"):
            return
        if conf.get("spark.pyspark.python", sys.executable) != sys.executable:
            return  # another interpreter runs the workers: it may not have sparkmill
        if conf.setdefault(PYTHON_DAEMON_MODULE, _DAEMON_MODULE) != _DAEMON_MODULE:
            return  # the operator runs a daemon of their own
        try:
            self._python_logs = PythonWorkerLogReceiver(store)
        except OSError as exc:
            conf.pop(PYTHON_DAEMON_MODULE)
            log.warning("UDF output will not reach the attempt logs: %s", exc)

    def flush_python_worker_logs(self) -> None:
        """Wait (briefly) until the Python workers' lines sent so far are in the attempt logs."""
        receiver = self._python_logs
        if receiver is not None and not receiver.flush():
            log.debug("the Python workers' last lines may be missing from an attempt's log")

    @property
    def python_worker_log_address(self) -> str:
        """Where Python workers send their lines ("" when they do not)."""
        return self._python_logs.address if self._python_logs is not None else ""

    def session(self, cancelled: threading.Event | None = None, timeout_s: float = 300.0) -> Any:
        """The SparkSession, waiting for it to come up (starts it if it is lazy)."""
        self.start()
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.1):
            if cancelled is not None and cancelled.is_set():
                raise TaskCancelledError("cancelled while waiting for the Spark session")
            if time.monotonic() > deadline:
                raise SparkSessionUnavailableError(
                    f"the Spark session did not come up within {timeout_s:g}s"
                )
        if self._error is not None:
            raise SparkSessionUnavailableError(
                f"the Spark session could not be started: {type(self._error).__name__}: "
                f"{self._error}"
            ) from self._error
        if self._session is None or self._stopping:
            raise SparkSessionUnavailableError("the Spark session is stopped")
        return self._session

    # -- slots ------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def pool(self, slot: int | None = None) -> Iterator[str]:
        """The FAIR pool of a running task: its slot's, or (when the slot is unknown) one of a
        set of lanes no larger than the number of tasks running at once."""
        if slot is not None:
            yield f"slot-{slot}"
            return
        with self._lock:
            lane = next(i for i in range(len(self._lanes) + 1) if i not in self._lanes)
            self._lanes.add(lane)
        try:
            yield f"slot-{lane}"
        finally:
            with self._lock:
                self._lanes.discard(lane)

    # -- stop -------------------------------------------------------------------------------------

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the session (waits for a start in progress). Blocking: run it off the loop."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        session, self._session = self._session, None
        self.ui_url = ""
        receiver, self._python_logs = self._python_logs, None
        if session is not None:
            try:
                session.stop()
                log.info("Spark session stopped")
            except Exception:
                log.exception("stopping the Spark session failed")
        if receiver is not None:
            receiver.stop()


def fair_pools_file(slots: int) -> str:
    """The path of a new fair-scheduler allocation file declaring the pools ``slot-0`` ..
    ``slot-N-1`` (equal weights, FAIR inside each): Spark warns about every pool it finds
    undeclared otherwise. The caller deletes it once the SparkContext has read it."""
    import tempfile

    pools = "".join(
        f'  <pool name="slot-{i}"><schedulingMode>FAIR</schedulingMode><weight>1</weight>'
        "<minShare>0</minShare></pool>\n"
        for i in range(slots)
    )
    xml = f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n'
    with tempfile.NamedTemporaryFile(
        "w", prefix="sparkmill-fairscheduler-", suffix=".xml", delete=False
    ) as out:
        out.write(xml)
    return out.name


def _warm_up(session: Any) -> None:
    """Run, on a few rows, the kinds of work tasks run, so that the first task does not pay for
    class loading, code generation and JIT warm-up (seconds in a fresh JVM): reading text,
    split/explode, a partial and a final aggregation, a hash-split partitioned Parquet write,
    reading it back with a given schema, a persisted result written twice, sort and limit."""
    import tempfile
    from pathlib import Path

    from pyspark.sql import functions as F

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sparkmill-warmup-") as scratch:
        try:
            df = session.range(64).withColumn("k", F.col("id") % 4)
            df.groupBy("k").agg(F.count("*").alias("n")).write.partitionBy("k").parquet(
                f"{scratch}/numbers"
            )
            session.read.parquet(f"{scratch}/numbers").collect()
            text = Path(scratch, "text.txt")
            text.write_text("warm up the Spark session of a task executor\n" * 64)
            words = (
                session.read.text(str(text))
                .select(F.explode(F.split(F.lower("value"), r"\s+")).alias("word"))
                .where(F.col("word") != "")
            )
            partial = words.groupBy("word").agg(F.count("*").alias("n"))
            split = F.pmod(F.hash(F.col("word")), F.lit(2))
            partial.withColumn("_sub", split).write.partitionBy("_sub").parquet(f"{scratch}/words")
            parts = [str(p) for p in sorted(Path(scratch, "words").glob("_sub=*"))]
            merged = (
                session.read.schema(partial.schema)
                .parquet(*parts)
                .groupBy("word")
                .agg(F.sum("n").cast("long").alias("n"))
                .persist()
            )
            try:
                merged.write.parquet(f"{scratch}/merged")
                merged.write.parquet(f"{scratch}/merged-again")
                merged.orderBy(F.desc("n"), "word").limit(3).collect()
            finally:
                merged.unpersist()
        except Exception:
            log.warning("the Spark warm-up job failed", exc_info=True)
    log.info("Spark warm-up took %.1fs", time.monotonic() - started)
