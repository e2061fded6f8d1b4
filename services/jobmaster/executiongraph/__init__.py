"""The ExecutionGraph: subtasks, attempts, intermediate results and pipelined regions."""
