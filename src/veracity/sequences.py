"""One base for sequences made on access: the records of a run file, a view of each item's
field, items kept on disk. A subclass says how long it is and how to make item ``i``; the base
gives indexing (negative too), slices (as lists) and iteration."""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from typing import TypeVar, overload

T = TypeVar("T")


class LazySequence(Sequence[T]):
    """A read-only sequence whose items are made when asked for.

    >>> class Squares(LazySequence[int]):
    ...     def __len__(self): return 5
    ...     def _item(self, index): return index * index
    >>> s = Squares(); s[-1], s[1:3], list(s)
    (16, [1, 4], [0, 1, 4, 9, 16])
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def _item(self, index: int) -> T:
        """Item ``index``, 0 <= index < len(self)."""
        raise NotImplementedError

    def _items(self, start: int, stop: int, step: int) -> list[T]:
        """Items of a slice already bounded by ``slice.indices`` (override to read in bulk)."""
        return [self._item(k) for k in range(start, stop, step)]

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        size = len(self)
        if isinstance(index, slice):
            return self._items(*index.indices(size))
        index = operator.index(index)  # numpy integers too, as a list takes them
        position = index + size if index < 0 else index
        if not 0 <= position < size:
            raise IndexError(f"item index {index} out of range for {size} items")
        return self._item(position)

    def __iter__(self) -> Iterator[T]:
        return (self._item(k) for k in range(len(self)))
