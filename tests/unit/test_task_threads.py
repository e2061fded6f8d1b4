"""Unit tests: task attempts run on threads of their own, reused once an attempt ended."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from sparkmill.services.taskexecutor.task_threads import TaskThreads

WAIT_S = 5.0


def _until(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return False


def test_an_ended_attempts_thread_runs_the_next_one_under_its_name() -> None:
    threads = TaskThreads()
    seen: list[tuple[int, str]] = []
    done = threading.Event()

    def work() -> None:
        seen.append((threading.get_ident(), threading.current_thread().name))
        done.set()

    threads.run(work, "task-a-0")
    assert done.wait(WAIT_S)
    done.clear()
    assert _until(lambda: threads._idle == 1)
    threads.run(work, "task-b-1")
    assert done.wait(WAIT_S)

    assert [name for _, name in seen] == ["task-a-0", "task-b-1"]
    assert seen[0][0] == seen[1][0] and threads.started == 1


def test_a_blocked_attempt_never_holds_up_another() -> None:
    threads = TaskThreads()
    release = threading.Event()
    second_ran = threading.Event()

    def slow() -> None:
        release.wait(WAIT_S)

    threads.run(slow, "task-slow-0")
    threads.run(second_ran.set, "task-fast-0")

    assert second_ran.wait(WAIT_S)  # on a new thread: the first one still blocks
    assert threads.started == 2
    release.set()


def test_idle_threads_exit_after_the_timeout_and_new_work_still_runs() -> None:
    threads = TaskThreads(idle_timeout_s=0.05)
    ran: list[threading.Thread] = []
    threads.run(lambda: ran.append(threading.current_thread()), "task-a-0")
    assert _until(lambda: len(ran) == 1)
    assert _until(lambda: not ran[0].is_alive())
    assert threads._idle == 0

    threads.run(lambda: ran.append(threading.current_thread()), "task-b-0")
    assert _until(lambda: len(ran) == 2) and threads.started == 2


def test_work_that_raises_is_logged_as_a_bug_and_the_thread_serves_on() -> None:
    threads = TaskThreads()
    ran = threading.Event()

    def broken() -> None:
        raise RuntimeError("a task must report its own failures")

    threads.run(broken, "task-broken-0")
    assert _until(lambda: threads._idle == 1)
    threads.run(ran.set, "task-next-0")
    assert ran.wait(WAIT_S) and threads.started == 1
