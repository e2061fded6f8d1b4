"""``scripts/check_deploy.sh``, run once per session: started early in the background when the
cheaper tiers run in the same session, or in the foreground by the test that needs it.

The check is one Ansible process on one core for about two minutes; the unit tier beside it
leaves most of the second core idle (its tests mostly wait on timers), so started at collection
the check is done, or nearly, when the deploy tier's turn comes. Its output goes to a file and
the test reads it whole, exactly as from a foreground run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_deploy.sh"
TIMEOUT_S = 850.0


@dataclass(frozen=True)
class CheckResult:
    returncode: int
    output: str
    ran_s: float  # from its start to its end (or to now, when it was stopped)
    waited_s: float  # how long the test waited for it


class _Check:
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    started = 0.0  # wall clock, to compare with the log's last write

    @classmethod
    def start(cls) -> None:
        if cls.process is not None:
            return
        env = dict(os.environ)
        # The venv running the tests is the project's: the script installs Ansible into it.
        env.setdefault("VENV", str(Path(sys.prefix)))
        cls.started = time.time()
        fd, name = tempfile.mkstemp(prefix="sparkmill-check-deploy-", suffix=".log")
        cls.log = Path(name)
        with os.fdopen(fd, "wb") as log:
            cls.process = subprocess.Popen(
                ["bash", str(SCRIPT)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: ``stop`` ends Ansible's too
            )

    @classmethod
    def result(cls) -> CheckResult:
        """The check's exit code and output: the background run's if one was started, else a
        run started now."""
        cls.start()
        assert cls.process is not None and cls.log is not None
        asked = time.monotonic()
        try:
            returncode = cls.process.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            cls.end_process()  # the log stays: its output says where the check hung
            returncode = -1
        ended = time.monotonic()
        ran = cls.log.stat().st_mtime - cls.started  # to its last output
        output = cls.log.read_text(encoding="utf-8", errors="replace")
        if returncode == -1:
            output += f"\ncheck_deploy.sh did not end within {TIMEOUT_S:.0f} s: stopped"
        return CheckResult(returncode, output, ran_s=ran, waited_s=ended - asked)

    @classmethod
    def stop(cls) -> None:
        """Ends a check still running (the session stopped before the deploy tier) and removes
        its log."""
        cls.end_process()
        if cls.log is not None:
            cls.log.unlink(missing_ok=True)

    @classmethod
    def end_process(cls) -> None:
        if cls.process is not None and cls.process.poll() is None:
            for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, None)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(cls.process.pid, sig)
                try:
                    cls.process.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue


def start_in_background() -> None:
    _Check.start()


def check_result() -> CheckResult:
    return _Check.result()


def stop() -> None:
    _Check.stop()
