"""How a task executor starts its pipeline worker, and as whom.

Three ways, by configuration and by who runs the task executor:

* ``taskmanager.pipeline-worker.socket`` set: a service manager runs the worker (systemd socket
  activation, as its own user); the task executor only connects to the socket.
* The task executor runs as root: it starts the worker as ``taskmanager.pipeline-worker.user``
  (created as a system user if missing), in a working directory of that user's, with an
  environment reduced to what Spark and Python need; the exchange directory is handed to that
  user so its files can be written there.
* Otherwise (or with the value ``same-user``) the worker runs as the task executor's own user:
  pipeline code is still out of the task executor's process, but it can read whatever that user
  can - the keys among them. A task executor says so loudly when it starts, unless the
  configuration asked for it explicitly.

The channel is one end of a socket pair the worker inherits (``--fd``); no path names it, so no
other process can connect to it.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SAME_USER = "same-user"
WORKER_MODULE = "sparkmill.services.taskexecutor.pipeline"
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# What the worker inherits of the task executor's environment: what Java, Spark and Python need
# to run, never anything else (a secret passed in an environment variable stays behind).
_KEPT_VARIABLES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "JAVA_HOME",
        "PYTHONPATH",
        "PYTHONUNBUFFERED",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "VIRTUAL_ENV",
        "SPARK_HOME",
        "SPARK_LOCAL_IP",
        "SPARK_LOCAL_HOSTNAME",
        "SPARK_CONF_DIR",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
        "HADOOP_CONF_DIR",
        "TMPDIR",
    }
)
_KEPT_PREFIXES = ("LC_",)


@dataclass(frozen=True, slots=True)
class PipelineUser:
    name: str
    uid: int
    gid: int


def resolve_pipeline_user(configured: str) -> PipelineUser | None:
    """The user to start the worker as; None: this process's own user."""
    if configured == SAME_USER:
        log.info(
            "pipeline code runs in a worker process of this task executor's own user "
            "(taskmanager.pipeline-worker.user: %s)",
            SAME_USER,
        )
        return None
    if os.geteuid() != 0:
        try:
            me = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            me = f"uid {os.geteuid()}"
        log.warning(
            "SECURITY: pipeline code runs as this task executor's own user %r and can read "
            "what it can, its CurveZMQ key among them: only root can start the pipeline "
            "worker as %r. Deploy with the playbook (a socket-activated worker of its own "
            "user), run the task executor as root, or set taskmanager.pipeline-worker.user: "
            "%s to say this is intended.",
            me,
            configured,
            SAME_USER,
        )
        return None
    entry: pwd.struct_passwd | None
    try:
        entry = pwd.getpwnam(configured)
    except KeyError:
        entry = _create_system_user(configured)
    if entry is None:
        return None
    if entry.pw_uid == 0:
        log.error(
            "SECURITY: taskmanager.pipeline-worker.user %r is root: pipeline code runs with "
            "every privilege. Name an unprivileged user.",
            configured,
        )
        return None
    return PipelineUser(configured, entry.pw_uid, entry.pw_gid)


def _create_system_user(name: str) -> pwd.struct_passwd | None:
    command = [
        "useradd",
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        "/usr/sbin/nologin",
        "--comment",
        "sparkmill pipeline code",
        name,
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        problem = done.stderr.strip() if done.returncode not in (0, 9) else ""  # 9: it exists
    except (OSError, subprocess.TimeoutExpired) as exc:
        problem = str(exc)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        log.error(
            "SECURITY: cannot create the pipeline user %r (%s): pipeline code runs as root "
            "and can read every secret of this task executor. Create the user (useradd "
            "--system %s) or set taskmanager.pipeline-worker.user.",
            name,
            problem or "useradd gave no reason",
            name,
        )
        return None
    log.info("created the system user %r to run pipeline code as", name)
    return entry


def worker_environment(user: PipelineUser | None, home: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key in _KEPT_VARIABLES or key.startswith(_KEPT_PREFIXES)
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = str(home)
    if user is not None:
        env["USER"] = env["LOGNAME"] = user.name
    env["PYTHONUNBUFFERED"] = "1"
    return env


def prepare_directories(user: PipelineUser | None, exchange_dir: str, resource_id: str) -> Path:
    """The worker's working directory (Spark may write there: ``spark-warehouse``...), made
    for it; as root, also hand ``exchange.dir`` to the worker's user when root owns it."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", resource_id)[:64]
    workdir = Path(tempfile.mkdtemp(prefix=f"sparkmill-pipeline-{safe}-"))
    if user is None:
        return workdir
    os.chown(workdir, user.uid, user.gid)
    if exchange_dir:
        path = Path(exchange_dir)
        path.mkdir(parents=True, exist_ok=True)
        if path.stat().st_uid == 0:
            os.chown(path, user.uid, user.gid)
    return workdir


def remove_directory(workdir: Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)


def spawn_worker(
    user: PipelineUser | None, workdir: Path
) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """Start a worker; returns it and the task executor's end of its channel."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", WORKER_MODULE, "--fd", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            env=worker_environment(user, workdir),
            user=user.uid if user is not None else None,
            group=user.gid if user is not None else None,
            extra_groups=[] if user is not None else None,
            # Group-writable files: a JobMaster of the service group removes a job's exchange
            # files the worker wrote.
            umask=0o007,
            start_new_session=True,  # a Ctrl-C meant for the task executor is its to pass on
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return process, ours


def connect_socket(path: str, timeout_s: float) -> socket.socket:
    """Connect to a worker a service manager listens for (it starts the worker on demand)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    sock.settimeout(None)
    return sock
