"""`tensorboard`: scalars in <run_dir>/tensorboard; a rewind purges the steps after it."""
from __future__ import annotations

from embodied_rl.sinks import METRIC_SINKS, SinkContext


@METRIC_SINKS.register("tensorboard")
class TensorBoardSink:
    def __init__(self, ctx: SinkContext) -> None:
        self.log_dir = str(ctx.run_dir / "tensorboard")
        self._writer = self._open(ctx.start_step)

    def _open(self, step: int):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(self.log_dir, purge_step=step + 1 if step else None)

    def log(self, step: int, values: dict[str, float | None]) -> None:
        for k, v in values.items():
            if v is not None:
                self._writer.add_scalar(k, v, step)
        self._writer.flush()

    def rewind(self, step: int) -> None:
        self._writer.close()
        self._writer = self._open(step)

    def close(self) -> None:
        self._writer.close()
