"""Resource profiles of slots and slot requests (Flink's ``ResourceProfile``, simplified).

A profile is CPU cores plus memory in MiB. :data:`UNKNOWN_PROFILE` (both zero) means
"a default slot, whatever its size": it matches any free slot, which is what most jobs ask for.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, InitVar, dataclass

from sparkmill.common.core.ids import ResourceID


@dataclass(frozen=True, slots=True)
class ResourceProfile:
    cpu_cores: float = 0.0
    memory_mb: int = 0
    _: KW_ONLY
    # Only :meth:`unvalidated` passes False (see there); not a field (no effect on equality).
    check: InitVar[bool] = True

    def __post_init__(self, check: bool) -> None:
        if check and (self.cpu_cores < 0 or self.memory_mb < 0):
            raise ValueError(f"resource profile cannot be negative: {self}")

    @classmethod
    def unvalidated(cls, cpu_cores: float, memory_mb: int) -> ResourceProfile:
        """A profile as a peer sent it, possibly negative or not finite.

        Only for a decoder that hands the value to a validator which refuses it with a better
        message than this constructor could give (the job graph's, naming the vertex); the
        profile must never reach a slot.
        """
        return cls(cpu_cores, memory_mb, check=False)

    @property
    def is_unknown(self) -> bool:
        return self.cpu_cores == 0 and self.memory_mb == 0

    def is_matching(self, required: ResourceProfile) -> bool:
        """Can a slot with this profile serve a request for ``required``?"""
        if required.is_unknown:
            return True
        return self.cpu_cores >= required.cpu_cores and self.memory_mb >= required.memory_mb

    def __add__(self, other: ResourceProfile) -> ResourceProfile:
        return ResourceProfile(self.cpu_cores + other.cpu_cores, self.memory_mb + other.memory_mb)

    def __sub__(self, other: ResourceProfile) -> ResourceProfile:
        return ResourceProfile(
            max(0.0, self.cpu_cores - other.cpu_cores), max(0, self.memory_mb - other.memory_mb)
        )

    def multiply(self, factor: int) -> ResourceProfile:
        return ResourceProfile(self.cpu_cores * factor, self.memory_mb * factor)

    def __str__(self) -> str:
        if self.is_unknown:
            return "ResourceProfile(UNKNOWN)"
        return f"ResourceProfile(cpu={self.cpu_cores:g}, memory={self.memory_mb}MiB)"


UNKNOWN_PROFILE = ResourceProfile()
"""A request for "any default slot"."""


@dataclass(frozen=True, slots=True)
class RequirementKey:
    """A kind of slot a job waits for, as JobMasters declare it to the resource manager: a
    resource profile, and the task executors (resource ids) whose slots must not serve it."""

    profile: ResourceProfile
    excluded: frozenset[ResourceID] = frozenset()
