"""The errors a user can fix. Scripts print them as one line and exit 1 (``squeezebert_jax.cli``); anything else is a
bug and keeps its traceback."""


class InputError(ValueError):
    """Bad input: a file, an argument, a config value, data or a checkpoint. The message names the thing (file, line,
    field, tensor) and says what to do. A ValueError, so code that catches ValueError keeps working."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message gives the ``pip install`` line."""


class CheckpointMismatchError(InputError):
    """A checkpoint that does not fit what is asked of it: weights with a tensor missing, unexpected or misshapen for
    the model (the message names the file and the tensors, in the checkpoint's own names), or a training checkpoint
    whose train state has another structure or other shapes than the current config's (nothing is touched)."""


class StoppedEarly(Exception):
    """A training stopped before its end (SIGTERM, ``stop_at_step``), by itself or inside a larger job (a sweep's run,
    a comparison's fine-tuning): ``loop.require_finished``. The scripts print the message and exit 0 when a checkpoint
    is on disk to resume from (``resumable``: run the same command again), as a preempted job should, and 1 when none
    is; whatever the job would have done after that training is not done."""

    def __init__(self, message: str, resumable: bool):
        super().__init__(message)
        self.resumable = resumable


class DataFileError(InputError):
    """A data file that does not fit the task's description: the message names the file, line and column."""
