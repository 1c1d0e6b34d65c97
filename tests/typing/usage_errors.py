"""Misuse of grain references: each marked line must give exactly the mypy error it names.

Never imported or run; ``test_mypy_plugin.py`` type-checks it and compares mypy's errors with
the trailing error comments (an error code in brackets, then a part of the message).
"""

from __future__ import annotations

from typing import TypeVar

from orleanspy import Grain, GrainRef, Silo
from tests.typing.grains import Box, Counter, Doubler
from tests.typing.interfaces import ICart

T = TypeVar("T")


async def misuse(silo: Silo) -> None:
    ref = silo.get_grain(Counter, "a")
    await ref.with_timeout(5).increment()
    _ = ref.key  # error: [attr-defined] key belongs to the Grain base
    _ = ref.grain_id  # error: [attr-defined] grain_id belongs to the Grain base
    _ = ref.state  # error: [attr-defined] only the async def methods of Counter
    _ = ref.on_activate  # error: [attr-defined] on_activate belongs to the Grain base
    _ = ref.get_grain  # error: [attr-defined] get_grain belongs to the Grain base
    _ = ref.sync_helper()  # error: [attr-defined] only the async def methods of Counter
    await ref._private()  # error: [attr-defined] private names are not grain methods
    await ref.missing()  # error: [attr-defined] Counter defines no method missing
    await ref.with_timeout(1).missing()  # error: [attr-defined] no method missing
    await ref.increment("1")  # error: [arg-type] "str"; expected "int"
    await ref.increment(1, 2)  # error: [call-arg] Too many arguments
    await ref.increment(step=1)  # error: [call-arg] Unexpected keyword argument "step"
    _ = ref.with_timeout("5")  # error: [arg-type] "str"; expected "float"
    count: str = await ref.get()  # error: [assignment] "int", variable has type "str"
    print(count)
    _ = ref.invoke_later  # error: [attr-defined] Counter defines no method invoke_later
    ref.increment = ref.get  # error: [attr-defined] "increment"


async def some_grain(ref: GrainRef[T]) -> None:
    await ref.with_timeout(1).invoke("increment")
    await ref.increment()  # error: [attr-defined] object defines no method increment


async def wrong_grain(silo: Silo) -> None:
    other: GrainRef[Doubler] = silo.get_grain(Counter, 1)  # error: [arg-type] "type[Counter]"
    await other.double()
    box: GrainRef[Box[int]] = silo.get_grain(Box, 2)
    await box.put("x")  # error: [arg-type] "str"; expected "int"
    counter: Counter = silo.get_grain(Counter, 3)  # error: [assignment] "GrainRef[Counter]"
    await counter.increment()


class Publisher(Grain):
    async def publish(self) -> None:
        stream = self.get_stream_provider("s").get_stream("ns", "k", int)
        await stream.on_next("x")  # error: [arg-type] "str"; expected "int"
        self.silo.no_such_thing()  # error: [attr-defined] "Silo" has no attribute "no_such_thing"
        _ = self.get_stream_provider("s").no_such()  # error: [attr-defined] no attribute "no_such"


async def interface_misuse(silo: Silo) -> None:
    cart = silo.get_grain(ICart, "a")
    await cart.add(3)  # error: [arg-type] "int"; expected "str"
    await cart.remove("x")  # error: [attr-defined] ICart defines no method remove
    total: str = await cart.add("x")  # error: [assignment] "int", variable has type "str"
    print(total)
    _ = cart.key  # error: [attr-defined] key belongs to the Grain base
