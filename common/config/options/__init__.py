"""Every configuration option of sparkmill, declared once, one module per area.

Keys and defaults follow Apache Flink's where the concept exists, so a Flink operator finds
familiar names; like Flink's ``*Options`` classes, each area has its own module:
:mod:`.rpc`, :mod:`.cluster`, :mod:`.jobs`, :mod:`.high_availability`, :mod:`.metrics`,
:mod:`.rest`, :mod:`.data_plane` and :mod:`.history`. Every option is also importable from
this package (``from sparkmill.common.config import options as opt; opt.HEARTBEAT_TIMEOUT``).
``docs/configuration.md`` is generated from the groups below by ``scripts/gen_config_docs.py``
(run it after changing an option).

Durations are float seconds and memory sizes int bytes (see :mod:`sparkmill.common.config.kinds`).
"""

from __future__ import annotations

from sparkmill.common.config.options._declare import DECLARED_GROUPS
from sparkmill.common.config.options.cluster import *  # noqa: F403
from sparkmill.common.config.options.data_plane import *  # noqa: F403
from sparkmill.common.config.options.data_plane import SPARK_CONF
from sparkmill.common.config.options.high_availability import *  # noqa: F403
from sparkmill.common.config.options.history import *  # noqa: F403
from sparkmill.common.config.options.jobs import *  # noqa: F403
from sparkmill.common.config.options.metrics import *  # noqa: F403
from sparkmill.common.config.options.metrics import METRICS_LABELS
from sparkmill.common.config.options.rest import *  # noqa: F403
from sparkmill.common.config.options.rpc import *  # noqa: F403
from sparkmill.common.config.schema import FreeFormPrefix, OptionGroup

_DOCS_ORDER = (
    "RPC and addresses",
    "Security",
    "Task executor",
    "Heartbeats and registration",
    "Slots",
    "Active resource management",
    "systemd driver",
    "Jobs, failover and restarts",
    "Adaptive batch execution",
    "Speculative execution",
    "High availability",
    "Metrics",
    "REST API and web dashboard",
    "Data plane",
    "Task logs and job history",
    "Logging",
)
if sorted(g.title for g in DECLARED_GROUPS) != sorted(_DOCS_ORDER):
    raise RuntimeError(
        "bug: every option group must have its place in _DOCS_ORDER, once; declared: "
        + ", ".join(g.title for g in DECLARED_GROUPS)
    )

GROUPS: tuple[OptionGroup, ...] = tuple(
    sorted(DECLARED_GROUPS, key=lambda g: _DOCS_ORDER.index(g.title))
)
"""Every option, in the groups (and order) of docs/configuration.md."""
PREFIXES: tuple[FreeFormPrefix, ...] = (SPARK_CONF, METRICS_LABELS)
