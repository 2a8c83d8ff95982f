"""The paper's mobile export path: our model -> transformers (PyTorch) -> TorchScript lite-interpreter file.
(Its latency table, the paper's Table 2, is ``squeezebert_jax.benchmarks.latency``.)

The paper (Sec. 5 / appendix) exports with ``torch.jit.trace`` and times the result on a Pixel 3 with
PyTorch's mobile runtime, batch 1, sequence length 128. Here:

1. ``to_transformers``: our Flax model -> the matching transformers PyTorch class, through ``export_torch``
   (SqueezeBERT keys, or BERT keys when every group count is 1, so BERT-base runs as ``BertFor...``).
   A pretraining model exports its MLM logits (transformers' ``...ForMaskedLM`` class; the SOP head is
   dropped). Attention is the eager implementation, as in the 2020 paper.
2. ``trace_frozen``: ``torch.jit.trace`` on ``(input_ids, attention_mask, token_type_ids)`` -> a tuple of
   tensors, then ``torch.jit.freeze``; ``optimize_for_mobile`` when this PyTorch build has XNNPACK
   (the x86 CPU wheels usually do not: the frozen trace is kept and the reason is reported).
3. ``export_lite``: save with ``_save_for_lite_interpreter``, reload with
   ``torch.jit.mobile._load_for_lite_interpreter`` and check its outputs against the Flax model on inputs
   with padding (max |diff| <= ``tol``) before declaring success.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import tempfile
import warnings
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from squeezebert_jax import convert, models
from squeezebert_jax.errors import InputError
from squeezebert_jax.files import host_memory_bytes, overwrite_flag
from squeezebert_jax.model import set_execution, SqueezeBertConfig
from squeezebert_jax.pretrained import cast_compute_dtype, export_torch
from squeezebert_jax.tasks import MIN_SEQ_LENGTH

log = logging.getLogger(__name__)

DEFAULT_TOL = 1e-4

# What each head exports, in order (the traced module returns this tuple).
OUTPUT_NAMES = {
    "SqueezeBertModel": ("last_hidden_state", "pooler_output"),
    "SqueezeBertForMaskedLM": ("logits",),
    "SqueezeBertForPreTraining": ("mlm_logits",),
    "SqueezeBertForSequenceClassification": ("logits",),
    "SqueezeBertForTokenClassification": ("logits",),
    "SqueezeBertForMultipleChoice": ("logits",),
    "SqueezeBertForQuestionAnswering": ("start_logits", "end_logits"),
    "SqueezeBertForReplacedTokenDetection": ("logits",),
}

def example_inputs(config: SqueezeBertConfig, batch: int = 1, seq_len: int = 128, seed: int = 0,
                   num_choices: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random (input_ids, attention_mask, token_type_ids), int64, with right padding.

    The first sequence has its last quarter padded, the others a random number of padding tokens (seeded),
    so a trace or a parity check always exercises the attention mask; token types switch to 1 half way.
    ``num_choices`` gives ``[B, C, S]``.
    """
    if seq_len > config.max_position_embeddings:
        raise InputError(f"seq_len {seq_len} > max_position_embeddings {config.max_position_embeddings}")
    shape = (batch, seq_len) if num_choices is None else (batch, num_choices, seq_len)
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, config.vocab_size, shape).astype(np.int64)
    n_pad = rng.integers(0, seq_len // 2 + 1, shape[:-1])
    n_pad.flat[0] = seq_len // 4
    mask = (np.arange(seq_len) < (seq_len - n_pad)[..., None]).astype(np.int64)
    ids[mask == 0] = config.pad_token_id
    tt = np.zeros(shape, np.int64)
    tt[..., seq_len // 2:] = min(1, config.type_vocab_size - 1)
    return ids, mask, tt


# --------------------------------------------------------------------------------------------------
# Flax side
# --------------------------------------------------------------------------------------------------

def _select_outputs(out, head: str) -> tuple:
    return tuple(getattr(out, name) for name in OUTPUT_NAMES[head])


def flax_outputs(model: nnx.Module, ids, mask, tt) -> list[np.ndarray]:
    """The outputs a traced export returns (``OUTPUT_NAMES[head]``), from the jitted Flax model in eval mode."""
    return [np.asarray(x, np.float32) for x in make_flax_forward(model)(ids, mask, tt)]


def make_flax_forward(model: nnx.Module, dtype=None):
    """A jitted pure function ``f(input_ids, attention_mask, token_type_ids) -> tuple of outputs``.

    The model is split into graphdef + state once (the Flax performance guide's advice) and the state is
    closed over as a jit argument, so each call runs one compiled executable. ``dtype`` (e.g.
    ``jnp.bfloat16``) sets the compute dtype and stores the parameters in it (inference-only weights);
    LayerNorm and softmax statistics stay float32 (see model.py). The layers run unrolled (``set_execution``):
    a scan would stack every layer's weights on each call, a copy that inference need not pay, and the op
    profile (``benchmarks.profile_table.op_profile``) attributes each layer's ops by their scopes.
    """

    head = convert.head_name(model)
    model.eval()
    set_execution(model, scan_layers=False, remat="none")
    if dtype is not None and dtype != jnp.float32:
        cast_compute_dtype(model, dtype)
    graphdef, state = nnx.split(model)
    if dtype is not None and dtype != jnp.float32:
        state = jax.tree.map(lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, state)

    @jax.jit
    def fwd(state, ids, mask, tt):
        return _select_outputs(nnx.merge(graphdef, state)(ids, mask, tt), head)

    def call(ids, mask, tt):
        return fwd(state, ids, mask, tt)

    # the compiled executable for given inputs (its HLO, for benchmarks.profile_table.op_profile)
    call.compile = lambda ids, mask, tt: (fwd.lower(state, ids, mask, tt).compile(), state)
    return call


# --------------------------------------------------------------------------------------------------
# PyTorch side
# --------------------------------------------------------------------------------------------------

def torch_class_name(model: nnx.Module) -> str:
    """transformers class the export uses: SqueezeBert* (BERT* when all groups are 1, Albert* for ALBERT); MLM for
    pretraining."""
    arch = convert.torch_architecture(model, _family(model))
    if convert.head_name(model) == "SqueezeBertForPreTraining":
        return arch.replace("ForPreTraining", "ForMaskedLM")
    return arch


def _family(model: nnx.Module) -> models.Family:
    """The layout the export writes: the model's own family's, BERT's when every group is 1, else SqueezeBERT's."""
    return models.get(model.config.style)


def to_transformers(model: nnx.Module):
    """The transformers PyTorch model (float32, eval, eager attention) holding ``model``'s weights."""
    import transformers

    cls_name = torch_class_name(model)
    with tempfile.TemporaryDirectory(prefix="sqb-export-") as d:
        export_torch(model, d, style=_family(model))
        cls = getattr(transformers, cls_name)
        with _quiet_transformers():
            tm, info = cls.from_pretrained(d, output_loading_info=True, attn_implementation="eager",
                                           dtype="float32")
    # Heads that transformers builds without these parts: the SOP head (we export MLM logits only; DistilBERT's and
    # ELECTRA's layouts name it without a "cls." prefix) and, for
    # BERT's token-level heads and MLM, the pooler (add_pooling_layer=False). They feed no exported output.
    unused = {k for k in info["unexpected_keys"] if ".pooler." in f".{k}"
              or k.startswith(("cls.seq_relationship.", "seq_relationship.", "sop_classifier."))}
    if info["missing_keys"] or set(info["unexpected_keys"]) - unused or info.get("mismatched_keys"):
        raise RuntimeError(f"export to {cls_name} lost weights: missing {info['missing_keys']}, unexpected "
                           f"{info['unexpected_keys']}, mismatched {info.get('mismatched_keys')}")
    return tm.eval()


@contextlib.contextmanager
def _quiet_transformers():
    import transformers

    level = transformers.logging.get_verbosity()
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(level)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def _wrapper(torch_model, n_outputs: int):
    import torch

    no_types = getattr(torch_model.config, "model_type", "") == "distilbert"

    class Exported(torch.nn.Module):
        """``forward(input_ids, attention_mask, token_type_ids)`` -> tensor or tuple of tensors."""

        def __init__(self):
            super().__init__()
            self.model = torch_model

        def forward(self, input_ids, attention_mask, token_type_ids):
            # DistilBERT takes no token types (ours ignores them too): the exported signature stays the same
            types = {} if no_types else {"token_type_ids": token_type_ids}
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=False, **types)
            return out[0] if n_outputs == 1 else tuple(out[:n_outputs])

    return Exported().eval()


def xnnpack_available() -> bool:
    import torch

    try:
        import torch.backends.xnnpack as xnn

        return bool(xnn.enabled)
    except (ImportError, AttributeError):
        return False


def trace_frozen(torch_model, example: Sequence[np.ndarray], n_outputs: int, optimize: bool = True):
    """Trace + freeze (+ ``optimize_for_mobile`` when XNNPACK is built in).

    Returns ``(script_module, optimized: bool, note: str)``.
    """
    import torch

    wrapped = _wrapper(torch_model, n_outputs)
    args = tuple(torch.from_numpy(np.asarray(a)) for a in example)
    with torch.no_grad(), warnings.catch_warnings(), _quiet_transformers():
        warnings.simplefilter("ignore")  # TracerWarnings on shape-only Python branches of the mask code
        traced = torch.jit.trace(wrapped, args, check_trace=False)
        frozen = torch.jit.freeze(traced.eval())
    if not optimize:
        return frozen, False, "optimize_for_mobile not requested: frozen trace kept"
    if not xnnpack_available():
        return frozen, False, ("optimize_for_mobile skipped: this PyTorch build has no XNNPACK "
                               f"(torch {torch.__version__}); frozen trace kept")
    from torch.utils.mobile_optimizer import optimize_for_mobile

    return optimize_for_mobile(frozen), True, "optimize_for_mobile applied (XNNPACK)"


def load_lite(path: str | os.PathLike):
    """Load a .ptl with the lite (mobile) interpreter."""
    from torch.jit.mobile import _load_for_lite_interpreter

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Lite Interpreter is deprecated", category=DeprecationWarning)
        return _load_for_lite_interpreter(os.fspath(path))


def run_torch(module, ids, mask, tt) -> list[np.ndarray]:
    """Call a traced / lite module on numpy inputs; outputs as float32 numpy."""
    import torch

    with torch.no_grad():
        out = module(torch.from_numpy(np.asarray(ids)), torch.from_numpy(np.asarray(mask)),
                     torch.from_numpy(np.asarray(tt)))
    out = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().float().numpy() for o in out]


# --------------------------------------------------------------------------------------------------
# End to end
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ExportResult:
    path: str
    torch_class: str
    outputs: tuple[str, ...]
    input_shape: tuple[int, ...]
    max_abs_diff: dict[str, float]
    optimized: bool
    note: str

    @property
    def worst_diff(self) -> float:
        return max(self.max_abs_diff.values())

    def summary(self) -> str:
        diffs = ", ".join(f"{k} {v:.2e}" for k, v in self.max_abs_diff.items())
        return (f"{self.path}: {self.torch_class} traced at input shape {list(self.input_shape)}, outputs "
                f"{list(self.outputs)}; {self.note}; lite interpreter vs Flax max |diff|: {diffs}")


class ParityError(RuntimeError):
    """The exported file's outputs differ from the Flax model's by more than the tolerance."""


def export_lite(model: nnx.Module, path: str | os.PathLike, batch: int = 1, seq_len: int = 128,
                num_choices: int = 2, tol: float = DEFAULT_TOL, optimize: bool = True, seed: int = 0,
                flax_forward=None, overwrite: bool = False) -> ExportResult:
    """Export ``model`` to a lite-interpreter ``.ptl`` and verify it against the Flax model.

    The trace uses inputs of ``[batch, seq_len]`` (``[batch, num_choices, seq_len]`` for multiple choice)
    with padding; the check reloads the file with ``_load_for_lite_interpreter`` and runs fresh padded
    inputs of the same shape (another seed). Raises ``ParityError`` when any output differs by > ``tol``
    (the file is still written, so it can be inspected). ``flax_forward``: a ``make_flax_forward(model)``
    to reuse (saves a compile). A file already at ``path`` is refused unless ``overwrite`` (as the CLI's
    --overwrite); its folder must exist. The file is written whole, then put in place (a link at ``path`` is
    replaced, never written through).
    """
    # seq_len: [CLS], a word of each text and [SEP] at least (tasks.MIN_SEQ_LENGTH, as training and predict);
    # num_choices: a choice of one scores 1 whatever it reads
    for name, v, low in (("batch", batch, 1), ("seq_len", seq_len, MIN_SEQ_LENGTH), ("num_choices", num_choices, 2)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < low:
            raise InputError(f"export_lite: {name}={v!r}; expected an integer >= {low}")
    if not (isinstance(tol, (int, float)) and not isinstance(tol, bool) and 0 <= tol < float("inf")):
        raise InputError(f"export_lite: tol={tol!r}; expected a finite number >= 0 (the largest difference allowed)")
    if os.path.isdir(path) or os.fspath(path).endswith(("/", os.sep)):
        raise InputError(f"export_lite: {os.fspath(path)} is a directory; give the .ptl file to write")
    overwrite = overwrite_flag(overwrite, "export_lite: overwrite")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InputError(f"export_lite: {folder} " + ("is not a directory" if os.path.exists(folder) else
                                                      "does not exist: create it first") + f" (the folder of {path})")
    if os.path.lexists(path) and not overwrite:
        raise InputError(f"export_lite: {os.fspath(path)} exists; pass overwrite=True to replace it")
    size = lambda name: int(getattr(getattr(model, "config", None), name, 0) or 0)  # noqa: E731 (every family's)
    if size("max_position_embeddings") and seq_len > size("max_position_embeddings"):  # before the memory it takes
        raise InputError(f"--seq-len {seq_len} > the model's max_position_embeddings {size('max_position_embeddings')}")
    per_token = 4 * (size("intermediate_size") + 6 * size("hidden_size") + size("num_attention_heads") * seq_len
                     + (size("vocab_size") if hasattr(model, "cls") else 0))  # float32: a layer's, and MLM logits
    tokens = batch * seq_len * (num_choices if type(model).__name__.endswith("ForMultipleChoice") else 1)
    if (have := host_memory_bytes()) and 2 * tokens * per_token > have // 2:  # torch's trace and Flax's check
        raise InputError(f"export_lite: batch={batch} x seq_len={seq_len} would take about "
                         f"{2 * tokens * per_token / 1e9:,.1f} GB of activations (the trace and the check), more than "
                         f"half of this host's {have / 1e9:,.1f} GB of memory; a phone runs batch 1")
    head, cfg = convert.head_name(model), model.config
    nc = num_choices if head == "SqueezeBertForMultipleChoice" else None
    names = OUTPUT_NAMES[head]
    tm = to_transformers(model)
    frozen, optimized, note = trace_frozen(tm, example_inputs(cfg, batch, seq_len, seed, nc), len(names), optimize)
    path = os.fspath(path)
    # written and checked beside ``path``, then put in place: a file it replaces (--overwrite) stays until the new
    # export has passed its check, and a failed one is kept for inspection without taking the good one's place
    partial = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.partial")
    try:
        with warnings.catch_warnings():  # deprecated in favour of ExecuTorch, but it is the paper's runtime
            warnings.filterwarnings("ignore", message="Lite Interpreter is deprecated", category=DeprecationWarning)
            frozen._save_for_lite_interpreter(partial)
        lite = load_lite(partial)
        ids, mask, tt = example_inputs(cfg, batch, seq_len, seed + 1, nc)
        got = run_torch(lite, ids, mask, tt)
        want = ([np.asarray(x, np.float32) for x in flax_forward(ids, mask, tt)] if flax_forward is not None
                else flax_outputs(model, ids, mask, tt))
        why, diffs = None, {}
        if len(got) != len(want):
            why = f"lite module returned {len(got)} outputs, expected {len(want)} ({names})"
        for name, g, w in zip(names, got, want) if why is None else ():
            if g.shape != w.shape:
                why = f"output {name} has shape {g.shape}, the Flax model gives {w.shape}"
                break
            diffs[name] = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) if g.size else 0.0
        bad = {k: v for k, v in diffs.items() if not v <= tol}
        if bad and why is None:
            why = (f"lite-interpreter outputs differ from the Flax model by more than {tol}: "
                   + ", ".join(f"{k} {v:.3e}" for k, v in bad.items()))
        if why is not None:
            kept = path if not os.path.lexists(path) else f"{path}.failed"
            os.replace(partial, kept)
            earlier = f"; the earlier {path} is left as it was" if kept != path else ""
            raise ParityError(f"{path}: {why}{earlier}; the new export is kept for inspection at {kept} (delete it, "
                              "or --overwrite, to export again)")
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return ExportResult(path, torch_class_name(model), names, ids.shape, diffs, optimized, note)
