"""Name -> object registries: a config names its choice, and an unknown name is one ConfigError
line listing the valid names, so adding a variant is one decorated function, never an if/elif edit."""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from embodied_rl.errors import ConfigError

F = TypeVar("F", bound=Callable)


class Registry(Generic[F]):
    def __init__(self, key: str) -> None:
        self.key = key  # the config key that selects from this registry, for error messages
        self._items: dict[str, F] = {}

    def register(self, name: str) -> Callable[[F], F]:
        def wrap(fn: F) -> F:
            if name in self._items:
                raise ValueError(f"{self.key} {name!r} registered twice")
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
