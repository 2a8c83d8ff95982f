"""Analytic forward FLOPs, counted as the SqueezeBERT paper does (footnote 11: a multiply-add is 2 FLOPs).

Counted: every matrix multiply of the encoder, i.e. the Q/K/V, post-attention and FFN position-wise layers
(ALBERT: its one shared layer at each of the num_hidden_layers steps, and the embeddings' projection to hidden_size,
under "embedding"; MobileBERT: ``models/mobilebert.flops_breakdown``, its bottlenecks and stacked FFNs)
(a grouped layer costs 1/G of the dense one), the two activation-activation products QKᵀ and (softmax)V,
and the pooler (+ an optional classifier of ``num_labels`` outputs). Not counted: embedding lookups, bias
adds, softmax, LayerNorm, GELU and residual adds (together < 1% at seq 128), as in the paper's Table 1
where the embedding is 0.00% of FLOPs.

Paper Table 2, seq 128: SqueezeBERT 7.42 GFLOPs, BERT-base 22.5 GFLOPs.

The BERT-family figures of MobileBERT's Table 3 (Sun et al.: BERT-base 22.5, its 6- and 3-layer PKD students 11.3 and
5.7 GFLOPs), which the paper quotes for BERT-base, are this count plus the pooler's hidden x hidden matmul at the
other 127 positions (2 * 127 * 768^2 = 0.150 GFLOPs at seq 128, as if the pooler ran on every token): with it ours
are 22.50, 11.32 and 5.74, each equal to the published figure at its printed precision; without it 22.35, 11.17 and
5.59. The sources do not say how they counted; ``pooler_every_token=True`` gives that count. The paper's own
SqueezeBERT figure, 7.42, is this module's default count (7.40), not that one (7.55).
"""

from __future__ import annotations

from squeezebert_jax.model import SqueezeBertConfig
from squeezebert_jax.models import mobilebert

PAPER_GFLOPS = {"squeezebert-uncased": 7.42, "bert-base-uncased": 22.5}


def flops_breakdown(config: SqueezeBertConfig, seq_len: int = 128, num_labels: int = 0,
                    pooler_every_token: bool = False) -> dict[str, float]:
    """FLOPs of one sequence, by the components of the paper's Table 1 (BERT-base: 0.00% embedding, 24.3%
    attention FC (Q/K/V), 2.70% softmax(QKᵀ/√d)V, 73.0% FFN FC (post-attention + expand + contract)).
    ``pooler_every_token``: the pooler counted at all ``seq_len`` positions, as MobileBERT's Table 3 counts them (module
    docstring); by default at the [CLS] position only, as the model runs it."""
    if config.family == "mobilebert":  # its bottlenecks and stacked FFNs: counted in its own file

        return mobilebert.flops_breakdown(config, seq_len, num_labels, pooler_every_token)
    c, s = config, seq_len
    h, i, n = c.hidden_size, c.intermediate_size, c.num_hidden_layers  # ALBERT: n runs of the one shared layer
    # As the paper's Table 1: "FC in self-attention" is Q/K/V; the post-attention FC is its FFN_1.
    attention_fc = 2 * s * h * h * (1 / c.q_groups + 1 / c.k_groups + 1 / c.v_groups)
    ffn_fc = 2 * s * h * (h / c.post_attention_groups + i / c.intermediate_groups + i / c.output_groups)
    attention_mm = 2 * 2 * s * s * h  # QKᵀ and probs·V over all heads
    # ALBERT's projection of the embeddings (embedding_size) to hidden_size: once, before the first layer
    projection = 2.0 * s * c.embedding_size * h if c.factorized_embeddings else 0.0
    return {
        "embedding": projection,
        "attention_fc": n * attention_fc,
        "attention_softmax_qkv": n * attention_mm,
        "ffn_fc": n * ffn_fc,
        "classifier": 2.0 * h * h * (s if pooler_every_token else 1) + 2.0 * h * num_labels,
    }


def flops(config: SqueezeBertConfig, seq_len: int = 128, num_labels: int = 0,
          pooler_every_token: bool = False) -> float:
    """Total forward FLOPs of one sequence of ``seq_len`` tokens (see the module docstring for what counts)."""
    return float(sum(flops_breakdown(config, seq_len, num_labels, pooler_every_token).values()))
