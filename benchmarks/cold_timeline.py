"""Where the time of one cold run goes: plain PySpark against ``sparkmill run``, phase by phase.

    PYTHONPATH=. python benchmarks/cold_timeline.py --mb 50
    PYTHONPATH=. python benchmarks/cold_timeline.py --mb 50 --repo /path/to/other/checkout

Runs the job of ``bench_vs_pyspark.py``'s cold case once per side, one after the other: the
plain PySpark script (the same DataFrame code, with a timestamp printed after its imports,
after ``getOrCreate`` and after the job) and ``sparkmill run examples/wordcount.py`` with its
cluster directory kept. Both sides write a Spark event log (through a ``spark-defaults.conf``
in a ``SPARK_CONF_DIR`` of their own; the log costs both sides the same little). The phase
boundaries come from:

* the wall clock of this script: process start, each line the process prints, its exit;
* a poller of ``/proc`` (every 0.1 s): when each descendant process (the four services, the
  Spark JVM) appeared and disappeared;
* the service logs of ``sparkmill run`` (first line of each service = its imports done, "Spark
  session created", the job's end);
* the Spark event log: each Spark job's start and end, and for a sparkmill task its vertex
  (the job description the task executor sets); the session's warm-up jobs have no group.

Prints both timelines and the table "phase: plain / sparkmill / difference", whose differences
add up to the whole-process gap.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_vs_pyspark import PLAIN_WORDCOUNT  # noqa: E402
from bench_wordcount import generate  # noqa: E402
from spark_event_summary import _lines  # noqa: E402

from sparkmill.local_cluster import process_tree  # noqa: E402

# The plain script with timestamps: its own code, unchanged, between them.
PLAIN_MAIN = """
import sys, time
print("MARK start", time.time(), flush=True)
namespace = {}
exec(open(sys.argv[1]).read().split('if __name__ == "__main__":')[0], namespace)
print("MARK imports", time.time(), flush=True)
spark = namespace["session"]()
print("MARK session", time.time(), flush=True)
rows = namespace["wordcount"](spark, sys.argv[2], sys.argv[3])
print("MARK job", time.time(), flush=True)
spark.stop()
print("MARK stopped", time.time(), flush=True)
"""

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


# -- observation ---------------------------------------------------------------------------------


class ProcessPoller(threading.Thread):
    """First and last time each descendant of ``root`` was seen, with its command line."""

    def __init__(self, root: int, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.root, self.period_s = root, period_s
        self.seen: dict[int, dict[str, Any]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            now = time.time()
            for pid, cmd in self._descendants().items():
                entry = self.seen.setdefault(pid, {"first": now, "cmd": cmd, "cpu": 0.0})
                entry["last"] = now
                # The latest (spark-class execs the JVM in its own process), not a zombie's "".
                entry["cmd"] = cmd if cmd.strip() else entry["cmd"]
                entry["cpu"] = _cpu_seconds(pid, entry["cpu"])
            self.done.wait(self.period_s)

    def _descendants(self) -> dict[int, str]:
        """The command line of the root (marked ``main``: the CLI, the plain driver) and of
        each of its descendants still there."""
        found = {}
        for pid in process_tree(self.root):
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            command = raw.replace(b"\0", b" ").decode(errors="replace")
            found[pid] = f"main {command}" if pid == self.root else command
        return found


def _cpu_seconds(pid: int, last: float) -> float:
    """User + system CPU seconds of ``pid`` so far (``last`` once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return last
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_observed(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``command``; every output line with its wall-clock time, and the process tree."""
    started = time.time()
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    poller = ProcessPoller(proc.pid)
    poller.start()
    lines: list[tuple[float, str]] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.time(), line.rstrip("\n")))
    code = proc.wait()
    ended = time.time()
    poller.done.set()
    poller.join()
    if code != 0:
        print("\n".join(text for _, text in lines[-40:]), file=sys.stderr)
        raise RuntimeError(f"{' '.join(command)} failed ({code})")
    return {"start": started, "end": ended, "lines": lines, "procs": poller.seen}


def first_line(lines: list[tuple[float, str]], pattern: str) -> float | None:
    return next((t for t, text in lines if re.search(pattern, text)), None)


def spark_jobs(event_dir: Path) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Every Spark job (group, description, start, end; ms to s) and the application's start
    and end, from the event logs under ``event_dir``."""
    jobs: dict[tuple[str, int], dict[str, Any]] = {}
    app: dict[str, float] = {}
    for log in sorted(event_dir.iterdir()):
        if not log.name.startswith(("eventlog", "local-", "app-")):
            continue
        for line in _lines(str(log)):
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerApplicationStart":
                app["start"] = event["Timestamp"] / 1000
            elif kind == "SparkListenerApplicationEnd":
                app["end"] = event["Timestamp"] / 1000
            elif kind == "SparkListenerJobStart":
                props = event.get("Properties") or {}
                jobs[(log.name, event["Job ID"])] = {
                    "group": props.get("spark.jobGroup.id", "-"),
                    "description": props.get("spark.job.description", ""),
                    "start": event["Submission Time"] / 1000,
                    "end": event["Submission Time"] / 1000,
                }
            elif kind == "SparkListenerJobEnd" and (log.name, event["Job ID"]) in jobs:
                jobs[(log.name, event["Job ID"])]["end"] = event["Completion Time"] / 1000
    return sorted(jobs.values(), key=lambda j: j["start"]), app


def log_lines(path: Path) -> list[tuple[float, str]]:
    out = []
    for text in path.read_text(errors="replace").splitlines():
        match = LOG_TIME.match(text)
        if match:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((stamp, text[match.end() :]))
    return out


# -- the two sides -------------------------------------------------------------------------------


def spark_env(base: dict[str, str], events: Path) -> dict[str, str]:
    conf_dir = events.parent / f"{events.name}-conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    events.mkdir(parents=True, exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.eventLog.enabled true\nspark.eventLog.dir {events.resolve().as_uri()}\n"
    )
    return {**base, "SPARK_CONF_DIR": str(conf_dir)}


def java_window(procs: dict[int, dict[str, Any]]) -> tuple[float | None, float | None]:
    javas = [p for p in procs.values() if re.search(r"(^|/)java ", p["cmd"])]
    if not javas:
        return None, None
    return min(p["first"] for p in javas), max(p["last"] for p in javas)


def plain_side(work: Path, source: str, env: dict[str, str]) -> dict[str, Any]:
    script, main = work / "plain_wordcount.py", work / "plain_timed.py"
    script.write_text(PLAIN_WORDCOUNT)
    main.write_text(PLAIN_MAIN)
    events = work / "plain-events"
    shutil.rmtree(events, ignore_errors=True)
    run = run_observed(
        [sys.executable, str(main), str(script), source, str(work / "plain-out")],
        spark_env(env, events),
    )
    marks = {
        text.split()[1]: float(text.split()[2]) for _, text in run["lines"] if text[:5] == "MARK "
    }
    jobs, _ = spark_jobs(events)
    jvm, _ = java_window(run["procs"])
    return {
        "start": run["start"],
        "end": run["end"],
        "points": [
            ("interpreter up", marks["start"]),
            ("imports done", marks["imports"]),
            ("Spark JVM launched", jvm),
            ("Spark session usable", marks["session"]),
            ("first Spark job starts", jobs[0]["start"] if jobs else None),
            ("job done (last Spark job ends)", marks["job"]),
            ("session stopped", marks["stopped"]),
            ("process exit", run["end"]),
        ],
        "spark_jobs": len(jobs),
        "spark_busy": sum(j["end"] - j["start"] for j in jobs),
        "procs": run["procs"],
    }


def sparkmill_side(
    work: Path, source: str, env: dict[str, str], repo: Path, parallelism: int
) -> dict[str, Any]:
    cluster = work / "sparkmill-cluster"
    example = repo / "examples" / "wordcount.py"
    if parallelism:  # the same example with another parallelism (an experiment)
        text = example.read_text()
        example = work / f"wordcount_p{parallelism}.py"
        example.write_text(text.replace("parallelism=4", f"parallelism={parallelism}"))
    events = work / "sparkmill-events"
    for path in (cluster, events):
        shutil.rmtree(path, ignore_errors=True)
    run_env = {**spark_env(env, events), "WORDCOUNT_INPUT": source}
    run_env["WORDCOUNT_OUTPUT"] = str(work / "sparkmill-out")
    sparkmill = str(Path(sys.executable).parent / "sparkmill")
    command = [sparkmill, "run", "--dir", str(cluster), str(example)]
    run = run_observed(command, run_env)
    lines = run["lines"]
    logs = {p.stem: log_lines(p) for p in (cluster / "logs").glob("*.log")}
    services_up = [entries[0][0] for entries in logs.values() if entries]
    te = logs.get("task-executor-0", [])
    created = first_line(te, r"Spark session created")
    warm = first_line(te, r"Spark session up and warm")
    jobs, app = spark_jobs(events)
    tasks = [j for j in jobs if j["group"] != "-"]
    warmups = [j for j in jobs if j["group"] == "-"]
    jvm, _ = java_window(run["procs"])
    ended = first_line(lines, r"^job \S+ (FINISHED|FAILED|CANCELED)")
    service_exits = [
        p["last"] for p in run["procs"].values() if re.search(r"-m sparkmill ", p["cmd"])
    ]
    return {
        "start": run["start"],
        "end": run["end"],
        "points": [
            ("pipeline loaded (CLI imports, graph built)", first_line(lines, r"^starting a local")),
            ("first service up (imports done)", min(services_up, default=None)),
            ("Spark JVM launched", jvm),
            ("last service up", max(services_up, default=None)),
            ("job submitted (cluster ready)", first_line(lines, r"^submitted job")),
            ("first subtask running", first_line(lines, r"\d+ running")),
            ("Spark session usable", created),
            ("first Spark job of a subtask starts", tasks[0]["start"] if tasks else None),
            ("warm-up done", warm),
            ("last Spark job of a subtask ends", max((j["end"] for j in tasks), default=None)),
            ("job FINISHED (client sees it)", ended),
            ("last output line", lines[-1][0] if lines else None),
            ("Spark session stopped (event log)", app.get("end")),
            ("last service process gone", max(service_exits, default=None)),
            ("process exit", run["end"]),
        ],
        "vertices": vertex_table(tasks),
        "spark_jobs": len(tasks),
        "warmup_jobs": len(warmups),
        "warmup_window": (
            (warmups[0]["start"], max(j["end"] for j in warmups)) if warmups else None
        ),
        "spark_busy": sum(j["end"] - j["start"] for j in tasks),
        "procs": run["procs"],
    }


def vertex_table(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per vertex (the description before " (i/n)"): subtasks, Spark jobs, first start, last
    end, and the seconds of Spark jobs (summed over subtasks, overlapping ones counted each)."""
    by_vertex: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for job in tasks:
        by_vertex[job["description"].split(" (")[0]].append(job)
    rows = []
    for name, members in by_vertex.items():
        rows.append(
            {
                "vertex": name,
                "subtasks": len({j["group"] for j in members}),
                "jobs": len(members),
                "start": min(j["start"] for j in members),
                "end": max(j["end"] for j in members),
                "busy": sum(j["end"] - j["start"] for j in members),
            }
        )
    return sorted(rows, key=lambda r: r["start"])


# -- report --------------------------------------------------------------------------------------


def _kind(cmd: str) -> str:
    if re.search(r"(^|/)java ", cmd):
        return "JVM"
    role = re.search(r"sparkmill (dispatcher|resource-manager|job-master|task-executor) ", cmd)
    if role:
        return role.group(1)
    if cmd.startswith("main "):
        return "main process"
    return "Python workers" if "pyspark" in cmd or "daemon" in cmd else "other"


def print_timeline(title: str, side: dict[str, Any]) -> None:
    cpu = sum(p["cpu"] for p in side["procs"].values())
    print(
        f"\n{title}: {side['end'] - side['start']:.1f} s, {side['spark_jobs']} Spark jobs, "
        f"{cpu:.1f} CPU-s in its processes (the JVM's included)"
    )
    kinds: dict[str, float] = defaultdict(float)
    for proc in side["procs"].values():
        kinds[_kind(proc["cmd"])] += proc["cpu"]
    print("  CPU-s: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items())))
    for name, stamp in sorted(side["points"], key=lambda p: p[1] or float("inf")):
        at = f"{stamp - side['start']:7.2f}" if stamp is not None else "      -"
        print(f"  {at} s  {name}")


def phase(side: dict[str, Any], begin: str, end: str) -> float:
    points = {name: stamp for name, stamp in side["points"]}
    first = side["start"] if begin == "start" else points[begin]
    last = side["end"] if end == "exit" else points[end]
    return float(last - first) if first is not None and last is not None else float("nan")


def print_sparkmill(ours: dict[str, Any]) -> None:
    print_timeline("sparkmill run", ours)
    if ours["warmup_window"]:
        begin, end = ours["warmup_window"]
        print(
            f"  warm-up: {ours['warmup_jobs']} Spark jobs from {begin - ours['start']:.2f} s "
            f"to {end - ours['start']:.2f} s"
        )
    print("\n| vertex | subtasks | Spark jobs | first start s | last end s | Spark job s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in ours["vertices"]:
        print(
            f"| {row['vertex']} | {row['subtasks']} | {row['jobs']} | "
            f"{row['start'] - ours['start']:.1f} | {row['end'] - ours['start']:.1f} | "
            f"{row['busy']:.1f} |"
        )


# Phase boundaries: (plain's, sparkmill's when it names them differently).
PHASES = [
    ("start -> Spark JVM launched", ("start", "Spark JVM launched"), None),
    ("JVM launched -> Spark session usable", ("Spark JVM launched", "Spark session usable"), None),
    (
        "session usable -> first Spark job",
        ("Spark session usable", "first Spark job starts"),
        ("Spark session usable", "first Spark job of a subtask starts"),
    ),
    (
        "first Spark job -> job done",
        ("first Spark job starts", "job done (last Spark job ends)"),
        ("first Spark job of a subtask starts", "job FINISHED (client sees it)"),
    ),
    (
        "job done -> process exit",
        ("job done (last Spark job ends)", "exit"),
        ("job FINISHED (client sees it)", "exit"),
    ),
]


def print_phases(plain: dict[str, Any], ours: dict[str, Any]) -> None:
    print("\n| phase | plain s | sparkmill s | difference s |")
    print("| --- | --- | --- | --- |")
    for name, plain_span, ours_span in PHASES:
        a = phase(plain, *plain_span)
        b = phase(ours, *(ours_span or plain_span))
        print(f"| {name} | {a:.1f} | {b:.1f} | {b - a:+.1f} |")
    total_a, total_b = plain["end"] - plain["start"], ours["end"] - ours["start"]
    print(f"| whole process | {total_a:.1f} | {total_b:.1f} | {total_b - total_a:+.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "sparkmill-cold")
    parser.add_argument("--repo", type=Path, default=ROOT, help="the sparkmill checkout to run")
    parser.add_argument("--json", type=Path, help="also write both timelines here")
    parser.add_argument(
        "--parallelism", type=int, default=0, help="run the example with this parallelism"
    )
    parser.add_argument("--only", choices=("plain", "sparkmill"), help="run one side only")
    args = parser.parse_args()
    repo = args.repo.resolve()
    source = f"{generate(args.dir, args.mb)}/*.txt"
    work = args.dir / "timeline"
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    load = [os.getloadavg()[0]]
    plain = ours = None
    if args.only != "sparkmill":
        plain = plain_side(work, source, env)
        load.append(os.getloadavg()[0])
    if args.only != "plain":
        ours = sparkmill_side(work, source, env, repo, args.parallelism)
        load.append(os.getloadavg()[0])
    print(
        f"sparkmill from {repo}; {args.mb} MB; 1-minute load "
        + " / ".join(f"{x:.1f}" for x in load)
    )
    if plain is not None:
        print_timeline("plain PySpark", plain)
    if ours is not None:
        print_sparkmill(ours)
    if plain is not None and ours is not None:
        print_phases(plain, ours)
    if args.json:
        args.json.write_text(json.dumps({"plain": plain, "sparkmill": ours, "load": load}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
