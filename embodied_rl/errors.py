"""User-facing errors: each message is one actionable line; the CLI prints it and exits 2."""


class UserError(Exception):
    """A problem with the user's input (config, path, checkpoint): message is one actionable line."""


class ConfigError(UserError):
    """Invalid configuration key or value."""


class CheckpointError(UserError):
    """A model or training checkpoint that is missing files, or whose tensors do not match."""


class RunError(Exception):
    """The run could not go on (a worker failed or died past runner.max_restarts): not the
    user's input, so the CLI prints the one-line message and exits 1."""


class DuplicateRegistration(ValueError):
    """A name registered twice in one registry (two plug-ins, or a plug-in and a built-in)."""
