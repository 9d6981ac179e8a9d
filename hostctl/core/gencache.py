"""A memo that follows the keys in use: what was not used for a whole generation is forgotten.

The daemon names, encodes and decodes every flow every slot, so it keeps each flow's result. An LRU
bounded at twice the flows a host can track keeps memory bounded, but it fills with every flow ever
seen (hours of short flows) before it stops growing. Here the owner ends a generation on its own
clock (``turn()``: the daemon every 30 s): the memo then holds the keys used in the last one or two
generations, so memory follows the live flows. ``limit`` still bounds one generation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Generations(Generic[K, V]):
    __slots__ = ("make", "limit", "new", "old")

    def __init__(self, make: Callable[[K], V], limit: int) -> None:
        self.make = make
        self.limit = limit
        self.new: dict[K, V] = {}  # used in this generation (hot loops may read it directly: new.get)
        self.old: dict[K, V] = {}  # used in the last one only

    def __call__(self, key: K) -> V:
        v = self.new.get(key)
        if v is None:
            v = self.old.pop(key, None)
            if v is None:
                v = self.make(key)
            if len(self.new) >= self.limit:
                self.turn()
            self.new[key] = v
        return v

    def turn(self) -> None:
        """End the generation: what was not used since the last turn is dropped."""
        self.old, self.new = self.new, {}

    def __len__(self) -> int:
        return len(self.new) + len(self.old)
