"""squeezebert_jax: SqueezeBERT (Iandola et al., 2020) in JAX / Flax NNX."""

from squeezebert_jax.flops import flops, flops_breakdown
from squeezebert_jax.io import export_torch, import_torch, load_pretrained, save_pretrained
from squeezebert_jax.model import (
    HEADS,
    SqueezeBertConfig,
    SqueezeBertForMaskedLM,
    SqueezeBertForMultipleChoice,
    SqueezeBertForPreTraining,
    SqueezeBertForQuestionAnswering,
    SqueezeBertForSequenceClassification,
    SqueezeBertForTokenClassification,
    SqueezeBertModel,
    count_params,
)

__all__ = [
    "HEADS", "SqueezeBertConfig", "SqueezeBertForMaskedLM", "SqueezeBertForMultipleChoice",
    "SqueezeBertForPreTraining", "SqueezeBertForQuestionAnswering", "SqueezeBertForSequenceClassification",
    "SqueezeBertForTokenClassification", "SqueezeBertModel", "count_params", "export_torch", "flops",
    "flops_breakdown", "import_torch", "load_pretrained", "save_pretrained",
]


def __getattr__(name):  # Tokenizer imports `tokenizers`/`sentencepiece` lazily
    if name == "Tokenizer":
        from squeezebert_jax.tokenizer import Tokenizer

        return Tokenizer
    raise AttributeError(name)
