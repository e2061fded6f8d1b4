"""Data plane options: the Spark sessions tasks run in and the exchange directory, with the
``spark.conf.`` prefix.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sparkmill.common.config.kinds import (
    BOOL,
    STRING,
    USER_NAME,
)
from sparkmill.common.config.options._declare import group, option
from sparkmill.common.config.schema import FreeFormPrefix

# --------------------------------------------------------------------------------------------
group(
    "Data plane",
    "The Spark sessions tasks run in, and where they exchange data. Any Spark setting can be "
    "passed with the free-form spark.conf.* keys.",
)

SPARK_MASTER = option(
    "spark.master",
    STRING,
    "local[2]",
    "Spark master URL of the Spark session each task executor runs its tasks in.",
)
SPARK_SESSION_START = option(
    "spark.session.start",
    STRING,
    "eager",
    "'eager' starts the Spark session when the task executor starts; 'lazy' when its first "
    "task runs.",
    choices=("eager", "lazy"),
)
SPARK_SESSION_WARM_UP = option(
    "spark.session.warm-up",
    BOOL,
    True,
    "Run a small job of the kinds tasks run (text, aggregation, Parquet) right after the Spark "
    "session starts, so that the first job submitted once the task executor is ready does not "
    "pay for the JVM's class loading and code generation. Tasks that arrive meanwhile do not "
    "wait for it. 'sparkmill run' turns it off: its job arrives with the session, and its own "
    "tasks warm the JVM up.",
)
SPARK_UI_ENABLED = option(
    "spark.ui.enabled",
    BOOL,
    False,
    "Run Spark's web UI in each task executor's Spark session.",
)
EXCHANGE_DIR = option(
    "exchange.dir",
    STRING,
    str(Path(tempfile.gettempdir()) / "sparkmill-exchange"),
    "Directory where tasks hand intermediate results to downstream tasks; must be shared by "
    "all task executors that exchange data. The default is under the system temp directory.",
    default_text="<temp dir>/sparkmill-exchange",
)
EXCHANGE_STORAGE = option(
    "exchange.storage",
    STRING,
    "shared",
    "What happens to a task executor's finished intermediate results when it is lost. "
    "'shared': exchange.dir is storage that outlives any task executor (a NAS); its results "
    "stay in use, and are produced again only if a consumer finds them missing. 'local': each "
    "executor's results live on its own machine's disk (still readable by the others under "
    "exchange.dir, e.g. cross-mounted); the results of a lost executor are lost with it, and "
    "those still needed are produced again before any consumer tries to read them (this "
    "counts as one failure for the restart strategy and waits for its back-off).",
    choices=("shared", "local"),
)

PIPELINE_WORKER_USER = option(
    "taskmanager.pipeline-worker.user",
    USER_NAME,
    "sparkmill-pipeline",
    "Pipeline code (the operators' functions, the Spark session, Spark's Python workers) runs "
    "in a pipeline worker process beside each task executor. A task executor running as root "
    "starts it as this unprivileged user (created as a system user if missing), which can read "
    "none of the cluster's secrets; pipelines must be able to read their inputs and write their "
    "outputs as this user. 'same-user' runs it as the task executor's own user (a lab switch: "
    "pipeline code can then read the task executor's keys); a task executor that is not root "
    "and has no pipeline-worker socket does so too, and warns.",
)
PIPELINE_WORKER_SOCKET = option(
    "taskmanager.pipeline-worker.socket",
    STRING,
    "",
    "Path of the Unix socket a pipeline worker started by the service manager listens on "
    "(systemd socket activation, as its own user: the playbook's units). Empty: the task "
    "executor starts its own worker (see taskmanager.pipeline-worker.user).",
)

SPARK_CONF = FreeFormPrefix(
    "spark.conf.",
    "Passed to Spark as-is with the prefix removed, e.g. "
    "spark.conf.spark.sql.shuffle.partitions: 8.",
)
