"""Sales per country: two CSV sources joined on the customer, aggregated, written as Parquet.

    sparkmill run examples/sales_report.py [-- --output DIR]

Sample data is generated on the first run (SPARKMILL_EXAMPLES_DIR moves it). The orders and
the customers are both hash-exchanged on ``customer_id`` so that each join subtask sees all
rows of its customers; the revenue per country is then aggregated with a second exchange.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import tempfile
from pathlib import Path

import sparkmill as sm
from sparkmill import functions as F

BASE = Path(os.environ.get("SPARKMILL_EXAMPLES_DIR") or Path(tempfile.gettempdir()) / "sparkmill")


def shared_scratch(directory: Path) -> Path:
    """The examples' scratch directory, made like /tmp (sticky, writable by all): a cluster's
    pipeline code runs as its own user (sparkmill-pipeline), which writes the output here."""
    directory.mkdir(parents=True, exist_ok=True)
    if directory.stat().st_uid == os.geteuid() and os.environ.get("SPARKMILL_EXAMPLES_DIR") is None:
        directory.chmod(0o1777)
    return directory


shared_scratch(BASE)
DATA = BASE / "sales-input"

COUNTRIES = ["DE", "FR", "JP", "BR", "US", "IN", "NO"]
PRODUCTS = {"widget": 2.50, "gadget": 12.00, "gizmo": 7.25, "doohickey": 0.99}


def sample_data(directory: Path, customers: int = 200, orders: int = 5000, seed: int = 11) -> None:
    if (directory / "customers.csv").exists():
        return
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    with open(directory / "customers.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["customer_id", "name", "country"])
        for c in range(customers):
            out.writerow([c, f"customer-{c}", rng.choice(COUNTRIES)])
    for part in range(3):
        with open(directory / f"orders-{part}.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["order_id", "customer_id", "product", "quantity"])
            for o in range(part, orders, 3):
                product = rng.choice(list(PRODUCTS))
                out.writerow([o, rng.randrange(customers), product, rng.randint(1, 9)])


parser = argparse.ArgumentParser(prog="sales_report", description="Revenue per country.")
parser.add_argument(
    "--output", default=str(BASE / "sales-report"), help="where the report is written (replaced)"
)
OUTPUT = parser.parse_args().output

sample_data(DATA)
prices = [(product, price) for product, price in PRODUCTS.items()]

pipeline = sm.Pipeline("sales-report")
orders = pipeline.read_csv(
    str(DATA / "orders-*.csv"),
    schema="order_id BIGINT, customer_id BIGINT, product STRING, quantity INT",
)
customers = pipeline.read_csv(
    str(DATA / "customers.csv"), schema="customer_id BIGINT, name STRING, country STRING"
).set_parallelism(1)
price_list = pipeline.from_rows(prices, schema="product STRING, unit_price DOUBLE").set_parallelism(
    1
)

report = (
    orders.join(customers, on="customer_id")
    # The price list is tiny: every join subtask reads all of it (no exchange of the orders).
    .join(price_list.broadcast(), on="product")
    .with_column("revenue", F.col("quantity") * F.col("unit_price"))
    .key_by("country")
    .agg(
        F.sum("revenue").alias("revenue"),
        F.count("*").alias("orders"),
        F.max("quantity").alias("largest_order"),
    )
)
report.write_parquet(OUTPUT, mode="overwrite")
(
    report.transform(
        lambda df: df.orderBy(F.desc("revenue")).withColumn("revenue", F.round("revenue", 2))
    )
    .set_parallelism(1)
    .collect(name="revenue by country")
)
