"""Rank lists as text: ``[1, 2, 3, 7]`` -> ``"1-3, 7"``, for reports, alerts and commands."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["rank_ranges"]


def rank_ranges(ranks: Iterable[int], *, sep: str = ", ", most: int | None = None) -> str:
    """Sorted, distinct ``ranks`` as runs of consecutive ranks: ``"1-3, 7"``.

    Parameters
    ----------
    ranks : iterable of int
    sep : str
        Between runs.
    most : int, optional
        Show at most this many runs; more end in ``"... (<n> ranks)"`` after ``sep``.

    Examples
    --------
    >>> rank_ranges([7, 1, 2, 3, 3])
    '1-3, 7'
    >>> rank_ranges([0, 2, 4, 6], sep=",", most=2)
    '0,2,... (4 ranks)'
    """
    rs = sorted({int(r) for r in ranks})
    runs: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        runs.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    if most is not None and len(runs) > most:
        return sep.join([*runs[:most], f"... ({len(rs)} ranks)"])
    return sep.join(runs)
