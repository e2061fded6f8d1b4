"""A key speaks only for the member ids it registered."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import PermissionDeniedError
from sparkmill.common.rpc.peer_bindings import PeerBindings


def test_the_first_key_owns_an_id_and_others_are_refused() -> None:
    bindings = PeerBindings("task executor")
    bindings.bind("host7", "task-executor:host7")
    bindings.bind("host7", "task-executor:host7")  # registering again with its own key: fine
    bindings.check("host7", "task-executor:host7", "disconnect it")
    with pytest.raises(PermissionDeniedError, match="task-executor:host8 may not disconnect"):
        bindings.check("host7", "task-executor:host8", "disconnect it")
    with pytest.raises(PermissionDeniedError):
        bindings.bind("host7", "task-executor:host8")
    bindings.check("unknown", "task-executor:host8", "report its tasks")  # nobody owns it


def test_the_table_is_bounded_least_recently_used_first() -> None:
    bindings = PeerBindings("task executor", max_bindings=2)
    bindings.bind("a", "k:a")
    bindings.bind("b", "k:b")
    bindings.bind("a", "k:a")  # a is used again
    bindings.bind("c", "k:c")
    assert bindings.owner("b") is None and bindings.owner("a") == "k:a"
