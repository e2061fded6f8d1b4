"""The ``sparkmill`` command line, one module per command group.

::

    sparkmill run PIPELINE.py [-- ARGS...]              # embedded local cluster, run, tear down
    sparkmill explain PIPELINE.py [-- ARGS...] [--json] # the job it becomes; no cluster, no JVM
    sparkmill local-cluster up --dir DIR [--task-executors N] [--slots N]
    sparkmill local-cluster down --dir DIR
    sparkmill --config FILE submit PIPELINE.py [--detach] [--json] [-- ARGS...]
    sparkmill --config FILE jobs list|status JOB|cancel JOB|wait JOB [--json]
    sparkmill --config FILE cluster status [--json]
    sparkmill keys generate --dir DIR [--role ROLE --name NAME] | keys list --dir DIR
    sparkmill dispatcher|resource-manager|job-master|task-executor --config FILE
    sparkmill pipeline-worker [--fd N | --peer-user USER]   # started for a task executor

``--config FILE`` (or ``$SPARKMILL_CONFIG``) and ``-D KEY=VALUE`` go before or after the
command; with ``--json`` errors are JSON on stdout too. Exit codes: 0 success (job FINISHED),
1 the job failed or was cancelled, 2 bad usage, bad configuration or a pipeline file that cannot
be loaded, 3 the cluster could not be reached.

Modules: :mod:`~sparkmill.cli.main` (parser and dispatch), :mod:`~sparkmill.cli.options` (the
shared options and help format), :mod:`~sparkmill.cli.jobs` (``run``, ``submit``, ``jobs``),
:mod:`~sparkmill.cli.explain` (``explain``), :mod:`~sparkmill.cli.cluster` (``cluster status``),
:mod:`~sparkmill.cli.local_cluster` (``local-cluster up|down``), :mod:`~sparkmill.cli.keys`
(``keys``), :mod:`~sparkmill.cli.output` (JSON, text and progress rendering),
:mod:`~sparkmill.cli.pipeline_loading` (pipeline files) and :mod:`~sparkmill.cli.exit_codes`.
The console script ``sparkmill`` and ``python -m sparkmill`` call :func:`main`.
"""

from sparkmill.cli.main import build_parser, main
from sparkmill.cli.pipeline_loading import PipelineLoadError, load_pipeline

__all__ = ["PipelineLoadError", "build_parser", "load_pipeline", "main"]
