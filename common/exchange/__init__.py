"""The exchange contract shared by the JobMaster and the task executors.

Blocking result partitions live as files under ``exchange.dir`` (see :mod:`.layout`); the
JobMaster names in each task's input gates the partitions it reads
(:mod:`sparkmill.common.core.partitions`), wired by the POINTWISE / ALL_TO_ALL rules
(:mod:`.pointwise`). Nothing here imports PySpark: the writing and reading of the data itself
is the task executor's.
"""
