"""The typed settings the services run with, resolved once from the cluster configuration.

Services never read raw configuration keys: :func:`settings_from_config` turns a validated
:class:`~sparkmill.common.config.configuration.Configuration` into this immutable object, so a
service's constructor says exactly what it depends on and unit tests build one with plain keyword
arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.core.ids import is_valid_name_id
from sparkmill.common.jobgraph.validation import JobGraphLimits
from sparkmill.common.runtime.retry import RetryPolicy


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    # addresses: each role's is the one it advertises; its RPC server binds on bind_host
    # ("" = the advertised host)
    bind_host: str = ""
    dispatcher_address: str = "tcp://127.0.0.1:6123"
    resource_manager_address: str = "tcp://127.0.0.1:6124"
    job_master_bind_address: str = "tcp://127.0.0.1:0"
    task_executor_bind_address: str = "tcp://127.0.0.1:0"
    rpc_timeout_s: float = 10.0
    rpc_max_message_bytes: int = 64 * 1024 * 1024
    rpc_max_control_message_bytes: int = 4 * 1024 * 1024
    rpc_max_in_flight_per_peer: int = 1000
    # heartbeats and registration
    heartbeat_interval_s: float = 10.0
    heartbeat_timeout_s: float = 50.0
    heartbeat_rpc_failure_threshold: int = 2
    registration: RetryPolicy = field(default_factory=RetryPolicy)
    # task executor
    number_of_slots: int = 1
    task_executor_resource_id: str = ""
    task_executor_cpu_cores: float = 0.0
    task_executor_memory_mb: int = 1728
    slot_timeout_s: float = 10.0
    # Flink's taskmanager.registration.timeout: unregistered this long -> the process exits.
    task_executor_registration_timeout_s: float = 300.0
    task_cancellation_timeout_s: float = 20.0
    # slots
    slot_request_timeout_s: float = 300.0
    slot_idle_timeout_s: float = 50.0
    task_manager_idle_timeout_s: float = 30.0
    evenly_spread_out_slots: bool = True
    # jobs
    job_store_expiration_s: float = 3600.0
    job_graph_limits: JobGraphLimits = field(default_factory=JobGraphLimits)
    # Where HA metadata lives ("" without HA): a sink must never write there.
    ha_storage_dir: str = ""
    # metrics
    metrics_enabled: bool = True
    metrics_bind_host: str = "127.0.0.1"
    metrics_address: str = ""  # the host in the published URL ("" = the bind host)
    metrics_port: int = 0
    # data plane
    exchange_dir: str = "/tmp/sparkmill-exchange"
    spark_master: str = "local[2]"
    spark_session_start: str = "eager"
    spark_session_warm_up: bool = True
    spark_ui_enabled: bool = False
    spark_conf: dict[str, str] = field(default_factory=dict)  # the spark.conf.* keys

    @property
    def protected_dirs(self) -> tuple[str, ...]:
        """The cluster's own directories, which no sink may write to, hold or lie inside."""
        return tuple(d for d in (self.exchange_dir, self.ha_storage_dir) if d)


MIB = 1 << 20


def settings_from_config(config: Configuration) -> ClusterSettings:
    threshold = config.get(opt.HEARTBEAT_RPC_FAILURE_THRESHOLD)
    resource_id = config.get(opt.TASK_MANAGER_RESOURCE_ID)
    if resource_id and not is_valid_name_id(resource_id):
        # The resource manager would refuse every registration with it: say so at start.
        raise ConfigurationError(
            opt.TASK_MANAGER_RESOURCE_ID.key,
            f"{resource_id[:80]!r} is not a valid resource id (letters, digits, '.', '_' and "
            "'-', at most 128 characters, starting with a letter or digit)",
        )
    return ClusterSettings(
        bind_host=config.get(opt.RPC_BIND_HOST).strip(),
        dispatcher_address=config.get(opt.DISPATCHER_RPC_ADDRESS),
        resource_manager_address=config.get(opt.RESOURCE_MANAGER_RPC_ADDRESS),
        job_master_bind_address=config.get(opt.JOB_MASTER_RPC_ADDRESS),
        task_executor_bind_address=config.get(opt.TASK_MANAGER_RPC_ADDRESS),
        rpc_timeout_s=config.get(opt.RPC_ASK_TIMEOUT),
        rpc_max_message_bytes=config.get(opt.RPC_MAX_MESSAGE_SIZE),
        rpc_max_control_message_bytes=config.get(opt.RPC_MAX_CONTROL_MESSAGE_SIZE),
        rpc_max_in_flight_per_peer=config.get(opt.RPC_MAX_IN_FLIGHT_PER_PEER),
        heartbeat_interval_s=config.get(opt.HEARTBEAT_INTERVAL),
        heartbeat_timeout_s=config.get(opt.HEARTBEAT_TIMEOUT),
        # Flink's -1 switches the fast path off; the heartbeat manager spells that 0.
        heartbeat_rpc_failure_threshold=max(0, threshold),
        registration=RetryPolicy(
            initial_timeout_s=config.get(opt.REGISTRATION_INITIAL_TIMEOUT),
            max_timeout_s=config.get(opt.REGISTRATION_MAX_TIMEOUT),
            error_delay_s=config.get(opt.REGISTRATION_ERROR_DELAY),
            refused_delay_s=config.get(opt.REGISTRATION_REFUSED_DELAY),
        ),
        number_of_slots=config.get(opt.TASK_MANAGER_NUM_TASK_SLOTS),
        task_executor_resource_id=config.get(opt.TASK_MANAGER_RESOURCE_ID),
        task_executor_cpu_cores=config.get(opt.TASK_MANAGER_CPU_CORES),
        task_executor_memory_mb=config.get(opt.TASK_MANAGER_MEMORY_PROCESS_SIZE) // MIB,
        slot_timeout_s=config.get(opt.TASK_MANAGER_SLOT_TIMEOUT),
        task_executor_registration_timeout_s=config.get(opt.TASK_MANAGER_REGISTRATION_TIMEOUT),
        task_cancellation_timeout_s=config.get(opt.TASK_CANCELLATION_TIMEOUT),
        slot_request_timeout_s=config.get(opt.SLOT_REQUEST_TIMEOUT),
        slot_idle_timeout_s=config.get(opt.SLOT_IDLE_TIMEOUT),
        task_manager_idle_timeout_s=config.get(opt.RESOURCE_MANAGER_TASK_MANAGER_TIMEOUT),
        evenly_spread_out_slots=config.get(opt.CLUSTER_EVENLY_SPREAD_OUT_SLOTS),
        job_store_expiration_s=config.get(opt.JOB_STORE_EXPIRATION_TIME),
        job_graph_limits=JobGraphLimits(
            max_vertices=config.get(opt.JOB_GRAPH_MAX_VERTICES),
            max_parallelism=config.get(opt.JOB_GRAPH_MAX_PARALLELISM),
            max_subtasks=config.get(opt.JOB_GRAPH_MAX_SUBTASKS),
            max_edges=config.get(opt.JOB_GRAPH_MAX_EDGES),
        ),
        ha_storage_dir=config.get(opt.HA_STORAGE_DIR),
        metrics_enabled=config.get(opt.METRICS_ENABLED),
        metrics_bind_host=config.get(opt.METRICS_BIND_HOST),
        metrics_address=config.get(opt.METRICS_ADDRESS).strip(),
        metrics_port=config.get(opt.METRICS_PORT),
        exchange_dir=config.get(opt.EXCHANGE_DIR),
        spark_master=config.get(opt.SPARK_MASTER),
        spark_session_start=config.get(opt.SPARK_SESSION_START),
        spark_session_warm_up=config.get(opt.SPARK_SESSION_WARM_UP),
        spark_ui_enabled=config.get(opt.SPARK_UI_ENABLED),
        spark_conf=config.prefixed("spark.conf."),
    )


def load_cluster_config(path: Path) -> tuple[ClusterSettings, Configuration]:
    config = Configuration.load(path)
    return settings_from_config(config), config
