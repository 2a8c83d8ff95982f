"""Checkpoint conversion: round trips through transformers, the convert/ scripts, and bad checkpoints."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402
from safetensors.numpy import load_file, save_file  # noqa: E402

import squeezebert_jax as sj  # noqa: E402
from squeezebert_jax import convert  # noqa: E402

from test_parity import TINY, inputs, randomize, torch_sd  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def save_hf(tm, d, vocab=True):
    tm.save_pretrained(d)
    if vocab:
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(94)]) + "\n")
    return d


def run_script(name, *args, subprocess_=False):
    """Run a convert/ script: in-process (fast) or as a real command line."""
    if not subprocess_:
        spec = importlib.util.spec_from_file_location(name[:-3], os.path.join(ROOT, "convert", name))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.main(list(args))
        return ""
    r = subprocess.run([sys.executable, os.path.join(ROOT, "convert", name), *args], capture_output=True, text=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.parametrize("cls", ["SqueezeBertForMaskedLM", "SqueezeBertForSequenceClassification", "SqueezeBertModel"])
def test_round_trip_bit_identical_via_scripts(tmp_path, cls):
    """transformers save_pretrained -> from_pytorch.py -> to_pytorch.py -> identical tensors, clean load."""
    tm = randomize(getattr(transformers, cls)(transformers.SqueezeBertConfig(**TINY, num_labels=3)))
    src = save_hf(tm, str(tmp_path / "hf"))
    # one real command line (to_pytorch.py; from_pytorch.py's runs in test_finetune's whole table), the rest in-process
    as_cli = cls == "SqueezeBertForMaskedLM"
    run_script("from_pytorch.py", "--src", src, "--out", str(tmp_path / "model"))
    assert sorted(os.listdir(tmp_path / "model")) == ["config.json", "params.safetensors", "vocab.txt"]
    run_script("to_pytorch.py", "--src", str(tmp_path / "model"), "--out", str(tmp_path / "back"), subprocess_=as_cli)
    a, b = load_file(os.path.join(src, "model.safetensors")), load_file(str(tmp_path / "back" / "model.safetensors"))
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    back, info = getattr(transformers, cls).from_pretrained(str(tmp_path / "back"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    auto, info = transformers.AutoModel.from_pretrained(str(tmp_path / "back"), output_loading_info=True)
    assert type(auto).__name__ == "SqueezeBertModel"
    assert not info["missing_keys"] and not info["mismatched_keys"]
    ids, mask, tt = inputs(sj.SqueezeBertConfig(**TINY))
    with torch.no_grad():
        x = tm(torch.tensor(ids), torch.tensor(mask), torch.tensor(tt))[0]
        y = back.eval()(torch.tensor(ids), torch.tensor(mask), torch.tensor(tt))[0]
    assert torch.equal(x, y)


def test_pytorch_bin_and_position_ids_buffer(tmp_path):
    """Older transformers saved pytorch_model.bin with the embeddings.position_ids buffer: read and skipped."""
    tm = randomize(transformers.SqueezeBertForSequenceClassification(transformers.SqueezeBertConfig(**TINY)))
    d = tmp_path / "old"
    d.mkdir()
    tm.config.to_json_file(str(d / "config.json"))
    sd = dict(tm.state_dict())
    sd["transformer.embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"])[None]
    torch.save(sd, d / "pytorch_model.bin")
    model = sj.load_pretrained(str(d))
    assert type(model) is sj.SqueezeBertForSequenceClassification and model.num_labels == 2
    model.eval()
    ids, mask, tt = inputs(model.config)
    with torch.no_grad():
        ref = tm(torch.tensor(ids), torch.tensor(mask), torch.tensor(tt)).logits.numpy()
    assert np.max(np.abs(np.asarray(model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).logits) - ref)) <= 1e-5


def test_pretraining_round_trip_keeps_sop(tmp_path):
    model = sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig(**TINY), rngs=sj.model.nnx.Rngs(3))
    sj.save_pretrained(model, tmp_path / "m")
    sj.export_torch(sj.load_pretrained(tmp_path / "m"), tmp_path / "hf")
    cfg = json.load(open(tmp_path / "hf" / "config.json"))
    assert cfg["architectures"] == ["SqueezeBertForMaskedLM"] and cfg["model_type"] == "squeezebert"
    tm, info = transformers.SqueezeBertForMaskedLM.from_pretrained(str(tmp_path / "hf"), output_loading_info=True)
    assert not info["missing_keys"]
    assert set(info["unexpected_keys"]) <= {"cls.seq_relationship.weight", "cls.seq_relationship.bias"}
    again = sj.load_pretrained(tmp_path / "hf")  # a transformers dir loads directly too
    assert type(again) is sj.SqueezeBertForPreTraining
    a, b = sj.pretrained.flat_params(model), sj.pretrained.flat_params(again)
    assert all(np.array_equal(a[k], b[k]) for k in a) and a.keys() == b.keys()


def test_bert_export_loads_in_bert_classes(tmp_path):
    cfg = sj.SqueezeBertConfig.preset("bert-tiny", vocab_size=99, max_position_embeddings=40)
    model = sj.SqueezeBertForMaskedLM(cfg, rngs=sj.model.nnx.Rngs(0))
    sj.export_torch(model, tmp_path / "bert", style="bert")
    tm, info = transformers.BertForMaskedLM.from_pretrained(str(tmp_path / "bert"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    ids, mask, tt = inputs(cfg)
    with torch.no_grad():
        ref = tm.eval()(torch.tensor(ids), torch.tensor(mask), torch.tensor(tt)).logits.numpy()
    model.eval()
    assert np.max(np.abs(np.asarray(model(jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(tt)).logits) - ref)) <= 1e-5


def test_new_head_on_headless_checkpoint_is_reported(tmp_path, caplog):
    tm = randomize(transformers.SqueezeBertModel(transformers.SqueezeBertConfig(**TINY)))
    src = save_hf(tm, str(tmp_path / "hf"))
    with caplog.at_level("WARNING"):
        m = sj.load_pretrained(src, head="SqueezeBertForSequenceClassification", num_labels=3)
    assert set(m.newly_initialized) == {"classifier/kernel", "classifier/bias"}
    assert "classifier/kernel" in caplog.text
    with pytest.raises(ValueError, match="classifier.weight"):
        sj.pretrained.from_torch_state_dict(torch_sd(tm), sj.SqueezeBertConfig(**TINY),
                                      "SqueezeBertForSequenceClassification")



def test_a_load_builds_the_model_once(tmp_path, monkeypatch):
    """load_pretrained (what init_from calls) and import_torch build the model once, with another head or label
    count too, and never eagerly: its shapes come from an abstract construction (nnx.eval_shape) and the values the
    checkpoint lacks (a new head, the dropout streams' keys) from one jitted one, in which XLA drops the initialisers
    of the parameters the checkpoint fills: no random weight is drawn to be replaced. The values it draws are an
    eager construction's; a second load of the same architecture in the process copies them (the shapes traced once).
    Every head class holds one SqueezeBertModel, so its constructor counts the constructions (traced ones hold
    tracers)."""
    tm = randomize(transformers.SqueezeBertForSequenceClassification(transformers.SqueezeBertConfig(**TINY,
                                                                                                    num_labels=3)))
    src = save_hf(tm, str(tmp_path / "hf"))
    traced = []
    init = sj.SqueezeBertModel.__init__

    def counting_init(self, *a, **k):
        init(self, *a, **k)
        traced.append(isinstance(self.pooler["dense"].kernel.get_value(), jax.core.Tracer))

    monkeypatch.setattr(sj.SqueezeBertModel, "__init__", counting_init)
    for load in (lambda: sj.pretrained.import_torch(src, str(tmp_path / "m"), overwrite=True),  # run twice
                 lambda: sj.load_pretrained(src),
                 lambda: sj.load_pretrained(src, "SqueezeBertForSequenceClassification", num_labels=2),
                 lambda: sj.load_pretrained(src, "SqueezeBertForMaskedLM"),
                 lambda: sj.load_pretrained(tmp_path / "m", "SqueezeBertForSequenceClassification", num_labels=2),
                 lambda: sj.load_pretrained(tmp_path / "m", "SqueezeBertForQuestionAnswering")):
        traced.clear()
        sj.pretrained._INITIAL.clear()
        load()
        assert traced == [True, True]  # the shapes, then the values the checkpoint lacks: both traced
        traced.clear()
        load()
        assert traced == [True]  # again: the shapes only
    monkeypatch.undo()
    # what the checkpoint lacks is what an eager construction draws: the new 2-label classifier, the dropout keys
    # (the first load's values, and the second's: copies of them, each in a buffer of its own for a step to donate)
    first, again = (sj.load_pretrained(src, "SqueezeBertForSequenceClassification", num_labels=2, seed=3)
                    for _ in range(2))
    eager = dict(nnx.to_flat_state(nnx.state(sj.SqueezeBertForSequenceClassification(first.config, num_labels=2,
                                                                                      rngs=nnx.Rngs(3)))))
    fresh = [(p, v.get_value()) for loaded in (first, again) for p, v in nnx.to_flat_state(nnx.state(loaded))
             if p[0] == "classifier" or not isinstance(v, nnx.Param)]
    assert {p[0] for p, _ in fresh} == {"classifier", "dropout", "transformer"}
    kernels = [v for p, v in fresh if p == ("classifier", "kernel")]
    assert len(kernels) == 2 and kernels[0].unsafe_buffer_pointer() != kernels[1].unsafe_buffer_pointer()
    for path, value in fresh:
        want = eager[path].get_value()
        if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):  # the same keys, bit for bit
            np.testing.assert_array_equal(jax.random.key_data(value), jax.random.key_data(want), err_msg=str(path))
        else:  # the same random bits; XLA fuses the normal's float transform, so up to 1 ulp apart
            np.testing.assert_allclose(value, want, rtol=3e-7, atol=0, err_msg=str(path))


# ---- bad checkpoints ------------------------------------------------------------------------------

def _sd():
    tm = randomize(transformers.SqueezeBertForMaskedLM(transformers.SqueezeBertConfig(**TINY)))
    return torch_sd(tm)


def test_unexpected_tensor_is_named():
    sd = _sd() | {"transformer.encoder.layers.0.attention.extra.weight": np.zeros(3, np.float32)}
    with pytest.raises(ValueError, match="attention.extra.weight"):
        sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY))


def test_missing_tensor_is_named():
    sd = _sd()
    del sd["transformer.encoder.layers.1.output.layernorm.bias"]
    with pytest.raises(ValueError, match=r"layers\.1\.output\.layernorm\.bias"):
        sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY))


def test_misshapen_tensor_and_wrong_config_are_named():
    sd = _sd()
    sd["transformer.encoder.layers.0.attention.query.weight"] = np.zeros((32, 32, 1), np.float32)
    with pytest.raises(ValueError, match=r"attention\.query\.weight has shape \(32, 32, 1\)"):
        sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY))
    with pytest.raises(ValueError, match="does config.json match"):  # right weights, wrong groups
        sj.pretrained.from_torch_state_dict(_sd(), sj.SqueezeBertConfig(**(TINY | {"k_groups": 4})))


def test_untied_decoder_rejected():
    sd = _sd() | {"cls.predictions.decoder.weight": np.zeros((99, 32), np.float32)}
    with pytest.raises(ValueError, match="decoder.weight differs"):
        sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY))


def test_native_model_dir_errors(tmp_path):
    model = sj.SqueezeBertForMaskedLM(sj.SqueezeBertConfig(**TINY), rngs=sj.model.nnx.Rngs(0))
    sj.save_pretrained(model, tmp_path / "m")
    cfg = json.load(open(tmp_path / "m" / "config.json"))
    json.dump(cfg | {"intermediate_size": 128}, open(tmp_path / "m" / "config.json", "w"))
    with pytest.raises(ValueError, match="intermediate/conv1d/(kernel|bias) has shape"):
        sj.load_pretrained(tmp_path / "m")
    json.dump(cfg, open(tmp_path / "m" / "config.json", "w"))
    flat = load_file(str(tmp_path / "m" / "params.safetensors"))
    flat["transformer/encoder/layers/0/attention/bogus"] = np.zeros(2, np.float32)
    save_file(flat, str(tmp_path / "m" / "params.safetensors"))
    with pytest.raises(ValueError, match="attention/bogus"):
        sj.load_pretrained(tmp_path / "m")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        sj.load_pretrained(tmp_path / "empty")
    for text, msg in (("{not json", r"config.json:1:2: not valid JSON"),
                      ('{"hidden_size": 32,\n "hidden_size": 64}', r"config.json: the key 'hidden_size' appears twice"),
                      ("[32]", r"config.json: expected a JSON object")):
        (tmp_path / "m" / "config.json").write_text(text)
        with pytest.raises(ValueError, match=msg):
            sj.load_pretrained(tmp_path / "m")


def test_pickle_checkpoint_refused(tmp_path):
    """A .bin that needs arbitrary unpickling is refused (weights_only=True), naming what it holds, and never with
    torch's advice to load it unsafely; a file that is no checkpoint, or a damaged one, says so; a sharded checkpoint
    says it is one (it was "no model.safetensors or pytorch_model.bin")."""
    d = tmp_path / "evil"
    d.mkdir()
    transformers.SqueezeBertConfig(**TINY).to_json_file(str(d / "config.json"))
    torch.save({"x": object.__new__(Evil)}, d / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pytorch_model.bin: not a PyTorch checkpoint of tensors alone \(Unsupported "
                                         r"global: GLOBAL test_convert.Evil\); this converter loads weights only") as e:
        sj.load_pretrained(str(d))
    assert "weights_only" not in str(e.value) and "trust" not in str(e.value)
    # a global from a module torch blocks outright (os.system: another wording of torch's), named the same way
    torch.save({"x": Shell()}, d / "pytorch_model.bin")
    with pytest.raises(ValueError, match=r"pytorch_model.bin: not a PyTorch checkpoint of tensors alone \(unsupported "
                                         r"GLOBAL (posix|nt).system\); this converter loads weights only") as e:
        sj.load_pretrained(str(d))
    assert "weights_only" not in str(e.value) and "damaged" not in str(e.value)
    torch.save({"x": object.__new__(Evil)}, d / "pytorch_model.bin")
    good = (d / "pytorch_model.bin").read_bytes()
    for data, msg in ((b"not a pickle at all", r"not a PyTorch checkpoint \(neither torch.save's zip archive nor a "
                                                r"pickle\)"),
                      (good[:len(good) // 2], r"cannot be read as a PyTorch checkpoint, damaged or cut short\? ")):
        (d / "pytorch_model.bin").write_bytes(data)
        with pytest.raises(ValueError, match=msg):
            sj.load_pretrained(str(d))
    (d / "pytorch_model.bin").unlink()
    (d / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(ValueError, match=r"evil: a checkpoint sharded over several files \(model.safetensors.index"
                                         r".json\); this converter reads one weights file"):
        sj.load_pretrained(str(d))


class Evil:
    pass


class Shell:
    """Unpickled, it would run a shell command (``os.system``): never, with weights-only loading."""

    def __reduce__(self):
        import os

        return os.system, ("true",)


def test_missing_encoder_tensor_is_an_error_even_when_new_heads_are_allowed(tmp_path):
    """allow_new_heads covers task heads and the pooler only: a checkpoint without an encoder tensor is refused
    by load_pretrained and import_torch (it must not become a MODEL_DIR with a random layer in it)."""
    tm = randomize(transformers.SqueezeBertForMaskedLM(transformers.SqueezeBertConfig(**TINY)))
    src = save_hf(tm, str(tmp_path / "hf"))
    sd = load_file(os.path.join(src, "model.safetensors"))
    del sd["transformer.encoder.layers.1.output.conv1d.weight"]
    save_file(sd, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing .*layers\.1\.output\.conv1d\.weight"):
        sj.load_pretrained(src, head="SqueezeBertForSequenceClassification", num_labels=2)
    with pytest.raises(ValueError, match=r"layers\.1\.output\.conv1d\.weight"):
        sj.pretrained.import_torch(src, str(tmp_path / "out"))
    assert not (tmp_path / "out" / "params.safetensors").exists()


def test_a_head_half_in_the_checkpoint_is_damage_not_a_new_head(tmp_path):
    """A classifier's bias without its weight: the head was taken for the base model's ("unexpected classifier.bias"),
    or, with new heads allowed (import_torch), the weight was drawn at random beside the saved bias."""
    tm = randomize(transformers.SqueezeBertForSequenceClassification(transformers.SqueezeBertConfig(**TINY)))
    src = save_hf(tm, str(tmp_path / "hf"))
    sd = load_file(os.path.join(src, "model.safetensors"))
    del sd["classifier.weight"]
    save_file(sd, os.path.join(src, "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"the weights do not match SqueezeBertForSequenceClassification: missing "
                                         r"classifier\.weight$"):
        sj.pretrained.import_torch(src, str(tmp_path / "out"))
    assert not (tmp_path / "out" / "params.safetensors").exists()
    # the pretraining heads alike: SOP's bias without its weight, the MLM head without its output bias
    tm = randomize(transformers.SqueezeBertForMaskedLM(transformers.SqueezeBertConfig(**TINY)))
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    sop_half = sd | {"cls.seq_relationship.bias": np.zeros(2, np.float32)}  # SOP's bias without its weight
    mlm_half = {k: v for k, v in sd.items() if k != "cls.predictions.bias"}
    for half, missing in ((sop_half, r"seq_relationship\.weight"), (mlm_half, r"predictions\.bias")):
        with pytest.raises(ValueError, match=rf"the weights do not match .*: missing cls\.{missing}"):
            sj.pretrained.from_torch_state_dict(half, sj.SqueezeBertConfig(**TINY), allow_new_heads=True)
    # names for the outputs as config.json's id2label reads them: "neg,pos" was a 7-output classifier
    for names in ("neg,pos", ["pos", "pos\u200b"], ["", "x"]):
        with pytest.raises(sj.errors.InputError, match=r"label_names=|id2label"):
            sj.pretrained.import_torch(src, str(tmp_path / "out2"), label_names=names)


@pytest.mark.parametrize("head", ["SqueezeBertForSequenceClassification", "SqueezeBertModel"])
def test_another_head_on_a_checkpoint_with_a_head(tmp_path, head):
    """from_pytorch.py --head on squeezebert-uncased (MLM + SOP): the saved head is dropped, the encoder kept."""
    tm = randomize(transformers.SqueezeBertForMaskedLM(transformers.SqueezeBertConfig(**TINY)))
    src = save_hf(tm, str(tmp_path / "hf"))
    run_script("from_pytorch.py", "--src", src, "--out", str(tmp_path / "m"), "--head", head)
    m = sj.load_pretrained(tmp_path / "m")
    assert type(m) is sj.HEADS[head]
    enc = m if head == "SqueezeBertModel" else m.transformer
    ref = tm.transformer.encoder.layers[1].attention.query.weight.detach().numpy()
    ours = np.asarray(enc.encoder.layers[1].attention.query.kernel[...])
    assert np.array_equal(convert._to_torch(ours, "conv", TINY["q_groups"]), ref)


def test_num_labels_applies_to_a_transformers_dir(tmp_path):
    """MNLI (3 labels) -> RTE (2) straight from a transformers directory: the classifier is new, 2-way."""
    tm = randomize(transformers.SqueezeBertForSequenceClassification(
        transformers.SqueezeBertConfig(**TINY, num_labels=3)))
    src = save_hf(tm, str(tmp_path / "hf"))
    m = sj.load_pretrained(src, "SqueezeBertForSequenceClassification", num_labels=2)
    assert m.num_labels == 2 and m.classifier.kernel.shape == (32, 2)
    assert set(m.newly_initialized) == {"classifier/kernel", "classifier/bias"}
    assert sj.load_pretrained(src, "SqueezeBertForSequenceClassification", num_labels=3).newly_initialized == ()
    # numpy's integer is an integer; 0 was ignored (a 2-way model came back), -1, "3" and 3.0 were jax tracebacks
    assert sj.load_pretrained(src, "SqueezeBertForSequenceClassification", num_labels=np.int64(2)).num_labels == 2
    for bad in (0, -1, "3", 3.0, True):
        with pytest.raises(sj.errors.InputError, match=rf"^num_labels={re.escape(repr(bad))}: an integer >= 1"):
            sj.load_pretrained(src, "SqueezeBertForSequenceClassification", num_labels=bad)
    for bad in (np.int32, "int8", "bogus"):  # an integer compute dtype was taken, and failed at the first forward
        with pytest.raises(sj.errors.InputError, match=r"^dtype=.*: the compute dtype is a floating type"):
            sj.load_pretrained(src, dtype=bad)


def test_a_task_head_of_another_class_is_never_taken_for_the_new_one(tmp_path):
    """A 2-label sentence classifier's [hidden, 2] output has a 2-tag tagger's shape, a 1-label (regression) one a
    choice scorer's: asked for another head class, the saved task head is dropped and the new one starts fresh,
    reported (it used to be loaded as the new head, silently), from our MODEL_DIR and from a transformers
    directory. The pooler and the pretraining heads still carry over."""
    tm = randomize(transformers.SqueezeBertForSequenceClassification(
        transformers.SqueezeBertConfig(**TINY, num_labels=2)))
    src = save_hf(tm, str(tmp_path / "hf"))
    ours = tmp_path / "ours"
    sj.save_pretrained(sj.load_pretrained(src), ours)
    for d in (src, ours):
        for head in ("SqueezeBertForTokenClassification", "SqueezeBertForMultipleChoice"):
            m = sj.load_pretrained(d, head, **({"num_labels": 2} if "Token" in head else {}))
            new = {"classifier.weight", "classifier.bias"} if d == src else {"classifier/kernel", "classifier/bias"}
            assert set(m.newly_initialized) == new, (d, head)  # in the checkpoint's own names
        tagger = tmp_path / f"tagger_{os.path.basename(d)}"
        sj.save_pretrained(sj.load_pretrained(d, "SqueezeBertForTokenClassification", num_labels=2, seed=1), tagger)
        back = sj.load_pretrained(tagger, "SqueezeBertForSequenceClassification", num_labels=2)
        assert set(back.newly_initialized) == {"classifier/kernel", "classifier/bias"}
        assert not np.array_equal(np.asarray(back.classifier.kernel[...]),
                                  np.asarray(sj.load_pretrained(tagger).classifier.kernel[...]))
    pre = sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig(**TINY), rngs=sj.model.nnx.Rngs(0))
    sj.save_pretrained(pre, tmp_path / "pre")
    mlm = sj.load_pretrained(tmp_path / "pre", "SqueezeBertForMaskedLM")
    assert mlm.newly_initialized == ()


@pytest.mark.parametrize("head", ["SqueezeBertForTokenClassification", "SqueezeBertForQuestionAnswering"])
def test_bert_heads_without_pooler_export_exactly(tmp_path, head):
    """transformers builds these BERT heads without a pooler: the export has no pooler tensors to be unexpected."""
    cfg = sj.SqueezeBertConfig.preset("bert-tiny", vocab_size=99, max_position_embeddings=40)
    kw = {"num_labels": 3} if "Token" in head else {}
    model = sj.HEADS[head](cfg, rngs=sj.model.nnx.Rngs(0), **kw)
    sj.export_torch(model, tmp_path / "bert", style="bert")
    cls = getattr(transformers, head.replace("SqueezeBert", "Bert"))
    _, info = cls.from_pretrained(str(tmp_path / "bert"), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_save_pretrained_round_trips_non_contiguous_parameters(tmp_path):
    """A parameter set from a column-indexed (Fortran-ordered) array saves and loads unchanged."""
    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig(**TINY), num_labels=3,
                                                    rngs=sj.model.nnx.Rngs(0))
    k = np.random.default_rng(0).standard_normal((32, 3)).astype(np.float32)[:, [2, 0, 1]]
    assert not k.flags["C_CONTIGUOUS"]
    model.classifier.kernel.set_value(k)
    sj.save_pretrained(model, tmp_path / "m")
    assert np.array_equal(np.asarray(sj.load_pretrained(tmp_path / "m").classifier.kernel[...]), k)


def test_label_names_name_a_converted_classifier(tmp_path):
    tm = randomize(transformers.SqueezeBertForSequenceClassification(
        transformers.SqueezeBertConfig(**TINY, num_labels=3)))
    src = save_hf(tm, str(tmp_path / "hf"))
    run_script("from_pytorch.py", "--src", src, "--out", str(tmp_path / "m"),
               "--label-names", "contradiction,entailment,neutral")
    assert sj.load_pretrained(tmp_path / "m").config.id2label == {0: "contradiction", 1: "entailment", 2: "neutral"}
    with pytest.raises(ValueError, match="2 label names"):
        sj.pretrained.import_torch(src, str(tmp_path / "m2"), label_names=["a", "b"])
    # each name read as config.data.labels reads them (tasks.declared_labels): none empty, each value once
    for names, msg in (("a,,b", r"--label-names='a,,b' has an empty name"), ("a, ,b", r"has an empty name"),
                       ("1,1.0,2", r"--label-names='1,1.0,2' names the label '1' twice")):
        with pytest.raises(ValueError, match=msg):
            run_script("from_pytorch.py", "--src", src, "--out", str(tmp_path / "m3"), "--label-names", names)
    assert not (tmp_path / "m3").exists()
    mlm = save_hf(randomize(transformers.SqueezeBertForMaskedLM(transformers.SqueezeBertConfig(**TINY))),
                  str(tmp_path / "mlm"))
    with pytest.raises(ValueError, match=r"label names \['a', 'b'\] for a SqueezeBertForMaskedLM, which has no "
                                         r"classifier"):
        sj.pretrained.import_torch(mlm, str(tmp_path / "m4"), label_names=["a", "b"])


def test_atomic_write_text_bytes_and_writer(tmp_path):
    """One helper for every whole-or-nothing file: text, bytes or a writer function (np.save keeps its name); a
    failing writer leaves the old file and no temp file; the file gets the umask's permissions, not 0600."""
    p = tmp_path / "a.txt"
    assert sj.files.atomic_write(p, "één\n") == str(p) and p.read_text(encoding="utf-8") == "één\n"
    sj.files.atomic_write(p, b"\x00\x01")
    sj.files.atomic_write(tmp_path / "x.npy", lambda tmp: np.save(tmp, np.arange(3)))
    assert np.array_equal(np.load(tmp_path / "x.npy"), np.arange(3))

    def half(tmp):
        with open(tmp, "w") as f:
            f.write("half")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        sj.files.atomic_write(p, half)
    assert p.read_bytes() == b"\x00\x01" and sorted(os.listdir(tmp_path)) == ["a.txt", "x.npy"]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(p).st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_a_model_dirs_weights_get_the_users_umask(tmp_path, umask):
    """Issue 26 class 8: params.safetensors (written by safetensors, which makes its file 0600) reads as config.json
    does: 0644 under umask 022, 0600 under 077."""
    from flax import nnx

    cfg = sj.SqueezeBertConfig(vocab_size=20, hidden_size=32, embedding_size=32, num_hidden_layers=1,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=32)
    old = os.umask(umask)
    try:
        sj.save_pretrained(sj.SqueezeBertForPreTraining(cfg, rngs=nnx.Rngs(0)), tmp_path / "m")
    finally:
        os.umask(old)
    modes = {name: os.stat(tmp_path / "m" / name).st_mode & 0o777 for name in os.listdir(tmp_path / "m")}
    assert modes == {"config.json": 0o666 & ~umask, "params.safetensors": 0o666 & ~umask}


# ---- tensors no float model can take (one check: convert.tensor_problem, in build_model and flat_to_torch) -------

WORD = "transformer.embeddings.word_embeddings.weight"
LN = "transformer.encoder.layers.1.output.layernorm.bias"


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.uint8, np.bool_, np.complex64])
def test_a_non_floating_weight_is_refused_by_name(dtype):
    sd = _sd()
    sd[LN] = sd[LN].astype(dtype)
    with pytest.raises(sj.errors.CheckpointMismatchError) as e:
        sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY), source="ckpt.bin")
    msg = str(e.value)
    assert msg.startswith(f"ckpt.bin: tensor {LN} has dtype {np.dtype(dtype)}, not a floating-point one") and \
        "\n" not in msg, msg


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_a_non_floating_weight_in_a_checkpoint_file_names_the_file(tmp_path, fmt):
    """Both readers keep an integer tensor's dtype (.bin, and safetensors with bf16 weights alike), so that
    load_pretrained and import_torch refuse it by file and name instead of casting it to float; the integer
    position_ids buffer older transformers saved is still skipped."""
    from safetensors.torch import save_file as save_torch

    tm = randomize(transformers.SqueezeBertForMaskedLM(transformers.SqueezeBertConfig(**TINY)))
    src = save_hf(tm, str(tmp_path / "hf"))
    os.remove(os.path.join(src, "model.safetensors"))
    path = os.path.join(src, "model.safetensors" if fmt == "safetensors" else "pytorch_model.bin")

    def write(word_dtype):
        sd = {k: v.detach().clone() for k, v in tm.state_dict().items() if k != "cls.predictions.decoder.weight"}
        sd[WORD] = sd[WORD].to(word_dtype)
        sd["transformer.embeddings.position_ids"] = torch.arange(TINY["max_position_embeddings"])[None]
        if fmt == "bin":
            torch.save(sd, path)
        else:
            save_torch({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in sd.items()}, path)

    write(torch.int64)
    for call in (lambda: sj.load_pretrained(src), lambda: sj.pretrained.import_torch(src, str(tmp_path / "m"))):
        with pytest.raises(sj.errors.CheckpointMismatchError,
                           match=rf"^{path}: tensor {WORD} has dtype int64, not a floating-point one \(float16"):
            call()
    assert not (tmp_path / "m").exists()
    write(torch.float32)
    assert type(sj.load_pretrained(src)) is sj.SqueezeBertForMaskedLM


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_weights_are_refused_with_their_count(bad):
    sd = _sd()
    sd[LN] = sd[LN].copy()
    sd[LN][[0, 3, 5]] = bad
    word = "nan" if np.isnan(bad) else "inf"
    label = {"nan": "NaN", "inf": "inf"}[word]
    with pytest.raises(sj.errors.InputError, match=rf"^ckpt: tensor {LN} holds 3 {label} of its 32 values"):
        sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY), source="ckpt")


def test_non_finite_tied_embeddings_are_named_as_such():
    """NaN in the word embeddings and their tied copy is the NaN, not an 'untied decoder'."""
    sd = _sd()
    sd[WORD] = sd[WORD].copy()
    sd[WORD][1, 2] = np.nan
    sd["cls.predictions.decoder.weight"] = sd[WORD].copy()
    with pytest.raises(sj.errors.InputError, match=rf"tensor {WORD} holds 1 NaN of its 3,168 values"):
        sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY))


def test_float64_beyond_float32_range_is_refused(tmp_path):
    sd = _sd()
    sd[LN] = sd[LN].astype(np.float64)
    sd[LN][0] = 1e300
    with pytest.raises(sj.errors.InputError, match=r"holds 1 beyond float32's range of its 32 values"):
        sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY))
    # read from a file (safetensors, and torch's .bin): not cast to float32 first, where 1e300 became an "inf"
    from safetensors.numpy import save_file

    torch = pytest.importorskip("torch")
    save_file(sd, str(tmp_path / "model.safetensors"))
    torch.save({k: torch.from_numpy(v) for k, v in sd.items()}, tmp_path / "pytorch_model.bin")
    for name in ("model.safetensors", "pytorch_model.bin"):
        read = sj.convert.read_torch_checkpoint(str(tmp_path / name))
        with pytest.raises(sj.errors.InputError, match=r"holds 1 beyond float32's range of its 32 values"):
            sj.pretrained.from_torch_state_dict(read, sj.SqueezeBertConfig(**TINY))
    sd[LN][0] = 0.5  # float64 and float16 weights that fit are taken
    ln0 = LN.replace("layers.1", "layers.0")
    sd[ln0] = sd[ln0].astype(np.float16)
    sj.pretrained.from_torch_state_dict(sd, sj.SqueezeBertConfig(**TINY))


def test_a_model_dir_with_bad_tensors_names_them_in_its_own_names(tmp_path):
    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig(**TINY), rngs=sj.model.nnx.Rngs(0))
    sj.save_pretrained(model, tmp_path / "m")
    path = str(tmp_path / "m" / "params.safetensors")
    good = load_file(path)
    key = "transformer/encoder/layers/0/attention/query/kernel"
    for value, message in ((good[key].astype(np.int32), "has dtype int32"),
                           (np.where(np.arange(good[key].size).reshape(good[key].shape) < 2, np.inf, good[key]
                                     ).astype(np.float32), "holds 2 inf")):
        save_file(good | {key: value}, path)
        with pytest.raises(sj.errors.CheckpointMismatchError, match=rf"^{path}: tensor {key} {message}"):
            sj.load_pretrained(tmp_path / "m")


def test_export_refuses_non_finite_parameters(tmp_path):
    """Flax -> PyTorch: a NaN in our parameters is named (our path and the transformers key) before anything is
    written."""
    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig(**TINY), rngs=sj.model.nnx.Rngs(0))
    k = np.asarray(model.classifier.kernel[...]).copy()
    k[0, 0] = np.nan
    model.classifier.kernel.set_value(k)
    with pytest.raises(sj.errors.InputError, match=r"^the model's parameter classifier/kernel \(to be "
                                                   r"classifier.weight\) holds 1 NaN of its 64 values"):
        sj.export_torch(model, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    with pytest.raises(sj.errors.InputError, match="classifier/kernel"):
        convert.to_torch_state_dict(model)


def test_a_card_given_as_a_value_is_checked_as_task_json_is_read(tmp_path):
    """export_torch(card=...) and import_torch(card=...): the task description was written as given (predict then
    refused the model, or read its inputs wrong); now checked as ``predict.read_card`` checks task.json, against the
    model it is written beside, before anything is written."""
    model = sj.SqueezeBertForSequenceClassification(sj.SqueezeBertConfig(**TINY), rngs=sj.model.nnx.Rngs(0))
    bare = sj.SqueezeBertForPreTraining(sj.SqueezeBertConfig(**TINY), rngs=sj.model.nnx.Rngs(0))
    for m, card, msg in (
            (model, {"kind": "bogus"}, r"card: 'kind' is \"bogus\", not one of classification"),
            (model, ["classification"], r"card: a list, not an object of the task's settings"),
            (model, {"kind": "classification", "text_columns": []}, r"card: 'text_columns' is \[\]; it must be a "
                                                                   r"non-empty list"),
            (model, {"kind": "classification", "text_columns": {"a"}}, r"card=\{'kind': 'classification', 'text_col"
                                                                      r"umns': \{'a'\}\}: not a JSON object"),
            (model, {"kind": "classification", "text_columns": ["a"], "extra": 1}, r"card: unknown key 'extra'"),
            (model, {"kind": "token_classification"}, r"card: 'kind' is 'token_classification', but the model is a "
                                                      r"classifier model"),
            (model, {"kind": "regression"}, r"card: 'kind' is 'regression', but the model's classifier has 2 outputs"),
            (model, {"kind": "classification", "glue_task": "rte", "text_columns": ["s1", "s2"]},
             r"card: 'glue_task' is 'rte', but config.json's finetuning_task is 'cola'"),
            # a GLUE task's card of another kind or number of outputs (MNLI's 3 on 2 outputs)
            (model, {"kind": "classification", "glue_task": "mnli", "text_columns": ["premise", "hypothesis"]},
             r"card: 'glue_task' is 'mnli', which has 3 outputs, but the model's classifier has 2"),
            (model, {"kind": "regression", "glue_task": "cola", "text_columns": ["sentence"]},
             r"card: 'kind' is 'regression', but cola is a classification task"),
            (bare, {"kind": "classification"}, r"card=\{\"kind\": \"classification\"\}: a task description is of a "
                                               r"fine-tuned head")):
        with pytest.raises(sj.errors.InputError, match="^" + msg):
            sj.export_torch(m, tmp_path / "hf", card=card, finetuning_task="cola")
        assert not (tmp_path / "hf").exists()
    sj.export_torch(model, tmp_path / "hf", card={"kind": "classification", "text_columns": ("review",)})
    assert json.loads((tmp_path / "hf" / "task.json").read_text()) == {"kind": "classification",
                                                                       "text_columns": ["review"]}
    # transformers' older spelling of a GLUE task is the task (sst-2 is sst2); numpy's numbers are numbers
    sj.export_torch(model, tmp_path / "hf2", card={"kind": "classification", "glue_task": "sst2",
                                                   "text_columns": ["sentence"]}, finetuning_task="sst-2")
    qa = sj.SqueezeBertForQuestionAnswering(sj.SqueezeBertConfig(**TINY), rngs=sj.model.nnx.Rngs(0))
    sj.export_torch(qa, tmp_path / "hf3", card={"kind": "question_answering", "max_query_length": np.int64(64),
                                                "null_threshold": np.float32(0.5), "version_2": np.bool_(True)})
    assert json.loads((tmp_path / "hf3" / "task.json").read_text())["max_query_length"] == 64
    with pytest.raises(sj.errors.InputError, match=r"^card: 'kind' is 'multiple_choice', but the model is a "
                                                   r"classifier model"):
        sj.import_torch(tmp_path / "hf", tmp_path / "m", card={"kind": "multiple_choice",
                                                               "text_columns": ["q"], "choice_columns": ["a", "b"]})
    assert not (tmp_path / "m").exists()


def test_conversion_keeps_one_models_tokenizer_and_its_own_label_names(tmp_path):
    """from_pytorch needs a vocabulary (a tokenizer_config.json or special_tokens_map.json alone is none); a converted
    MODEL_DIR never holds another model's tokenizer file beside its own (--overwrite replaces files of the same name
    only: a stale vocab.txt beside a new spiece.model would be read instead); --label-names never renames outputs the
    checkpoint's config names already. Each refused before anything is written."""
    tm = randomize(transformers.SqueezeBertForSequenceClassification(
        transformers.SqueezeBertConfig(**TINY, num_labels=2, id2label={0: "negative", 1: "positive"})))
    src = save_hf(tm, str(tmp_path / "hf"), vocab=False)
    with open(os.path.join(src, "special_tokens_map.json"), "w") as f:
        json.dump({"unk_token": "[UNK]"}, f)
    with pytest.raises(sj.errors.InputError, match=r"^--src .*: no tokenizer file \(vocab.txt, spiece.model"):
        run_script("from_pytorch.py", "--src", src, "--out", str(tmp_path / "a"))
    os.remove(os.path.join(src, "special_tokens_map.json"))
    save_hf(tm, src)
    out = tmp_path / "out"
    out.mkdir()
    (out / "spiece.model").write_bytes(b"another model's")
    with pytest.raises(sj.errors.InputError, match=rf"^{out} holds spiece.model, a tokenizer file this model does "
                                                   r"not have \(it has vocab.txt\)"):
        sj.pretrained.import_torch(src, str(out))
    assert sorted(os.listdir(out)) == ["spiece.model"]
    with pytest.raises(sj.errors.InputError, match=r"^--label-names positive,negative: .*config.json names the "
                                                   r"outputs already \(0: negative, 1: positive\)"):
        sj.pretrained.import_torch(src, str(tmp_path / "b"), label_names=["positive", "negative"])
    model = sj.pretrained.import_torch(src, str(tmp_path / "c"), label_names=["negative", "positive"])  # the same
    assert model.config.id2label == {0: "negative", 1: "positive"}


def test_a_model_is_written_over_another_only_with_overwrite_and_never_beside_its_files(tmp_path):
    """Every writer of a model (save_pretrained, export_torch, import_torch) refuses a directory that holds a model
    unless told to overwrite, and even then where a file of the other model would stay beside the new one's: a
    fine-tuned model's task.json (predict would read it as the new model's card), transformers' model.safetensors
    beside our params.safetensors and the reverse. Refused before any write: the directory is as it was."""
    cfg = sj.SqueezeBertConfig(**TINY)
    model = sj.SqueezeBertForMaskedLM(cfg, rngs=nnx.Rngs(0))
    ours = tmp_path / "ours"
    sj.save_pretrained(model, ours)
    before = {n: (ours / n).read_bytes() for n in os.listdir(ours)}
    with pytest.raises(sj.errors.InputError, match=rf"^{ours} holds a model already \(config.json, "
                                                   r"params.safetensors\); pass overwrite=True to replace it"):
        sj.save_pretrained(model, ours)
    sj.save_pretrained(sj.SqueezeBertForMaskedLM(cfg, rngs=nnx.Rngs(1)), ours, overwrite=True)
    assert sorted(os.listdir(ours)) == sorted(before) and (ours / "params.safetensors").read_bytes() != before[
        "params.safetensors"]
    (ours / "task.json").write_text('{"kind": "multilabel"}')  # a fine-tuned model's card
    state = {n: (ours / n).read_bytes() for n in os.listdir(ours)}
    with pytest.raises(sj.errors.InputError, match=rf"^{ours} holds task.json, a model file this model does not "
                                                   r"have \(it has config.json, params.safetensors\): it would be "
                                                   r"read with"):
        sj.save_pretrained(model, ours, overwrite=True)
    with pytest.raises(sj.errors.InputError, match=rf"^{ours} holds params.safetensors, a model file this model does "
                                                   r"not have \(it has config.json, model.safetensors\)"):
        sj.export_torch(model, ours, overwrite=True)
    assert {n: (ours / n).read_bytes() for n in os.listdir(ours)} == state
    hf = tmp_path / "hf"
    sj.export_torch(model, hf)
    with pytest.raises(sj.errors.InputError, match=rf"^{hf} holds a model already \(config.json, model.safetensors\)"):
        sj.export_torch(model, hf)
    sj.export_torch(model, hf, overwrite=True)
    with pytest.raises(sj.errors.InputError, match=rf"^{hf} holds model.safetensors, a model file"):
        sj.save_pretrained(model, hf, overwrite=True)
    with pytest.raises(sj.errors.InputError, match=rf"^{hf} holds model.safetensors, a model file"):
        sj.pretrained.import_torch(hf, hf, overwrite=True)
    assert sorted(os.listdir(hf)) == ["config.json", "model.safetensors"]
    empty = tmp_path / "empty"
    empty.mkdir()
    sj.save_pretrained(model, empty)  # an empty directory is a new one
    # a directory holding only the tokenizer the model is saved with (tokenizer_dir is the directory) replaces
    # nothing; a vocab.txt there is not replaced by another directory's without overwrite
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(
        TINY["vocab_size"] - 5)]) + "\n")
    sj.save_pretrained(model, tok, tokenizer_dir=tok)
    assert sorted(os.listdir(tok)) == ["config.json", "params.safetensors", "vocab.txt"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "vocab.txt").write_bytes((tok / "vocab.txt").read_bytes())
    with pytest.raises(sj.errors.InputError, match=rf"^{other} holds tokenizer files already \(vocab.txt\); pass "
                                                   r"overwrite=True"):
        sj.save_pretrained(model, other, tokenizer_dir=tok)
    # transformers' other weights and its added tokens (ids past this model's embeddings) are another model's too
    for name in ("flax_model.msgpack", "added_tokens.json"):
        (hf / name).write_text("{}")
        with pytest.raises(sj.errors.InputError, match=rf"^{hf} holds {name}, a (model|tokenizer) file this model "):
            sj.export_torch(model, hf, overwrite=True)
        (hf / name).unlink()
    # "replace" is a run's own directory's only
    with pytest.raises(sj.errors.InputError, match=r"^overwrite='replace': expected True or False"):
        sj.export_torch(model, hf, overwrite="replace")
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(sj.errors.InputError, match=rf"^{tmp_path / 'a_file'} is a file, not a directory"):
        sj.save_pretrained(model, tmp_path / "a_file")
    # saved without a tokenizer_dir, the model reads the tokenizer already there: one it cannot read is refused
    big = tmp_path / "big"
    big.mkdir()
    (big / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(
        TINY["vocab_size"])]) + "\n")
    with pytest.raises(sj.errors.InputError, match=rf"^{big}/vocab.txt: {TINY['vocab_size'] + 5} tokens, but the "
                                                   rf"model's vocab_size is {TINY['vocab_size']}"):
        sj.save_pretrained(model, big)
    assert os.listdir(big) == ["vocab.txt"]
    # a tokenizer directory holding no file this library reads (tokenizer.json alone, as transformers 5 saves one)
    (tmp_path / "tj").mkdir()
    (tmp_path / "tj" / "tokenizer.json").write_text("{}")
    with pytest.raises(sj.errors.InputError, match=rf"^tokenizer_dir='{tmp_path / 'tj'}': no tokenizer file this "
                                                   r"library reads \(vocab.txt, "):
        sj.save_pretrained(model, tmp_path / "tj_model", tokenizer_dir=tmp_path / "tj")
    assert not (tmp_path / "tj_model").exists()
    # a training run's own model directory (its export): the other model's files go, named in a warning
    sj.save_pretrained(model, ours, overwrite="replace")
    assert sorted(os.listdir(ours)) == ["config.json", "params.safetensors"]


def test_a_tokenizer_json_that_keeps_case_beside_an_uncased_vocab_is_refused(tmp_path):
    """transformers reads tokenizer.json, this library vocab.txt (uncased BERT's WordPiece): a tokenizer.json of the
    same vocabulary whose normalizer keeps case would encode "The Story" as [UNK] [UNK] there and "the story" here."""
    from tokenizers import BertWordPieceTokenizer

    src = tmp_path / "hf"
    src.mkdir()
    (src / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "story"]) + "\n")
    BertWordPieceTokenizer(str(src / "vocab.txt"), lowercase=True).save(str(src / "tokenizer.json"))
    assert [n for n, _ in sj.pretrained.tokenizer_files(str(src))] == ["vocab.txt", "tokenizer.json"]
    BertWordPieceTokenizer(str(src / "vocab.txt"), lowercase=False).save(str(src / "tokenizer.json"))
    with pytest.raises(sj.errors.InputError, match=r"tokenizer.json: its normalizer keeps case or accents \(lowercase "
                                                   r"a boolean false, strip_accents null\)"):
        sj.pretrained.tokenizer_files(str(src))


def test_a_config_json_without_model_type_is_read_as_squeezebert_only_when_its_architecture_says_so(tmp_path):
    """transformers writes model_type; a config.json that lost it was read as SqueezeBERT's, so a BERT checkpoint's
    failed on an unrelated field (embedding_size). One line naming what is missing, from the one reader."""
    from squeezebert_jax.pretrained import read_model_config

    cfg = {"architectures": ["BertForSequenceClassification"], "hidden_size": 32, "num_hidden_layers": 2,
           "num_attention_heads": 2, "intermediate_size": 64, "vocab_size": 99}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(sj.errors.InputError, match=r"config.json: no model_type, and architectures names a "
                                                   r"BertForSequenceClassification: .* \"model_type\": \"bert\""):
        read_model_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "bert"}))
    assert read_model_config(tmp_path)[0].hidden_size == 32
    cfg.pop("architectures")  # no class named: read as SqueezeBERT's, as before
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "embedding_size": 32}))
    assert read_model_config(tmp_path)[0].q_groups == 4
    # tie_word_embeddings as a string: "false" was read as tied
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "embedding_size": 32, "tie_word_embeddings": "false"}))
    with pytest.raises(sj.errors.InputError, match=r"config.json: tie_word_embeddings is a string \"false\"; expected "
                                                   r"true or false"):
        read_model_config(tmp_path)
    # a MODEL_DIR that is a link looping or leading nowhere: said so (it said "a file, not a MODEL_DIR")
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    with pytest.raises(FileNotFoundError, match=r"loop: a symbolic link that leads back to itself"):
        sj.load_pretrained(str(tmp_path / "loop"))


def test_a_checkpoint_with_both_weights_files_says_which_it_reads(tmp_path, caplog):
    """model.safetensors is read where pytorch_model.bin is there too (as transformers does), and the console says
    so: the two may hold different weights."""
    import logging

    for name in ("model.safetensors", "pytorch_model.bin"):
        (tmp_path / name).write_bytes(b"weights")
    with caplog.at_level(logging.WARNING):
        assert convert.torch_checkpoint_file(tmp_path) == str(tmp_path / "model.safetensors")
    assert "holds both model.safetensors and pytorch_model.bin: reading model.safetensors" in caplog.text
