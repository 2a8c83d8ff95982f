"""Optimizers: LAMB for pretraining (the paper's recipe), AdamW for fine-tuning, gradient accumulation.

LAMB as the BERT/LAMB reference implementations: global-norm clip -> Adam moments -> decoupled weight
decay -> layer-wise trust ratio ||w|| / ||update|| -> -lr, where LayerNorm parameters and biases get
neither the weight decay nor the trust ratio. Built from optax primitives.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from squeezebert_jax.errors import InputError


def key_name(k) -> str:
    """A pytree path entry's name: a dict key, an attribute name or a sequence index."""
    return str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))


def decay_mask(params) -> Any:
    """True for weights that get weight decay and the trust ratio; False for LayerNorm params and biases."""

    def keep(path, _):
        names = [key_name(k).lower() for k in path]
        if any("layernorm" in n or "layer_norm" in n for n in names):
            return False
        return names[-1] not in ("bias", "scale")

    return jax.tree_util.tree_map_with_path(keep, params)


def warmup_polynomial_decay(peak_lr: float, total_steps: int, warmup_fraction: float = 0.28, power: float = 1.0,
                            end_lr: float = 0.0) -> optax.Schedule:
    """Linear warmup from 0 over ``warmup_fraction * total_steps`` steps, then polynomial decay to ``end_lr``."""
    warmup = int(round(warmup_fraction * total_steps))
    decay = optax.polynomial_schedule(peak_lr, end_lr, power, max(total_steps - warmup, 1))
    if warmup == 0:
        return decay
    return optax.join_schedules([optax.linear_schedule(0.0, peak_lr, warmup), decay], [warmup])


def learning_rate_input(make: Callable[..., optax.GradientTransformation],
                        **hyperparams) -> optax.GradientTransformation:
    """``make(learning_rate=..., **hyperparams)`` whose learning rate is an input of every update, set by the train
    step with ``set_learning_rate`` from the host's schedule (``optax.inject_hyperparams``; the other hyperparameters
    stay constants of the program). A schedule inside the update would be compiled into the step as constants: runs
    that differ only in learning rate, warmup or length (a sweep, the GLUE tasks, a resume with another rate) would
    each compile their own program; this way they run one."""
    static = tuple(n for n in inspect.signature(make).parameters if n != "learning_rate")  # defaults included
    return optax.inject_hyperparams(make, static_args=static)(learning_rate=0.0, **hyperparams)


def set_learning_rate(opt_state, lr):
    """The state of a ``learning_rate_input`` optimizer with the rate of its next update set to ``lr``."""
    return opt_state._replace(hyperparams={**opt_state.hyperparams, "learning_rate": jnp.asarray(lr, jnp.float32)})


def schedule_values(schedule: optax.Schedule, num_steps: int) -> np.ndarray:
    """``schedule(0), ..., schedule(num_steps - 1)`` as float32: the rate of each update, read by the host."""
    return np.asarray(jax.jit(jax.vmap(schedule))(jnp.arange(num_steps)), np.float32)  # one compile, not one per op


def lamb(learning_rate: float | optax.Schedule, weight_decay: float = 0.01, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-6, clip_norm: float | None = 1.0,
         mask_fn: Callable[[Any], Any] = decay_mask) -> optax.GradientTransformation:
    """LAMB with LayerNorm/bias excluded from weight decay and from the trust ratio, updated layer-stacked
    (``by_layer``: the same numbers, one kernel per parameter kind instead of one per layer)."""
    parts = [optax.clip_by_global_norm(clip_norm)] if clip_norm else []
    parts += [optax.scale_by_adam(b1=b1, b2=b2, eps=eps),
              optax.add_decayed_weights(weight_decay, mask=mask_fn),
              optax.masked(scale_by_trust_ratio(), mask_fn),
              optax.scale_by_learning_rate(learning_rate)]
    return by_layer(optax.chain(*parts))


# --------------------------------------------------------------------------------------------------
# Layer-stacked updates
# --------------------------------------------------------------------------------------------------

STACKED = "[layers]"  # the key under which stack_layers puts a layer stack: its leaves are [num_layers, ...]


def _is_layer_dict(name, node) -> bool:
    """A ``layers`` dict of two or more layers keyed 0..L-1 with one structure and one shape per leaf."""
    if key_name(name) != "layers" or not isinstance(node, dict) or len(node) < 2:
        return False
    if not all(str(k).isdigit() for k in node) or sorted(int(k) for k in node) != list(range(len(node))):
        return False
    first = jax.tree.structure(node[next(iter(node))])
    shapes = jax.tree.map(lambda x: (np.shape(x), getattr(x, "dtype", None)), node[next(iter(node))])
    return all(jax.tree.structure(v) == first and jax.tree.map(lambda x: (np.shape(x), getattr(x, "dtype", None)), v)
               == shapes for v in node.values())


def stack_layers(tree, name=None):
    """``tree`` with each ``layers`` dict of identical layers (``{0: layer, 1: layer, ...}``, as an encoder's
    parameters are kept: the PyTorch names) replaced by ``{STACKED: layer}`` whose leaves are the layers' stacked on a
    new leading axis; everything else as it is."""
    if not isinstance(tree, dict):
        return tree
    if _is_layer_dict(name, tree):
        layers = [tree[k] for k in sorted(tree, key=int)]
        return {STACKED: jax.tree.map(lambda *xs: jnp.stack(xs), *layers)}
    return {k: stack_layers(v, k) for k, v in tree.items()}


def unstack_layers(stacked, like):
    """``stack_layers`` undone: ``stacked`` back in the structure (and layer keys) of ``like``."""
    if not isinstance(like, dict):
        return stacked
    if isinstance(stacked, dict) and set(stacked) == {STACKED} and STACKED not in like:
        return {k: jax.tree.map(lambda x, i=i: x[i], stacked[STACKED]) for i, k in enumerate(sorted(like, key=int))}
    return {k: unstack_layers(stacked[k], v) for k, v in like.items()}


def _convert_param_trees(state, params_def, fn):
    """``state`` with each subtree shaped like the parameters (treedef ``params_def``: Adam's moments) mapped by
    ``fn``; the rest (counts, empty states, hyperparameters) as it is."""
    like = lambda node: jax.tree.structure(node) == params_def  # noqa: E731
    return jax.tree.map(lambda node: fn(node) if like(node) else node, state, is_leaf=like)


def by_layer(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """``tx`` applied to the layer-stacked parameters (``stack_layers``), its state kept per layer.

    An encoder's parameters are kept per layer (``layers.{i}``); an optimizer over them launches its element-wise
    update and its norms once per leaf and layer: on a GPU, some 1,500 small kernels per step for SqueezeBERT's 12
    layers. Stacked, each parameter kind is one array ``[num_layers, ...]`` and the update one kernel over all its
    layers. Per-layer quantities stay per layer (``scale_by_trust_ratio`` takes a stacked leaf's norms per layer), so
    the numbers are the per-layer update's; the state (Adam's moments) keeps the per-layer layout (checkpoints are
    unchanged: a run resumes across this choice)."""

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("by_layer needs the parameters")
        stacked_params = stack_layers(params)
        per_layer_def, stacked_def = jax.tree.structure(params), jax.tree.structure(stacked_params)
        state = _convert_param_trees(state, per_layer_def, stack_layers)
        updates, state = tx.update(stack_layers(updates), state, stacked_params)
        back = lambda t: unstack_layers(t, params)  # noqa: E731
        return back(updates), _convert_param_trees(state, stacked_def, back)

    return optax.GradientTransformation(tx.init, update)


def scale_by_trust_ratio() -> optax.GradientTransformation:
    """optax's ``scale_by_trust_ratio`` (min_norm 0, coefficient 1): each update scaled by ||w|| / ||update||, 1
    where either is 0; on a ``stack_layers`` leaf, per layer."""

    def update(updates, state, params=None):
        def scale(path, u, w):
            axes = tuple(range(1, u.ndim)) if any(key_name(k) == STACKED for k in path) else None
            w_norm = jnp.sqrt(jnp.sum(jnp.square(w), axis=axes, keepdims=axes is not None))
            u_norm = jnp.sqrt(jnp.sum(jnp.square(u), axis=axes, keepdims=axes is not None))
            ratio = jnp.where((w_norm == 0.0) | (u_norm == 0.0), jnp.array(1.0, w.dtype), w_norm / u_norm)
            return u * ratio

        return jax.tree_util.tree_map_with_path(scale, updates, params), state

    return optax.GradientTransformation(optax.scale_by_trust_ratio().init, update)


def adamw_finetune(peak_lr: float, total_steps: int, warmup_fraction: float = 0.1, b1: float = 0.9,
                   b2: float = 0.999, eps: float = 1e-6,
                   weight_decay: float = 0.0) -> tuple[optax.GradientTransformation, np.ndarray]:
    """The paper's fine-tuning optimizer: AdamW (no weight decay by default) with warmup + linear decay to 0, as
    ``(tx, rates)``: ``tx`` takes each update's rate from ``set_learning_rate``, ``rates[i]`` is update i's."""
    rates = schedule_values(warmup_polynomial_decay(peak_lr, total_steps, warmup_fraction, power=1.0), total_steps)
    tx = learning_rate_input(optax.adamw, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay, mask=decay_mask)
    return tx, rates


def accumulate_gradients(loss_fn: Callable, params, batch: dict[str, jax.Array], num_microbatches: int,
                         rng: jax.Array) -> tuple[jax.Array, Any, Any]:
    """``(loss, aux, grads)`` of ``loss_fn(params, microbatch, rng_i) -> (loss, aux)`` summed over microbatches.

    The batch's leading axis is split into ``num_microbatches`` equal parts (rng_i = fold_in(rng, i)) and the
    losses, aux pytrees and gradients are *summed*: write ``loss_fn`` so that the per-microbatch values add up
    to the big batch's (e.g. a weighted sum divided by the global weight), and the result equals the big
    batch's to float error. ``num_microbatches == 1`` is a plain ``value_and_grad``.
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if num_microbatches == 1:
        (loss, aux), grads = grad_fn(params, batch, rng)
        return loss, aux, grads
    for k, v in batch.items():
        if v.shape[0] % num_microbatches:
            raise InputError(f"batch[{k!r}] has {v.shape[0]} rows, not divisible into {num_microbatches} microbatches")
    # Strided split (row r goes to microbatch r % k): with the batch sharded over devices, every
    # microbatch keeps rows on every device.
    micro = jax.tree.map(lambda x: x.reshape(x.shape[0] // num_microbatches, num_microbatches, *x.shape[1:]), batch)

    def body(carry, i):
        mb = jax.tree.map(lambda x: x[:, i], micro)
        (loss, aux), grads = grad_fn(params, mb, jax.random.fold_in(rng, i))
        return jax.tree.map(jnp.add, carry, (loss, aux, grads)), None

    mb0 = jax.tree.map(lambda x: x[:, 0], micro)
    shapes = jax.eval_shape(lambda: grad_fn(params, mb0, rng))
    (loss_s, aux_s), grads_s = shapes
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), (loss_s, aux_s, grads_s))
    (loss, aux, grads), _ = jax.lax.scan(body, zeros, jnp.arange(num_microbatches))
    return loss, aux, grads
