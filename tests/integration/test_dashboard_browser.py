"""The web dashboard in headless Chromium against a real local cluster: what a person sees.

Uses Debian's ``chromium`` and ``chromium-driver`` through Selenium with explicit paths, so
nothing is downloaded at run time. Screenshots go to ``build/test-artifacts/dashboard/`` (or
``$SPARKMILL_TEST_ARTIFACTS``), outside pytest's temporary directories and ignored by git.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkmill.common.core.ids import new_dataset_id, new_job_id, new_vertex_id
from sparkmill.common.jobgraph.model import (
    NOOP_OPERATOR_KIND,
    DistributionPattern,
    IntermediateDataSet,
    JobEdge,
    JobGraph,
    JobVertex,
    OperatorSpec,
)
from sparkmill.common.pipeline.noop import NoOpOptions, encode_noop_payload
from sparkmill.common.rpc.keys import rest_token_of
from sparkmill.local_cluster import LocalCluster
from sparkmill.testing import noop_pipeline
from tests.integration.conftest import start_local_cluster
from tests.integration.rest_helpers import submit, use_token, wait_for_state

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)
GRAFANA = "http://grafana.example:3000"
ARTIFACTS = (
    Path(
        os.environ.get("SPARKMILL_TEST_ARTIFACTS")
        or Path(__file__).resolve().parents[2] / "build" / "test-artifacts"
    )
    / "dashboard"
)


def _missing() -> str:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.exists():
            return f"{path} is missing (apt-get install {package}; scripts/bootstrap.sh does)"
    return ""


if _missing():
    pytest.skip(_missing(), allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import StaleElementReferenceException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@dataclass
class DiamondPipeline:
    """Two sources joined, then a sink: a graph with fan-in and both edge patterns."""

    name: str
    sleep_s: float

    def build_job_graph(self) -> JobGraph:
        payload = encode_noop_payload(NoOpOptions(self.sleep_s, 0))
        graph = JobGraph(new_job_id(), self.name)

        def vertex(name: str, parallelism: int, *inputs: tuple[JobVertex, str]) -> JobVertex:
            new = JobVertex(
                new_vertex_id(), name, parallelism, OperatorSpec(NOOP_OPERATOR_KIND, payload)
            )
            for source, pattern in inputs:
                dataset = IntermediateDataSet(new_dataset_id(), source.id)
                source.produced.append(dataset)
                new.inputs.append(JobEdge(dataset.id, new.id, DistributionPattern[pattern]))
            graph.vertices.append(new)
            return new

        orders = vertex("read orders", 2)
        customers = vertex("read customers", 1)
        joined = vertex("join", 2, (orders, "ALL_TO_ALL"), (customers, "ALL_TO_ALL"))
        vertex("write report", 2, (joined, "POINTWISE"))
        return graph


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # With ZooKeeper and a standby of each control process, as in production.
    running = start_local_cluster(
        tmp_path_factory.mktemp("web"),
        task_executors=2,
        slots=2,
        ha=True,
        standbys=1,
        extra_config={"web.grafana-url": GRAFANA},
    )
    yield running
    running.stop()


@pytest.fixture(scope="module")
def base(cluster: LocalCluster, browser: Any) -> str:
    """The dashboard's URL, signed in once with the operator token (kept for the tab)."""
    url = cluster.rest_url()
    token = rest_token_of(cluster.rest_tokens_file, "operator")
    use_token(token)
    browser.get(f"{url}/")
    _wait(browser, lambda: _texts(browser, "#token-input"), what="the token form")
    assert "token" in _text(browser, "#token-message")
    browser.find_element(By.ID, "token-input").send_keys("wrong-token-of-nobody")
    _click(browser, "#token-submit")
    _wait(browser, lambda: "refused" in _text(browser, "#token-message"), what="the refusal")
    browser.find_element(By.ID, "token-input").send_keys(token)
    _click(browser, "#token-submit")
    _wait(browser, lambda: _texts(browser, "#card-taskmanagers"), what="the overview")
    assert browser.execute_script("return sessionStorage.getItem('sparkmill-token');") == token
    return url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="sparkmill-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _wait(browser: Any, condition: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
    return WebDriverWait(browser, timeout, poll_frequency=0.3).until(
        lambda _driver: condition(), message=f"waited {timeout:g}s for {what}"
    )


# The dashboard re-renders its view on every refresh, so elements found a moment ago may be
# gone: reads go through one JavaScript call each (atomic), clicks retry on a stale element.


def _texts(browser: Any, selector: str) -> list[str]:
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => (e.innerText !== undefined ? e.innerText : e.textContent) || '');"
    )
    return [str(t) for t in browser.execute_script(script, selector)]


def _text(browser: Any, selector: str) -> str:
    found = _texts(browser, selector)
    return found[0] if found else ""


def _attrs(browser: Any, selector: str, attribute: str) -> list[str]:
    script = (
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => e.getAttribute(arguments[1]) || '');"
    )
    return [str(a) for a in browser.execute_script(script, selector, attribute)]


def _click(browser: Any, selector: str) -> None:
    for _ in range(10):
        try:
            browser.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{selector} kept going stale")


def _screenshot(browser: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    browser.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, "a blank screenshot"
    return path


def _open_job(browser: Any, base: str, job_id: str) -> None:
    browser.get(f"{base}/#/jobs/{job_id}")
    browser.refresh()  # a hash change alone does not reload the page in every case


def _vertex_x(browser: Any, name: str) -> float:
    transform = _attrs(browser, f'#job-graph g.vertex[data-vertex-name="{name}"]', "transform")
    return float(transform[0].split("(")[1].split(",")[0])


def test_overview_shows_the_cluster(browser: Any, base: str) -> None:
    browser.get(f"{base}/")
    _wait(browser, lambda: _text(browser, "#card-taskmanagers .card-value") == "2", what="2 TEs")
    assert _text(browser, "#card-slots-total .card-value") == "4"
    assert _text(browser, "#card-zookeeper .card-value") == "CONNECTED"
    shown = sorted(
        tuple(pair)
        for pair in browser.execute_script(
            "return [...document.querySelectorAll('#services-table tbody tr')]"
            ".map(r => [r.dataset.role, r.querySelector('.badge').innerText]);"
        )
    )
    assert shown == [
        ("dispatcher", "leader"),
        ("dispatcher", "standby"),
        ("job-master", "process"),
        ("job-master", "process"),
        ("resource-manager", "leader"),
        ("resource-manager", "standby"),
    ]
    grafana = browser.find_element(By.ID, "grafana-link")
    assert grafana.is_displayed() and grafana.get_attribute("href").rstrip("/") == GRAFANA
    metrics = _attrs(browser, "#services-table a[href$='/metrics']", "href")
    assert len(metrics) == 6
    _screenshot(browser, "overview-empty")


def test_a_running_job_is_listed_drawn_and_turns_finished(browser: Any, base: str) -> None:
    job_id = submit(base, DiamondPipeline("sales-report", sleep_s=2.0))
    browser.get(f"{base}/")
    row = f'#jobs-table tr[data-job-id="{job_id}"]'
    _wait(browser, lambda: "sales-report" in _text(browser, row), what="the job's row")

    _click(browser, f"{row} a")
    vertices = "#job-graph g.vertex"
    _wait(browser, lambda: len(_attrs(browser, vertices, "data-state")) == 4, what="the graph")
    names = _attrs(browser, vertices, "data-vertex-name")
    assert names == ["read orders", "read customers", "join", "write report"]
    edges = "#job-graph g.edge"
    assert _attrs(browser, edges, "data-pattern") == ["ALL_TO_ALL", "ALL_TO_ALL", "POINTWISE"]
    labels = _texts(browser, f"{edges} text")
    assert "all-to-all" in labels[0] and "pointwise" in labels[2]
    # Drawn left to right by stage: both sources in the first column, the sink last.
    x = {name: _vertex_x(browser, name) for name in names}
    assert x["read orders"] == x["read customers"] < x["join"] < x["write report"]

    # Live: the page updates by itself while the job runs.
    def state(name: str) -> str:
        found = _attrs(browser, f'{vertices}[data-vertex-name="{name}"]', "data-state")
        return found[0] if found else ""

    _wait(browser, lambda: state("read orders") == "RUNNING", what="sources running")
    # The job's state comes from the JobMaster's reports, the vertices' from its details: the
    # report may reach the dispatcher a poll later than the details show a running task.
    _wait(browser, lambda: _text(browser, "#job-state") == "RUNNING", what="the job running")
    _wait(browser, lambda: state("join") == "RUNNING", what="the join running")
    assert state("read orders") == "FINISHED"
    assert "2 finished" in " ".join(_texts(browser, f"{vertices} .vertex-counts"))
    _screenshot(browser, "job-running")

    _wait(browser, lambda: _text(browser, "#job-state") == "FINISHED", what="FINISHED")
    _wait(browser, lambda: all(state(n) == "FINISHED" for n in names), what="vertices FINISHED")
    rows = _texts(browser, "#subtasks-table tbody tr")
    assert len(rows) == 7 and all("FINISHED" in r for r in rows)
    assert "pid" in _text(browser, "#job-master")
    assert not browser.find_elements(By.ID, "cancel-job")  # nothing to cancel any more
    _screenshot(browser, "job-finished")
    browser.get(f"{base}/")
    _wait(browser, lambda: "FINISHED" in _text(browser, row), what="FINISHED in the list")
    _screenshot(browser, "overview")


def test_a_failed_jobs_exception_is_shown(browser: Any, base: str) -> None:
    job_id = submit(
        base,
        noop_pipeline(
            "dashboard-fails",
            parallelism=1,
            fail_attempts=1,
            config={"restart-strategy.type": "none"},
        ),
    )
    wait_for_state(base, job_id, ("FAILED", "FINISHED"))
    _open_job(browser, base, job_id)
    _wait(browser, lambda: _text(browser, "#job-state") == "FAILED", what="FAILED")
    _wait(browser, lambda: _text(browser, "#root-exception"), what="the root cause")
    assert "fails attempt 0" in _text(browser, "#root-exception")
    entries = _texts(browser, "#exceptions details.exception summary")
    assert entries and "noop-0" in entries[0]
    assert _attrs(browser, "#job-graph g.vertex", "data-state") == ["FAILED"]
    _screenshot(browser, "job-failed")


def test_the_cancel_button_cancels(browser: Any, base: str) -> None:
    job_id = submit(base, noop_pipeline("dashboard-cancel", parallelism=1, sleep_s=60))
    wait_for_state(base, job_id, ("RUNNING",))
    _open_job(browser, base, job_id)
    _wait(browser, lambda: _texts(browser, "#cancel-job"), what="the cancel button")
    browser.execute_script("window.confirm = () => true;")  # the "are you sure?" dialog
    _click(browser, "#cancel-job")
    _wait(browser, lambda: _text(browser, "#job-state") == "CANCELED", what="CANCELED")
    assert wait_for_state(base, job_id, ("CANCELED",))["state"] == "CANCELED"
