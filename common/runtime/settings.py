"""The typed settings the services run with, resolved once from the cluster configuration.

Services never read raw configuration keys: :func:`settings_from_config` turns a validated
:class:`~sparkmill.common.config.configuration.Configuration` into this immutable object, so a
service's constructor says exactly what it depends on and unit tests build one with plain keyword
arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Protocol, TypeVar

from sparkmill.common.config import options as opt
from sparkmill.common.config.configuration import Configuration
from sparkmill.common.config.schema import ConfigOption, FreeFormPrefix
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.core.ids import is_valid_name_id
from sparkmill.common.jobgraph.validation import JobGraphLimits
from sparkmill.common.runtime.retry import RetryPolicy

T = TypeVar("T")
V = TypeVar("V")
S = TypeVar("S")

# -- one source of truth ----------------------------------------------------------------------
#
# Each settings field names the options it comes from and how (``_option`` / ``_setting``); the
# same resolver gives its default (every option at its declared default) and its value in
# ``*_from_config``. So a default lives only in the option's declaration, and a new field cannot
# be forgotten by the factory. (Ruff's RUF009 cannot see that these calls return field()
# specifiers, hence its noqa below.)


class OptionSource(Protocol):
    """Where option values come from: a :class:`Configuration`, or :data:`DEFAULTS`."""

    def get(self, option: ConfigOption[T]) -> T: ...

    def prefixed(self, prefix: FreeFormPrefix | str) -> dict[str, str]: ...


class _Defaults:
    """Every option at its declared default, no free-form key set (an empty configuration)."""

    def get(self, option: ConfigOption[T]) -> T:
        return option.default

    def prefixed(self, prefix: FreeFormPrefix | str) -> dict[str, str]:
        return {}


DEFAULTS: OptionSource = _Defaults()
_RESOLVE = "sparkmill.resolve"


def _setting(resolve: Callable[[OptionSource], V]) -> V:
    """A settings field whose value ``resolve`` computes from option values."""
    default = resolve(DEFAULTS)
    metadata = {_RESOLVE: resolve}
    if getattr(type(default), "__hash__", None) is None:  # a dict: one copy per instance
        return field(default_factory=lambda: resolve(DEFAULTS), metadata=metadata)
    return field(default=default, metadata=metadata)


def _option(option: ConfigOption[T]) -> T:
    """A settings field that is ``option``'s value as parsed."""
    return _setting(lambda source: source.get(option))


def resolve_settings(cls: Callable[..., S], source: OptionSource) -> S:
    """An instance of the settings dataclass ``cls`` with every field resolved from ``source``."""
    resolved = {
        f.name: f.metadata[_RESOLVE](source)
        for f in fields(cls)  # type: ignore[arg-type]
        if _RESOLVE in f.metadata
    }
    return cls(**resolved)


# -- converters ---------------------------------------------------------------------------------

MIB = 1 << 20


def _stripped(option: ConfigOption[str]) -> str:
    return _setting(lambda source: source.get(option).strip())


def _failure_threshold(source: OptionSource) -> int:
    # Flink's -1 switches the fast path off; the heartbeat manager spells that 0.
    return max(0, source.get(opt.HEARTBEAT_RPC_FAILURE_THRESHOLD))


def _registration(source: OptionSource) -> RetryPolicy:
    return RetryPolicy(
        initial_timeout_s=source.get(opt.REGISTRATION_INITIAL_TIMEOUT),
        max_timeout_s=source.get(opt.REGISTRATION_MAX_TIMEOUT),
        error_delay_s=source.get(opt.REGISTRATION_ERROR_DELAY),
        refused_delay_s=source.get(opt.REGISTRATION_REFUSED_DELAY),
    )


def _job_graph_limits(source: OptionSource) -> JobGraphLimits:
    return JobGraphLimits(
        max_vertices=source.get(opt.JOB_GRAPH_MAX_VERTICES),
        max_parallelism=source.get(opt.JOB_GRAPH_MAX_PARALLELISM),
        max_subtasks=source.get(opt.JOB_GRAPH_MAX_SUBTASKS),
        max_edges=source.get(opt.JOB_GRAPH_MAX_EDGES),
    )


def _archive_dir(source: OptionSource) -> str:
    configured = source.get(opt.ARCHIVE_DIR).strip()
    storage = source.get(opt.HA_STORAGE_DIR).strip()
    if configured or not storage:
        return configured
    return str(Path(storage) / "completed-jobs")


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    # addresses: each role's is the one it advertises; its RPC server binds on bind_host
    # ("" = the advertised host)
    bind_host: str = _stripped(opt.RPC_BIND_HOST)
    dispatcher_address: str = _option(opt.DISPATCHER_RPC_ADDRESS)
    resource_manager_address: str = _option(opt.RESOURCE_MANAGER_RPC_ADDRESS)
    job_master_bind_address: str = _option(opt.JOB_MASTER_RPC_ADDRESS)
    task_executor_bind_address: str = _option(opt.TASK_MANAGER_RPC_ADDRESS)
    rpc_timeout_s: float = _option(opt.RPC_ASK_TIMEOUT)
    rpc_max_message_bytes: int = _option(opt.RPC_MAX_MESSAGE_SIZE)
    rpc_max_control_message_bytes: int = _option(opt.RPC_MAX_CONTROL_MESSAGE_SIZE)
    rpc_max_in_flight_per_peer: int = _option(opt.RPC_MAX_IN_FLIGHT_PER_PEER)
    # heartbeats and registration
    heartbeat_interval_s: float = _option(opt.HEARTBEAT_INTERVAL)
    heartbeat_timeout_s: float = _option(opt.HEARTBEAT_TIMEOUT)
    heartbeat_rpc_failure_threshold: int = _setting(_failure_threshold)
    registration: RetryPolicy = _setting(_registration)  # noqa: RUF009 (a field())
    # task executor
    number_of_slots: int = _option(opt.TASK_MANAGER_NUM_TASK_SLOTS)
    task_executor_resource_id: str = _option(opt.TASK_MANAGER_RESOURCE_ID)
    task_executor_cpu_cores: float = _option(opt.TASK_MANAGER_CPU_CORES)
    task_executor_memory_mb: int = _setting(
        lambda source: source.get(opt.TASK_MANAGER_MEMORY_PROCESS_SIZE) // MIB
    )
    slot_timeout_s: float = _option(opt.TASK_MANAGER_SLOT_TIMEOUT)
    # Flink's taskmanager.registration.timeout: unregistered this long -> the process exits.
    task_executor_registration_timeout_s: float = _option(opt.TASK_MANAGER_REGISTRATION_TIMEOUT)
    task_cancellation_timeout_s: float = _option(opt.TASK_CANCELLATION_TIMEOUT)
    # slots
    slot_request_timeout_s: float = _option(opt.SLOT_REQUEST_TIMEOUT)
    slot_idle_timeout_s: float = _option(opt.SLOT_IDLE_TIMEOUT)
    task_manager_idle_timeout_s: float = _option(opt.RESOURCE_MANAGER_TASK_MANAGER_TIMEOUT)
    evenly_spread_out_slots: bool = _option(opt.CLUSTER_EVENLY_SPREAD_OUT_SLOTS)
    # active resource management (the resource manager starts and stops task executors)
    resource_manager_driver: str = _option(opt.RESOURCE_MANAGER_DRIVER)
    min_slots: int = _option(opt.SLOT_MANAGER_NUMBER_OF_SLOTS_MIN)
    max_slots: int = _option(opt.SLOT_MANAGER_NUMBER_OF_SLOTS_MAX)
    worker_registration_timeout_s: float = _option(opt.RESOURCE_MANAGER_WORKER_REGISTRATION_TIMEOUT)
    start_worker_retry_interval_s: float = _option(opt.RESOURCE_MANAGER_START_WORKER_RETRY_INTERVAL)
    # per minute
    start_worker_max_failure_rate: float = _option(
        opt.RESOURCE_MANAGER_START_WORKER_MAX_FAILURE_RATE
    )
    release_wait_result_consumed: bool = _option(opt.RESOURCE_MANAGER_RELEASE_WAIT_RESULT_CONSUMED)
    previous_worker_recovery_timeout_s: float = _option(
        opt.RESOURCE_MANAGER_PREVIOUS_WORKER_RECOVERY_TIMEOUT
    )
    local_worker_dir: str = _stripped(opt.RESOURCE_MANAGER_LOCAL_WORKER_DIR)
    # jobs
    job_store_expiration_s: float = _option(opt.JOB_STORE_EXPIRATION_TIME)
    job_graph_limits: JobGraphLimits = _setting(_job_graph_limits)  # noqa: RUF009 (a field())
    # high availability; ha_storage_dir is where HA metadata lives ("" without HA): a sink must
    # never write there.
    ha_mode: str = _option(opt.HA_MODE)
    ha_storage_dir: str = _option(opt.HA_STORAGE_DIR)
    # metrics and logging
    metrics_enabled: bool = _option(opt.METRICS_ENABLED)
    metrics_bind_host: str = _option(opt.METRICS_BIND_HOST)
    metrics_address: str = _stripped(opt.METRICS_ADDRESS)  # the published URL's host ("" = bind)
    metrics_port: int = _option(opt.METRICS_PORT)
    metrics_labels: dict[str, str] = _setting(  # noqa: RUF009 (a field(), see _setting)
        lambda source: source.prefixed(opt.METRICS_LABELS)
    )
    log_level: str = _option(opt.LOG_LEVEL)
    # REST API and dashboard (the dispatcher's)
    rest_enabled: bool = _option(opt.REST_ENABLED)
    rest_bind_address: str = _stripped(opt.REST_BIND_ADDRESS)  # "" = the dispatcher's host
    rest_address: str = _stripped(opt.REST_ADDRESS)
    rest_port: str = _option(opt.REST_PORT)  # a port or a range ("50100-50200")
    rest_auth_token_file: str = _stripped(opt.REST_AUTH_TOKEN_FILE)
    rest_auth_allow_unauthenticated: bool = _option(opt.REST_AUTH_ALLOW_UNAUTHENTICATED)
    web_grafana_url: str = _setting(lambda s: s.get(opt.WEB_GRAFANA_URL).strip().rstrip("/"))
    # data plane
    exchange_dir: str = _option(opt.EXCHANGE_DIR)
    exchange_storage: str = _option(opt.EXCHANGE_STORAGE)
    spark_master: str = _option(opt.SPARK_MASTER)
    spark_session_start: str = _option(opt.SPARK_SESSION_START)
    spark_session_warm_up: bool = _option(opt.SPARK_SESSION_WARM_UP)
    spark_ui_enabled: bool = _option(opt.SPARK_UI_ENABLED)
    pipeline_worker_user: str = _option(opt.PIPELINE_WORKER_USER)
    pipeline_worker_socket: str = _stripped(opt.PIPELINE_WORKER_SOCKET)
    spark_conf: dict[str, str] = _setting(  # noqa: RUF009 (a field(), see _setting)
        lambda source: source.prefixed(opt.SPARK_CONF)
    )
    # attempt logs (task executor) and the job archive (dispatcher)
    task_log_dir: str = _stripped(opt.TASK_LOG_DIR)
    task_log_max_bytes: int = _option(opt.TASK_LOG_MAX_SIZE)
    task_log_retention_s: float = _option(opt.TASK_LOG_RETENTION)
    archive_dir: str = _setting(  # the job archive's directory ("" = none)
        lambda s: (
            s.get(opt.ARCHIVE_DIR).strip()
            or (
                str(Path(s.get(opt.HA_STORAGE_DIR)) / "completed-jobs")
                if s.get(opt.HA_STORAGE_DIR)
                else ""
            )
        )
    )
    archive_retained_jobs: int = _option(opt.ARCHIVE_RETAINED_JOBS)
    archive_max_age_s: float = _option(opt.ARCHIVE_MAX_AGE)

    @property
    def protected_dirs(self) -> tuple[str, ...]:
        """The cluster's own directories, which no sink may write to, hold or lie inside."""
        return tuple(d for d in (self.exchange_dir, self.ha_storage_dir) if d)

    @property
    def results_lost_with_executor(self) -> bool:
        """Whether a task executor's results go with it (``exchange.storage: local``)."""
        return self.exchange_storage == "local"


def settings_from_config(config: Configuration) -> ClusterSettings:
    resource_id = config.get(opt.TASK_MANAGER_RESOURCE_ID)
    if resource_id and not is_valid_name_id(resource_id):
        # The resource manager would refuse every registration with it: say so at start.
        raise ConfigurationError(
            opt.TASK_MANAGER_RESOURCE_ID.key,
            f"{resource_id[:80]!r} is not a valid resource id (letters, digits, '.', '_' and "
            "'-', at most 128 characters, starting with a letter or digit)",
        )
    return resolve_settings(ClusterSettings, config)


# -- per job ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RestartSettings:
    """The restart strategy's options (``restart-strategy.*``); see
    :mod:`sparkmill.services.jobmaster.scheduler.restart_strategy`."""

    strategy: str = _option(opt.RESTART_STRATEGY_TYPE)
    fail_on_repeated_error: bool = _option(opt.RESTART_STRATEGY_FAIL_ON_REPEATED_ERROR)
    fixed_delay_attempts: int = _option(opt.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS)
    fixed_delay_s: float = _option(opt.RESTART_STRATEGY_FIXED_DELAY_DELAY)
    failure_rate_max_failures: int = _option(opt.RESTART_STRATEGY_FAILURE_RATE_MAX_FAILURES)
    failure_rate_interval_s: float = _option(opt.RESTART_STRATEGY_FAILURE_RATE_INTERVAL)
    failure_rate_delay_s: float = _option(opt.RESTART_STRATEGY_FAILURE_RATE_DELAY)
    exponential_initial_backoff_s: float = _option(opt.RESTART_STRATEGY_EXP_INITIAL_BACKOFF)
    exponential_max_backoff_s: float = _option(opt.RESTART_STRATEGY_EXP_MAX_BACKOFF)
    exponential_multiplier: float = _option(opt.RESTART_STRATEGY_EXP_BACKOFF_MULTIPLIER)
    exponential_reset_threshold_s: float = _option(opt.RESTART_STRATEGY_EXP_RESET_BACKOFF_THRESHOLD)
    exponential_jitter: float = _option(opt.RESTART_STRATEGY_EXP_JITTER_FACTOR)
    exponential_attempts: int = _option(opt.RESTART_STRATEGY_EXP_ATTEMPTS_BEFORE_RESET)


@dataclass(frozen=True, slots=True)
class AutoParallelismSettings:
    """How the JobMaster decides open parallelisms (``execution.batch.adaptive.*``); see
    :mod:`sparkmill.services.jobmaster.executiongraph.parallelism_decider`."""

    enabled: bool = _option(opt.AUTO_PARALLELISM_ENABLED)
    min_parallelism: int = _option(opt.AUTO_PARALLELISM_MIN)
    max_parallelism: int = _option(opt.AUTO_PARALLELISM_MAX)
    bytes_per_task: int = _option(opt.AUTO_PARALLELISM_AVG_DATA_VOLUME)
    default_source_parallelism: int = _option(opt.AUTO_PARALLELISM_DEFAULT_SOURCE)
    # Bounds every decision too: a decided vertex never exceeds what a submitted one may have.
    job_graph_max_parallelism: int = _option(opt.JOB_GRAPH_MAX_PARALLELISM)
    job_graph_max_subtasks: int = _option(opt.JOB_GRAPH_MAX_SUBTASKS)
    # Skewed sub-partitions of a join split across subtasks (table.optimizer.skewed-join-*).
    skewed_join_strategy: str = _option(opt.SKEWED_JOIN_STRATEGY)
    skewed_join_factor: float = _option(opt.SKEWED_JOIN_FACTOR)
    skewed_join_threshold: int = _option(opt.SKEWED_JOIN_THRESHOLD)


@dataclass(frozen=True, slots=True)
class SpeculativeSettings:
    """Speculative execution and the slow-task detector (``execution.batch.speculative.*``,
    ``slow-task-detector.*``); see
    :mod:`sparkmill.services.jobmaster.scheduler.speculative_execution`."""

    enabled: bool = _option(opt.SPECULATIVE_ENABLED)
    max_concurrent_executions: int = _option(opt.SPECULATIVE_MAX_CONCURRENT)
    block_duration_s: float = _option(opt.SPECULATIVE_BLOCK_DURATION)
    check_interval_s: float = _option(opt.SLOW_TASK_CHECK_INTERVAL)
    baseline_lower_bound_s: float = _option(opt.SLOW_TASK_BASELINE_LOWER_BOUND)
    baseline_ratio: float = _option(opt.SLOW_TASK_BASELINE_RATIO)
    baseline_multiplier: float = _option(opt.SLOW_TASK_BASELINE_MULTIPLIER)


@dataclass(frozen=True, slots=True)
class JobSettings:
    """What one JobMaster runs its job with: the cluster's options overridden by the job's own
    (the job-overridable keys of its job graph's config)."""

    slot_request_timeout_s: float = _option(opt.SLOT_REQUEST_TIMEOUT)
    failover_strategy: str = _option(opt.FAILOVER_STRATEGY)
    deployment_offload_min_partitions: int = _option(opt.DEPLOYMENT_OFFLOAD_MIN_PARTITIONS)
    restart: RestartSettings = _setting(  # noqa: RUF009 (a field(), see _setting)
        lambda source: resolve_settings(RestartSettings, source)
    )
    auto_parallelism: AutoParallelismSettings = _setting(  # noqa: RUF009 (as above)
        lambda source: resolve_settings(AutoParallelismSettings, source)
    )
    speculative: SpeculativeSettings = _setting(  # noqa: RUF009 (as above)
        lambda source: resolve_settings(SpeculativeSettings, source)
    )


def job_settings_from_config(config: Configuration) -> JobSettings:
    """``config``: the cluster's configuration with the job's overrides applied
    (:meth:`Configuration.with_overrides` with ``job_scope=True``)."""
    return resolve_settings(JobSettings, config)


def load_cluster_config(path: Path) -> tuple[ClusterSettings, Configuration]:
    config = Configuration.load(path)
    return settings_from_config(config), config
