"""Multi-event query building (MELON Sec. 4.2 and Tab. 5)."""

from __future__ import annotations

from typing import Literal

QueryMode = Literal["concat", "events"]


def concat_query(descriptions: list[str], separator: str = " ") -> str:
    """The K event descriptions joined in their original order into one query (MELON Sec. 4.2)."""
    return separator.join(d.strip() for d in descriptions)
