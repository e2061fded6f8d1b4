"""The pipeline worker: the process a task executor runs pipeline code in.

A submitted pipeline is code: its operator functions are unpickled and run, with the Spark
session and Spark's Python workers, on a task executor. That code must not reach the cluster's
secrets (the task executor's CurveZMQ key, other roles' keys, the ZooKeeper digest, REST
tokens), so it runs in a process of its own, as a user that can read none of them: the
*pipeline worker*. The task executor keeps the control plane (slots, the attempt's lifecycle,
reports to the JobMaster) and hands each data-plane attempt to its worker over a local channel.

* :mod:`.channel` - the framing of the channel's protobuf messages;
* :mod:`.codec` - an attempt's context and outcome as those messages;
* :mod:`.worker` - the worker process (``sparkmill pipeline-worker``);
* :mod:`.link` - the task executor's end: starts or connects to its worker and runs attempts on it;
* :mod:`.launch` - how a task executor starts its worker as another user.
"""
