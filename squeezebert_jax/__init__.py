"""squeezebert_jax: SqueezeBERT (Iandola et al., 2020) in JAX / Flax NNX."""

import logging as _logging
import os as _os


class _NoCudaPluginOnCpuHosts(_logging.Filter):
    """The ``gpu-aot`` extra installs the CUDA PJRT plugin so that train/compile.py can compile for H100/A100 targets
    on a host without a GPU; jax then tries it at every start and logs a full traceback ("Unable to load CUDA") when
    no driver is there. On such a host (no NVIDIA driver) that record says nothing: drop it. Any other plugin error,
    or any on a host with a driver, still shows."""

    def filter(self, record: _logging.LogRecord) -> bool:
        return not ("xla_cuda" in record.getMessage() and not _os.path.exists("/proc/driver/nvidia"))


_logging.getLogger("jax._src.xla_bridge").addFilter(_NoCudaPluginOnCpuHosts())


def _compile_only_plugins_on_a_cpu_host() -> bool:
    """libtpu (the ``tpu`` extra) or the CUDA plugin (``gpu-aot``) installed on a host with no TPU, GPU or driver:
    they are there to compile for other machines (train/compile.py), not to run here."""
    import glob
    import importlib.util

    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*") or glob.glob("/dev/nvidia*") or \
            _os.path.exists("/proc/driver/nvidia") or _os.path.exists("/dev/kfd"):
        return False
    def installed(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ImportError:  # a parent package is missing (no jax_plugins without a plugin installed)
            return False

    return installed("libtpu") or installed("jax_plugins.xla_cuda12")


if "JAX_PLATFORMS" not in _os.environ and _compile_only_plugins_on_a_cpu_host():
    # Without this, jax tries those backends at its first use and prints libtpu's start-up errors; on such a host
    # it would end up on the CPU anyway. Compiling for TPU/GPU targets does not go through jax's backends (aot).
    import jax as _jax

    if not _jax.config.jax_platforms:
        _jax.config.update("jax_platforms", "cpu")

from squeezebert_jax.flops import flops, flops_breakdown
from squeezebert_jax.pretrained import export_torch, import_torch, load_pretrained, save_pretrained
from squeezebert_jax.model import (
    HEADS,
    SqueezeBertConfig,
    SqueezeBertForMaskedLM,
    SqueezeBertForMultipleChoice,
    SqueezeBertForPreTraining,
    SqueezeBertForQuestionAnswering,
    SqueezeBertForReplacedTokenDetection,
    SqueezeBertForSequenceClassification,
    SqueezeBertForTokenClassification,
    SqueezeBertModel,
    count_params,
)

__all__ = [
    "HEADS", "SqueezeBertConfig", "SqueezeBertForMaskedLM", "SqueezeBertForMultipleChoice",
    "SqueezeBertForPreTraining", "SqueezeBertForQuestionAnswering", "SqueezeBertForReplacedTokenDetection",
    "SqueezeBertForSequenceClassification",
    "SqueezeBertForTokenClassification", "SqueezeBertModel", "count_params", "export_torch", "flops",
    "flops_breakdown", "import_torch", "load_pretrained", "save_pretrained",
]


def __getattr__(name):
    """``Tokenizer`` and ``Predictor`` (their modules load ``tokenizers``/``sentencepiece`` on first use), and any
    submodule by its name, imported on first use: ``squeezebert_jax.predict.Predictor(MODEL_DIR)`` after a bare
    ``import squeezebert_jax`` (an AttributeError before)."""
    if name == "Tokenizer":
        from squeezebert_jax.tokenizer import Tokenizer  # lazy: tokenizers and sentencepiece load on first use

        return Tokenizer
    if name == "Predictor":
        from squeezebert_jax.predict import Predictor  # lazy: as Tokenizer

        return Predictor
    import importlib
    import importlib.util

    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
