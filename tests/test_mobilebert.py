"""MobileBERT (family "mobilebert", squeezebert_jax/models/mobilebert.py): every head against transformers' PyTorch
MobileBert* on random weights, with its variants (pooler or none, value from the bottleneck, one FFN, no 3-gram); the
converter both ways; the count and FLOPs of mobilebert-uncased against transformers and a hand count; the
lite-interpreter export; pretraining and fine-tuning through the scripts' code."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from conftest import assert_family_head_matches, perturbed
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import convert, mobile, pretrained
from squeezebert_jax.benchmarks import compare
from squeezebert_jax.errors import InputError
from squeezebert_jax.model import ElectraPreTraining

HEADS = {"MobileBertModel": "SqueezeBertModel", "MobileBertForPreTraining": "SqueezeBertForPreTraining",
         "MobileBertForMaskedLM": "SqueezeBertForMaskedLM",
         "MobileBertForSequenceClassification": "SqueezeBertForSequenceClassification",
         "MobileBertForTokenClassification": "SqueezeBertForTokenClassification",
         "MobileBertForQuestionAnswering": "SqueezeBertForQuestionAnswering",
         "MobileBertForMultipleChoice": "SqueezeBertForMultipleChoice"}
WITHOUT_POOLER = ("MobileBertForMaskedLM", "MobileBertForTokenClassification", "MobileBertForQuestionAnswering")


def tiny(**overrides) -> dict:
    """mobilebert-uncased's shape at tiny width: body 32, bottleneck 16, embeddings 8 (3-gram 24 -> 32), 2 heads."""
    return dict(vocab_size=50, embedding_size=8, hidden_size=32, intra_bottleneck_size=16, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=24, max_position_embeddings=64, num_feedforward_networks=3,
                hidden_dropout_prob=0.1) | overrides


VARIANTS = {"released": dict(classifier_activation=False), "pooler": dict(classifier_activation=True),
            "value_from_bottleneck": dict(use_bottleneck_attention=True, num_feedforward_networks=1),
            "no_trigram": dict(trigram_input=False, key_query_shared_bottleneck=False, hidden_size=16,
                               intra_bottleneck_size=16),
            # embeddings as wide as the body: the MLM decoder's own dense is [0, vocab]
            "embeddings_of_the_body_width": dict(embedding_size=32),
            # an inverted bottleneck (IB-BERT, MobileBERT's teacher: the inner width above the body's)
            "inverted_bottleneck": dict(intra_bottleneck_size=48, intermediate_size=96)}


# every head on the released shape; the variants change the encoder and the pooler: three heads cover them
CASES = [(cls, "released") for cls in HEADS] + [
    (cls, v) for v in list(VARIANTS)[1:] for cls in ("MobileBertModel", "MobileBertForPreTraining",
                                                     "MobileBertForSequenceClassification", "MobileBertForMaskedLM")]


@pytest.mark.parametrize("cls, variant", CASES)
def test_every_head_equals_transformers_and_converts_back_exactly(cls, variant, tmp_path):
    torch.manual_seed(0)
    config = transformers.MobileBertConfig(**tiny(**VARIANTS[variant]))
    h = config.hidden_size
    pooler = h * h + h if config.classifier_activation and cls in WITHOUT_POOLER else 0  # built without one there
    assert_family_head_matches(perturbed(getattr(transformers, cls)(config).eval()), tmp_path, "mobilebert",
                               HEADS[cls], pooler)


def test_the_layers_scan_and_the_unrolled_loop_agree_in_train_mode():
    """Dropout on (the output bottleneck's, the embeddings', the attention's): the scanned and unrolled encoders draw
    the same masks, so outputs and gradients agree."""
    config = sj.SqueezeBertConfig.preset("mobilebert-uncased", **tiny(attention_probs_dropout_prob=0.2))
    ids = jnp.asarray(np.random.default_rng(1).integers(0, 50, (2, 12)))

    def loss(model):
        return jnp.sum(model(ids).logits ** 2)

    grads = []
    for scan in (True, False):
        model = sj.SqueezeBertForSequenceClassification(config.replace(scan_layers=scan), rngs=nnx.Rngs(3))
        grads.append(nnx.state(nnx.jit(nnx.grad(loss))(model), nnx.Param))  # one program, not one per op
    for a, b in zip(jax_leaves(grads[0]), jax_leaves(grads[1]), strict=True):
        assert np.allclose(a, b, atol=1e-5)


def jax_leaves(state):
    import jax

    return [np.asarray(x) for x in jax.tree.leaves(state)]


def test_the_count_and_flops_of_mobilebert_uncased_and_its_compare_row():
    config = sj.SqueezeBertConfig.preset("mobilebert-uncased")
    ref = transformers.MobileBertConfig(classifier_activation=False)
    assert compare.param_counts(config) == transformers.MobileBertModel(ref).num_parameters() == 24_581_888
    # the hand count at seq 128: per layer two bottlenecks in (2 s H b), q and k (2 s b b each), v (2 s H b), the
    # attention's products (2 x 2 s s b), its output (2 s b b), 4 FFNs (2 x 2 s b i), the bottleneck out (2 s b H)
    s, h, b, i = 128, 512, 128, 512
    layer = 2 * (2 * s * h * b) + 2 * (2 * s * b * b) + 2 * s * h * b + 4 * s * s * b + 2 * s * b * b \
        + 4 * (2 * 2 * s * b * i) + 2 * s * b * h
    assert sj.flops(config, 128) == 24 * layer + 2 * s * 384 * h  # + the 3-gram projection
    (row,) = [e for e in compare.ENTRIES if e.preset == "mobilebert-uncased"]
    assert {p.gflops for p in row.published} == {5.36, 5.7}


def test_settings_transformers_cannot_run_are_named():
    with pytest.raises(InputError, match="intra_bottleneck_size 30 is not a multiple of num_attention_heads 4"):
        sj.SqueezeBertConfig.preset("mobilebert-uncased", intra_bottleneck_size=30)
    with pytest.raises(InputError, match="normalization_type 'layer_norm' is not supported"):
        sj.SqueezeBertConfig.from_dict({"model_type": "mobilebert", "normalization_type": "layer_norm"}, "c.json")
    with pytest.raises(InputError, match="embedding_size 600 > hidden_size 512"):
        sj.SqueezeBertConfig.preset("mobilebert-uncased", embedding_size=600)


def test_a_mobilebert_config_round_trips_through_both_formats():
    config = sj.SqueezeBertConfig.preset("mobilebert-uncased", **tiny(classifier_activation=True))
    assert sj.SqueezeBertConfig.from_dict(config.to_dict()) == config
    theirs = config.to_dict(model_type="mobilebert")
    assert transformers.MobileBertConfig(**theirs).true_hidden_size == 16
    assert sj.SqueezeBertConfig.from_dict(theirs) == config
    assert "intra_bottleneck_size" not in sj.SqueezeBertConfig.preset("bert-base-uncased").to_dict()


def test_export_to_the_lite_interpreter_equals_flax(tmp_path):
    config = sj.SqueezeBertConfig.preset("mobilebert-uncased", **tiny())
    model = sj.SqueezeBertForSequenceClassification(config, num_labels=3, rngs=nnx.Rngs(0))
    model.eval()
    ids, mask, tt = mobile.example_inputs(config, 2, 10, seed=3)
    want = np.asarray(model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).logits)
    res = mobile.export_lite(model, tmp_path / "m.ptl", batch=2, seq_len=10)
    assert res.torch_class == "MobileBertForSequenceClassification"
    assert np.max(np.abs(mobile.run_torch(mobile.load_lite(res.path), ids, mask, tt)[0] - want)) <= 1e-4


MODEL = dict(hidden_size=32, embedding_size=16, intra_bottleneck_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, num_feedforward_networks=2, max_position_embeddings=128)


@pytest.mark.parametrize("objective", ["mlm_sop", "rtd"])
def test_mobilebert_pretrains_with_mlm_and_sop_and_as_an_rtd_discriminator(tmp_path, objective):
    """train/pretrain.py's objectives on a MobileBERT encoder: a finite loss and a MODEL_DIR that keeps the family;
    as ELECTRA's discriminator it shares its word embeddings with the generator (its position and type embeddings
    have its body's width)."""
    from conftest import tiny_config

    from squeezebert_jax import pretrain

    # MLM + SOP with embeddings as wide as the body (no decoder dense of its own: transformers' is [0, vocab])
    overrides = dict(MODEL, embedding_size=32) if objective == "mlm_sop" else dict(MODEL)
    c = tiny_config(**{"model.preset": "mobilebert-uncased", "model.overrides": overrides, "objective": objective})
    final = pretrain.train_and_evaluate(c, str(tmp_path / "run"))
    assert final["preempted"] is False and np.isfinite(final["loss"])
    model = sj.load_pretrained(tmp_path / "run" / "model")
    assert model.config.family == "mobilebert" and model.config.num_feedforward_networks == 2
    if objective == "mlm_sop":  # transformers reads it with nothing missing or left over
        pretrained.export_torch(model, tmp_path / "hf")
        _, info = transformers.MobileBertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
        assert not info["missing_keys"] and not info["unexpected_keys"]
    else:  # transformers has no MobileBERT discriminator: our MODEL_DIR only, said in one line, nothing written
        with pytest.raises(InputError, match="no mobilebert class for SqueezeBertForReplacedTokenDetection"):
            pretrained.export_torch(model, tmp_path / "hf")
        assert not (tmp_path / "hf").exists()
    if objective == "rtd":
        pair = ElectraPreTraining(model.config, rngs=nnx.Rngs(0))
        d, g = pair.discriminator.transformer.embeddings, pair.generator.transformer.embeddings
        assert g.word_embeddings is d.word_embeddings and g.position_embeddings is not d.position_embeddings


def test_mobilebert_fine_tunes_on_a_glue_task_and_distils_to_a_shallower_student(tmp_path):
    from conftest import VOCAB, glue_config, tiny_init, write_sst2

    from squeezebert_jax import distill
    from squeezebert_jax import finetune as ft

    tiny_init(tmp_path / "init", VOCAB, sj.SqueezeBertConfig.preset("mobilebert-uncased", **MODEL))
    write_sst2(tmp_path / "glue", n_train=64, n_dev=16)
    res = ft.finetune(glue_config("sst2", tmp_path / "init", tmp_path / "glue", num_epochs=1, learning_rate=1e-3),
                      str(tmp_path / "run"))
    assert res["best"] is not None and np.isfinite(res["history"][-1]["train_loss"])
    teacher = sj.load_pretrained(tmp_path / "run" / "model")
    assert teacher.config.family == "mobilebert"
    # a 1-layer student from the teacher's second layer (PKD-Last's start), embeddings, pooler and head
    student = distill.init_student_from_teacher(teacher, 1, mapping="2")
    assert student.config.num_hidden_layers == 1 and student.config.family == "mobilebert"
    got, want = convert.flat_params(student), convert.flat_params(teacher)
    assert len(got) < len(want) and all(np.array_equal(got[k], want[k.replace("layers/0/", "layers/1/")]) for k in got)
    # distillation from that teacher: the fine-tuning config's distill block, the student a fresh MobileBERT
    cfg = glue_config("sst2", tmp_path / "init", tmp_path / "glue", num_epochs=1, learning_rate=1e-3)
    cfg.distill.teacher = str(tmp_path / "run" / "model")
    cfg.distill.hidden_weight = 1.0
    res = ft.finetune(cfg, str(tmp_path / "distilled"))
    assert np.isfinite(res["history"][-1]["train_loss"])


def test_pruning_a_mobilebert_is_refused_before_any_work(tmp_path):
    from conftest import VOCAB, glue_config, tiny_init, write_sst2

    from squeezebert_jax import finetune as ft

    tiny_init(tmp_path / "init", VOCAB, sj.SqueezeBertConfig.preset("mobilebert-uncased", **MODEL))
    write_sst2(tmp_path / "glue", n_train=16, n_dev=8)
    cfg = glue_config("sst2", tmp_path / "init", tmp_path / "glue", num_epochs=1)
    cfg.prune.target = 0.5
    with pytest.raises(InputError, match="pruning is for BERT-shaped layers.*MobileBERT"):
        ft.finetune(cfg, str(tmp_path / "run"))
    assert not (tmp_path / "run" / "checkpoints").exists()
