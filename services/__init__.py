"""sparkmill.services: the dispatcher, resource-manager, job-master and task-executor services.

This folder is only ever imported as ``sparkmill.services`` (``sparkmill/services`` links to it
in a checkout). Imported by its bare folder name, with the repository root on ``sys.path``, it
would load a second copy of every module next to the real one, so that name is refused.
"""

if __name__ != "sparkmill.services":
    raise ImportError(
        f"the package {__name__!r} (folder {__path__[0]}) is sparkmill.services: "
        "import sparkmill.services instead (e.g. `from sparkmill.services.dispatcher import "
        "dispatcher`)",
        name=__name__,
    )
