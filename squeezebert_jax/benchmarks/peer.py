"""The peer on the same device: transformers' PyTorch SqueezeBERT and BERT trained and run as their users run them,
beside our step (``benchmarks.train_step``) and forward (``mobile.make_flax_forward``), for ``eval/bench_train.py
--peer``.

The PyTorch train step is an MLM step on the same synthetic batches: ``*ForMaskedLM`` with labels at the masked
positions (-100 elsewhere; its head computes logits at every position, as transformers does), bf16 autocast where
bf16 is asked for, AdamW (fused on CUDA), ``zero_grad(set_to_none=True)``; eager, or the model under
``torch.compile``. Inference: ``*ForSequenceClassification`` under ``torch.inference_mode`` and the same autocast.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from squeezebert_jax import mobile
from squeezebert_jax.benchmarks.timing import cpu_model, time_steps
from squeezebert_jax.model import SqueezeBertConfig, SqueezeBertForSequenceClassification


def torch_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def release_memory() -> None:
    """Hand PyTorch's cached device memory back (its models gone), for the JAX steps that share the GPU."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def device_name() -> str:
    """The device both frameworks run on, in words (the GPU's name, or the CPU's)."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else cpu_model()


def _torch_model(cfg: SqueezeBertConfig, auto_class: str):
    """A randomly initialised transformers model of ``cfg`` in its family's classes (``cfg.style``: SqueezeBERT,
    BERT when every group is 1, ...), ``auto_class`` e.g. "AutoModelForMaskedLM"."""
    import transformers

    d = cfg.to_dict(cfg.style)
    tcfg = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    with mobile._quiet_transformers():
        return getattr(transformers, auto_class).from_config(tcfg)


def torch_train_step(cfg: SqueezeBertConfig, seq_len: int, batch_size: int, max_predictions: int,
                     bf16: bool = True, compile: bool = False, steps: int = 10, warmup: int = 3) -> dict[str, float]:
    """Sequences/s and step ms of transformers' MLM train step on one device (``torch_device``)."""
    import torch

    dev = torch_device()
    model = _torch_model(cfg, "AutoModelForMaskedLM").to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=dev == "cuda")
    rng = np.random.default_rng(0)
    ids = torch.as_tensor(rng.integers(5, cfg.vocab_size, (batch_size, seq_len)), device=dev)
    labels = torch.full_like(ids, -100)
    pos = torch.as_tensor(np.sort(rng.integers(1, seq_len, (batch_size, max_predictions)), 1), device=dev)
    labels.scatter_(1, pos, torch.as_tensor(rng.integers(5, cfg.vocab_size, pos.shape), device=dev))
    mask = torch.ones_like(ids)
    forward = torch.compile(model) if compile else model
    dtype = torch.bfloat16 if bf16 else torch.float32

    def step():
        with torch.autocast(dev, dtype=dtype, enabled=bf16):
            loss = forward(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    dt = time_steps(step, sync, steps, warmup)
    return {"seq_per_s": batch_size / dt, "step_ms": 1000 * dt}


def torch_inference(cfg: SqueezeBertConfig, seq_len: int, batch_size: int, bf16: bool = True, steps: int = 10,
                    warmup: int = 3) -> float:
    """Sequences/s of transformers' sequence classifier forward (eager, inference mode)."""
    import torch

    dev = torch_device()
    model = _torch_model(cfg, "AutoModelForSequenceClassification").to(dev).eval()
    ids = torch.as_tensor(np.random.default_rng(0).integers(5, cfg.vocab_size, (batch_size, seq_len)), device=dev)
    mask = torch.ones_like(ids)

    def step():
        with torch.inference_mode(), torch.autocast(dev, dtype=torch.bfloat16, enabled=bf16):
            model(input_ids=ids, attention_mask=mask)

    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    return batch_size / time_steps(step, sync, steps, warmup)


def flax_inference(cfg: SqueezeBertConfig, seq_len: int, batch_size: int, bf16: bool = True, steps: int = 10,
                   warmup: int = 3) -> float:
    """Sequences/s of our sequence classifier forward (``mobile.make_flax_forward``; bf16 weights and compute)."""
    from flax import nnx

    model = SqueezeBertForSequenceClassification(cfg, num_labels=2, rngs=nnx.Rngs(0))
    ids, mask, tt = mobile.example_inputs(cfg, batch_size, seq_len, seed=0)
    fwd, out = mobile.make_flax_forward(model, jnp.bfloat16 if bf16 else None), [None]

    def step():
        out[0] = fwd(ids, mask, tt)

    return batch_size / time_steps(step, lambda: jax.block_until_ready(out[0]), steps, warmup)
