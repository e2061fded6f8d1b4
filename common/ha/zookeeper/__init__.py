"""ZooKeeper-based high availability (``high-availability.mode: zookeeper``), built on kazoo.

Small recipes built on each other: :mod:`.connection` (one kazoo session per process, state
changes posted to the event loop), :mod:`.election` (a leader latch per role, and the leader
retrieval that watches the published leader), :mod:`.stores` (submitted job graphs and job
results), :mod:`.ha_services` (all of it behind the HA interface) and :mod:`.server` (a real
ZooKeeper server for local clusters and tests).
"""
