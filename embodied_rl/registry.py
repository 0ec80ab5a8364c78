"""Name -> object registries: a config names its choice, and an unknown name is one ConfigError
line listing the valid names, so adding a variant is one decorated function, never an if/elif edit."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from embodied_rl.errors import ConfigError, DuplicateRegistration

F = TypeVar("F", bound=Callable)


def shadows_builtin(name: str, cls: type, builtins: Mapping[str, str]) -> bool:
    """`cls` takes the name of a built-in (name -> its module, imported on first use) from outside
    that module: the built-in's own registration would fail later or be replaced unseen."""
    return name in builtins and not cls.__module__.startswith(builtins[name])


class Registry(Generic[F]):
    def __init__(self, key: str) -> None:
        self.key = key  # the config key that selects from this registry, for error messages
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def wrap(fn: F) -> F:
            if name in self._items:
                raise DuplicateRegistration(f"{self.key} {name!r} registered twice")
            self._items[name] = fn
            return fn

        return wrap

    def get(self, name: str) -> F:
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(
                f"{self.key}={name!r} is not valid; choose one of: {', '.join(self.names())}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items
