"""The family files (squeezebert_jax/models): each one's transformers classes exist, its state_dicts are told apart
from the others' by their keys, its presets are unique across families, and a head transformers has no class for
is refused by name."""

from __future__ import annotations

import pytest
import transformers
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import convert, models
from squeezebert_jax.errors import InputError

TINY = dict(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
            max_position_embeddings=16)
TORCH = {"bert": ("BertModel", transformers.BertConfig(**TINY)),
         "squeezebert": ("SqueezeBertModel", transformers.SqueezeBertConfig(**TINY, embedding_size=16)),
         "albert": ("AlbertModel", transformers.AlbertConfig(**TINY, embedding_size=8)),
         "distilbert": ("DistilBertModel", transformers.DistilBertConfig(vocab_size=40, dim=16, n_layers=1, n_heads=2,
                                                                         hidden_dim=16, max_position_embeddings=16)),
         "mobilebert": ("MobileBertModel", transformers.MobileBertConfig(**TINY, embedding_size=8,
                                                                         intra_bottleneck_size=8)),
         "electra": ("ElectraModel", transformers.ElectraConfig(**TINY, embedding_size=8))}


@pytest.mark.parametrize("family", models.ALL, ids=lambda f: f.style)
def test_each_familys_classes_exist_in_transformers(family):
    for ours, theirs in family.torch_classes.items():
        assert ours in sj.HEADS and hasattr(transformers, theirs), (ours, theirs)
    assert set(family.parts("SqueezeBertForPreTraining")) <= set(family.head_table)


@pytest.mark.parametrize("style", list(TORCH))
def test_a_state_dict_is_told_to_be_its_familys(style):
    cls, config = TORCH[style]
    keys = getattr(transformers, cls)(config).state_dict()
    assert models.detect_style(keys) == ("bert" if style == "electra" else style)  # ELECTRA's keys are BERT's


def test_presets_are_unique_and_build():
    names = [name for f in models.ALL for name in f.presets]
    assert len(names) == len(set(names)) == len(models.PRESETS) == 31
    for alias, name in models.ALIASES.items():
        assert sj.SqueezeBertConfig.preset(alias) == sj.SqueezeBertConfig.preset(name)
    with pytest.raises(InputError, match="unknown BERT miniature 'bert-L3-H128'"):
        sj.SqueezeBertConfig.preset("bert-L3-H128")


def test_a_head_transformers_has_no_class_for_is_refused_by_name(tmp_path, run_cli):
    config = sj.SqueezeBertConfig.preset("bert-tiny", vocab_size=40)
    model = sj.SqueezeBertForReplacedTokenDetection(config, rngs=nnx.Rngs(0))
    with pytest.raises(InputError, match="transformers has no squeezebert class for SqueezeBertForReplacedTokenDetection"):
        convert.torch_architecture(model)
    sj.save_pretrained(model, tmp_path / "m")
    rc, out, err = run_cli("convert/to_pytorch.py", "--src", tmp_path / "m", "--out", tmp_path / "hf")
    assert rc == 1 and "transformers has no squeezebert class" in err and "Traceback" not in err, err
    assert not (tmp_path / "hf").exists()
