"""``python -m sparkmill.services.taskexecutor.pipeline``: the pipeline worker process."""

from sparkmill.services.taskexecutor.pipeline.worker import main

raise SystemExit(main())
