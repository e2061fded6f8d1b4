"""From a configuration file to what a process runs with: settings and HA services."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparkmill.common import config_options as opt
from sparkmill.common.config import Configuration
from sparkmill.common.errors import ConfigurationError
from sparkmill.common.ha import HighAvailabilityServices, StandaloneHaServices
from sparkmill.common.ids import is_valid_name_id
from sparkmill.common.jobgraph_validation import JobGraphLimits
from sparkmill.common.retry import RetryPolicy
from sparkmill.common.settings import ClusterSettings

if TYPE_CHECKING:
    from sparkmill.common.rpc.client import RpcClient

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


def create_ha_services(
    settings: ClusterSettings,
    config: Any = None,
    rpc: Callable[[str], RpcClient] | None = None,
) -> HighAvailabilityServices:
    """The HA services of a process; ``rpc`` gives the (authenticated) client of an address,
    which standalone leader retrieval uses to ask a leader for its session id."""
    mode = config.get(opt.HA_MODE) if isinstance(config, Configuration) else "none"
    if mode == "none":
        return StandaloneHaServices(settings, rpc)
    if mode != "zookeeper":
        raise ConfigurationError(opt.HA_MODE.key, f"unknown mode {mode!r}")
    from sparkmill.common.zookeeper.ha_services import ZooKeeperHaServices

    return ZooKeeperHaServices(settings, config)
