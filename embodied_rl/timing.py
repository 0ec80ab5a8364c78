"""Wall-clock accounting for time/* metrics: one `Timer` per step or rollout, one name per phase."""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class Timer:
    """Seconds per phase, summed over every `with timer("phase"):` block of that name."""

    def __init__(self, *always: str) -> None:
        """`always`: phases reported even when no block of theirs ran (as 0 s)."""
        self.seconds: defaultdict[str, float] = defaultdict(float, dict.fromkeys(always, 0.0))

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def metrics(self, prefix: str) -> dict[str, float]:
        """{f"{prefix}{name}_s": seconds}, e.g. prefix "time/env/" gives time/env/step_s."""
        return {f"{prefix}{name}_s": s for name, s in self.seconds.items()}
