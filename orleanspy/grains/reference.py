"""GrainRef: the type of a grain reference, as code names it and a type checker sees it.

``GrainRef[G]`` is what ``get_grain(G, key)`` returns for a grain class or grain interface
``G``: ``with_timeout()``, the untyped by-name calls and, through the mypy plugin
``orleanspy.mypy_plugin``, the public async methods of ``G``. Without the plugin every other
attribute of a ``GrainRef`` is ``Any``. At run time a reference is a
``orleanspy.grains.proxy.GrainProxy``.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

__all__ = ["GrainRef"]

G_co = TypeVar("G_co", covariant=True)


class GrainRef(Protocol[G_co]):
    """The static type of a reference to grain class or interface ``G_co``
    (``get_grain(G, key)``).

    It offers ``with_timeout()``, the untyped by-name calls ``invoke()`` and
    ``invoke_one_way()`` (for tools) and, through the mypy plugin, exactly the public
    ``async def`` methods of ``G_co`` with their parameters and awaitable results; grain
    attributes such as ``key``, ``state`` or ``on_activate`` are type errors on a reference.
    At run time a reference is a ``GrainProxy``; this protocol exists for type checkers.
    """

    def with_timeout(self, seconds: float) -> GrainRef[G_co]:
        """A copy of this reference whose calls time out after ``seconds``."""
        ...

    async def invoke(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Call a method by name (untyped)."""
        ...

    async def invoke_one_way(self, method: str, *args: Any, **kwargs: Any) -> None:
        """Send a one-way call by name (untyped): returns once enqueued."""
        ...

    def __getattr__(self, name: str) -> Any:
        """A grain method (typed by the mypy plugin from the grain class or interface)."""
        ...
