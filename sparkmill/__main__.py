"""``python -m sparkmill`` is the ``sparkmill`` command."""

from sparkmill.cli import main

raise SystemExit(main())
