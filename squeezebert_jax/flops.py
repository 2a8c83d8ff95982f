"""Analytic forward FLOPs, counted as the SqueezeBERT paper does (footnote 11: a multiply-add is 2 FLOPs).

Counted: every matrix multiply of the encoder, i.e. the Q/K/V, post-attention and FFN position-wise layers
(a grouped layer costs 1/G of the dense one), the two activation-activation products QKᵀ and (softmax)V,
and the pooler (+ an optional classifier of ``num_labels`` outputs). Not counted: embedding lookups, bias
adds, softmax, LayerNorm, GELU and residual adds (together < 1% at seq 128), as in the paper's Table 1
where the embedding is 0.00% of FLOPs.

Paper Table 2, seq 128: SqueezeBERT 7.42 GFLOPs, BERT-base 22.5 GFLOPs.
"""

from __future__ import annotations

from squeezebert_jax.model import SqueezeBertConfig

PAPER_GFLOPS = {"squeezebert-uncased": 7.42, "bert-base-uncased": 22.5}


def flops_breakdown(config: SqueezeBertConfig, seq_len: int = 128, num_labels: int = 0) -> dict[str, float]:
    """FLOPs of one sequence, by the components of the paper's Table 1 (BERT-base: 0.00% embedding, 24.3%
    attention FC (Q/K/V), 2.70% softmax(QKᵀ/√d)V, 73.0% FFN FC (post-attention + expand + contract))."""
    c, s = config, seq_len
    h, i, n = c.hidden_size, c.intermediate_size, c.num_hidden_layers
    # As the paper's Table 1: "FC in self-attention" is Q/K/V; the post-attention FC is its FFN_1.
    attention_fc = 2 * s * h * h * (1 / c.q_groups + 1 / c.k_groups + 1 / c.v_groups)
    ffn_fc = 2 * s * h * (h / c.post_attention_groups + i / c.intermediate_groups + i / c.output_groups)
    attention_mm = 2 * 2 * s * s * h  # QKᵀ and probs·V over all heads
    return {
        "embedding": 0.0,
        "attention_fc": n * attention_fc,
        "attention_softmax_qkv": n * attention_mm,
        "ffn_fc": n * ffn_fc,
        "classifier": 2.0 * h * h + 2.0 * h * num_labels,
    }


def flops(config: SqueezeBertConfig, seq_len: int = 128, num_labels: int = 0) -> float:
    """Total forward FLOPs of one sequence of ``seq_len`` tokens (see the module docstring for what counts)."""
    return float(sum(flops_breakdown(config, seq_len, num_labels).values()))
