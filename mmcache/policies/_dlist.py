"""A doubly-linked list of hashable keys, for online policies that walk their queue."""

from __future__ import annotations

from typing import Hashable, Iterator


class DList:
    """Keys ordered from head (newest) to tail (oldest); O(1) insert, unlink and neighbours."""

    def __init__(self) -> None:
        self._newer: dict[Hashable, Hashable | None] = {}
        self._older: dict[Hashable, Hashable | None] = {}
        self.head: Hashable | None = None
        self.tail: Hashable | None = None

    def push_head(self, key: Hashable) -> None:
        """Insert ``key`` (not present) at the head."""
        self._newer[key] = None
        self._older[key] = self.head
        if self.head is None:
            self.tail = key
        else:
            self._newer[self.head] = key
        self.head = key

    def unlink(self, key: Hashable) -> None:
        """Remove ``key`` (present)."""
        newer, older = self._newer.pop(key), self._older.pop(key)
        if newer is None:
            self.head = older
        else:
            self._older[newer] = older
        if older is None:
            self.tail = newer
        else:
            self._newer[older] = newer

    def pop_tail(self) -> Hashable:
        """Remove and return the oldest key (the list must not be empty)."""
        key = self.tail
        self.unlink(key)
        return key

    def move_to_head(self, key: Hashable) -> None:
        """Make present ``key`` the newest."""
        if key != self.head:
            self.unlink(key)
            self.push_head(key)

    def newer(self, key: Hashable) -> Hashable | None:
        """The key just newer than ``key`` (None at the head)."""
        return self._newer[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._newer

    def __len__(self) -> int:
        return len(self._newer)

    def __iter__(self) -> Iterator[Hashable]:
        """Keys from tail (oldest) to head (newest)."""
        key = self.tail
        while key is not None:
            yield key
            key = self._newer[key]
