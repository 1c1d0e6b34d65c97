"""mypy plugin: types the methods of a grain reference (``GrainRef[G]``) from the grain class
or grain interface ``G``.

Enable it in the project's mypy configuration::

    [tool.mypy]
    plugins = ["orleanspy.mypy_plugin"]

``GrainRef`` declares ``with_timeout()`` and a ``__getattr__``; mypy asks the plugin about every
other attribute of a ``GrainRef[G]``. The plugin answers with the bound type of ``G``'s method
when the runtime would route the call (a public ``async def`` that the ``Grain`` base does not
define: the rule of ``orleanspy.grains.interface.class_info``) and reports an ``attr-defined``
error for anything else (grain properties, state, lifecycle hooks, plain methods, private
names, missing names). A reference by type name (``GrainRef[Any]``) stays untyped.

It also gives two members of ``Grain`` the types of the layers above it, which the grains
layer cannot import: ``self.silo`` is the hosting ``orleanspy.Silo`` and
``self.get_stream_provider(name)`` (and ``Silo.get_stream_provider``) a
``PersistentStreamProvider``, whose ``get_stream(namespace, key, item_type)`` is an
``AsyncStream[item_type]``. Without the plugin those stay ``Any``.

The plugin runs inside mypy only (1.16 or newer); nothing in orleanspy imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Final

from mypy.build import PRI_LOW
from mypy.checker import TypeChecker
from mypy.checkmember import analyze_member_access
from mypy.errorcodes import ATTR_DEFINED
from mypy.maptype import map_instance_to_supertype
from mypy.nodes import Decorator, FuncDef, Import, MypyFile, OverloadedFuncDef, SymbolNode, TypeInfo
from mypy.plugin import AttributeContext, MethodContext, Plugin
from mypy.types import (
    AnyType,
    Instance,
    ProperType,
    Type,
    TypeOfAny,
    TypeVarType,
    get_proper_type,
)

__all__ = ["GrainRefPlugin", "plugin"]

GRAIN_REF: Final = "orleanspy.grains.reference.GrainRef"
GRAIN: Final = "orleanspy.grains.grain.Grain"
SILO_CLASS: Final = "orleanspy.hosting.silo.Silo"
STREAM_PROVIDER_CLASS: Final = "orleanspy.streams.provider.PersistentStreamProvider"
# mypy names a method call after the receiver's class, so the hook checks the receiver's bases.
STREAM_PROVIDER_OWNERS: Final = (GRAIN, "orleanspy.runtime.silo.Silo")
# A method the Grain base may declare that grains still receive as calls (reminder ticks).
CALLABLE_BASE_METHODS: Final = frozenset({"receive_reminder"})


class GrainRefPlugin(Plugin):
    """Answers attribute lookups on ``GrainRef[G]`` with the methods of ``G``."""

    def get_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        prefix, _, name = fullname.rpartition(".")
        if prefix == GRAIN_REF:
            return partial(_grain_method, name)
        if fullname == f"{GRAIN}.silo":
            return partial(_instance_of, SILO_CLASS)
        return None

    def get_additional_deps(self, file: MypyFile) -> list[tuple[int, str, int]]:
        # The types the hooks hand out come from modules a user's file may not import itself;
        # mypy must load them (and re-check the file when they change).
        if file.fullname.split(".")[0] in ("orleanspy", "silo") or not _imports_orleanspy(file):
            return []
        return [(PRI_LOW, SILO_CLASS.rpartition(".")[0], -1),
                (PRI_LOW, STREAM_PROVIDER_CLASS.rpartition(".")[0], -1)]

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        if fullname.endswith(".get_stream_provider"):
            return _stream_provider
        return None


def _stream_provider(ctx: MethodContext) -> Type:
    receiver = get_proper_type(ctx.type)
    if isinstance(receiver, Instance) and any(
        receiver.type.has_base(owner) for owner in STREAM_PROVIDER_OWNERS
    ):
        return _instance_of(STREAM_PROVIDER_CLASS, ctx)
    return _default(ctx)


def _imports_orleanspy(file: MypyFile) -> bool:
    for imp in file.imports:
        names = [name for name, _ in imp.ids] if isinstance(imp, Import) else [
            getattr(imp, "id", "")
        ]
        if any(name.split(".")[0] == "orleanspy" for name in names):
            return True
    return False


def _instance_of(fullname: str, ctx: AttributeContext | MethodContext) -> Type:
    """An instance of the class ``fullname`` when the program imports it, else the declared
    type (``Any``)."""
    module, _, name = fullname.rpartition(".")
    api = ctx.api
    if not isinstance(api, TypeChecker) or api.tree.fullname.split(".")[0] == "orleanspy":
        # orleanspy's own modules sit below hosting and streams: they keep the declared type.
        return _default(ctx)
    tree = api.modules.get(module)
    symbol = tree.names.get(name) if tree is not None else None
    if symbol is None or not isinstance(symbol.node, TypeInfo):
        return _default(ctx)
    return Instance(symbol.node, [])


def _default(ctx: AttributeContext | MethodContext) -> Type:
    if isinstance(ctx, AttributeContext):
        return ctx.default_attr_type
    return ctx.default_return_type


def _grain_method(name: str, ctx: AttributeContext) -> Type:
    ref = ctx.type
    if not isinstance(ref, Instance):
        return ctx.default_attr_type
    grain = _grain_type(ref)
    if not isinstance(grain, Instance):
        return ctx.default_attr_type  # GrainRef[Any]: a reference by type name is untyped
    problem = _why_not_callable(grain.type, name, _grain_base_names(ctx, grain.type))
    if problem is not None or ctx.is_lvalue or not isinstance(ctx.api, TypeChecker):
        reason = problem or "a reference's methods cannot be assigned"
        ctx.api.fail(
            f'"{ref.type.name}[{grain.type.name}]" has no attribute "{name}" ({reason})',
            ctx.context,
            code=ATTR_DEFINED,
        )
        return AnyType(TypeOfAny.from_error)
    return analyze_member_access(
        name,
        grain,
        ctx.context,
        is_lvalue=False,
        is_super=False,
        is_operator=False,
        original_type=grain,
        chk=ctx.api,
    )


def _grain_type(ref: Instance) -> ProperType:
    """``G`` of ``GrainRef[G]`` (a type variable stands for its upper bound)."""
    info = next((base for base in ref.type.mro if base.fullname == GRAIN_REF), None)
    if info is None:
        return AnyType(TypeOfAny.special_form)
    mapped = map_instance_to_supertype(ref, info)
    if not mapped.args:
        return AnyType(TypeOfAny.special_form)
    grain = get_proper_type(mapped.args[0])
    while isinstance(grain, TypeVarType):
        grain = get_proper_type(grain.upper_bound)
    return grain


def _grain_base_names(ctx: AttributeContext, info: TypeInfo) -> frozenset[str]:
    """The names the ``Grain`` base defines (never grain methods, as at run time)."""
    base = next((b for b in info.mro if b.fullname == GRAIN), None)
    if base is None and isinstance(ctx.api, TypeChecker):
        module = ctx.api.modules.get(GRAIN.rpartition(".")[0])
        sym = module.names.get("Grain") if module is not None else None
        base = sym.node if sym is not None and isinstance(sym.node, TypeInfo) else None
    if base is None:
        return frozenset()
    return frozenset(n for b in base.mro if b.fullname != "builtins.object" for n in b.names)


def _why_not_callable(info: TypeInfo, name: str, base_names: frozenset[str]) -> str | None:
    """None when ``name`` is a method of ``info`` that a reference routes, else the reason."""
    if name.startswith("_"):
        return "private names are not grain methods"
    if name in base_names and name not in CALLABLE_BASE_METHODS:
        return f"{name} belongs to the Grain base, not to the grain's interface"
    sym = info.get(name)
    if sym is None or sym.node is None:
        return f"{info.name} defines no method {name}"
    if not _is_async_method(sym.node):
        return f"only the async def methods of {info.name} are called through a reference"
    return None


def _is_async_method(node: SymbolNode) -> bool:
    if isinstance(node, FuncDef):
        return node.is_coroutine
    if isinstance(node, Decorator):
        return node.func.is_coroutine and not node.func.is_property
    if isinstance(node, OverloadedFuncDef):
        impl = node.impl
        if isinstance(impl, Decorator):
            return impl.func.is_coroutine
        if isinstance(impl, FuncDef):
            return impl.is_coroutine
        return all(_is_async_method(item) for item in node.items)
    return False


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point: the plugin class for any mypy version this module imports with."""
    return GrainRefPlugin
