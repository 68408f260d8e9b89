"""Placement policies, registered by name: the one place that says how a node and its devices
are scored for a task, in the scheduling cycle (every action), the simulator and the packing
benchmark alike.

Adding a policy is one class in one new module of this package: subclass `PlacementPolicy`,
then `register("name")(TheClass)` after it. Every module here is imported when the package is, so
the name is then accepted by the server (`--placement`), scenario files (`settings.placement`) and
`gpupool bench packing --policy`. The policies here are registered by a call rather than with
`@register` as a class decorator because the compiled core (docs/performance.md) compiles a
decorated class as a plain Python class, which may not subclass the compiled base; a policy kept
outside the package, never compiled, may use the decorator.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TypeVar

from gpupool.core.policies.base import PlacementPolicy, PolicyContext

P = TypeVar("P", bound=type[PlacementPolicy])

_REGISTRY: dict[str, type[PlacementPolicy]] = {}
_ALIASES: dict[str, str] = {}


def register(name: str, *aliases: str) -> Callable[[P], P]:
    """Class decorator: make the policy known as `name` (and each of `aliases`)."""

    def add(cls: P) -> P:
        for key in (name, *aliases):
            if key in _REGISTRY or key in _ALIASES:
                raise ValueError(f"two placement policies are called {key!r}")
        cls.name = name
        _REGISTRY[name] = cls
        for alias in aliases:
            _ALIASES[alias] = name
        return cls

    return add


def policy_names() -> tuple[str, ...]:
    """Every registered name, aliases left out, sorted."""
    return tuple(sorted(_REGISTRY))


def canonical_name(name: str) -> str:
    """`name`, or what it is an alias of. Raises `ValueError` naming the choices."""
    key = _ALIASES.get(name, name)
    if key not in _REGISTRY:
        known = ", ".join(policy_names())
        raise ValueError(f"no placement policy is called {name!r}; choose one of: {known}")
    return key


def create_policy(name: str, context: PolicyContext) -> PlacementPolicy:
    return _REGISTRY[canonical_name(name)].create(context)


def _import_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")


_import_all()
