"""Gradual magnitude pruning during fine-tuning (Zhu & Gupta, 2017): the pruning baseline of MobileBERT's Table 3.

The sparsity follows the cubic schedule ``s_t = s_f + (s_i - s_f) (1 - (t - t_0) / (t_1 - t_0))^3`` from step
``t_0`` to ``t_1`` (``config.prune.begin`` / ``end``, fractions of the run), the masks recomputed every
``config.prune.every`` steps from the weights' magnitudes and applied after each optimizer update (a pruned weight
may regrow only when a later mask update brings it back). What is pruned, per encoder layer:

* ``unstructured``: the smallest-magnitude entries of each 1x1-conv kernel (Q, K, V, post-attention, FFN expand and
  contract), every kernel to the same sparsity;
* ``heads``: whole attention heads, scored by the L2 norm of their Q/K/V output channels and post-attention input
  rows; a pruned head has those channels and rows (and biases) zero, so it contributes nothing;
* ``ffn``: whole FFN channels, scored by the norm of the expand kernel's output column and the contract kernel's
  input row; both zeroed (with the expand bias).

Structured sparsity is rounded to whole heads / channels per layer (FFN channels: the same number in every group of
the grouped convs). Zeros are kept: the pruned model saves, loads and exports like any other. ``shrink_ffn`` cuts
FFN-pruned channels out, giving a model with a smaller ``intermediate_size`` that saves, converts and loads in
transformers (``SqueezeBertFor...`` / ``BertFor...``) like any other. Pruned heads stay zeros: transformers 5 has no
``prune_heads`` and its configs one head count for every layer, so a head-pruned model cannot be shrunk there.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from squeezebert_jax.errors import InputError
from squeezebert_jax.model import HEADS
from squeezebert_jax.pretrained import flat_params

KINDS = ("unstructured", "heads", "ffn")
# config.prune and its defaults (train/configs/glue.py builds its section from these): target 0 is off, and then
# fine-tuning's validator refuses the others changed (finetune_settings.check_settings), which nothing would read
SETTINGS = {"target": 0.0, "kind": "unstructured", "begin": 0.0, "end": 0.75, "every": 10}
_LAYER = re.compile(r"^(?:transformer/)?encoder/layers/(\d+)/(.+)/kernel$")
_KERNELS = ("attention/query", "attention/key", "attention/value", "post_attention/conv1d", "intermediate/conv1d",
            "output/conv1d")


def check_prunable(model_config, source: str, what: str) -> None:
    """Refuse, before any work, a model whose layers are not the BERT-shaped ones ``_KERNELS`` names (MobileBERT's
    bottlenecks and stacked FFNs): ``what`` (the setting) and ``source`` (the model) name it."""
    if model_config.family == "mobilebert":
        raise InputError(f"{what}: pruning is for BERT-shaped layers (Q, K, V, post-attention and FFN kernels); "
                         f"{source} is a MobileBERT, whose bottlenecks and stacked FFNs the pruner does not know")


def cubic_sparsity(step: int, total_steps: int, target: float, begin: float = 0.0, end: float = 0.75,
                   initial: float = 0.0) -> float:
    """The sparsity at ``step`` of ``total_steps``: ``initial`` until ``begin * total``, ``target`` from ``end *
    total`` on, the cubic ramp of Zhu & Gupta in between (fast at first, slow near the target)."""
    t0, t1 = begin * total_steps, end * total_steps
    if step <= t0:
        return initial
    if step >= t1 or t1 <= t0:
        return target
    return target + (initial - target) * (1.0 - (step - t0) / (t1 - t0)) ** 3


def _key(path) -> str:
    return "/".join(str(getattr(k, "key", k)) for k in path)


def prunable_kernels(params) -> dict[str, tuple[int, str]]:
    """``{param path: (layer, kernel name)}`` of the encoder's 1x1-conv kernels (``[G, Cin/G, Cout/G]``)."""
    out = {}
    for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]:
        m = _LAYER.match(_key(path))
        if m and m.group(2) in _KERNELS:
            out[_key(path)] = (int(m.group(1)), m.group(2))
    return out


def _channels_out(kernel: np.ndarray) -> np.ndarray:
    """``[G, Cin/G, Cout/G]`` -> ``[Cout, Cin/G]``: output channel ``g * Cout/G + j`` is column ``j`` of group ``g``."""
    g, cin, cout = kernel.shape
    return np.transpose(kernel, (0, 2, 1)).reshape(g * cout, cin)


def _channels_in(kernel: np.ndarray) -> np.ndarray:
    """``[G, Cin/G, Cout/G]`` -> ``[Cin, Cout/G]``: input channel ``g * Cin/G + i`` is row ``i`` of group ``g``."""
    g, cin, cout = kernel.shape
    return kernel.reshape(g * cin, cout)


def _out_mask(shape, keep: np.ndarray) -> np.ndarray:
    g, cin, cout = shape
    return np.broadcast_to(keep.reshape(g, 1, cout), shape).astype(np.float32)


def _in_mask(shape, keep: np.ndarray) -> np.ndarray:
    g, cin, cout = shape
    return np.broadcast_to(keep.reshape(g, cin, 1), shape).astype(np.float32)


def _smallest(scores: np.ndarray, k: int) -> np.ndarray:
    """A keep-vector (bool) dropping the ``k`` lowest scores (ties: the lower index first)."""
    keep = np.ones(scores.shape[0], bool)
    if k > 0:
        keep[np.argsort(scores, kind="stable")[:k]] = False
    return keep


@dataclasses.dataclass
class Pruner:
    """Masks for one model's parameters, updated on the cubic schedule and applied after each optimizer step.

    ``pruner = Pruner(kind, target, num_heads, total_steps, ...)``; in the loop ``params = pruner(step, params)``;
    ``pruner.report(params)`` gives the sparsity reached per layer."""

    kind: str
    target: float
    num_heads: int
    total_steps: int
    begin: float = 0.0
    end: float = 0.75
    every: int = 10
    masks: Any = None  # pytree like params: 1.0 / 0.0 where pruned (ones for what is never pruned)
    _updated_at: int = -1
    _sparsity: float = -1.0  # of the current masks

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InputError(f"prune.kind {self.kind!r}: one of {', '.join(KINDS)}")
        if not 0.0 <= self.target < 1.0:
            raise InputError(f"prune.target {self.target}: a sparsity in [0, 1)")
        if not 0.0 <= self.begin <= self.end <= 1.0:
            raise InputError(f"prune.begin {self.begin} and prune.end {self.end}: 0 <= begin <= end <= 1")
        if self.every < 1:
            raise InputError(f"prune.every {self.every} must be >= 1")
        self._apply = jax.jit(lambda p, m: jax.tree.map(lambda x, y: x * y.astype(x.dtype), p, m))

    @classmethod
    def from_config(cls, prune_config, num_heads: int, total_steps: int) -> Pruner | None:
        """The ``prune`` block of a fine-tuning config; None when ``target`` is 0 (no pruning)."""
        if not prune_config.target:
            return None
        return cls(prune_config.kind, float(prune_config.target), num_heads, total_steps, prune_config.begin,
                   prune_config.end, prune_config.every)

    @property
    def at_target(self) -> bool:
        """The current masks prune the target sparsity (the ramp has ended)."""
        return self.masks is not None and self._sparsity >= self.target

    def sparsity_at(self, step: int) -> float:
        return cubic_sparsity(step, self.total_steps, self.target, self.begin, self.end)

    def __call__(self, step: int, params):
        """``params`` with the masks of ``step`` applied (the masks recomputed when the schedule says so)."""
        s = self.sparsity_at(step)
        # every `every` steps while the ramp rises (and once it ends); at the target the masks stay, as Zhu & Gupta's do
        ramping = self._sparsity < self.target and (step - self._updated_at >= self.every or s == self.target)
        if self.masks is None or ramping:
            self.masks = compute_masks(params, self.kind, s, self.num_heads)
            self._updated_at, self._sparsity = step, s
        return self._apply(params, self.masks)

    def report(self, params) -> dict[str, Any]:
        """``sparsity_report`` plus ``reached``: what ``target`` measures -- the zeros of the prunable kernels
        (unstructured), the share of heads or of FFN channels removed (heads, ffn), over all layers."""
        rep = sparsity_report(params, self.num_heads)
        return rep | {"reached": rep[{"unstructured": "encoder", "heads": "heads", "ffn": "ffn_channels"}[self.kind]]}


def compute_masks(params, kind: str, sparsity: float, num_heads: int):
    """Masks (a pytree like ``params``) pruning ``sparsity`` of each layer's prunable weights by magnitude."""
    host = jax.device_get(params)
    flat = {_key(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(host)[0]}
    kernels = prunable_kernels(host)
    masks = {k: np.ones_like(v, np.float32) for k, v in flat.items()}
    layers = sorted({layer for layer, _ in kernels.values()})
    prefix = {layer: next(k for k, (li, _) in kernels.items() if li == layer).split("encoder/")[0] for layer in layers}

    def name(layer, kernel, what="kernel"):
        return f"{prefix[layer]}encoder/layers/{layer}/{kernel}/{what}"

    for layer in layers:
        if kind == "unstructured":
            for kernel in _KERNELS:
                w = flat[name(layer, kernel)]
                k = int(round(sparsity * w.size))
                if k:
                    order = np.argsort(np.abs(w).reshape(-1), kind="stable")[:k]
                    m = np.ones(w.size, np.float32)
                    m[order] = 0.0
                    masks[name(layer, kernel)] = m.reshape(w.shape)
        elif kind == "heads":
            q, kk, v = (flat[name(layer, f"attention/{x}")] for x in ("query", "key", "value"))
            post = flat[name(layer, "post_attention/conv1d")]
            if q.shape[0] * q.shape[2] % num_heads:
                raise InputError(f"{q.shape[0] * q.shape[2]} attention channels do not split into {num_heads} heads")
            d = q.shape[0] * q.shape[2] // num_heads
            score = sum((_channels_out(x) ** 2).sum(1) for x in (q, kk, v)) + (_channels_in(post) ** 2).sum(1)
            # a layer keeps one head at least: a target rounded up to all of them (0.99 of 4) left no attention
            keep_heads = _smallest(score.reshape(num_heads, d).sum(1), min(int(round(sparsity * num_heads)),
                                                                           num_heads - 1))
            keep = np.repeat(keep_heads, d)
            for x in ("query", "key", "value"):
                masks[name(layer, f"attention/{x}")] = _out_mask(q.shape, keep)
                masks[name(layer, f"attention/{x}", "bias")] = keep.astype(np.float32)
            masks[name(layer, "post_attention/conv1d")] = _in_mask(post.shape, keep)
        else:  # ffn: the same number of channels in every group (and layer), so that shrink_ffn can cut them out
            up, down = flat[name(layer, "intermediate/conv1d")], flat[name(layer, "output/conv1d")]
            score = ((_channels_out(up) ** 2).sum(1) + (_channels_in(down) ** 2).sum(1)).reshape(up.shape[0], -1)
            k = min(int(round(sparsity * score.shape[1])), score.shape[1] - 1)  # one channel a group at least
            keep = np.concatenate([_smallest(row, k) for row in score])
            masks[name(layer, "intermediate/conv1d")] = _out_mask(up.shape, keep)
            masks[name(layer, "intermediate/conv1d", "bias")] = keep.astype(np.float32)
            masks[name(layer, "output/conv1d")] = _in_mask(down.shape, keep)
    treedef = jax.tree_util.tree_structure(host)
    return jax.tree_util.tree_unflatten(treedef, [jnp.asarray(masks[_key(p)])
                                                  for p, _ in jax.tree_util.tree_flatten_with_path(host)[0]])


def sparsity_report(params, num_heads: int | None = None) -> dict[str, Any]:
    """Zeros among the prunable kernels: per layer, per kernel kind and over the whole encoder; the share of FFN
    channels whose expand column and contract row are all zero; with ``num_heads``, the share of heads removed."""
    host = jax.device_get(params)
    flat = {_key(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(host)[0]}
    dead_channels = [0, 0]
    for key, (layer, kernel) in prunable_kernels(host).items():
        if kernel == "output/conv1d":
            up = _channels_out(flat[key.replace("output/conv1d", "intermediate/conv1d")])
            dead = ~(np.any(_channels_in(flat[key]) != 0, axis=1) | np.any(up != 0, axis=1))
            dead_channels = [dead_channels[0] + int(dead.sum()), dead_channels[1] + dead.size]
    per_layer: dict[int, list[int]] = {}
    per_kernel: dict[str, list[int]] = {}
    for key, (layer, kernel) in prunable_kernels(host).items():
        zeros, size = int((flat[key] == 0).sum()), int(flat[key].size)
        for d, k in ((per_layer, layer), (per_kernel, kernel)):
            d.setdefault(k, [0, 0])
            d[k][0] += zeros
            d[k][1] += size
    total = [sum(v[0] for v in per_layer.values()), sum(v[1] for v in per_layer.values())]
    out = {"encoder": total[0] / max(total[1], 1),
           "per_layer": {str(k): v[0] / v[1] for k, v in sorted(per_layer.items())},
           "per_kernel": {k: v[0] / v[1] for k, v in per_kernel.items()},
           "ffn_channels": dead_channels[0] / max(dead_channels[1], 1)}
    if num_heads:
        dead_heads = sum(map(len, pruned_heads(host, num_heads).values()))
        out["heads"] = dead_heads / (num_heads * max(len(per_layer), 1))
    return out


def pruned_heads(params, num_heads: int) -> dict[int, list[int]]:
    """``{layer: [heads]}`` whose post-attention input rows are all zero (a head-pruned model's removed heads)."""
    flat = {_key(p): np.asarray(x) for p, x in jax.tree_util.tree_flatten_with_path(jax.device_get(params))[0]}
    out = {}
    for key, (layer, kernel) in prunable_kernels(flat).items():
        if kernel == "post_attention/conv1d":
            rows = _channels_in(flat[key])
            d = rows.shape[0] // num_heads
            dead = [h for h in range(num_heads) if not np.any(rows[h * d:(h + 1) * d])]
            if dead:
                out[layer] = dead
    return out


def shrink_ffn(model):
    """A copy of an FFN-pruned ``model`` with the pruned channels cut out: ``intermediate_size`` reduced by the channels
    pruned per layer (the same number in every layer and group, as ``compute_masks(..., "ffn", ...)`` prunes them).
    Its outputs equal the masked model's; it saves, converts and loads (ours and transformers') as any model does."""
    from flax import nnx

    cfg = model.config
    flat = flat_params(model)
    kernels = prunable_kernels(flat)
    keeps = {}
    for key, (layer, kernel) in kernels.items():
        if kernel == "output/conv1d":
            rows = _channels_in(flat[key])
            up = _channels_out(flat[key.replace("output/conv1d", "intermediate/conv1d")])
            keeps[layer] = np.any(rows != 0, axis=1) | np.any(up != 0, axis=1)
    groups = cfg.intermediate_groups
    widths = {int(k.reshape(groups, -1).sum(1).min()) for k in keeps.values()} | \
        {int(k.reshape(groups, -1).sum(1).max()) for k in keeps.values()}
    if len(widths) != 1:
        raise InputError(f"the layers' FFNs keep different numbers of channels per group ({sorted(widths)}): "
                         "shrink_ffn needs FFN pruning (prune.kind='ffn'), which prunes them evenly")
    new_size = widths.pop() * groups
    if cfg.intermediate_groups != cfg.output_groups:
        raise InputError(f"intermediate_groups {cfg.intermediate_groups} != output_groups {cfg.output_groups}")
    kwargs = {"num_labels": model.num_labels} if hasattr(model, "num_labels") else {}
    small = HEADS[type(model).__name__](cfg.replace(intermediate_size=new_size), rngs=nnx.Rngs(0), **kwargs)
    state = nnx.to_flat_state(nnx.state(small, nnx.Param))
    for path, var in state:
        key = "/".join(str(p) for p in path)
        x = flat[key]
        m = _LAYER.match(key.replace("/bias", "/kernel"))
        if m and m.group(2) in ("intermediate/conv1d", "output/conv1d"):
            keep = keeps[int(m.group(1))]
            if m.group(2) == "intermediate/conv1d":
                x = x[keep] if key.endswith("bias") else \
                    np.stack([x[g][:, keep.reshape(groups, -1)[g]] for g in range(groups)])
            elif key.endswith("kernel"):
                x = np.stack([x[g][keep.reshape(groups, -1)[g], :] for g in range(groups)])
        var.set_value(jnp.asarray(x, var.get_value().dtype))
    nnx.update(small, nnx.from_flat_state(state))
    return small
