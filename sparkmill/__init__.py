"""sparkmill: a highly available, slot-based job runtime for PySpark pipelines.

The public API is :class:`Pipeline` (``sparkmill.pipeline``) and ``sparkmill.functions``.
The runtime lives in two subpackages that are shipped inside this one:

* ``sparkmill.common`` - the contract every process shares (wire messages and gateways,
  states, configuration, RPC, HA building blocks);
* ``sparkmill.services`` - the four services, each importing only ``sparkmill.common``.

Importing a service must not load the pipeline API (and with it PySpark-facing code), so the
public names are resolved lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sparkmill.pipeline import Pipeline

__all__ = ["Pipeline"]


def __getattr__(name: str) -> Any:
    if name == "Pipeline":
        from sparkmill.pipeline import Pipeline

        return Pipeline
    raise AttributeError(f"module 'sparkmill' has no attribute {name!r}")
