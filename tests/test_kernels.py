"""The fused grouped FFN kernel (squeezebert_jax/kernels.py) against float64 and against the model's XLA path. On a
CPU the kernel runs in Pallas' interpreter (the same kernel body); on a GPU, as Triton compiled it."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy.special import erf

from squeezebert_jax import kernels
from squeezebert_jax.errors import InputError
from squeezebert_jax.model import SqueezeBertConfig, SqueezeBertForPreTraining, SqueezeBertModel, set_execution

INTERPRET = jax.default_backend() != "gpu"
# the least FFN the kernel's tiles take: 4 groups of 64 input, 256 inner and 64 output channels
CFG = SqueezeBertConfig.preset("squeezebert-uncased", hidden_size=256, embedding_size=256, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=1024, vocab_size=128,
                               max_position_embeddings=64, scan_layers=False, remat="none",
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, ffn="fused")


def float64_ffn(x, w1, b1, w2):
    x, w1, b1, w2 = (np.asarray(a, np.float64) for a in (x, w1, b1, w2))
    g = w1.shape[0]
    pre = np.einsum("ngi,gio->ngo", x.reshape(len(x), g, -1), w1) + b1
    return np.einsum("ngi,gio->ngo", 0.5 * pre * (1 + erf(pre / np.sqrt(2))), w2).reshape(len(x), -1)


def inputs(dtype, n=128, cin=256, inner=1024, g=4, seed=0):
    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.normal(0, 1, (n, cin)), dtype), jnp.asarray(rng.normal(0, 0.05, (g, cin // g, inner // g)),
            dtype), jnp.asarray(rng.normal(0, 0.5, (g, inner // g)), dtype),
            jnp.asarray(rng.normal(0, 0.05, (g, inner // g, cin // g)), dtype))


def rel(a, ref):
    a = np.asarray(a, np.float64)
    return np.linalg.norm(a - ref) / np.linalg.norm(ref)


def test_erf_within_5e7_of_xla():
    x = jnp.linspace(-9, 9, 200_001, dtype=jnp.float32)
    assert float(jnp.max(jnp.abs(kernels.erf_f32(x) - jax.lax.erf(x)))) < 5e-7
    assert float(jnp.max(jnp.abs(kernels.erf_f32(x) - erf(np.asarray(x, np.float64))))) < 5e-7


# float32 through Triton's matmuls on a GPU is tf32 (near 3e-4): the model gives the kernel bf16 and fp16 alone
@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-6 if INTERPRET else 2e-3), (jnp.bfloat16, 1e-2)])
def test_kernel_equals_float64(dtype, tol):
    """Every output finite and right, on fresh random inputs; bf16 operands with float32 accumulation land between
    1e-3 and 1e-2."""
    x, w1, b1, w2 = inputs(dtype, seed=1)
    ref = float64_ffn(x, w1, b1, w2)
    got = kernels.pallas_ffn(x, w1, b1, w2, interpret=INTERPRET)
    assert got.shape == ref.shape and got.dtype == dtype
    assert np.isfinite(np.asarray(got, np.float32)).all()
    assert rel(got, ref) < tol
    # a tile choice of its own: rows 32, inner 128, computes the same
    other = kernels.pallas_ffn(x, w1, b1, w2, interpret=INTERPRET, tiles=kernels.Tiles(32, 128, 4, 3))
    assert rel(other, ref) < tol


def test_gradient_is_the_xla_ffns():
    """The custom VJP's gradients equal autodiff of the model's XLA FFN (reference_ffn), for every input."""
    args = inputs(jnp.float32, seed=2)
    dy = jnp.asarray(np.random.default_rng(3).normal(size=(128, 256)), jnp.float32)
    loss = lambda f: lambda *a: jnp.vdot(f(*a), dy)  # noqa: E731
    got = jax.grad(loss(lambda *a: kernels.grouped_ffn(*a, INTERPRET)), argnums=(0, 1, 2, 3))(*args)
    want = jax.grad(loss(kernels.reference_ffn), argnums=(0, 1, 2, 3))(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


def test_fits_names_what_the_kernel_takes():
    assert kernels.fits(32768, 768, 3072, 768, 4)  # SqueezeBERT at batch 256 x 128
    assert not kernels.fits(32768, 768, 3072, 768, 4, jnp.float32)  # Triton's tf32 matmuls would change float32
    assert not kernels.fits(32768, 768, 3072, 768, 1)  # BERT: not grouped
    assert not kernels.fits(32768 + 8, 768, 3072, 768, 4)  # tokens not a multiple of the rows of a program
    assert not kernels.fits(32768, 128, 512, 128, 4)  # 32 channels a group: below the 64-channel chunk
    assert not kernels.fits(32768, 3072, 3072, 3072, 4)  # 768 outputs a group: more than the registers hold


def test_tiles_from_the_environment(monkeypatch):
    monkeypatch.setenv("SQUEEZEBERT_FFN_TILES", "128,64,8,3")
    assert kernels.default_tiles() == kernels.Tiles(128, 64, 8, 3)
    for bad in ("64,64", "64,x,4,2", "48,64,4,2", "64,64,4,0", "32,64,4,2,", "0x20,64,4,2", "-32,64,4,2",
                "65536,64,4,2", "32,64,3,2"):
        monkeypatch.setenv("SQUEEZEBERT_FFN_TILES", bad)
        with pytest.raises(InputError, match=r"^SQUEEZEBERT_FFN_TILES="):
            kernels.default_tiles()
    # read when a kernel is traced: a script with a bad value imports, and an XLA-FFN model never reads it
    model = SqueezeBertModel(CFG.replace(ffn="xla"), dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    with kernels.lowering_for("gpu", interpret=True):
        jax.make_jaxpr(lambda i: model(i).last_hidden_state)(jnp.ones((2, 64), jnp.int32))
    monkeypatch.delenv("SQUEEZEBERT_FFN_TILES")
    assert kernels.default_tiles() == kernels.Tiles()


def _trace_has_kernel(fn, *args) -> bool:
    """Whether tracing ``fn`` now calls the kernel (a fresh function each time: jax reuses a function's trace)."""
    return "pallas_call" in str(jax.make_jaxpr(lambda *a: fn(*a))(*args))


def test_model_uses_the_kernel_only_when_traced_for_a_gpu():
    """ffn "fused" calls the kernel in a program traced for a GPU, with bf16 weights and sizes it takes; never on a
    CPU or TPU, in float32, with ffn "xla", or for BERT's ungrouped FFN."""
    ids = jnp.ones((2, 64), jnp.int32)
    bf16 = SqueezeBertModel(CFG, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    graph, state = nnx.split(bf16)
    run = lambda s, i: nnx.merge(graph, s)(i).last_hidden_state  # noqa: E731
    assert not _trace_has_kernel(run, state, ids) or jax.default_backend() == "gpu"
    with kernels.lowering_for("tpu"):
        assert not _trace_has_kernel(run, state, ids)
    with kernels.lowering_for("gpu", interpret=True):
        assert _trace_has_kernel(run, state, ids)
        assert not _trace_has_kernel(run, state, jnp.ones((2, 60), jnp.int32))  # 120 tokens: no whole program
        xla_graph, xla_state = nnx.split(set_execution(nnx.clone(bf16), ffn="xla"))
        assert not _trace_has_kernel(lambda s, i: nnx.merge(xla_graph, s)(i).last_hidden_state, xla_state, ids)
        f32_graph, f32_state = nnx.split(SqueezeBertModel(CFG, rngs=nnx.Rngs(0)))
        assert not _trace_has_kernel(lambda s, i: nnx.merge(f32_graph, s)(i).last_hidden_state, f32_state, ids)
        bert = CFG.replace(q_groups=1, k_groups=1, v_groups=1, intermediate_groups=1, output_groups=1)
        b_graph, b_state = nnx.split(SqueezeBertModel(bert, dtype=jnp.bfloat16, rngs=nnx.Rngs(0)))
        assert not _trace_has_kernel(lambda s, i: nnx.merge(b_graph, s)(i).last_hidden_state, b_state, ids)


def test_pretraining_loss_and_gradients_equal_the_xla_paths():
    """The whole pretraining model in bf16 (dropout off): the loss and every gradient with the kernel equal XLA's
    FFN within bf16's rounding (the kernel accumulates the contraction in float32 where XLA rounds to bf16)."""
    model = SqueezeBertForPreTraining(CFG.replace(num_hidden_layers=1), dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(4)
    ids = jnp.asarray(rng.integers(5, 128, (1, 64)), jnp.int32)
    positions = jnp.asarray(np.sort(rng.integers(1, 64, (1, 8)), 1), jnp.int32)

    def loss(model):
        out = model(ids, masked_positions=positions)
        return (out.mlm_logits.astype(jnp.float32) ** 2).mean() + (out.sop_logits.astype(jnp.float32) ** 2).mean()

    results = {}
    for ffn in ("xla", "fused"):
        graph, params, rest = nnx.split(set_execution(model, ffn=ffn), nnx.Param, ...)
        f = lambda p: loss(nnx.merge(graph, p, rest))  # noqa: E731
        with kernels.lowering_for("gpu", interpret=INTERPRET):
            assert _trace_has_kernel(f, params) == (ffn == "fused")
            results[ffn] = jax.jit(jax.value_and_grad(f))(params)
    (l_x, g_x), (l_f, g_f) = results["xla"], results["fused"]
    assert abs(float(l_f) - float(l_x)) < 1e-2 * abs(float(l_x))
    flat_x, flat_f = jax.tree.leaves(g_x), jax.tree.leaves(g_f)
    assert len(flat_x) == len(flat_f)
    for a, b in zip(flat_f, flat_x):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        assert np.linalg.norm(a - b) <= 0.05 * np.linalg.norm(b) + 1e-6


def test_a_program_compiled_for_an_h100_runs_the_ffn_as_one_kernel_a_layer():
    """With ffn "fused", the bf16 forward compiled for one H100 on this host (``aot``'s compile-only GPU) holds one
    Triton kernel per layer where XLA had two matmuls and GELU's kernel, and none with ffn "xla"."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from squeezebert_jax import aot
    from squeezebert_jax.pretrained import cast_compute_dtype

    target = aot.get_target("h100:1x1")
    replicated = NamedSharding(Mesh(np.array(target.devices), ("data",)), PartitionSpec())
    texts = {}
    for ffn in ("fused", "xla"):
        model = nnx.eval_shape(lambda: SqueezeBertModel(CFG.replace(ffn=ffn), rngs=nnx.Rngs(0)))
        model.eval()
        cast_compute_dtype(model, jnp.bfloat16)
        graphdef, state = nnx.split(model)
        state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(
            x.shape, jnp.bfloat16 if jnp.issubdtype(x.dtype, jnp.floating) else x.dtype, sharding=replicated), state)
        ids = jax.ShapeDtypeStruct((8, 64), jnp.int32, sharding=replicated)
        forward = jax.jit(lambda s, i: nnx.merge(graphdef, s)(i).last_hidden_state)
        with kernels.lowering_for(target.devices[0].platform):
            texts[ffn] = forward.lower(state, ids).compile().as_text()
    kernel = re.compile(r'custom_call_target="__gpu\$xla\.gpu\.triton".*squeezebert_grouped_ffn')
    assert len(kernel.findall(texts["fused"])) == CFG.num_hidden_layers and not kernel.findall(texts["xla"])
