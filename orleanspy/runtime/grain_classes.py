"""The grain classes a silo serves: found in the application's modules, checked and
registered by type name (their argument and state types allowed on the wire)."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

from orleanspy.errors import ConfigurationError
from orleanspy.grains.grain import Grain
from orleanspy.grains.interface import RUNTIME_TYPE_PREFIX, GrainClassInfo, class_info
from orleanspy.messaging.types import TypePolicy
from orleanspy.runtime.system_target import SystemTarget

__all__ = ["grain_classes_in", "register_grain_class"]


def grain_classes_in(module: ModuleType | str) -> list[type]:
    """The Grain subclasses defined in a module (not imported into it)."""
    if isinstance(module, str):
        try:
            module = importlib.import_module(module)
        except ImportError as exc:
            raise ConfigurationError(
                f"--app {module}: cannot import it ({exc}); check the module path and that "
                "its folder is on PYTHONPATH"
            ) from exc
    return [
        obj
        for obj in vars(module).values()
        if inspect.isclass(obj)
        and issubclass(obj, Grain)
        and obj.__module__ == module.__name__
        and obj is not Grain
        and not issubclass(obj, SystemTarget)
        and not inspect.isabstract(obj)
    ]


def register_grain_class(registry: dict[str, GrainClassInfo], policy: TypePolicy,
                         cls: type) -> None:
    """Add a grain class to a silo's registry and allow its types on the wire."""
    if not (isinstance(cls, type) and issubclass(cls, Grain)):
        raise ConfigurationError(f"{cls!r} is not a Grain subclass")
    info = class_info(cls)
    if info.type_name.startswith(RUNTIME_TYPE_PREFIX) and not info.runtime:
        raise ConfigurationError(
            f"grain class {cls.__module__}.{cls.__qualname__} is named "
            f"{info.type_name!r}: type names starting with {RUNTIME_TYPE_PREFIX!r} are "
            "reserved for the runtime; give it another @grain_type('...')"
        )
    other = registry.get(info.type_name)
    if other is not None and other.cls is not cls:
        raise ConfigurationError(
            f"two grain classes share the type name {info.type_name!r} "
            f"({other.cls.__module__} and {cls.__module__}); give one @grain_type('...')"
        )
    registry[info.type_name] = info
    policy.allow_grain_class(
        cls, info.methods, [spec.factory for spec in info.states.values()
                            if isinstance(spec.factory, type)]
    )
