"""The ``sparkmill`` command's exit codes, one meaning each, so scripts can tell a failed job
from a bad command line from an unreachable cluster."""

from __future__ import annotations

EXIT_OK = 0  # success (for a job: it FINISHED)
EXIT_JOB_FAILED = 1  # the job failed or was cancelled
EXIT_USAGE = 2  # bad usage, bad configuration, a pipeline file that cannot be loaded
EXIT_UNREACHABLE = 3  # the cluster could not be reached (or a local cluster did not come up)
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT

__all__ = ["EXIT_INTERRUPTED", "EXIT_JOB_FAILED", "EXIT_OK", "EXIT_UNREACHABLE", "EXIT_USAGE"]
