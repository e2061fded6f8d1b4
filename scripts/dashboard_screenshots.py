#!/usr/bin/env python3
"""Refresh the dashboard screenshots in docs/images (a heavy run: a local cluster with Spark).

Starts a local cluster (2 task executors x 2 slots, Spark sessions), runs the sales report and
the word count examples, and takes 1400x900 screenshots of the overview and of the sales report
job with Debian's chromium and chromedriver through Selenium (as
tests/integration/test_dashboard_browser.py does). Hold the heavy-run lock while it runs.

    python scripts/dashboard_screenshots.py [--out docs/images]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZE = (1400, 900)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    from sparkmill.cli.pipeline_loading import load_pipeline
    from sparkmill.client import ClusterClient
    from sparkmill.common.rpc.keys import rest_token_of
    from sparkmill.local_cluster import LocalCluster

    with tempfile.TemporaryDirectory(prefix="sparkmill-shots-") as tmp:
        os.environ.setdefault("SPARKMILL_EXAMPLES_DIR", str(Path(tmp) / "data"))
        cluster = LocalCluster(
            Path(tmp) / "cluster",
            task_executors=2,
            slots=2,
            extra_config={"spark.session.start": "eager", "spark.master": "local[1]"},
        )
        cluster.start(wait_timeout_s=180)
        try:
            with ClusterClient.from_config_file(cluster.config_path) as client:
                jobs = []
                for example in ("wordcount.py", "sales_report.py"):
                    graph = load_pipeline(ROOT / "examples" / example).build_job_graph()
                    jobs.append(client.submit(graph))
                    client.wait(jobs[-1], timeout=600)
            url = cluster.rest_url()
            token = rest_token_of(cluster.rest_tokens_file, "viewer")
            options = webdriver.ChromeOptions()
            options.binary_location = "/usr/bin/chromium"
            for flag in (
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                f"--window-size={SIZE[0]},{SIZE[1]}",
                f"--user-data-dir={Path(tmp) / 'profile'}",
            ):
                options.add_argument(flag)
            driver = webdriver.Chrome(
                service=Service(executable_path="/usr/bin/chromedriver"), options=options
            )
            try:
                driver.set_window_size(*SIZE)
                driver.get(f"{url}/")
                time.sleep(2)
                driver.find_element(By.ID, "token-input").send_keys(token)
                driver.find_element(By.ID, "token-submit").click()
                time.sleep(3)
                args.out.mkdir(parents=True, exist_ok=True)
                driver.save_screenshot(str(args.out / "dashboard-overview.png"))
                driver.get(f"{url}/#/jobs/{jobs[-1]}")
                driver.refresh()
                time.sleep(4)
                driver.save_screenshot(str(args.out / "dashboard-job.png"))
                print(f"wrote {args.out}/dashboard-overview.png and dashboard-job.png")
            finally:
                driver.quit()
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
