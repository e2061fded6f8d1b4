"""Which authenticated key speaks for which member id (a task executor's resource id).

CurveZMQ authenticates a *key* and its role; a request then names the member it acts for
(``resource_id``). :class:`PeerBindings` ties the two: the first key that registers an id owns
it, and calls that act for that id from any other key are refused. With one key per host (the
playbook makes one), a compromised host cannot disconnect, impersonate or report for another.
Without security every peer is "" and nothing is refused. The table is bounded: the least
recently used binding goes first (the member then binds again when it next registers).
"""

from __future__ import annotations

from collections import OrderedDict

from sparkmill.common.core.errors import PermissionDeniedError

DEFAULT_MAX_BINDINGS = 4096


class PeerBindings:
    def __init__(self, what: str, max_bindings: int = DEFAULT_MAX_BINDINGS) -> None:
        self._what = what  # e.g. "task executor", for messages
        self._max = max_bindings
        self._owner: OrderedDict[str, str] = OrderedDict()

    def bind(self, member_id: str, peer: str) -> None:
        """Register ``member_id`` as ``peer``'s; refused when another key owns it."""
        self.check(member_id, peer, "register it")
        self._owner[member_id] = peer
        self._owner.move_to_end(member_id)
        while len(self._owner) > self._max:
            self._owner.popitem(last=False)

    def check(self, member_id: str, peer: str, action: str) -> None:
        """Raise :class:`PermissionDeniedError` when ``member_id`` belongs to another key."""
        owner = self._owner.get(member_id)
        if owner is not None and owner != peer:
            raise PermissionDeniedError(
                f"{self._what} {member_id[:80]} belongs to {owner or 'an unauthenticated key'}; "
                f"{peer or 'an unauthenticated caller'} may not {action}"
            )

    def owner(self, member_id: str) -> str | None:
        return self._owner.get(member_id)
