"""Ctrl-C during training: finish the step and save, rather than stop halfway."""
from __future__ import annotations

import logging
import signal
import threading
from typing import Self

log = logging.getLogger(__name__)


class GracefulStop:
    """First Ctrl-C: finish the running step, save a checkpoint, exit 130 (a step stopped halfway
    would leave the actor's weights and the driver's step count out of step). Second: abort now."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("Ctrl-C: finishing this training step, then saving a checkpoint (press again to abort)")

    def __enter__(self) -> Self:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
