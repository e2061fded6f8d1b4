"""sparkmill.common: the contract every sparkmill process shares (see docs/architecture.md).

This folder is only ever imported as ``sparkmill.common`` (``sparkmill/common`` links to it in a
checkout). Imported by its bare folder name, with the repository root on ``sys.path``, it would
load a second copy of every module, whose classes, enums and registries differ from the real
ones, so that name is refused outright.
"""

if __name__ != "sparkmill.common":
    raise ImportError(
        f"the package {__name__!r} (folder {__path__[0]}) is sparkmill.common: "
        "import sparkmill.common instead (e.g. `from sparkmill.common.core import ids`)",
        name=__name__,
    )
