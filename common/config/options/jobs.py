"""Job retention, job graph limits, failover and restart strategy options (Flink's
``JobManagerOptions``, ``RestartStrategyOptions``).
"""

from __future__ import annotations

from sparkmill.common.config.kinds import (
    BOOL,
    DURATION,
    DURATION_SECONDS,
    FLOAT,
    INT,
    MEMORY,
    STRING,
)
from sparkmill.common.config.options._declare import MIB, MS, group, option

# --------------------------------------------------------------------------------------------
group(
    "Jobs, failover and restarts",
    "Finished-job retention and what happens when tasks fail. A job's own configuration may "
    "override the job-overridable keys.",
)

JOB_STORE_EXPIRATION_TIME = option(
    "jobstore.expiration-time",
    DURATION_SECONDS,
    3600.0,
    "How long the dispatcher keeps a finished job's result; a bare number is seconds here, "
    "as in Flink.",
    min=0,
)
# Set by the CLI, not by hand: the arguments a pipeline file was loaded with are part of the
# job, so a job recovered after a failover is the same job and the views can show them.
PIPELINE_ARGS = option(
    "pipeline.args",
    STRING,
    "",
    "The arguments after `--` of `sparkmill submit|run FILE -- ARGS` (a JSON list of strings, "
    "set by the CLI); shown by `sparkmill jobs status` and the REST API.",
    job_overridable=True,
)
# Checked at submission and again at the JobMaster's StartJob, before anything is allocated.
JOB_GRAPH_MAX_VERTICES = option(
    "jobmanager.job-graph.max-vertices", INT, 10_000, "Most vertices a job graph may have.", min=1
)
JOB_GRAPH_MAX_PARALLELISM = option(
    "jobmanager.job-graph.max-parallelism",
    INT,
    100_000,
    "Largest parallelism of one vertex of a job graph (its max parallelism bounds it too).",
    min=1,
)
JOB_GRAPH_MAX_SUBTASKS = option(
    "jobmanager.job-graph.max-subtasks",
    INT,
    1_000_000,
    "Most subtasks (the sum of the vertices' parallelisms) a job graph may have.",
    min=1,
)
JOB_GRAPH_MAX_EDGES = option(
    "jobmanager.job-graph.max-edges",
    INT,
    100_000,
    "Most edges (vertex inputs) a job graph may have; one ALL_TO_ALL edge counts once.",
    min=1,
)
DEPLOYMENT_OFFLOAD_MIN_PARTITIONS = option(
    "jobmanager.deployment.offload-min-partitions",
    INT,
    64,
    "An input gate of at least this many partitions that its consumers share is not copied "
    "into each task deployment: each task executor fetches it once from the JobMaster and "
    "caches it for the job (like Flink's offloading of large descriptors to its blob server).",
    job_overridable=True,
    min=1,
)
FAILOVER_STRATEGY = option(
    "jobmanager.execution.failover-strategy",
    STRING,
    "region",
    "What a task failure restarts: 'region' only the tasks connected to the failed one by "
    "data exchanges, 'full' the whole job.",
    job_overridable=True,
    choices=("region", "full"),
)
RESTART_STRATEGY_TYPE = option(
    "restart-strategy.type",
    STRING,
    "exponential-delay",
    "How a failed job is restarted. 'off' and 'disable' mean 'none'; 'fixeddelay', "
    "'failurerate' and 'exponentialdelay' are accepted for the hyphenated names. The default "
    "differs from Flink's ('none' unless checkpointing is on): a Flink job without checkpoints "
    "has nothing to restart from, while a sparkmill batch job restarts from the finished "
    "results of its other regions, so a lost task executor or a transient task failure costs "
    "a partial re-run instead of the job (as Spark retries tasks and Dask reschedules a lost "
    "worker's tasks). A failure that no restart can fix still fails the job at once, see "
    "restart-strategy.fail-on-repeated-error.",
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
RESTART_STRATEGY_FAIL_ON_REPEATED_ERROR = option(
    "restart-strategy.fail-on-repeated-error",
    BOOL,
    True,
    "Whatever the restart strategy, a subtask whose attempt raises the same error (exception "
    "type and first line of its message) as its previous failed attempt fails the job at once "
    "with that error as the root cause: a user's bug does not retry for minutes. Errors no "
    "restart can fix (a source path that matches no file, a Spark AnalysisException, a "
    "pipeline error) fail it on the first attempt; lost task executors, slots and results and "
    "RPC failures are never counted here. Turn off for a transform whose identical errors can "
    "be transient (e.g. a remote call timing out).",
    job_overridable=True,
)
RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS = option(
    "restart-strategy.fixed-delay.attempts",
    INT,
    1,
    "fixed-delay: restarts allowed before the job fails for good.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_FIXED_DELAY_DELAY = option(
    "restart-strategy.fixed-delay.delay",
    DURATION,
    1.0,
    "fixed-delay: pause before each restart.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_FAILURE_RATE_MAX_FAILURES = option(
    "restart-strategy.failure-rate.max-failures-per-interval",
    INT,
    1,
    "failure-rate: failures tolerated within one interval before the job fails for good.",
    job_overridable=True,
    min=1,
)
RESTART_STRATEGY_FAILURE_RATE_INTERVAL = option(
    "restart-strategy.failure-rate.failure-rate-interval",
    DURATION,
    60.0,
    "failure-rate: the sliding window in which failures are counted.",
    job_overridable=True,
    min=MS,
)
RESTART_STRATEGY_FAILURE_RATE_DELAY = option(
    "restart-strategy.failure-rate.delay",
    DURATION,
    1.0,
    "failure-rate: pause before each restart.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_EXP_INITIAL_BACKOFF = option(
    "restart-strategy.exponential-delay.initial-backoff",
    DURATION,
    0.2,
    "exponential-delay: pause before the first restart. 200 ms (Flink: 1 s): a lost task "
    "executor is found in well under a second and its slots are then already written off, so "
    "every second of pause adds a second to a job that lost a machine; the pause doubles, so "
    "a transient trouble that outlasts the first restart is met by longer ones.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_EXP_MAX_BACKOFF = option(
    "restart-strategy.exponential-delay.max-backoff",
    DURATION,
    30.0,
    "exponential-delay: the growing pause never exceeds this; must be at least the initial "
    "backoff. 30 s: long enough for a restarted task executor or a storage blip to come "
    "back, short against the minutes a batch job runs.",
    job_overridable=True,
    min=0,
)
RESTART_STRATEGY_EXP_BACKOFF_MULTIPLIER = option(
    "restart-strategy.exponential-delay.backoff-multiplier",
    FLOAT,
    2.0,
    "exponential-delay: factor applied to the pause after every restart. 2 (Flink: 1.5): "
    "from the short first pause the pause reaches max-backoff by the eighth restart.",
    job_overridable=True,
    min=1.0,
)
RESTART_STRATEGY_EXP_RESET_BACKOFF_THRESHOLD = option(
    "restart-strategy.exponential-delay.reset-backoff-threshold",
    DURATION,
    600.0,
    "exponential-delay: a job that runs this long without failing starts over at the "
    "initial backoff and attempt count. 10 min (Flink: 1 h, for streaming jobs that run for "
    "months): failures of a batch job that far apart are unrelated.",
    job_overridable=True,
    min=MS,
)
RESTART_STRATEGY_EXP_JITTER_FACTOR = option(
    "restart-strategy.exponential-delay.jitter-factor",
    FLOAT,
    0.1,
    "exponential-delay: each pause varies randomly by up to this fraction, so that many jobs "
    "do not restart in lockstep.",
    job_overridable=True,
    min=0.0,
    max=1.0,
)
RESTART_STRATEGY_EXP_ATTEMPTS_BEFORE_RESET = option(
    "restart-strategy.exponential-delay.attempts-before-reset-backoff",
    INT,
    10,
    "exponential-delay: restarts allowed before the job fails for good (counted since the "
    "last backoff reset). Failures that happen while a restart is still pending (the "
    "tasks of one lost task executor, say) count as one. 10 (Flink: unbounded, for "
    "streaming): with the other defaults the job gives up after about 111 s of pauses in "
    "all, where a batch job that keeps losing its machines would otherwise never end.",
    job_overridable=True,
    min=1,
)

# --------------------------------------------------------------------------------------------
group(
    "Adaptive batch execution",
    "Parallelism decided from the data (Flink's adaptive batch scheduler). A vertex whose "
    "parallelism the pipeline does not set (neither `Pipeline(parallelism=...)` nor "
    "`set_parallelism`) gets one decided from the data: a source from the size of the files it "
    "reads when its job starts, every other vertex from the bytes its inputs wrote, once they "
    "have finished. Each key may be set per job.",
)

AUTO_PARALLELISM_ENABLED = option(
    "execution.batch.adaptive.auto-parallelism.enabled",
    BOOL,
    True,
    "Decide the parallelism of the vertices the pipeline leaves open. Off: they all run with "
    "`default-source-parallelism`.",
    job_overridable=True,
)
AUTO_PARALLELISM_MIN = option(
    "execution.batch.adaptive.auto-parallelism.min-parallelism",
    INT,
    1,
    "The fewest subtasks a decided vertex gets.",
    job_overridable=True,
    min=1,
)
AUTO_PARALLELISM_MAX = option(
    "execution.batch.adaptive.auto-parallelism.max-parallelism",
    INT,
    128,
    "The most subtasks a decided vertex gets (also bounded by the vertex's max parallelism "
    "and `jobmanager.job-graph.max-parallelism`). 128, as in Flink.",
    job_overridable=True,
    min=1,
)
AUTO_PARALLELISM_AVG_DATA_VOLUME = option(
    "execution.batch.adaptive.auto-parallelism.avg-data-volume-per-task",
    MEMORY,
    256 * MIB,
    "How much input one subtask should get. 256 MiB (Flink: 16 MiB): each subtask of this "
    "data plane is a Spark job that spreads its input over all the cores of its task "
    "executor and costs about a second of fixed work, so fewer, larger subtasks win; at "
    "1 GB four subtasks ran within 6 % of plain PySpark, at 50-100 MB one subtask was fastest.",
    job_overridable=True,
    min=1,
)
AUTO_PARALLELISM_DEFAULT_SOURCE = option(
    "execution.batch.adaptive.auto-parallelism.default-source-parallelism",
    INT,
    2,
    "The parallelism of a source whose size the JobMaster cannot find (a range, a database "
    "table, files on a file system other than the local one) and of every open vertex when "
    "automatic parallelism is off. 2: what such vertices ran with before parallelism was "
    "decided.",
    job_overridable=True,
    min=1,
)

SKEWED_JOIN_STRATEGY = option(
    "table.optimizer.skewed-join-optimization.strategy",
    STRING,
    "auto",
    "Split a skewed sub-partition of a hash join across several subtasks when the join's "
    "vertex is decided late (Flink's adaptive skewed join optimization): each reads the "
    "skewed input's rows from some of its producers and the other input's rows of that "
    "sub-partition whole. 'auto': where the join type allows it (inner: either side; left, "
    "left_semi, left_anti: the left; right: the right; never full) and nothing after the join "
    "in its vertex needs all rows of a key (only select, where, with_column, drop and renames "
    "may follow). 'none': never.",
    job_overridable=True,
    choices=("auto", "none"),
)
SKEWED_JOIN_FACTOR = option(
    "table.optimizer.skewed-join-optimization.skewed-factor",
    FLOAT,
    4.0,
    "A sub-partition is skewed when one input holds more than this times the median of that "
    "input's sub-partitions in it (and more than `skewed-threshold`). 4, as in Flink.",
    job_overridable=True,
    min=1.0,
)
SKEWED_JOIN_THRESHOLD = option(
    "table.optimizer.skewed-join-optimization.skewed-threshold",
    MEMORY,
    256 * MIB,
    "A sub-partition is skewed only when one input holds more than this in it. 256 MiB, as "
    "in Flink, and the `avg-data-volume-per-task` of this data plane: a smaller sub-partition "
    "is no longer than a subtask's usual share.",
    job_overridable=True,
    min=1,
)

# --------------------------------------------------------------------------------------------
group(
    "Speculative execution",
    "A subtask that runs much longer than the finished subtasks of its vertex gets a second "
    "attempt on another task executor; the first attempt to finish wins and the others are "
    "cancelled (Flink's speculative execution, FLIP-168). The task executor of a slow attempt "
    "is blocked for new slots a while (Flink's blocklist, FLIP-224). Each key may be set per job.",
)

SPECULATIVE_ENABLED = option(
    "execution.batch.speculative.enabled",
    BOOL,
    False,
    "Run speculative attempts of slow subtasks. Off, as in Flink and Spark: a speculative "
    "attempt repeats all the work of its subtask on a slot another subtask could use.",
    job_overridable=True,
)
SPECULATIVE_MAX_CONCURRENT = option(
    "execution.batch.speculative.max-concurrent-executions",
    INT,
    2,
    "The most attempts of one subtask that run at the same time (the original included).",
    job_overridable=True,
    min=2,
    max=16,
)
SPECULATIVE_BLOCK_DURATION = option(
    "execution.batch.speculative.block-slow-node-duration",
    DURATION,
    60.0,
    "How long the task executor of a slow attempt gets no new slot of the job. 0 blocks "
    "nothing (the speculative attempt then only avoids the slow attempt's own executor).",
    job_overridable=True,
    min=0,
)
SLOW_TASK_CHECK_INTERVAL = option(
    "slow-task-detector.check-interval",
    DURATION,
    1.0,
    "How often the JobMaster looks for slow attempts.",
    job_overridable=True,
    min=10 * MS,
)
SLOW_TASK_BASELINE_LOWER_BOUND = option(
    "slow-task-detector.execution-time.baseline-lower-bound",
    DURATION,
    10.0,
    "An attempt is never slow before it has run this long. 10 s (Flink: 1 min): a subtask "
    "here has about a second of fixed cost and its time varies by seconds with the load of "
    "its machine; below that, speculation would mostly repeat work for noise.",
    job_overridable=True,
    min=0,
)
SLOW_TASK_BASELINE_RATIO = option(
    "slow-task-detector.execution-time.baseline-ratio",
    FLOAT,
    0.75,
    "The share of a vertex's subtasks that must have finished before any of its running "
    "attempts can be found slow.",
    job_overridable=True,
    min=0.0,
    max=1.0,
)
SLOW_TASK_BASELINE_MULTIPLIER = option(
    "slow-task-detector.execution-time.baseline-multiplier",
    FLOAT,
    1.5,
    "An attempt is slow once it has run longer than this times the median time of the "
    "vertex's finished subtasks (and the lower bound).",
    job_overridable=True,
    min=1.0,
)
