"""SystemTarget: a runtime component addressed like a grain but created explicitly.

System targets are not virtual: the runtime (or an application) creates them with
``silo.add_system_target(obj, key)``; they live on that silo until it stops, are never
placed, moved or collected, and run one request at a time like a grain. Address one with
``silo.get_system_target(Class, key)``; a key that ends with a silo's address routes to that silo.
"""

from __future__ import annotations

from orleanspy.grains.grain import Grain

__all__ = ["SystemTarget"]


class SystemTarget(Grain):
    """Base class of system targets (pulling agents, managers, …)."""

    #: Marks the class for ``grains.interface.class_info`` (which sits below the runtime).
    _orleanspy_system_target = True
