"""Every training objective's loss, written once: pretraining's (MLM + sentence order, or ELECTRA's replaced-token
detection) as per-batch sums that microbatches add up exactly, and fine-tuning's per task kind (``LOSSES``, keyed by
``tasks.Task.loss``) as weighted means over a batch's real rows, with distillation's soft targets mixed in.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from squeezebert_jax import tasks


# --------------------------------------------------------------------------------------------------
# Pretraining
# --------------------------------------------------------------------------------------------------

def pretraining_losses(out, batch) -> dict[str, jax.Array]:
    """Per-batch sums (so microbatches add up exactly): MLM NLL over real predictions, SOP NLL."""
    sop_logp = jax.nn.log_softmax(out.sop_logits.astype(jnp.float32), axis=-1)
    sop_nll = -jnp.take_along_axis(sop_logp, batch["sop_label"][:, None], axis=-1)[:, 0]
    return mlm_losses(out.mlm_logits, batch) | {
        "sop_nll_sum": jnp.sum(sop_nll),
        "sop_correct_sum": jnp.sum((jnp.argmax(sop_logp, -1) == batch["sop_label"]).astype(jnp.float32)),
        "sop_count": jnp.asarray(sop_nll.shape[0], jnp.float32)}


def mlm_losses(mlm_logits, batch) -> dict[str, jax.Array]:
    """Per-batch sums of the MLM NLL and accuracy over the real predictions (``masked_lm_weights`` > 0)."""
    ids, w = batch["masked_lm_ids"], batch["masked_lm_weights"].astype(jnp.float32)
    nll = softmax_nll(mlm_logits, ids)
    correct = (jnp.argmax(mlm_logits, -1) == ids).astype(jnp.float32)
    return {"mlm_nll_sum": jnp.sum(nll * w), "mlm_correct_sum": jnp.sum(correct * w), "mlm_weight": jnp.sum(w)}


def softmax_nll(logits: jax.Array, ids: jax.Array) -> jax.Array:
    """``-log softmax(logits)[ids]`` in float32 over the last axis, ``logits [..., V]``, ``ids [...]``: the
    vocabulary-wide cross-entropy, its label's logit picked by a one-hot select (compared in place, never stored).
    Written as ``log_softmax`` and ``take_along_axis``, autodiff's backward wrote a zero ``[..., V]`` array,
    scattered the labels into it and read both back: 3.1 GB of the paper step's 110 GB compiled for one H100 (2.6%
    of its time on an H200). Here the backward is ``softmax - one_hot`` in one kernel. A hand-written backward
    (``jax.custom_vjp``, the form timed on the H200) compiles to the same bytes for an H100 and to 5 GB more per
    v5e chip (696.9 against 691.9 GB, phase 1 at 4 microbatches)."""
    x = logits.astype(jnp.float32)
    one_hot = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1) == ids[..., None]
    return jax.nn.logsumexp(x, axis=-1) - jnp.sum(jnp.where(one_hot, x, 0.0), axis=-1)


def finalize_losses(s: dict[str, jax.Array], rtd_weight: float = 0.0) -> dict[str, jax.Array]:
    mlm = s["mlm_nll_sum"] / jnp.maximum(s["mlm_weight"], 1.0)
    out = {"mlm_loss": mlm, "mlm_accuracy": s["mlm_correct_sum"] / jnp.maximum(s["mlm_weight"], 1.0)}
    if "rtd_bce_sum" in s:  # ELECTRA: the generator's MLM + rtd_weight x the discriminator's per-token BCE
        rtd = s["rtd_bce_sum"] / jnp.maximum(s["rtd_tokens"], 1.0)
        return out | {"loss": mlm + rtd_weight * rtd, "rtd_loss": rtd,
                      "rtd_accuracy": s["rtd_correct_sum"] / jnp.maximum(s["rtd_tokens"], 1.0),
                      "replaced_share": s["rtd_replaced_sum"] / jnp.maximum(s["rtd_tokens"], 1.0)}
    sop = s["sop_nll_sum"] / jnp.maximum(s["sop_count"], 1.0)
    return out | {"loss": mlm + sop, "sop_loss": sop,
                  "sop_accuracy": s["sop_correct_sum"] / jnp.maximum(s["sop_count"], 1.0)}


def replace_with_samples(input_ids, positions, original_ids, weights, generator_logits, rng):
    """ELECTRA's corruption: at each real masked position (``weights`` > 0) the token is replaced by a sample of the
    generator's softmax (Gumbel-max, no gradient through it); everywhere else the input stays. Returns (the
    discriminator's input ids [B, S], its labels [B, S]: 1 where the token differs from the original -- a sample that
    equals the original counts as original --, the samples [B, P])."""
    logits = jax.lax.stop_gradient(generator_logits.astype(jnp.float32))
    gumbel = -jnp.log(-jnp.log(jax.random.uniform(rng, logits.shape, jnp.float32, 1e-9, 1.0)))
    sampled = jnp.argmax(logits + gumbel, axis=-1).astype(input_ids.dtype)
    real = weights > 0
    rows = jnp.arange(input_ids.shape[0])[:, None]
    at = jnp.where(real, positions, input_ids.shape[1])  # padding predictions write out of bounds: dropped
    disc_ids = input_ids.at[rows, at].set(sampled, mode="drop")
    labels = jnp.zeros(input_ids.shape, jnp.int32).at[rows, at].set(
        (sampled != original_ids).astype(jnp.int32), mode="drop")
    return disc_ids, labels, sampled


def rtd_losses(discriminator_logits, labels, attention_mask) -> dict[str, jax.Array]:
    """Per-batch sums of the discriminator's sigmoid cross-entropy over the real tokens, its accuracy and the
    share of replaced tokens."""
    z = discriminator_logits.astype(jnp.float32)
    y = labels.astype(jnp.float32)
    m = attention_mask.astype(jnp.float32)
    bce = optax.sigmoid_binary_cross_entropy(z, y)
    return {"rtd_bce_sum": jnp.sum(bce * m), "rtd_correct_sum": jnp.sum(((z > 0) == (y > 0)) * m),
            "rtd_replaced_sum": jnp.sum(y * m), "rtd_tokens": jnp.sum(m)}


# --------------------------------------------------------------------------------------------------
# Fine-tuning
# --------------------------------------------------------------------------------------------------

def task_loss(logits, labels, weights, teacher=None, teacher_weight=0.0, regression: bool = False):
    """A single-label classifier's cross-entropy (over its labels, or a multiple-choice model's choices), or with
    ``regression`` a regressor's squared error: the weighted mean over real examples (weights 0 on padding), towards
    the teacher's soft labels mixed in when ``teacher`` is given (the target is ``w * teacher + (1 - w) * label``: a softmax's for a classifier, the score for a regressor). ``teacher_weight``: a
    number, or one per example (1 on unlabeled transfer rows: the soft-label cross-entropy alone)."""
    w = weights.astype(jnp.float32)
    tw = jnp.asarray(teacher_weight, jnp.float32)  # a scalar, or per example [B] (transfer rows: 1)
    if regression:
        pred = logits[..., 0]
        target = labels.astype(jnp.float32)
        if teacher is not None:
            target = tw * teacher[..., 0] + (1.0 - tw) * target
        per = jnp.square(pred - target)
    else:
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
        target = jax.nn.one_hot(labels, logits.shape[-1])
        if teacher is not None:
            tw = tw[..., None]
            target = tw * jax.nn.softmax(teacher.astype(jnp.float32), -1) + (1.0 - tw) * target
        per = -jnp.sum(target * logp, -1)
    return jnp.sum(per * w) / jnp.maximum(jnp.sum(w), 1.0)


def multilabel_loss(logits, labels, weights):
    """Multilabel: a sigmoid cross-entropy per label (``labels`` multi-hot [B, L]), their mean per example, the
    weighted mean over real examples."""
    w = weights.astype(jnp.float32)
    per = optax.sigmoid_binary_cross_entropy(logits.astype(jnp.float32), labels).mean(-1)
    return jnp.sum(per * w) / jnp.maximum(jnp.sum(w), 1.0)


def token_loss(logits, labels, weights):
    """Token classification: the mean cross-entropy of the scored pieces (``labels`` [B, S]; ``tasks.IGNORE`` on the
    pieces not scored) of the real examples."""
    w = weights.astype(jnp.float32)
    valid = (labels != tasks.IGNORE).astype(jnp.float32) * w[:, None]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    nll = -jnp.take_along_axis(logp, jnp.maximum(labels, 0)[..., None], -1)[..., 0]
    return jnp.sum(nll * valid) / jnp.maximum(jnp.sum(valid), 1.0)


def span_loss(logits, start_positions, end_positions, attention_mask, weights):
    """Extractive QA: the mean of the start and end positions' cross-entropies over each real example's positions
    (``logits`` [B, S, 2]); the padding is left out of the softmax, so a batch cut to its length bucket gives the loss
    of one padded to ``max_seq_length`` (transformers' ``run_qa`` keeps the padding in)."""
    w = weights.astype(jnp.float32)
    x = jnp.where(attention_mask[..., None] > 0, logits.astype(jnp.float32), -1e9)
    logp = jax.nn.log_softmax(x, axis=1)
    nll = -(jnp.take_along_axis(logp[..., 0], start_positions[:, None], 1)[:, 0]
            + jnp.take_along_axis(logp[..., 1], end_positions[:, None], 1)[:, 0]) / 2
    return jnp.sum(nll * w) / jnp.maximum(jnp.sum(w), 1.0)


# The training loss of each ``tasks.Task.loss``: ``(logits, batch, teacher_weight) -> the batch's weighted mean``. A
# batch holds the teacher's logits (``teacher``) only when distilling, and its own ``teacher_weight`` per row only
# with transfer text; ``teacher_weight`` (distill.teacher_weight) serves the others.
LOSSES = {
    "cross_entropy": lambda logits, b, tw: task_loss(logits, b["labels"], b["weights"], b.get("teacher"),
                                                     b.get("teacher_weight", tw)),
    "mse": lambda logits, b, tw: task_loss(logits, b["labels"], b["weights"], b.get("teacher"),
                                           b.get("teacher_weight", tw), regression=True),
    "sigmoid_bce": lambda logits, b, tw: multilabel_loss(logits, b["labels"], b["weights"]),
    "token_cross_entropy": lambda logits, b, tw: token_loss(logits, b["labels"], b["weights"]),
    "span_cross_entropy": lambda logits, b, tw: span_loss(logits, b["start_positions"], b["end_positions"],
                                                          b["attention_mask"], b["weights"]),
}
