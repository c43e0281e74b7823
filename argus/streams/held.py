"""Input offsets an agent keeps uncommitted after processing them (the compressor's held parts).

The compressor holds the parts of a split kernel window in memory until its last part
comes (:class:`argus.schemas.kernel_parts.PartAssembler`). Were their offsets committed with
the records after them, a worker restarted mid-window would resume past the window's first
parts and lose the window. So a held part's offset is *held*: no commit of its partition
goes past it until it is released (its window summarised or given up to the DLQ), and a
restarted worker re-reads the window from its first part (the records after it are read
again too: the compressor's outputs are idempotent downstream, as after any restart).

faust-streaming 0.15 commits, per partition, the first run of consecutive acknowledged
offsets (``Consumer._new_offset``). An unacknowledged offset does not reliably stop it: the
check for a gap at the head of the run is skipped while nothing is committed yet (offset
``None`` or 0) and lets the offset at the committed position itself through. So instead of
holding back the acknowledgement, :func:`install` wraps ``_new_offset``: acknowledged
offsets at or above a partition's lowest held offset are left out of the run it commits
(and kept for later), so the commit stops at the held offset.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import faust

__all__ = ["HeldOffsets", "install"]


class HeldOffsets:
    """Offsets held uncommitted, per topic partition (faust ``TP``); a count per offset."""

    def __init__(self) -> None:
        self._held: dict[Any, Counter[int]] = {}

    def hold(self, tp: Any, offset: int) -> None:
        self._held.setdefault(tp, Counter())[offset] += 1

    def release(self, tp: Any, offset: int) -> None:
        c = self._held.get(tp)
        if c is None or c[offset] <= 0:
            return
        c[offset] -= 1
        if c[offset] <= 0:
            del c[offset]
        if not c:
            del self._held[tp]

    def lowest(self, tp: Any) -> int | None:
        """The lowest offset held on ``tp``: no commit goes past it (None: none held)."""
        c = self._held.get(tp)
        return min(c) if c else None

    def __len__(self) -> int:
        return sum(sum(c.values()) for c in self._held.values())


def install(app: faust.App) -> HeldOffsets:
    """The app's :class:`HeldOffsets`, made once: its consumer's commits stop at held offsets."""
    consumer: Any = app.consumer
    held: HeldOffsets | None = getattr(consumer, "_argus_held", None)
    if held is not None:
        return held
    held = HeldOffsets()
    new_offset = consumer._new_offset

    def _new_offset(tp: Any) -> int | None:
        low = held.lowest(tp)
        if low is None:
            return new_offset(tp)
        acked: list[int] = consumer._acked[tp]
        later = [o for o in acked if o >= low]
        acked[:] = [o for o in acked if o < low]  # in place: faust trims this very list
        try:
            return new_offset(tp)
        finally:
            acked.extend(later)

    consumer._new_offset = _new_offset
    consumer._argus_held = held
    return held
