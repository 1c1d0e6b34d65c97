"""Grains of the request context and call filter integration tests
(``--app tests.integration.context_app``): placed by hash, so the test picks keys whose
activations live on the silo it wants; each says where it runs and what context it sees."""

from __future__ import annotations

from typing import Any

from orleanspy import Grain, GrainCall, RequestContext, implicit_subscription, placement

__all__ = ["ContextPublisher", "ContextSink", "Guarded", "Hopper", "tenant_required"]


@placement("hash_based")
class Hopper(Grain):
    async def where(self) -> str:
        return self.silo.name

    async def relay(self, keys: list[str]) -> list[list[Any]]:
        """[silo, tenant] here, then the same from each of ``keys`` in turn (a chain)."""
        here = [self.silo.name, RequestContext.get("tenant")]
        if not keys:
            return [here]
        rest: list[list[Any]] = await self.get_grain(Hopper, keys[0]).relay(keys[1:])
        return [here, *rest]


@placement("hash_based")
class Guarded(Grain):
    """Admits ``secret`` only for the tenant "allowed" (a grain class incoming filter)."""

    async def on_incoming_call(self, call: GrainCall) -> Any:
        if call.method == "secret" and call.context.get("tenant") != "allowed":
            raise PermissionError(f"tenant {call.context.get('tenant')!r} may not call secret")
        return await call.proceed()

    async def where(self) -> str:
        return self.silo.name

    async def secret(self) -> str:
        return f"secret of {self.key} on {self.silo.name}"


@placement("hash_based")
class ContextPublisher(Grain):
    """Publishes to stream ("ctx", key) of provider "s" (under the caller's context)."""

    async def where(self) -> str:
        return self.silo.name

    async def publish(self, key: str, items: list[int]) -> None:
        stream = self.get_stream_provider("s").get_stream("ctx", key)
        for item in items:
            await stream.on_next(item)


@implicit_subscription("ctx")
class ContextSink(Grain):
    """Keeps each event with the tenant its handler saw, and where it ran."""

    async def on_activate(self) -> None:
        self.seen_items: list[list[Any]] = []

    async def on_next(self, item: int, token: Any) -> None:
        self.seen_items.append([item, RequestContext.get("tenant"), self.silo.name])

    async def seen(self) -> list[list[Any]]:
        return self.seen_items


async def tenant_required(call: GrainCall) -> Any:
    """A silo filter (the config file's ``[filters]``): a Hopper call without a tenant, or
    with the tenant "blocked", is refused."""
    if call.grain_id.type_name == "Hopper" and call.context.get("tenant") in (None, "blocked"):
        raise PermissionError(f"tenant {call.context.get('tenant')!r} is refused by the silo")
    return await call.proceed()
