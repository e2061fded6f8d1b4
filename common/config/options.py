"""Every configuration option of sparkmill, declared once, grouped as in the docs.

Keys and defaults follow Apache Flink's where the concept exists, so a Flink operator finds
familiar names. ``docs/configuration.md`` is generated from this module by
``scripts/gen_config_docs.py`` (run it after changing anything here).

Durations are float seconds and memory sizes int bytes (see :mod:`sparkmill.common.config.kinds`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TypeVar

from sparkmill.common.config.kinds import (
    ADDRESS,
    BOOL,
    DURATION,
    DURATION_SECONDS,
    FLOAT,
    INT,
    MEMORY,
    STRING,
    Kind,
)
from sparkmill.common.config.schema import (
    ConfigOption,
    FreeFormPrefix,
    OptionGroup,
)

T = TypeVar("T")

_MS = 0.001
_MIB = 1 << 20
_GROUPS: list[OptionGroup] = []


def _group(title: str, description: str) -> None:
    """Start a new group: the options declared after this call (with :func:`_option`) join it."""
    _GROUPS.append(OptionGroup(title, description, ()))


def _option(
    key: str,
    kind: Kind[T],
    default: T,
    description: str,
    *,
    job_overridable: bool = False,
    choices: tuple[T, ...] | None = None,
    aliases: tuple[tuple[str, T], ...] = (),
    min: float | None = None,
    max: float | None = None,
    default_text: str = "",
) -> ConfigOption[T]:
    """Declare an option in the current group (see :class:`ConfigOption` for the fields)."""
    option = ConfigOption(
        key, kind, default, description, job_overridable, choices, aliases, min, max, default_text
    )
    group = _GROUPS[-1]
    _GROUPS[-1] = OptionGroup(group.title, group.description, (*group.options, option))
    return option


# --------------------------------------------------------------------------------------------
_group(
    "RPC and addresses",
    "How the services find and talk to each other over ZeroMQ. Each role's rpc-address is the "
    "address it *advertises* (what others dial: in ZooKeeper, registrations, deployments); "
    "rpc.bind-host is where it listens (Flink's rpc.address vs rpc.bind-address).",
)
RPC_BIND_HOST = _option(
    "rpc.bind-host",
    STRING,
    "",
    "Host or interface the RPC server of this process binds to: '0.0.0.0' (or '::') for all "
    "interfaces, or one interface's address; the port is the role's rpc-address's.",
    default_text="the host of this role's rpc-address",
)
RPC_ASK_TIMEOUT = _option(
    "rpc.ask-timeout",
    DURATION,
    10.0,
    "Default deadline of an RPC call that does not carry its own timeout.",
    min=_MS,
)
RPC_MAX_MESSAGE_SIZE = _option(
    "rpc.max-message-size",
    MEMORY,
    64 * _MIB,
    "Largest RPC message a server accepts or a client sends; larger ones are refused.",
    min=1024,
)
RPC_MAX_CONTROL_MESSAGE_SIZE = _option(
    "rpc.max-control-message-size",
    MEMORY,
    4 * _MIB,
    "Largest request of a method that carries no job graph or task code (every method but "
    "SubmitJob, StartJob and SubmitTask); larger ones are refused with INVALID_ARGUMENT.",
    min=1024,
)
RPC_MAX_IN_FLIGHT_PER_PEER = _option(
    "rpc.max-in-flight-per-peer",
    INT,
    1000,
    "Requests one peer (one authenticated key, or one connection without security) may have "
    "in progress at a server; more are refused with RESOURCE_EXHAUSTED.",
    min=1,
)
DISPATCHER_RPC_ADDRESS = _option(
    "dispatcher.rpc-address",
    ADDRESS,
    "tcp://127.0.0.1:6123",
    "The dispatcher's advertised address; clients submit jobs here when high availability is "
    "off. It binds its port on rpc.bind-host. Never a wildcard (0.0.0.0, *): start-up refuses it.",
)
RESOURCE_MANAGER_RPC_ADDRESS = _option(
    "resourcemanager.rpc-address",
    ADDRESS,
    "tcp://127.0.0.1:6124",
    "The resource manager's advertised address; task executors and job masters register here "
    "when high availability is off. It binds its port on rpc.bind-host.",
)
JOB_MASTER_RPC_ADDRESS = _option(
    "jobmaster.rpc-address",
    ADDRESS,
    "tcp://127.0.0.1:0",
    "Advertised address of a job master (this host's name or address as others reach it); it "
    "binds the port on rpc.bind-host, port 0 picking a free one, which is then advertised.",
)
TASK_MANAGER_RPC_ADDRESS = _option(
    "taskmanager.rpc-address",
    ADDRESS,
    "tcp://127.0.0.1:0",
    "Advertised address of a task executor (this host's name or address as others reach it); "
    "it binds the port on rpc.bind-host, port 0 picking a free one, which is then advertised.",
)

# --------------------------------------------------------------------------------------------
_group(
    "Security",
    "CurveZMQ encryption and authentication of every RPC, authorization by role, and ZooKeeper "
    "digest authentication; see docs/security.md.",
)
SECURITY_CURVE_ENABLED = _option(
    "security.curve.enabled",
    BOOL,
    True,
    "Encrypt and authenticate every RPC with CurveZMQ and admit only the cluster's keys. "
    "'false' is for an isolated lab only: anyone reaching a port can then run code on the "
    "task executors (every process logs a warning).",
)
SECURITY_CURVE_PUBLIC_KEYS_DIR = _option(
    "security.curve.public-keys-dir",
    STRING,
    "",
    "Directory of the admitted public keys: server.key and one <role>[-<name>].key per member "
    "(role: client, dispatcher, resource-manager, job-master, task-executor).",
)
SECURITY_CURVE_SECRET_KEY_FILE = _option(
    "security.curve.secret-key-file",
    STRING,
    "",
    "This process's secret key file (mode 0600); '{role}' is replaced by the process's role "
    "(client for the CLI), so one configuration can serve every process of a host.",
)
SECURITY_CURVE_SERVER_SECRET_KEY_FILE = _option(
    "security.curve.server-secret-key-file",
    STRING,
    "",
    "The cluster's server secret key file (mode 0600), which every service process serves "
    "with; clients need only its public half (server.key).",
)
SECURITY_ZOOKEEPER_DIGEST_FILE = _option(
    "security.zookeeper.digest-file",
    STRING,
    "",
    "File (mode 0600) holding 'user:password' for ZooKeeper digest authentication; when set, "
    "every znode sparkmill creates is readable and writable only by that user.",
)

# --------------------------------------------------------------------------------------------
_group("Task executor", "Resources and lifecycle of a task executor process.")
TASK_MANAGER_NUM_TASK_SLOTS = _option(
    "taskmanager.numberOfTaskSlots",
    INT,
    1,
    "Number of slots a task executor offers; each slot runs one task at a time.",
    min=1,
)
TASK_MANAGER_RESOURCE_ID = _option(
    "taskmanager.resource-id",
    STRING,
    "",
    "Stable identity of the task executor; empty means a random id per start.",
)
TASK_MANAGER_CPU_CORES = _option(
    "taskmanager.cpu.cores",
    FLOAT,
    0.0,
    "CPU cores the task executor announces to the resource manager; 0 means one core per slot.",
    min=0,
)
TASK_MANAGER_MEMORY_PROCESS_SIZE = _option(
    "taskmanager.memory.process.size",
    MEMORY,
    1728 * _MIB,
    "Total memory the task executor announces, split evenly across its slots.",
    min=_MIB,
)
TASK_MANAGER_SLOT_TIMEOUT = _option(
    "taskmanager.slot.timeout",
    DURATION,
    10.0,
    "How long an allocated slot may stay unused by its job master before the task executor "
    "frees it again.",
    min=_MS,
)
TASK_CANCELLATION_TIMEOUT = _option(
    "task.cancellation.timeout",
    DURATION,
    20.0,
    "How long a task executor that is shutting down waits for its cancelled tasks to end "
    "before it closes its slot table anyway (and logs the tasks that did not end).",
    min=_MS,
)
TASK_MANAGER_REGISTRATION_TIMEOUT = _option(
    "taskmanager.registration.timeout",
    DURATION,
    300.0,
    "A task executor that has not registered with a resource manager within this time shuts down.",
    min=_MS,
)

# --------------------------------------------------------------------------------------------
_group(
    "Heartbeats and registration",
    "Failure detection between services and how they (re)connect.",
)

HEARTBEAT_INTERVAL = _option(
    "heartbeat.interval",
    DURATION,
    10.0,
    "Time between two heartbeat requests to a monitored component.",
    min=_MS,
)
HEARTBEAT_TIMEOUT = _option(
    "heartbeat.timeout",
    DURATION,
    50.0,
    "A component that has not answered heartbeats for this long is considered lost. Must be "
    "greater than heartbeat.interval.",
    min=_MS,
)
HEARTBEAT_RPC_FAILURE_THRESHOLD = _option(
    "heartbeat.rpc-failure-threshold",
    INT,
    2,
    "Consecutive failed heartbeat RPCs after which a target is declared lost without waiting "
    "for heartbeat.timeout; -1 turns this detection off.",
    min=-1,
)
REGISTRATION_INITIAL_TIMEOUT = _option(
    "cluster.registration.initial-timeout",
    DURATION,
    0.1,
    "Timeout of the first registration attempt; it doubles with every unanswered attempt.",
    min=_MS,
)
REGISTRATION_MAX_TIMEOUT = _option(
    "cluster.registration.max-timeout",
    DURATION,
    30.0,
    "Upper bound of the doubling registration timeout.",
    min=_MS,
)
REGISTRATION_ERROR_DELAY = _option(
    "cluster.registration.error-delay",
    DURATION,
    10.0,
    "Pause before retrying a registration that failed with an error.",
    min=0,
)
REGISTRATION_REFUSED_DELAY = _option(
    "cluster.registration.refused-registration-delay",
    DURATION,
    30.0,
    "Pause before retrying a registration the target explicitly refused.",
    min=0,
)

# --------------------------------------------------------------------------------------------
_group("Slots", "Slot allocation between job masters, the resource manager and task executors.")
SLOT_REQUEST_TIMEOUT = _option(
    "slot.request.timeout",
    DURATION,
    300.0,
    "How long a job master waits for a requested slot before the request fails.",
    job_overridable=True,
    min=_MS,
)
SLOT_IDLE_TIMEOUT = _option(
    "slot.idle.timeout",
    DURATION,
    50.0,
    "A slot held by a job master but not used for this long is given back.",
    min=_MS,
)
RESOURCE_MANAGER_TASK_MANAGER_TIMEOUT = _option(
    "resourcemanager.taskmanager-timeout",
    DURATION,
    30.0,
    "A task executor whose slots have all been free for this long is considered idle and "
    "may be released.",
    min=_MS,
)
CLUSTER_EVENLY_SPREAD_OUT_SLOTS = _option(
    "cluster.evenly-spread-out-slots",
    BOOL,
    True,
    "Prefer free slots on the least loaded task executor instead of filling one executor "
    "first. The default is true in sparkmill (Flink's default is false).",
)

# --------------------------------------------------------------------------------------------
_group(
    "Jobs, failover and restarts",
    "Finished-job retention and what happens when tasks fail. A job's own configuration may "
    "override the job-overridable keys.",
)

JOB_STORE_EXPIRATION_TIME = _option(
    "jobstore.expiration-time",
    DURATION_SECONDS,
    3600.0,
    "How long the dispatcher keeps a finished job's result; a bare number is seconds here, "
    "as in Flink.",
    min=0,
)
# Checked at submission and again at the JobMaster's StartJob, before anything is allocated.
JOB_GRAPH_MAX_VERTICES = _option(
    "jobmanager.job-graph.max-vertices", INT, 10_000, "Most vertices a job graph may have.", min=1
)
JOB_GRAPH_MAX_PARALLELISM = _option(
    "jobmanager.job-graph.max-parallelism",
    INT,
    100_000,
    "Largest parallelism of one vertex of a job graph (its max parallelism bounds it too).",
    min=1,
)
JOB_GRAPH_MAX_SUBTASKS = _option(
    "jobmanager.job-graph.max-subtasks",
    INT,
    1_000_000,
    "Most subtasks (the sum of the vertices' parallelisms) a job graph may have.",
    min=1,
)
JOB_GRAPH_MAX_EDGES = _option(
    "jobmanager.job-graph.max-edges",
    INT,
    100_000,
    "Most edges (vertex inputs) a job graph may have; one ALL_TO_ALL edge counts once.",
    min=1,
)
DEPLOYMENT_OFFLOAD_MIN_PARTITIONS = _option(
    "jobmanager.deployment.offload-min-partitions",
    INT,
    64,
    "An input gate of at least this many partitions that its consumers share is not copied "
    "into each task deployment: each task executor fetches it once from the JobMaster and "
    "caches it for the job (like Flink's offloading of large descriptors to its blob server).",
    job_overridable=True,
    min=1,
)
FAILOVER_STRATEGY = _option(
    "jobmanager.execution.failover-strategy",
    STRING,
    "region",
    "What a task failure restarts: 'region' only the tasks connected to the failed one by "
    "data exchanges, 'full' the whole job.",
    job_overridable=True,
    choices=("region", "full"),
)
RESTART_STRATEGY_TYPE = _option(
    "restart-strategy.type",
    STRING,
    "none",
    "How a failed job is restarted. 'off' and 'disable' mean 'none'; 'fixeddelay', "
    "'failurerate' and 'exponentialdelay' are accepted for the hyphenated names.",
    job_overridable=True,
    choices=("none", "fixed-delay", "failure-rate", "exponential-delay"),
    aliases=(
        ("off", "none"),
        ("disable", "none"),
        ("fixeddelay", "fixed-delay"),
        ("failurerate", "failure-rate"),
        ("exponentialdelay", "exponential-delay"),
    ),
)
RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS = _option(
    "restart-strategy.fixed-delay.attempts",
    INT,
    1,
    "fixed-delay: restarts allowed before the job fails for good.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_FIXED_DELAY_DELAY = _option(
    "restart-strategy.fixed-delay.delay",
    DURATION,
    1.0,
    "fixed-delay: pause before each restart.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_FAILURE_RATE_MAX_FAILURES = _option(
    "restart-strategy.failure-rate.max-failures-per-interval",
    INT,
    1,
    "failure-rate: failures tolerated within one interval before the job fails for good.",
    job_overridable=True,
    min=1,
)
RESTART_STRATEGY_FAILURE_RATE_INTERVAL = _option(
    "restart-strategy.failure-rate.failure-rate-interval",
    DURATION,
    60.0,
    "failure-rate: the sliding window in which failures are counted.",
    job_overridable=True,
    min=_MS,
)
RESTART_STRATEGY_FAILURE_RATE_DELAY = _option(
    "restart-strategy.failure-rate.delay",
    DURATION,
    1.0,
    "failure-rate: pause before each restart.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_EXP_INITIAL_BACKOFF = _option(
    "restart-strategy.exponential-delay.initial-backoff",
    DURATION,
    1.0,
    "exponential-delay: pause before the first restart.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_EXP_MAX_BACKOFF = _option(
    "restart-strategy.exponential-delay.max-backoff",
    DURATION,
    60.0,
    "exponential-delay: the growing pause never exceeds this; must be at least the initial "
    "backoff.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_EXP_BACKOFF_MULTIPLIER = _option(
    "restart-strategy.exponential-delay.backoff-multiplier",
    FLOAT,
    1.5,
    "exponential-delay: factor applied to the pause after every restart.",
    job_overridable=True,
    min=1.0,
)
RESTART_STRATEGY_EXP_RESET_BACKOFF_THRESHOLD = _option(
    "restart-strategy.exponential-delay.reset-backoff-threshold",
    DURATION,
    3600.0,
    "exponential-delay: a job that runs this long without failing starts over at the "
    "initial backoff.",
    job_overridable=True,
    min=_MS,
)
RESTART_STRATEGY_EXP_JITTER_FACTOR = _option(
    "restart-strategy.exponential-delay.jitter-factor",
    FLOAT,
    0.1,
    "exponential-delay: each pause varies randomly by up to this fraction, so that many jobs "
    "do not restart in lockstep.",
    job_overridable=True,
    min=0.0,
    max=1.0,
)
RESTART_STRATEGY_EXP_ATTEMPTS_BEFORE_RESET = _option(
    "restart-strategy.exponential-delay.attempts-before-reset-backoff",
    INT,
    2**31 - 1,
    "exponential-delay: restarts allowed before the job fails for good (counted since the "
    "last backoff reset).",
    job_overridable=True,
    min=1,
)

# --------------------------------------------------------------------------------------------
_group("High availability", "Leader election, service discovery and recovery through ZooKeeper.")
HA_MODE = _option(
    "high-availability.mode",
    STRING,
    "none",
    "'none': one dispatcher and resource manager at fixed addresses; 'zookeeper': leader "
    "election and service discovery through ZooKeeper (case-insensitive).",
    choices=("none", "zookeeper"),
)
HA_ZOOKEEPER_QUORUM = _option(
    "high-availability.zookeeper.quorum",
    STRING,
    "",
    "Comma-separated host[:port] list of the ZooKeeper ensemble (port 2181 if omitted); "
    "required in zookeeper mode.",
)
HA_ZOOKEEPER_ROOT = _option(
    "high-availability.zookeeper.path.root",
    STRING,
    "/sparkmill",
    "ZooKeeper node under which all clusters keep their data; must start with '/'.",
)
HA_CLUSTER_ID = _option(
    "high-availability.cluster-id",
    STRING,
    "/default",
    "Separates the ZooKeeper data of clusters that share one root path.",
)
HA_STORAGE_DIR = _option(
    "high-availability.storageDir",
    STRING,
    "",
    "Durable directory for job graphs and results that ZooKeeper only points to; required "
    "in zookeeper mode.",
)
HA_ZOOKEEPER_SESSION_TIMEOUT = _option(
    "high-availability.zookeeper.client.session-timeout",
    DURATION,
    60.0,
    "ZooKeeper session timeout; a leader that loses its session loses leadership.",
    min=_MS,
)
HA_ZOOKEEPER_CONNECTION_TIMEOUT = _option(
    "high-availability.zookeeper.client.connection-timeout",
    DURATION,
    15.0,
    "How long to wait for the ZooKeeper connection when starting.",
    min=_MS,
)
HA_ZOOKEEPER_TOLERATE_SUSPENDED_CONNECTIONS = _option(
    "high-availability.zookeeper.client.tolerate-suspended-connections",
    BOOL,
    True,
    "Keep leadership while the ZooKeeper connection is suspended, for at most the session "
    "timeout less the client's read timeout (2/3 of it): a client that moves to another "
    "server of the ensemble (its server stopped) interrupts nothing, and the grace ends "
    "before the servers can expire the session, so a partitioned leader stops before a "
    "successor can start. LOST always revokes at once. false: revoke on every suspension "
    "(Flink's default).",
)

# --------------------------------------------------------------------------------------------
_group(
    "Metrics",
    "The Prometheus endpoint. Extra labels come from the free-form metrics.labels.* keys.",
)

METRICS_ENABLED = _option(
    "metrics.enabled",
    BOOL,
    True,
    "Serve Prometheus metrics over HTTP from every process.",
)
METRICS_BIND_HOST = _option(
    "metrics.bind-host",
    STRING,
    "127.0.0.1",
    "Host or interface the metrics HTTP endpoint binds to ('0.0.0.0' for all).",
)
METRICS_ADDRESS = _option(
    "metrics.address",
    STRING,
    "",
    "Host name or address put in the metrics URL this process publishes (its ServiceInfo, "
    "Prometheus discovery).",
    default_text="metrics.bind-host, or this host's name when that is a wildcard",
)
METRICS_PORT = _option(
    "metrics.port",
    INT,
    0,
    "Port of the metrics HTTP endpoint; 0 picks a free port, which is written to the log.",
    min=0,
    max=65535,
)

# --------------------------------------------------------------------------------------------
_group(
    "REST API and web dashboard",
    "The HTTP server of the dispatcher: the JSON API under /v1/ and the dashboard, with bearer "
    "tokens from rest.auth.token-file (see docs/security.md).",
)

REST_ENABLED = _option(
    "rest.enabled",
    BOOL,
    True,
    "Serve the REST API and the web dashboard from every dispatcher (standbys redirect to the "
    "leader).",
)
REST_BIND_ADDRESS = _option(
    "rest.bind-address",
    STRING,
    "",
    "Host or interface the HTTP server binds to ('0.0.0.0' for all).",
    default_text="the host of dispatcher.rpc-address",
)
REST_ADDRESS = _option(
    "rest.address",
    STRING,
    "",
    "Host name clients are given to reach the REST API (in redirects, `cluster status` and "
    "the URLs the CLI prints).",
    default_text="rest.bind-address, or this host's name when that is a wildcard",
)
REST_PORT = _option(
    "rest.port",
    STRING,
    "8081",
    "Port of the HTTP server: a number, 0 for a free port, or a range such as '50100-50200' "
    "(the first free one is used, so several dispatchers on one host can share the setting).",
)
REST_AUTH_TOKEN_FILE = _option(
    "rest.auth.token-file",
    STRING,
    "",
    "File (mode 0600) of the REST API's bearer tokens, one 'ROLE TOKEN' per line: 'viewer' "
    "tokens may read, 'operator' tokens may also submit and cancel. Empty: the API and the "
    "dashboard are open to anyone who reaches the port (the dispatcher logs a warning).",
)
WEB_GRAFANA_URL = _option(
    "web.grafana-url",
    STRING,
    "",
    "Base URL of a Grafana with the sparkmill dashboards; the dashboard links to it when set.",
)

# --------------------------------------------------------------------------------------------
_group(
    "Data plane",
    "The Spark sessions tasks run in, and where they exchange data. Any Spark setting can be "
    "passed with the free-form spark.conf.* keys.",
)

SPARK_MASTER = _option(
    "spark.master",
    STRING,
    "local[2]",
    "Spark master URL of the Spark session each task executor runs its tasks in.",
)
SPARK_SESSION_START = _option(
    "spark.session.start",
    STRING,
    "eager",
    "'eager' starts the Spark session when the task executor starts; 'lazy' when its first "
    "task runs.",
    choices=("eager", "lazy"),
)
SPARK_SESSION_WARM_UP = _option(
    "spark.session.warm-up",
    BOOL,
    True,
    "Run a small job of the kinds tasks run (text, aggregation, Parquet) right after the Spark "
    "session starts, so that the first job submitted once the task executor is ready does not "
    "pay for the JVM's class loading and code generation. Tasks that arrive meanwhile do not "
    "wait for it. 'sparkmill run' turns it off: its job arrives with the session, and its own "
    "tasks warm the JVM up.",
)
SPARK_UI_ENABLED = _option(
    "spark.ui.enabled",
    BOOL,
    False,
    "Run Spark's web UI in each task executor's Spark session.",
)
EXCHANGE_DIR = _option(
    "exchange.dir",
    STRING,
    str(Path(tempfile.gettempdir()) / "sparkmill-exchange"),
    "Directory where tasks hand intermediate results to downstream tasks; must be shared by "
    "all task executors that exchange data. The default is under the system temp directory.",
    default_text="<temp dir>/sparkmill-exchange",
)
EXCHANGE_STORAGE = _option(
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

# --------------------------------------------------------------------------------------------
_group("Logging", "Process logging.")
LOG_LEVEL = _option(
    "log.level",
    STRING,
    "INFO",
    "Level of the process's root logger (case-insensitive; WARN means WARNING).",
    choices=("DEBUG", "INFO", "WARNING", "ERROR"),
    aliases=(("WARN", "WARNING"),),
)

# --------------------------------------------------------------------------------------------
# Free-form prefixes

SPARK_CONF = FreeFormPrefix(
    "spark.conf.",
    "Passed to Spark as-is with the prefix removed, e.g. "
    "spark.conf.spark.sql.shuffle.partitions: 8.",
)
METRICS_LABELS = FreeFormPrefix(
    "metrics.labels.",
    "Constant labels added to every metric of the process, e.g. metrics.labels.region: eu.",
)


GROUPS: tuple[OptionGroup, ...] = tuple(_GROUPS)
"""Every option, in the groups (and order) of docs/configuration.md."""
PREFIXES: tuple[FreeFormPrefix, ...] = (SPARK_CONF, METRICS_LABELS)
