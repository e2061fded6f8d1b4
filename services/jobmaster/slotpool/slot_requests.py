"""The job's slot needs, declared to the resource manager (Flink's declarative slot protocol,
FLIP-138).

The SlotPool asks for one slot per subtask and withdraws a request as soon as a reused slot
served it. Sent as one request and one cancellation each, a job of N subtasks on S slots cost
the JobMaster and the resource manager about 2 N messages, almost all of them for requests that
slot reuse serves anyway. Instead, :class:`RequirementsDeclarer` keeps a count of the waiting
requests per resource profile and set of excluded task executors, and sends the whole picture
(``DeclareRequiredResources``) when it changed: at most once per turn of the event loop and
never while the previous declaration is unanswered, so a burst of changes costs one message.

A declaration is complete and versioned: it replaces the previous one, the resource manager
ignores one that arrives after a newer one, and after a reconnection the pool's re-sent
requests make the first declaration to the new leader. That first one rides on the JobMaster's
registration (:meth:`RequirementsDeclarer.declaration_for_registration`): a small job's first
slot is asked for one round trip sooner. It also acknowledges the allocations
offered to the job since the previous declaration (``received_allocation_ids``): until then
the resource manager counts them as on their way and asks for no other slot in their stead.

Failures: an entry the resource manager refuses (no task executor could ever serve its
profile) fails the requests waiting for it; a declaration that could not be delivered is sent
again after :data:`RETRY_DELAY_S` while a resource manager is connected (it is idempotent).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from sparkmill.common.core.errors import (
    FailedPreconditionError,
    FencingMismatchError,
    RpcError,
    UnimplementedError,
)
from sparkmill.common.core.ids import AllocationID, JobID, ResourceID, short
from sparkmill.common.core.proto_convert import error_from_proto, profile_to_proto
from sparkmill.common.core.resources import RequirementKey, ResourceProfile
from sparkmill.common.v1 import resource_manager_pb2
from sparkmill.common.v1.gateways import ResourceManagerClient

log = logging.getLogger(__name__)

# A declaration that could not be delivered (the resource manager is busy or restarting) is
# sent again after this long, unless a newer one left meanwhile.
RETRY_DELAY_S = 1.0

Spawn = Callable[[Coroutine[Any, Any, None], str], object]
RefusalListener = Callable[[AllocationID, RpcError], object]


class RequirementsDeclarer:
    """Counts the job's waiting slot requests and declares them; see the module docstring."""

    def __init__(
        self,
        job_id: JobID,
        client: Callable[[], ResourceManagerClient | None],
        *,
        session_id: Callable[[], str],
        timeout_ms: int,
        spawn: Spawn,
        on_refused: RefusalListener,
    ) -> None:
        self._job_id = job_id
        self._client = client
        self._session_id = session_id
        self._timeout_ms = timeout_ms
        self._spawn = spawn
        self._on_refused = on_refused
        self._key_of: dict[AllocationID, RequirementKey] = {}
        self._counts: dict[RequirementKey, int] = {}
        # One key object per distinct key (thousands of requests share a handful).
        self._keys: dict[RequirementKey, RequirementKey] = {}
        self._received: list[str] = []
        self._versions = itertools.count(1)
        self._dirty = False
        self._flush_scheduled = False
        self._in_flight = False
        # The declaration riding on a registration attempt: its version, keys and
        # acknowledgements.
        self._riding: tuple[int, list[RequirementKey], list[str]] | None = None
        self._retry: asyncio.TimerHandle | None = None
        # Bumped by reset(): an answer to a declaration sent before it is ignored.
        self._generation = 0
        self.declarations_sent = 0
        # Why the resource manager has not served some of them yet (its last heartbeat said).
        self.wait_reason = ""

    # ------------------------------------------------------------------ the pool's side

    def request(
        self, allocation_id: AllocationID, profile: ResourceProfile, excluded: frozenset[ResourceID]
    ) -> None:
        """A pending request waits for a slot: count it."""
        if allocation_id in self._key_of:
            return
        key = RequirementKey(profile, excluded)
        key = self._keys.setdefault(key, key)
        self._key_of[allocation_id] = key
        self._counts[key] = self._counts.get(key, 0) + 1
        self._changed()

    def withdraw(self, allocation_id: AllocationID) -> None:
        """The request waits no more (served, withdrawn, failed or timed out)."""
        key = self._key_of.pop(allocation_id, None)
        if key is None:
            return
        left = self._counts[key] - 1
        if left:
            self._counts[key] = left
        else:
            del self._counts[key]
            del self._keys[key]
        self._changed()

    def received(self, allocation_ids: list[str]) -> None:
        """Slots were offered to the job (taken or rejected): acknowledge them."""
        if allocation_ids:
            self._received.extend(allocation_ids)
            self._changed()

    def reset(self) -> None:
        """The resource manager connection is gone: the next one starts from the pool's
        re-sent requests."""
        self._key_of.clear()
        self._counts.clear()
        self._keys.clear()
        self._received.clear()
        self._dirty = False
        self._in_flight = False
        self._riding = None
        self._generation += 1
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def waiting(self) -> int:
        """Slots the last picture asks for."""
        return sum(self._counts.values())

    # ------------------------------------------------------------------ riding on a registration

    def declaration_for_registration(
        self,
    ) -> resource_manager_pb2.DeclareRequiredResourcesRequest | None:
        """The declaration to send with a registration at the resource manager, taken as sent
        (``None`` when nothing is to be declared, or one is still on its way). Its answer, or
        the registration's failure, goes to :meth:`registration_answered`."""
        if self._in_flight or not self._dirty:
            return None
        message, keys, received = self._take()
        self._in_flight = True
        self._riding = (message.version, keys, received)
        return message

    def registration_answered(
        self, version: int, reply: resource_manager_pb2.DeclareRequiredResourcesResponse | None
    ) -> None:
        """A registration attempt ended that carried the declaration of ``version`` (0: none):
        ``reply`` answers it, ``None`` when the attempt failed or the resource manager did not
        read it. Whatever is still to be declared is then declared on its own (once a resource
        manager is connected). The end of an attempt abandoned meanwhile (the registration
        began again, at another leader) changes nothing: its version is no longer riding."""
        riding = self._riding
        if riding is not None and riding[0] == version:
            self._riding = None
            _, keys, received = riding
            self._in_flight = False
            if reply is None:
                self._received[:0] = received  # not delivered: acknowledge them next time
                self._dirty = True
            else:
                self._answered(reply, keys)
        if self._dirty:
            self._changed()

    # ------------------------------------------------------------------ sending

    def _changed(self) -> None:
        self._dirty = True
        if not self._flush_scheduled and not self._in_flight:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if not self._dirty or self._in_flight:
            return
        client = self._client()
        if client is None:
            return  # not connected: the pool asks again once it is
        message, keys, received = self._take()
        self._in_flight = True
        call = self._send(client, message, keys, received, self._generation)
        self._spawn(call, "declare")

    def _take(
        self,
    ) -> tuple[
        resource_manager_pb2.DeclareRequiredResourcesRequest, list[RequirementKey], list[str]
    ]:
        """The whole picture as the next declaration, and the acknowledgements it carries."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self._dirty = False
        keys = list(self._counts.items())
        message = resource_manager_pb2.DeclareRequiredResourcesRequest(
            job_id=self._job_id,
            job_master_session_id=self._session_id(),
            version=next(self._versions),
            received_allocation_ids=self._received,
            timeout_ms=self._timeout_ms,
        )
        for key, count in keys:
            message.requirements.add(
                resource_profile=profile_to_proto(key.profile),
                count=count,
                excluded_task_executors=sorted(key.excluded),
            )
        received, self._received = self._received, []
        return message, [key for key, _ in keys], received

    async def _send(
        self,
        client: ResourceManagerClient,
        message: resource_manager_pb2.DeclareRequiredResourcesRequest,
        keys: list[RequirementKey],
        received: list[str],
        generation: int,
    ) -> None:
        self.declarations_sent += 1
        try:
            reply = await client.declare_required_resources(message)
        except RpcError as exc:
            if generation != self._generation:
                return  # another resource manager by now: the pool declares to it afresh
            self._in_flight = False
            self._received[:0] = received  # not delivered: acknowledge them next time
            level = logging.INFO
            if isinstance(exc, FencingMismatchError | FailedPreconditionError):
                level = logging.DEBUG  # the registration is being renewed
            if isinstance(exc, UnimplementedError):
                level = logging.ERROR
                exc = UnimplementedError(
                    f"{exc}: the resource manager runs an older sparkmill that takes no declared "
                    "slot requirements; upgrade the resource managers (the job's slot requests "
                    "wait until one serves them)"
                )
            log.log(level, "job %s: declaring slot needs failed: %s", short(self._job_id), exc)
            self._dirty = True
            self._retry = asyncio.get_running_loop().call_later(RETRY_DELAY_S, self._flush)
            return
        if generation != self._generation:
            return
        self._in_flight = False
        self._answered(reply, keys)
        if self._dirty:
            self._changed()

    def _answered(
        self,
        reply: resource_manager_pb2.DeclareRequiredResourcesResponse,
        keys: list[RequirementKey],
    ) -> None:
        for refused in reply.refused:
            if refused.index < len(keys):
                self._refuse(keys[refused.index], error_from_proto(refused.error))

    def _refuse(self, key: RequirementKey, error: RpcError) -> None:
        for allocation_id in [a for a, k in self._key_of.items() if k == key]:
            self.withdraw(allocation_id)
            self._on_refused(allocation_id, error)


__all__ = ["RETRY_DELAY_S", "RequirementsDeclarer"]
