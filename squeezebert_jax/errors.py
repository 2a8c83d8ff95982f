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


class DataFileError(InputError):
    """A data file that does not fit the task's description: the message names the file, line and column."""
