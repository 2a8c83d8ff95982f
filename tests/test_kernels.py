"""The fused grouped FFN kernel (squeezebert_jax/kernels.py) against float64 and against the model's XLA path. On a
CPU the kernel runs in Pallas' interpreter (the same kernel body); on a GPU, as Triton compiled it."""

import re

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy.special import erf

from squeezebert_jax import kernels
from squeezebert_jax.errors import InputError
from squeezebert_jax.layers import Dropout, LayerNorm
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


# -- the dropout + residual + LayerNorm backward (kernels.dropout_residual_layernorm) ------------------------------


def norm_inputs(dtype, n=64, c=96, groups=1, rate=0.1, seed=5):
    rng = np.random.default_rng(seed)
    z, residual, dy = (jnp.asarray(rng.normal(0, 1, (n, c)), dtype) for _ in range(3))
    bias = jnp.asarray(rng.normal(0, 1, (c,)), dtype)
    gamma, beta = jnp.asarray(rng.normal(1, 0.2, (c,)), jnp.float32), jnp.asarray(rng.normal(0, 1, (c,)), jnp.float32)
    keep = jnp.asarray(rng.random((n, c)) >= rate) if rate else None
    if groups > 1:
        z = z.reshape(n, groups, -1).transpose(1, 0, 2)
    return (z, bias, residual, keep, gamma, beta), dy


def kernel_calls(jaxpr, name="squeezebert_layernorm_backward") -> list:
    """(the z-gradient's shape, the number of inputs) of each call of the kernel ``name`` in ``jaxpr``, in program
    order, every sub-program counted as often as it is called (a printed jaxpr shows a shared sub-program once)."""
    found = []
    for eqn in jaxpr.jaxpr.eqns if hasattr(jaxpr, "jaxpr") else jaxpr.eqns:
        if eqn.primitive.name == "pallas_call" and name in str(eqn.params.get("name", eqn.params.get(
                "name_and_src_info", ""))):  # (the parameter's name in other jax versions)
            found.append((tuple(eqn.outvars[1].aval.shape), len(eqn.invars)))
            continue
        for param in eqn.params.values():
            for sub in param if isinstance(param, (list, tuple)) else [param]:
                if isinstance(sub, (jax.extend.core.Jaxpr, jax.extend.core.ClosedJaxpr)):
                    found += kernel_calls(sub, name)
    return found


def xla_block(z, bias, residual, keep, gamma, beta, scale, eps=1e-12):
    """The model's XLA path (model.ConvDropoutLayerNorm.finish) of a conv output without its bias."""
    if z.ndim == 3:
        z = z.transpose(1, 0, 2).reshape(residual.shape)
    y = z + bias
    if keep is not None:
        y = jax.lax.select(keep, y * jnp.asarray(scale, y.dtype), jnp.zeros_like(y))
    ln = LayerNorm(residual.shape[-1], eps, residual.dtype)
    ln.scale[...], ln.bias[...] = gamma, beta
    return ln(y + residual)


@pytest.mark.parametrize("groups, rate, twice", [(1, 0.1, False), (3, 0.25, True), (3, 0.0, False)])
@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 2e-6), (jnp.bfloat16, 1e-2)])
def test_layernorm_backward_equals_autodiff_of_the_xla_block(groups, rate, twice, dtype, tol):
    """Output bit for bit equal to the model's XLA path with the same mask; every gradient (the conv output's, in its
    group-major layout too, the bias's, the residual's, gamma's, beta's) within float32 rounding of autodiff in
    float32, and in bf16 within bf16's. ``twice``: the output for two uses, their two gradients added."""
    (z, bias, residual, keep, gamma, beta), dy = norm_inputs(dtype, groups=groups, rate=rate)
    dy2 = jnp.asarray(np.random.default_rng(9).normal(0, 1, dy.shape), dtype)
    scale = 1 / (1 - rate)
    fused = lambda *a: kernels.dropout_residual_layernorm(*a[:3], keep, *a[3:], scale=scale, eps=1e-12,  # noqa: E731
                                                          name="attention_sum", interpret=INTERPRET, twice=twice)
    xla = lambda *a: xla_block(*a[:3], keep, *a[3:], scale)  # noqa: E731
    args = (z, bias, residual, gamma, beta)
    out, vjp = jax.vjp(fused, *args)
    if twice:
        assert len(out) == 2 and (out[0] == out[1]).all()
        out = out[0]
    np.testing.assert_array_equal(out, xla(*args))
    # the reference: autodiff of the same block in float32 from the same (rounded) inputs, at bf16's scale
    f32 = [a.astype(jnp.float32) for a in args]
    _, vjp32 = jax.vjp(lambda *a: xla_block(*a[:3], keep, *a[3:], float(np.asarray(scale, dtype))), *f32)
    got, want = (vjp((dy, dy2)), vjp32((dy + dy2).astype(jnp.float32))) if twice else (vjp(dy), vjp32(dy.astype(
        jnp.float32)))
    for name, got, want, arg in zip(("z", "bias", "residual", "gamma", "beta"), got, want, args):
        assert got.shape == arg.shape and got.dtype == arg.dtype, name
        assert np.isfinite(np.asarray(got, np.float32)).all(), name
        assert rel(got, np.asarray(want, np.float64)) < tol, (name, rel(got, np.asarray(want, np.float64)))


def test_layernorm_backward_takes_its_sizes_and_tiles(monkeypatch):
    assert kernels.norm_fits(32768, 768) and kernels.norm_fits(32768, 768, 4)  # BERT's and SqueezeBERT's blocks
    assert not kernels.norm_fits(32768 + 4, 768)  # rows not a multiple of a step's 8
    assert not kernels.norm_fits(32768, 100)  # no power-of-2 chunk of 16 or more divides 100 channels
    assert not kernels.norm_fits(32768, 768, 5)
    # another tile choice (16 rows a step, 3 programs: the rows split unevenly over 8 would not divide) computes the
    # same gradients
    (z, bias, residual, keep, gamma, beta), dy = norm_inputs(jnp.float32, n=96, groups=3)
    s = jnp.where(keep, z.transpose(1, 0, 2).reshape(residual.shape) + bias, 0) + residual
    want = kernels.layernorm_backward(dy, s, gamma, keep, eps=1e-12, scale=1.0, groups=3, interpret=INTERPRET)
    got = kernels.layernorm_backward(dy, s, gamma, keep, eps=1e-12, scale=1.0, groups=3, interpret=INTERPRET,
                                     tiles=kernels.NormTiles(16, 4, 4))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("SQUEEZEBERT_NORM_TILES", "16,4,64")
    assert kernels.norm_tiles() == kernels.NormTiles(16, 4, 64)
    for bad in ("8,8", "8,x,512", "12,8,512", "8,8,0", "8,8,512,", "512,8,512", "8,3,512"):
        monkeypatch.setenv("SQUEEZEBERT_NORM_TILES", bad)
        with pytest.raises(InputError, match=r"^SQUEEZEBERT_NORM_TILES="):
            kernels.norm_tiles()


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_dropout_keep_mask_is_the_mask_a_call_applies(impl):
    """``layers.Dropout.keep_mask`` draws the mask a call would, from the same key, for either generator."""
    for shape in ((4, 8, 16), (30, 6)):  # the 16-bit draws; nnx.Dropout's bernoulli (a last axis not a multiple of 4)
        drop = Dropout(0.3, rngs=nnx.Rngs(dropout=jax.random.key(3, impl=impl)))
        drop.train()
        twin = nnx.clone(drop)
        assert drop.drops()
        keep, scale = twin.keep_mask(shape)
        np.testing.assert_array_equal(np.asarray(drop(jnp.ones(shape))) != 0, keep)
        assert abs(scale - 1 / 0.7) < 1e-4 and 0.5 < float(keep.mean()) < 0.9
    drop.eval()
    assert not drop.drops()


@pytest.mark.parametrize("groups", [4, 1])
def test_pretraining_with_the_layernorm_kernel_equals_the_xla_path_with_dropout_on(groups):
    """The pretraining model in float32, dropout on (the same masks), layernorm "fused" against "xla": the kernel in
    each block's backward (two a layer) only in a program traced for a GPU; the same loss, and every gradient within
    float32 rounding of the whole gradient (the key bias's is zero but for rounding: softmax ignores it)."""
    from squeezebert_jax import pretrain

    cfg = CFG.replace(hidden_size=64, embedding_size=64, intermediate_size=256, hidden_dropout_prob=0.1,
                      remat="minimal")
    if groups == 1:
        cfg = cfg.replace(q_groups=1, k_groups=1, v_groups=1, intermediate_groups=1, output_groups=1)
    model = SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(6)
    ids = jnp.asarray(rng.integers(5, 128, (2, 64)), jnp.int32)
    positions = jnp.asarray(np.sort(rng.integers(1, 64, (2, 8)), 1), jnp.int32)
    results = {}
    for layernorm in ("xla", "fused"):
        graph, params, rest = pretrain.split_model(set_execution(nnx.clone(model), layernorm=layernorm))

        def loss(p, key):
            m = nnx.merge(graph, p, rest)
            nnx.reseed(m, dropout=key, default=key)
            m.train()
            out = m(ids, masked_positions=positions)
            return (out.mlm_logits ** 2).mean() + (out.sop_logits ** 2).mean()

        key = jax.random.key(7)
        assert not kernel_calls(jax.make_jaxpr(jax.grad(loss))(params, key)) or jax.default_backend() == "gpu"
        with kernels.lowering_for("gpu", interpret=INTERPRET):
            # the backward, last layer first: each layer's FFN output block (z group-major for SqueezeBERT's G=4)
            # and its post-attention block (G=1). Inputs: the gradient, the sum, gamma, the mask, and a second
            # gradient where the output has two uses (the post-attention output; a layer's output but the last's)
            calls = kernel_calls(jax.make_jaxpr(jax.grad(loss))(params, key))
            ffn = (groups, 128, 64 // groups) if groups > 1 else (128, 64)
            assert calls == ([(ffn, 4), ((128, 64), 5), (ffn, 5), ((128, 64), 5)] if layernorm == "fused" else []
                             ), calls
            results[layernorm] = jax.jit(jax.value_and_grad(loss))(params, key)
    (l_x, g_x), (l_f, g_f) = results["xla"], results["fused"]
    assert float(l_f) == float(l_x)
    scale = max(float(np.abs(np.asarray(g)).max()) for g in jax.tree.leaves(g_x))
    for a, b in zip(jax.tree.leaves(g_f), jax.tree.leaves(g_x), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-5 * scale)


def test_a_training_step_compiled_for_an_h100_runs_each_blocks_backward_as_one_kernel():
    """With layernorm "fused", the bf16 pretraining gradient compiled for one H100 on this host holds the kernel
    twice a layer (Triton, as the GPU runs it), so its Triton lowering holds at these sizes. On the paper step
    (seq 128, batch 256) the census reads 56.0 GB and writes 34.2 where XLA's blocks read 63.7 and write 37.1
    (docs/results.md)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from squeezebert_jax import aot, pretrain
    from squeezebert_jax.pretrained import cast_compute_dtype

    target = aot.get_target("h100:1x1")
    replicated = NamedSharding(Mesh(np.array(target.devices), ("data",)), PartitionSpec())
    model = nnx.eval_shape(lambda: SqueezeBertForPreTraining(CFG.replace(ffn="xla", layernorm="fused",
                                                                         hidden_dropout_prob=0.1), rngs=nnx.Rngs(0)))
    cast_compute_dtype(model, jnp.bfloat16)
    graph, params, rest = pretrain.split_model(model)
    spec = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated)  # noqa: E731
    params, rest = jax.tree.map(spec, params), jax.tree.map(spec, rest)

    def loss(p, ids, key):
        m = nnx.merge(graph, p, rest)
        nnx.reseed(m, dropout=key, default=key)
        m.train()
        return (m(ids).mlm_logits.astype(jnp.float32) ** 2).mean()

    ids = jax.ShapeDtypeStruct((8, 64), jnp.int32, sharding=replicated)
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype, sharding=replicated)
    with kernels.lowering_for(target.devices[0].platform):
        text = jax.jit(jax.grad(loss)).lower(params, ids, key).compile().as_text()
    kernel = re.compile(r'custom_call_target="__gpu\$xla\.gpu\.triton".*squeezebert_layernorm_backward')
    assert len(kernel.findall(text)) == 2 * CFG.num_hidden_layers
