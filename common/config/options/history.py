"""Task attempt logs and the job history (the archive of ended jobs), with Flink's key names
where the concept exists (``jobmanager.archive.fs.dir``, ``historyserver.archive.retained-jobs``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from sparkmill.common.config.kinds import DURATION, INT, MEMORY, STRING
from sparkmill.common.config.options._declare import MIB, group, option

# --------------------------------------------------------------------------------------------
group(
    "Task logs and job history",
    "What each subtask attempt logged on its task executor (sparkmill jobs logs) and the "
    "archive of ended jobs every dispatcher serves after failovers and restarts.",
)

TASK_LOG_DIR = option(
    "taskmanager.log.attempt.dir",
    STRING,
    str(Path(tempfile.gettempdir()) / "sparkmill-attempt-logs"),
    "Directory where a task executor keeps the log of each subtask attempt it runs (one "
    "subdirectory per task executor resource id, then per job).",
    default_text="<temp dir>/sparkmill-attempt-logs",
)
TASK_LOG_MAX_SIZE = option(
    "taskmanager.log.attempt.max-size",
    MEMORY,
    MIB,
    "Most bytes kept of one attempt's log; past it the oldest lines are dropped (a reader is "
    "told how many bytes were).",
    min=1024,
)
TASK_LOG_RETENTION = option(
    "taskmanager.log.attempt.retention",
    DURATION,
    86400.0,
    "How long a job's attempt logs are kept after their last line.",
    min=0,
)
ARCHIVE_DIR = option(
    "jobmanager.archive.fs.dir",
    STRING,
    "",
    "Directory where the dispatcher archives each ended job (details, plan, parameters, "
    "exceptions, attempts, logs index) for every dispatcher to serve after a failover or a "
    "cluster restart. Empty: '<high-availability.storageDir>/completed-jobs' with HA storage, "
    "no archive without.",
)
ARCHIVE_RETAINED_JOBS = option(
    "historyserver.archive.retained-jobs",
    INT,
    1000,
    "Most archived jobs kept; the oldest are removed first.",
    min=1,
)
ARCHIVE_MAX_AGE = option(
    "historyserver.archive.max-age",
    DURATION,
    7 * 86400.0,
    "Archived jobs that ended longer ago than this are removed.",
    min=0,
)
