"""Choosing which episodes become the dataset, independent of timing.

Reset ids are tried in order from `seed_start`. Episodes are settled in reset-id order (results
that arrive early wait), so the dataset is always the first `num_demos` successful reset ids
and the failure count covers exactly the ids before the last kept one. Failed expert episodes
are counted and dropped; anything recorded past the last needed id is discarded.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from embodied_rl.demos.recorder import EpisodeRecord
from embodied_rl.demos.sources import EpisodeSource


@dataclass
class CollectResult:
    kept_reset_ids: list[int] = field(default_factory=list)
    failed_reset_ids: list[int] = field(default_factory=list)

    @property
    def num_attempted(self) -> int:
        return len(self.kept_reset_ids) + len(self.failed_reset_ids)


def collect(source: EpisodeSource, *, num_demos: int, seed_start: int, max_attempts: int,
            on_demo: Callable[[EpisodeRecord], None], on_failure: Callable[[int], None] = lambda _: None) -> CollectResult:
    """Run the source until `num_demos` successes are settled or `max_attempts` ids were tried."""
    result = CollectResult()
    pending: dict[int, EpisodeRecord] = {}
    next_settled = seed_start
    issued = 0

    def enough() -> bool:
        ahead = sum(r.succeeded for r in pending.values())
        return len(result.kept_reset_ids) + ahead >= num_demos

    def reset_ids() -> Iterator[int]:
        nonlocal issued
        while issued < max_attempts and not enough():
            issued += 1
            yield seed_start + issued - 1

    for rec in source.episodes(reset_ids()):
        pending[rec.reset_id] = rec
        while next_settled in pending:
            settled = pending.pop(next_settled)
            next_settled += 1
            if len(result.kept_reset_ids) >= num_demos:
                continue
            if settled.succeeded:
                result.kept_reset_ids.append(settled.reset_id)
                on_demo(settled)
            else:
                result.failed_reset_ids.append(settled.reset_id)
                on_failure(settled.reset_id)
    return result
