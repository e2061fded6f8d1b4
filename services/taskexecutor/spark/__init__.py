"""The data plane: PySpark chains run by ``spark`` tasks (see ``docs/pipelines.md``).

Nothing here is imported by the control plane until a ``spark`` task runs; PySpark itself is
only imported when the Spark session starts.
"""
