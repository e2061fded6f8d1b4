"""A two-stage test job (no data, no Spark): exercises the control plane end to end.

sparkmill run examples/noop_job.py
"""

from sparkmill.testing import noop_pipeline

pipeline = noop_pipeline("noop-demo", parallelism=8, vertices=2, pattern="ALL_TO_ALL", sleep_s=0.2)
