"""Keep the cyclic garbage collector off the objects a silo starts with.

A silo process holds tens of thousands of long-lived objects (modules, classes, functions,
the runtime's tables) from the moment it has started. CPython's full collections walk all
of them, and under load (stream deliveries create and drop many objects) a full collection
runs every few hundred milliseconds and costs milliseconds each: a third of the delivery
path's time in the stream benchmarks. ``gc.freeze()`` moves every object alive at that
moment into a generation the collector never walks; reference counting still frees them.

``acquire`` (at a silo's start) collects once, then freezes; ``release`` (at its stop)
unfreezes once the last silo of the process that froze has stopped, so that what those
silos left behind in cycles is collected again. Objects frozen while a silo runs are not
collected by the cyclic collector until then (reference counting frees them as usual).
"""

from __future__ import annotations

import gc

__all__ = ["acquire", "release"]

_holders = 0


def acquire() -> None:
    global _holders
    _holders += 1
    gc.collect()
    gc.freeze()


def release() -> None:
    global _holders
    if _holders == 0:
        return
    _holders -= 1
    if _holders == 0:
        gc.unfreeze()
