"""Task executor, heartbeat, registration and slot options (Flink's ``TaskManagerOptions``,
``HeartbeatManagerOptions``, ``ResourceManagerOptions``).
"""

from __future__ import annotations

from sparkmill.common.config.kinds import (
    BOOL,
    DURATION,
    FLOAT,
    INT,
    MEMORY,
    STRING,
)
from sparkmill.common.config.options._declare import MIB, MS, group, option

# --------------------------------------------------------------------------------------------
group("Task executor", "Resources and lifecycle of a task executor process.")
TASK_MANAGER_NUM_TASK_SLOTS = option(
    "taskmanager.numberOfTaskSlots",
    INT,
    1,
    "Number of slots a task executor offers; each slot runs one task at a time.",
    min=1,
)
TASK_MANAGER_RESOURCE_ID = option(
    "taskmanager.resource-id",
    STRING,
    "",
    "Stable identity of the task executor; empty means a random id per start.",
)
TASK_MANAGER_CPU_CORES = option(
    "taskmanager.cpu.cores",
    FLOAT,
    0.0,
    "CPU cores the task executor announces to the resource manager; 0 means one core per slot.",
    min=0,
)
TASK_MANAGER_MEMORY_PROCESS_SIZE = option(
    "taskmanager.memory.process.size",
    MEMORY,
    1728 * MIB,
    "Total memory the task executor announces, split evenly across its slots.",
    min=MIB,
)
TASK_MANAGER_SLOT_TIMEOUT = option(
    "taskmanager.slot.timeout",
    DURATION,
    10.0,
    "How long an allocated slot may stay unused by its job master before the task executor "
    "frees it again.",
    min=MS,
)
TASK_CANCELLATION_TIMEOUT = option(
    "task.cancellation.timeout",
    DURATION,
    20.0,
    "How long a task executor that is shutting down waits for its cancelled tasks to end "
    "before it closes its slot table anyway (and logs the tasks that did not end).",
    min=MS,
)
TASK_MANAGER_REGISTRATION_TIMEOUT = option(
    "taskmanager.registration.timeout",
    DURATION,
    300.0,
    "A task executor that has not registered with a resource manager within this time shuts down.",
    min=MS,
)

# --------------------------------------------------------------------------------------------
group(
    "Heartbeats and registration",
    "Failure detection between services and how they (re)connect.",
)

HEARTBEAT_INTERVAL = option(
    "heartbeat.interval",
    DURATION,
    10.0,
    "Time between two heartbeat requests to a monitored component.",
    min=MS,
)
HEARTBEAT_TIMEOUT = option(
    "heartbeat.timeout",
    DURATION,
    50.0,
    "A component that has not answered heartbeats for this long is considered lost. Must be "
    "greater than heartbeat.interval.",
    min=MS,
)
HEARTBEAT_RPC_FAILURE_THRESHOLD = option(
    "heartbeat.rpc-failure-threshold",
    INT,
    2,
    "Consecutive failed heartbeat RPCs after which a target is declared lost without waiting "
    "for heartbeat.timeout; -1 turns this detection off.",
    min=-1,
)
REGISTRATION_INITIAL_TIMEOUT = option(
    "cluster.registration.initial-timeout",
    DURATION,
    0.1,
    "Timeout of the first registration attempt; it doubles with every unanswered attempt.",
    min=MS,
)
REGISTRATION_MAX_TIMEOUT = option(
    "cluster.registration.max-timeout",
    DURATION,
    30.0,
    "Upper bound of the doubling registration timeout.",
    min=MS,
)
REGISTRATION_ERROR_DELAY = option(
    "cluster.registration.error-delay",
    DURATION,
    10.0,
    "Pause before retrying a registration that failed with an error.",
    min=0,
)
REGISTRATION_REFUSED_DELAY = option(
    "cluster.registration.refused-registration-delay",
    DURATION,
    30.0,
    "Pause before retrying a registration the target explicitly refused.",
    min=0,
)

# --------------------------------------------------------------------------------------------
group("Slots", "Slot allocation between job masters, the resource manager and task executors.")
SLOT_REQUEST_TIMEOUT = option(
    "slot.request.timeout",
    DURATION,
    300.0,
    "How long a job master waits for a requested slot before the request fails.",
    job_overridable=True,
    min=MS,
)
SLOT_IDLE_TIMEOUT = option(
    "slot.idle.timeout",
    DURATION,
    50.0,
    "A slot held by a job master but not used for this long is given back.",
    min=MS,
)
RESOURCE_MANAGER_TASK_MANAGER_TIMEOUT = option(
    "resourcemanager.taskmanager-timeout",
    DURATION,
    30.0,
    "A task executor whose slots have all been free for this long is considered idle and "
    "may be released.",
    min=MS,
)
CLUSTER_EVENLY_SPREAD_OUT_SLOTS = option(
    "cluster.evenly-spread-out-slots",
    BOOL,
    True,
    "Prefer free slots on the least loaded task executor instead of filling one executor "
    "first. The default is true in sparkmill (Flink's default is false).",
)

# --------------------------------------------------------------------------------------------
group(
    "Active resource management",
    "Task executors the resource manager starts and stops itself (Flink's "
    "ActiveResourceManager): started when slot requests cannot be served, released when idle.",
)
RESOURCE_MANAGER_DRIVER = option(
    "resourcemanager.driver",
    STRING,
    "none",
    "How the resource manager gets task executors. 'none': it only uses the task executors "
    "someone else started. 'local': it starts task executor processes on its own host when "
    "slots are missing and stops them when idle. 'systemd': it starts and stops template units "
    "on the hosts of resourcemanager.systemd.hosts, with systemctl over SSH.",
    choices=("none", "local", "systemd"),
)
SLOT_MANAGER_NUMBER_OF_SLOTS_MIN = option(
    "slotmanager.number-of-slots.min",
    INT,
    0,
    "Slots the resource manager keeps available with an active driver, idle or not: it starts "
    "task executors up to this many slots and does not release idle ones below it.",
    min=0,
)
SLOT_MANAGER_NUMBER_OF_SLOTS_MAX = option(
    "slotmanager.number-of-slots.max",
    INT,
    2**31 - 1,
    "Upper bound of the slots of all registered and starting task executors; with an active "
    "driver, no task executor is started beyond it (slot requests then wait).",
    min=1,
    default_text="unbounded",
)
RESOURCE_MANAGER_WORKER_REGISTRATION_TIMEOUT = option(
    "resourcemanager.taskmanager-registration.timeout",
    DURATION,
    300.0,
    "A task executor started by the resource manager that has not registered within this "
    "time is stopped and counts as a failed start.",
    min=MS,
)
RESOURCE_MANAGER_START_WORKER_RETRY_INTERVAL = option(
    "resourcemanager.start-worker.retry-interval",
    DURATION,
    3.0,
    "After a task executor failed to start (or ended before it registered), the resource "
    "manager starts no other one for this long.",
    min=0,
)
RESOURCE_MANAGER_START_WORKER_MAX_FAILURE_RATE = option(
    "resourcemanager.start-worker.max-failure-rate",
    FLOAT,
    10.0,
    "Task executor start failures per minute (failed starts, and task executors that ended or "
    "were lost unexpectedly) at which the resource manager stops starting task executors, "
    "until fewer failed within the last minute.",
    min=0.01,
)
RESOURCE_MANAGER_PREVIOUS_WORKER_RECOVERY_TIMEOUT = option(
    "resourcemanager.previous-worker.recovery.timeout",
    DURATION,
    50.0,
    "After a failover, how long the new leader waits for a task executor it found running (a "
    "previous leader's) to register again before it stops it. Such a task executor counts as "
    "started meanwhile, so no duplicate is started for the slots it will offer. Flink's default "
    "is 0 (no wait); sparkmill's is heartbeat.timeout's default: a task executor re-registers "
    "seconds after ZooKeeper names the new leader, and one that stayed silent this long would "
    "have been declared lost had it been registered.",
    min=0,
)
RESOURCE_MANAGER_RELEASE_WAIT_RESULT_CONSUMED = option(
    "resourcemanager.taskmanager-release.wait.result.consumed",
    BOOL,
    True,
    "Keep an idle task executor while it still holds finished results of a job that is "
    "connected to it (its consumers may still read them).",
)
RESOURCE_MANAGER_LOCAL_WORKER_DIR = option(
    "resourcemanager.local.worker-dir",
    STRING,
    "",
    "Where the 'local' driver keeps each task executor's configuration, log and scratch "
    "directories (one sub-directory per task executor); empty means a 'workers' directory "
    "next to the resource manager's configuration file.",
)


# --------------------------------------------------------------------------------------------
group(
    "systemd driver",
    "How the resource manager reaches the task-executor hosts when resourcemanager.driver is "
    "'systemd': each task executor is an instance of a template unit, named by its resource "
    "id, started and stopped with systemctl over SSH (an argument list, BatchMode, checked "
    "host keys).",
)
RESOURCE_MANAGER_SYSTEMD_HOSTS = option(
    "resourcemanager.systemd.hosts",
    STRING,
    "",
    "Comma-separated hosts that run on-demand task executors, each 'HOST' or 'HOST=SLOTS' "
    "(the slots its task executors may offer together; default "
    "resourcemanager.systemd.slots-per-host). Host names and IPv4 addresses only. A new task "
    "executor goes to the host with the most free slots.",
)
RESOURCE_MANAGER_SYSTEMD_SLOTS_PER_HOST = option(
    "resourcemanager.systemd.slots-per-host",
    INT,
    4,
    "Slots of on-demand task executors a host of resourcemanager.systemd.hosts takes when its "
    "entry does not say.",
    min=1,
)
RESOURCE_MANAGER_SYSTEMD_UNIT = option(
    "resourcemanager.systemd.unit",
    STRING,
    "sparkmill-task-executor-elastic",
    "The template unit of an on-demand task executor, without '@.service': its instance name "
    "is the task executor's resource id (the Ansible role installs it). It must differ from "
    "the fixed task executors' sparkmill-task-executor@N units.",
)
RESOURCE_MANAGER_SYSTEMD_SSH_USER = option(
    "resourcemanager.systemd.ssh-user",
    STRING,
    "root",
    "The account the resource manager logs in as on the task-executor hosts. The Ansible role "
    "restricts its key there to a forced command that runs only systemctl start, stop, "
    "is-active and list-units of the template unit.",
)
RESOURCE_MANAGER_SYSTEMD_SSH_IDENTITY_FILE = option(
    "resourcemanager.systemd.ssh-identity-file",
    STRING,
    "",
    "The resource manager's SSH private key; empty means ssh's default.",
)
RESOURCE_MANAGER_SYSTEMD_SSH_KNOWN_HOSTS_FILE = option(
    "resourcemanager.systemd.ssh-known-hosts-file",
    STRING,
    "",
    "The known_hosts file with the task-executor hosts' host keys (required with the systemd "
    "driver): a host whose key is not there is refused (StrictHostKeyChecking=yes).",
)
RESOURCE_MANAGER_SYSTEMD_SSH_PORT = option(
    "resourcemanager.systemd.ssh-port", INT, 22, "The hosts' SSH port.", min=1, max=65535
)
RESOURCE_MANAGER_SYSTEMD_CONNECT_TIMEOUT = option(
    "resourcemanager.systemd.ssh-connect-timeout",
    DURATION,
    10.0,
    "How long ssh waits for a host's connection (ConnectTimeout).",
    min=1.0,
)
RESOURCE_MANAGER_SYSTEMD_COMMAND_TIMEOUT = option(
    "resourcemanager.systemd.command-timeout",
    DURATION,
    60.0,
    "Bound of one remote systemctl call, connection included; past it the call counts as "
    "failed (a start that timed out is followed by a stop, in case it went through).",
    min=1.0,
)
RESOURCE_MANAGER_SYSTEMD_CHECK_INTERVAL = option(
    "resourcemanager.systemd.check-interval",
    DURATION,
    10.0,
    "How often the active units are listed on the hosts that run task executors, to notice "
    "one that ended.",
    min=MS,
)
