"""The typed settings the services run with, resolved once from the cluster configuration.

Services never read raw configuration keys: :func:`settings_from_config` turns a validated
:class:`~common.config.Configuration` into this immutable object, so a service's constructor
says exactly what it depends on and unit tests build one with plain keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkmill.common.jobgraph_validation import JobGraphLimits
from sparkmill.common.retry import RetryPolicy


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
