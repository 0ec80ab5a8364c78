"""`wandb`: a run in <run_dir>/wandb, continued on resume; offline unless WANDB_MODE is set or an
API key is configured (WANDB_API_KEY or a netrc login for the wandb host): it never prompts."""
from __future__ import annotations

import netrc
import os
import uuid
from urllib.parse import urlparse

from embodied_rl.sinks import METRIC_SINKS, SinkContext


def wandb_mode(environ: dict[str, str] | None = None) -> str:
    """'online' only when credentials exist; otherwise 'offline' (an explicit WANDB_MODE wins)."""
    env = os.environ if environ is None else environ
    if env.get("WANDB_MODE"):
        return env["WANDB_MODE"]
    if env.get("WANDB_API_KEY"):
        return "online"
    host = urlparse(env.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        if netrc.netrc(env.get("NETRC") or None).authenticators(host):
            return "online"
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        pass
    return "offline"


@METRIC_SINKS.register("wandb")
class WandbSink:
    def __init__(self, ctx: SinkContext) -> None:
        import wandb

        id_file = ctx.run_dir / "wandb_run_id.txt"  # one wandb run per run dir, continued on resume
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:8]
        id_file.write_text(run_id)
        # Absolute: wandb's service process may have been started from another working directory
        # (an earlier run in the same process) and resolves a relative dir against its own.
        self._run = wandb.init(project=ctx.logger_cfg.project_name, name=ctx.logger_cfg.experiment_name, id=run_id,
                               resume="allow", dir=str(ctx.run_dir.resolve()), config=ctx.config, mode=wandb_mode(),
                               settings=wandb.Settings(console="off", silent=True))

    def log(self, step: int, values: dict[str, float | None]) -> None:
        self._run.log({k: v for k, v in values.items() if v is not None}, step=step)

    def rewind(self, step: int) -> None:
        """wandb cannot drop logged steps: it keeps the first values of a repeated step."""

    def close(self) -> None:
        self._run.finish()
