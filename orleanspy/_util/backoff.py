"""Backoff: exponential delays with jitter, for every retry loop in the runtime."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Backoff"]


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delay before retry ``attempt`` (1-based): ``initial * multiplier**(attempt-1)``, capped
    at ``maximum``, then spread by ``±jitter`` (a fraction) so that many retrying peers do not
    act in step.

    Example::

        backoff = Backoff(initial=0.05, maximum=2.0)
        for attempt in itertools.count(1):
            try:
                return await connect()
            except OSError:
                await clock.sleep(backoff.delay(attempt))
    """

    initial: float = 0.1
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not (self.initial >= 0 and self.maximum >= self.initial and self.multiplier >= 1):
            raise ValueError(
                f"Backoff(initial={self.initial}, maximum={self.maximum}, "
                f"multiplier={self.multiplier}): need 0 <= initial <= maximum, multiplier >= 1"
            )
        if not 0 <= self.jitter < 1:
            raise ValueError(f"Backoff.jitter = {self.jitter}: a fraction in [0, 1)")

    def base(self, attempt: int) -> float:
        """The delay before jitter."""
        if attempt <= 1:
            return self.initial
        exp = min(attempt - 1, 64)
        return min(self.maximum, self.initial * self.multiplier**exp)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The delay before retry ``attempt``, jittered."""
        base = self.base(attempt)
        if not self.jitter or not base:
            return base
        r = (rng or random).uniform(-self.jitter, self.jitter)
        return min(self.maximum, base * (1.0 + r))
