"""The convert/ scripts and the tokenizer trainer as a user meets them (issue 11): a refused command prints one line
naming what is wrong, exits 1 (argparse: 2) and changes nothing on disk -- an --out that would overwrite a MODEL_DIR
or other files, bad --seq-len / --batch / --out of to_torchscript.py (refused before the minute-long export), a
config.json with a wrong type, a misspelt --head, an empty training corpus, a lone surrogate in tokenizer input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import mobile, model
from squeezebert_jax.errors import InputError
from squeezebert_jax.model import SqueezeBertConfig
from squeezebert_jax.tokenizer import Tokenizer, train_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(vocab_size=12, hidden_size=16, embedding_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=16, q_groups=2, k_groups=2, v_groups=2,
            intermediate_groups=2, output_groups=2)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "story", "then", "and", "was", "it"]


def model_dir(path, head="SqueezeBertForMaskedLM") -> str:
    sj.save_pretrained(sj.HEADS[head](SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0)), path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return str(path)


def hf_dir(path, head="SqueezeBertForMaskedLM") -> str:
    """A transformers checkpoint directory (config.json + model.safetensors + vocab.txt), written without torch."""
    model = sj.HEADS[head](SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    vocab_dir = path.parent / (path.name + "_vocab")
    vocab_dir.mkdir()
    (vocab_dir / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    sj.export_torch(model, path, tokenizer_dir=str(vocab_dir))
    return str(path)


def one_error_line(err: str, prog: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    return lines[0]


# -- 1. from_pytorch.py: a non-empty --out, --out in --src, an existing file -------------------------------------------

def test_from_pytorch_refuses_a_non_empty_out_unless_overwrite(tmp_path, run_cli, digest):
    src, out = hf_dir(tmp_path / "hf"), tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text('{"mine": true}\n')
    (out / "notes.txt").write_text("keep me\n")
    before = digest(src, out)
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", out)
    line = one_error_line(err, "from_pytorch.py")
    assert rc == 1 and f"--out {out} is not empty" in line and "config.json, notes.txt" in line
    assert "--overwrite" in line and stdout == ""
    assert digest(src, out) == before
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", out, "--overwrite")
    assert rc == 0 and stdout.startswith(f"wrote {out}: SqueezeBertForMaskedLM"), err
    assert (out / "notes.txt").read_text() == "keep me\n"  # only the files it writes are replaced
    assert type(sj.load_pretrained(out)).__name__ == "SqueezeBertForMaskedLM"


@pytest.mark.parametrize("where", ["same", "inside", "linked"])
def test_from_pytorch_never_writes_into_src(tmp_path, run_cli, digest, where):
    """Not into the source, nor through a link in --out to one of its files (--overwrite replaced the checkpoint's
    config.json with ours)."""
    src = hf_dir(tmp_path / "hf")
    out = {"same": src, "inside": os.path.join(src, "converted"), "linked": str(tmp_path / "out")}[where]
    if where == "linked":
        os.makedirs(out)
        os.symlink(os.path.join(src, "config.json"), os.path.join(out, "config.json"))
    before = digest(src)
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", out, "--overwrite")
    line = one_error_line(err, "from_pytorch.py")
    verb = {"same": f"is the source directory {src}", "inside": f"is inside the source directory {src}",
            "linked": f"holds {out}/config.json, a link to {src}/config.json outside it"}[where]
    assert rc == 1 and f"--out {out} {verb}" in line
    assert digest(src) == before and sorted(os.listdir(src)) == ["config.json", "model.safetensors", "vocab.txt"]


@pytest.mark.parametrize("script", ["convert/from_pytorch.py", "convert/to_pytorch.py"])
def test_an_out_that_is_a_file_is_refused_before_converting(tmp_path, run_cli, digest, monkeypatch, script):
    src = hf_dir(tmp_path / "hf") if "from" in script else model_dir(tmp_path / "m")
    out = tmp_path / "out.bin"
    out.write_bytes(b"\x00data")
    before = digest(src, out)
    for name in ("import_torch", "load_pretrained"):  # nothing may be read or converted
        monkeypatch.setattr(sj, name, lambda *a, **k: pytest.fail("converted before refusing"))
    rc, _, err = run_cli(script, "--src", src, "--out", out, "--overwrite")
    line = one_error_line(err, os.path.basename(script))
    assert rc == 1 and f"--out {out} is an existing file, not a directory" in line
    assert digest(src, out) == before


# -- 2. to_pytorch.py: --out == --src would overwrite the MODEL_DIR's config.json --------------------------------------

@pytest.mark.parametrize("overwrite", [False, True])
def test_to_pytorch_refuses_out_equal_to_src(tmp_path, run_cli, digest, overwrite):
    src = model_dir(tmp_path / "m")
    before = digest(src)
    rc, stdout, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", src, *(["--overwrite"] * overwrite))
    line = one_error_line(err, "to_pytorch.py")
    assert rc == 1 and f"--out {src} is the source directory {src}" in line and stdout == ""
    assert digest(src) == before
    assert type(sj.load_pretrained(src)).__name__ == "SqueezeBertForMaskedLM"  # still loads


@pytest.mark.parametrize("script", ["convert/to_pytorch.py", "convert/to_torchscript.py"])
def test_a_src_that_is_a_file_or_missing_is_named_as_such(tmp_path, run_cli, script):
    """--src an existing .ptl or config.json was "no such directory"; a typo is one."""
    src = model_dir(tmp_path / "m")
    for given, said in ((os.path.join(src, "config.json"), "a file, not a MODEL_DIR"),
                        (str(tmp_path / "nope"), "no such directory")):
        rc, stdout, err = run_cli(script, "--src", given, "--out", tmp_path / "o")
        line = one_error_line(err, os.path.basename(script))
        assert rc == 1 and f"--src {given}: {said}" in line, line
    assert not (tmp_path / "o").exists()


def test_to_pytorch_refuses_a_non_empty_out_unless_overwrite(tmp_path, run_cli, digest):
    src, out = model_dir(tmp_path / "m"), tmp_path / "hf"
    out.mkdir()
    (out / "config.json").write_text("{}\n")
    before = digest(src, out)
    rc, _, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", out)
    line = one_error_line(err, "to_pytorch.py")
    assert rc == 1 and f"--out {out} is not empty (it holds config.json)" in line and "--overwrite" in line
    assert digest(src, out) == before
    rc, stdout, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", out, "--overwrite")
    assert rc == 0 and stdout.startswith(f"wrote {out}: SqueezeBertForMaskedLM"), err
    assert json.loads((out / "config.json").read_text())["architectures"] == ["SqueezeBertForMaskedLM"]


def test_to_pytorch_command_line(tmp_path, digest):
    """The real command line (`sys.exit(cli.run(main))`): one line, exit 1, no traceback, nothing changed."""
    src = model_dir(tmp_path / "m")
    before = digest(src)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "convert", "to_pytorch.py"), "--src", src, "--out", src],
                       capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
    assert r.returncode == 1 and r.stdout == ""
    line = [x for x in r.stderr.splitlines() if x.startswith("to_pytorch.py: error: ")]
    assert len(line) == 1 and "is the source directory" in line[0] and "Traceback" not in r.stderr, r.stderr
    assert digest(src) == before


# -- 3. to_torchscript.py: arguments checked before the export ---------------------------------------------------------

@pytest.fixture
def no_export(monkeypatch):
    """Fail the test if to_torchscript.py gets as far as loading or exporting a model."""
    monkeypatch.setattr(sj, "load_pretrained", lambda *a, **k: pytest.fail("loaded the model before refusing"))
    monkeypatch.setattr(mobile, "export_lite", lambda *a, **k: pytest.fail("exported before refusing"))


@pytest.mark.parametrize("flag,value", [("--seq-len", "0"), ("--seq-len", "-4"), ("--batch", "0"),
                                        ("--num-choices", "0"), ("--seq-len", "x")])
def test_to_torchscript_refuses_bad_sizes_at_once(tmp_path, run_cli, no_export, flag, value):
    src = model_dir(tmp_path / "m")
    rc, stdout, err = run_cli("convert/to_torchscript.py", "--src", src, "--out", tmp_path / "m.ptl", flag, value)
    assert rc == 2 and stdout == "" and "Traceback" not in err
    assert f"argument {flag}: " in err and ("must be >= 1" in err or "is not an integer" in err), err
    assert not (tmp_path / "m.ptl").exists()


def test_to_torchscript_refuses_num_choices_for_a_model_without_choices(tmp_path, run_cli, digest, monkeypatch):
    monkeypatch.setattr(mobile, "export_lite", lambda *a, **k: pytest.fail("exported before refusing"))
    src = model_dir(tmp_path / "m")
    before = digest(src)
    rc, _, err = run_cli("convert/to_torchscript.py", "--src", src, "--out", tmp_path / "m.ptl", "--num-choices", "4")
    line = one_error_line(err, "to_torchscript.py")
    assert rc == 1 and "--num-choices 4: " in line and "not a multiple-choice model" in line, line
    assert digest(src) == before and not (tmp_path / "m.ptl").exists()


def test_to_torchscript_refuses_a_directory_out_and_any_path_in_its_source(tmp_path, run_cli, digest, no_export):
    """A directory, the source itself, and any file inside the source (its weights, with --overwrite too: the .ptl
    would replace them; a new name beside them): one line each, nothing changed."""
    src, other = model_dir(tmp_path / "m"), tmp_path / "exports"
    other.mkdir()
    before = digest(src)
    rc, _, err = run_cli("convert/to_torchscript.py", "--src", src, "--out", other)
    line = one_error_line(err, "to_torchscript.py")
    assert rc == 1 and f"--out {other} is a directory; give the path of the file to write" in line
    weights = next(f for f in os.listdir(src) if f.endswith(".safetensors"))
    for out, extra in ((src, ()), (os.path.join(src, weights), ("--overwrite",)), (os.path.join(src, "vocab.txt"),
                       ("--overwrite",)), (os.path.join(src, "new.ptl"), ())):
        rc, _, err = run_cli("convert/to_torchscript.py", "--src", src, "--out", out, *extra)
        line = one_error_line(err, "to_torchscript.py")
        assert rc == 1 and f"--out {out} is " in line and "an input" in line and "never" in line, (out, line)
    assert digest(src) == before and os.listdir(other) == []


def test_to_torchscript_refuses_an_existing_out_unless_overwrite(tmp_path, run_cli, digest, no_export):
    src, out = model_dir(tmp_path / "m"), tmp_path / "old.ptl"
    out.write_bytes(b"an earlier export")
    before = digest(src, out)
    rc, _, err = run_cli("convert/to_torchscript.py", "--src", src, "--out", out)
    line = one_error_line(err, "to_torchscript.py")
    assert rc == 1 and f"--out {out} already exists; pass --overwrite" in line
    assert digest(src, out) == before


def test_export_lite_checks_its_sizes(tmp_path):
    """Before any trace: a length that cannot hold [CLS] a word [SEP] (1 and 2 exported), one choice (its softmax is
    1 whatever it reads), a tolerance that is no number >= 0 (the whole export ran first), a directory as the file,
    and a file already there without overwrite=True (the notebook calls this, not the CLI that asks --overwrite), an
    overwrite that is no bool, a folder that is missing or a file."""
    model = sj.SqueezeBertModel(SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0))
    for kw, msg in (({"seq_len": 0}, r"seq_len=0; expected an integer >= 4"),
                    ({"seq_len": 2}, r"seq_len=2; expected an integer >= 4"),
                    ({"num_choices": 1}, r"num_choices=1; expected an integer >= 2"),
                    ({"tol": -1}, r"tol=-1; expected a finite number >= 0"),
                    ({"tol": float("nan")}, r"tol=nan; expected a finite number >= 0"),
                    # a length past the model's positions: said so, not as the memory it would take
                    ({"seq_len": 10 ** 8}, r"--seq-len 100000000 > the model's max_position_embeddings"),
                    # a batch no host holds: one line, not numpy's "Unable to allocate 931 TiB" traceback
                    ({"batch": 10 ** 12, "seq_len": 16}, r"batch=1000000000000 x seq_len=16 would take about .* GB of "
                                                         r"activations \(the trace and the check\), more than half")):
        with pytest.raises(InputError, match=msg):
            mobile.export_lite(model, tmp_path / "unused.ptl", **kw)
    with pytest.raises(InputError, match=rf"export_lite: {re.escape(str(tmp_path))} is a directory; give the .ptl"):
        mobile.export_lite(model, tmp_path)
    assert os.listdir(tmp_path) == []
    (tmp_path / "phone.ptl").write_bytes(b"the export on the phone")  # a file the user has, as the CLI's --out
    with pytest.raises(InputError, match=r"export_lite: .*phone\.ptl exists; pass overwrite=True to replace it$"):
        mobile.export_lite(model, tmp_path / "phone.ptl")
    for flag in ("no", 1, None):  # a truthy string replaced it
        with pytest.raises(InputError, match=rf"export_lite: overwrite={flag!r}: expected True or False"):
            mobile.export_lite(model, tmp_path / "phone.ptl", overwrite=flag)
    assert (tmp_path / "phone.ptl").read_bytes() == b"the export on the phone"
    # a folder that is not there (made, before) or a file (a FileExistsError traceback, before)
    with pytest.raises(InputError, match=r"export_lite: .*/new/sub does not exist: create it first \(the folder of "):
        mobile.export_lite(model, tmp_path / "new" / "sub" / "m.ptl")
    with pytest.raises(InputError, match=r"export_lite: .*phone\.ptl is not a directory \(the folder of "):
        mobile.export_lite(model, tmp_path / "phone.ptl" / "m.ptl")
    with pytest.raises(InputError, match=r"export_lite: .*/out\.ptl/ is a directory; give the \.ptl file"):
        mobile.export_lite(model, str(tmp_path / "out.ptl") + "/")  # traced whole, then NotADirectoryError
    assert sorted(os.listdir(tmp_path)) == ["phone.ptl"]


# -- 4. config.json with the wrong shape or types ----------------------------------------------------------------------

@pytest.mark.parametrize("edit,message", [
    (lambda c: [c], 'config.json: expected a JSON object ({"hidden_size": 768, ...}), got a list [{'),
    (lambda c: "config", 'config.json: expected a JSON object ({"hidden_size": 768, ...}), got a string "config"'),
    (lambda c: c | {"hidden_size": "16"}, 'config.json: hidden_size is "16" (a string); expected an integer >= 1'),
    (lambda c: c | {"num_attention_heads": 0}, "config.json: num_attention_heads is 0; expected an integer >= 1"),
    (lambda c: c | {"hidden_dropout_prob": "0.1"},
     'config.json: hidden_dropout_prob is "0.1" (a string); expected a number in [0, 1)'),
    (lambda c: c | {"hidden_act": None}, "config.json: hidden_act is null; expected a string"),
    (lambda c: c | {"layer_norm_eps": -1e-12}, "config.json: layer_norm_eps is -1e-12; expected a number > 0 and < 1"),
    (lambda c: c | {"attention_probs_dropout_prob": 1.0},
     "config.json: attention_probs_dropout_prob is 1.0; expected a number in [0, 1)"),
    (lambda c: c | {"id2label": {"0": "neg", "1": "pos", "2": "mixed"}, "num_labels": 2},
     "config.json: num_labels is 2 but id2label names 3 labels"),
    (lambda c: c | {"id2label": {"0": "neg", "1": "pos"}, "num_labels": 2.0},  # written back as 2 before
     "config.json: num_labels is 2.0; expected an integer >= 1 (the classifier's outputs)"),
    (lambda c: c | {"num_labels": True}, "config.json: num_labels is true; expected an integer >= 1"),
    (lambda c: c | {"id2label": {"0": "neg", "1": "pos"}, "label2id": {"neg": 1, "pos": 0}},
     'config.json: label2id {"neg": 1, "pos": 0} disagrees with id2label'),
])
def test_config_json_types_are_named(tmp_path, run_cli, digest, edit, message):
    src = model_dir(tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    before = digest(src)
    rc, _, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", tmp_path / "hf")
    line = one_error_line(err, "to_pytorch.py")
    assert rc == 1 and f"{path}: " in line and message in line, line
    assert digest(src) == before and not (tmp_path / "hf").exists()


def test_weights_of_another_layout_are_one_short_line(tmp_path, run_cli, digest):
    """SqueezeBERT's grouped weights under a config.json saying "bert": every layer's tensors mismatch; one line lists
    three and counts the rest, and points at what decides the shapes (it was every tensor: 1,266 characters)."""
    src = model_dir(tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"model_type": "bert"}))
    before = digest(src)
    rc, _, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", tmp_path / "hf")
    line = one_error_line(err, "to_pytorch.py")
    assert rc == 1 and "params.safetensors: tensor " in line and "but the config implies" in line, line
    assert re.search(r"; and \d+ more \(does config.json match the weights\? its model_type, groups and sizes decide "
                     r"each tensor's shape\)$", line) and line.count("but the config implies") == 3, line
    assert digest(src) == before and not (tmp_path / "hf").exists()


@pytest.mark.parametrize("field,value,message", [
    ("vocab_size", 30522.0, "vocab_size is 30522.0 (a decimal number); expected an integer >= 1"),
    ("vocab_size", True, "vocab_size is true (a boolean); expected an integer >= 1"),
    ("layer_norm_eps", "1e-12", 'layer_norm_eps is "1e-12" (a string); expected a number'),
    ("pad_token_id", [0], "pad_token_id is [0] (a list); expected an integer"),
    ("pad_token_id", 40000, "pad_token_id is 40000; expected an id of the vocabulary, 0 to 30521 (transformers"),
    ("pad_token_id", -1, "pad_token_id is -1; expected an id of the vocabulary"),
    ("id2label", ["a", "b"], 'id2label is ["a", "b"] (a list); expected an object of label names'),
    ("id2label", {"x": "a"}, 'id2label has the key "x"; expected integer keys'),
    ("id2label", {"0": "neg", "2": "pos"}, "id2label has the ids [0, 2]; expected 0 to 1, one name per output"),
    ("id2label", {"1": "pos"}, "id2label has the ids [1]; expected 0 to 0"),
    ("id2label", {"0": "pos", "1": "neg", "2": "pos"}, "id2label names 'pos' twice (ids 0 and 2)"),
    ("id2label", {"0": "pos", "1": " pos"}, "id2label names ' pos' twice (ids 0 and 1)"),
    ("id2label", {"0": "neg", "1": "neg\u200b"}, "id2label names 'neg\\u200b' twice (ids 0 and 1)"),  # looks alike
    # label names are strings (transformers writes "1"): null, true and 1 were made "None", "True" and "1"
    ("id2label", {"0": None, "1": True}, 'id2label["0"] is null; each label is a name, a string'),
    ("id2label", {"0": "neg", "1": 1}, 'id2label["1"] is an integer 1; each label is a name'),
    ("id2label", {"0": "neg", "1": "\u200b"}, 'id2label["1"] is a string "\\u200b"; each label is a name'),
    # transformers' switches that make another function of an encoder's weights
    ("is_decoder", True, "is_decoder is true: a decoder's causal attention"),
    ("add_cross_attention", True, "add_cross_attention is true: cross-attention to an encoder's outputs"),
])
def test_config_from_dict_checks_each_field_type(field, value, message):
    with pytest.raises(InputError) as e:
        SqueezeBertConfig.from_dict({field: value}, source="M/config.json")
    assert str(e.value).startswith("M/config.json: " + message), str(e.value)


@pytest.mark.parametrize("field,value,message", [
    ("layer_norm_eps", -1e-12, "layer_norm_eps is -1e-12; expected a number > 0 and < 1 (e.g. 1e-12)"),
    ("layer_norm_eps", 0, "layer_norm_eps is 0; expected a number > 0 and < 1"),
    ("layer_norm_eps", 0.0, "layer_norm_eps is 0.0; expected a number > 0 and < 1"),
    ("layer_norm_eps", 1, "layer_norm_eps is 1; expected a number > 0 and < 1"),
    ("layer_norm_eps", 1e5, "layer_norm_eps is 100000.0; expected a number > 0 and < 1"),
    ("layer_norm_eps", float("nan"), "layer_norm_eps is NaN (not a finite number); expected a number > 0"),
    ("layer_norm_eps", None, "layer_norm_eps is null; expected a number > 0"),
    ("layer_norm_eps", False, "layer_norm_eps is false (a boolean); expected a number > 0"),
    ("layer_norm_eps", [1e-12], "layer_norm_eps is [1e-12] (a list); expected a number > 0"),
    ("hidden_dropout_prob", 1.0, "hidden_dropout_prob is 1.0; expected a number in [0, 1)"),
    ("hidden_dropout_prob", -0.1, "hidden_dropout_prob is -0.1; expected a number in [0, 1)"),
    ("attention_probs_dropout_prob", 1.5, "attention_probs_dropout_prob is 1.5; expected a number in [0, 1)"),
    ("attention_probs_dropout_prob", float("inf"), "attention_probs_dropout_prob is Infinity (not a finite number)"),
    ("initializer_range", -0.02, "initializer_range is -0.02; expected a number >= 0 (e.g. 0.02)"),
    ("initializer_range", "0.02", 'initializer_range is "0.02" (a string); expected a number >= 0'),
])
def test_config_float_settings_are_range_checked(field, value, message):
    """The float settings as a class: a LayerNorm epsilon in (0, 1), dropout probabilities in [0, 1), an
    initializer_range >= 0; finite numbers all (config.json's NaN / Infinity refused)."""
    with pytest.raises(InputError) as e:
        SqueezeBertConfig.from_dict({field: value}, source="M/config.json")
    assert str(e.value).startswith("M/config.json: " + message), str(e.value)


def test_a_config_error_over_a_field_the_file_leaves_out_says_it_is_the_default():
    """A BERT config labelled squeezebert: transformers' SqueezeBertConfig defaults embedding_size to 768, so the
    error named a 768 the file does not hold."""
    with pytest.raises(InputError) as e:
        SqueezeBertConfig.from_dict({"model_type": "squeezebert", "hidden_size": 32, "num_attention_heads": 4},
                                    source="M/config.json")
    assert str(e.value).startswith("M/config.json: embedding_size (768) must equal hidden_size (32)")
    assert str(e.value).endswith("(M/config.json has no embedding_size: 768 is the default)"), str(e.value)
    with pytest.raises(InputError) as e:  # both written: no note
        SqueezeBertConfig.from_dict({"hidden_size": 32, "embedding_size": 64}, source="M/config.json")
    assert "is the default" not in str(e.value)


@pytest.mark.parametrize("key,field", [("num_hidden_layer", "num_hidden_layers"),
                                       ("hidden_dropout", "hidden_dropout_prob"),
                                       ("layer_norm_epsilon", "layer_norm_eps"), ("Hidden_Act", "hidden_act"),
                                       ("intermediate_group", "intermediate_groups"), ("q_group", "q_groups"),
                                       ("attention_dropout_prob", "attention_probs_dropout_prob")])
def test_a_config_key_that_misspells_a_field_is_refused(key, field):
    """A misspelt field in a config.json left the field at its default without a word (12 layers for a file that
    says 3; dropout 0.1 for one that says 0.2): refused, naming both; every key of transformers' own configs of the six
    families (their bookkeeping: use_cache, classifier_dropout, ...; DistilBERT's dim, n_layers, attention_dropout)
    is no near miss."""
    with pytest.raises(InputError, match=rf"^M/config.json: '{key}' is no setting of a model config; '{field}', "
                                         rf"misspelt\? \(without it {field} would be .*, the default\)$"):
        SqueezeBertConfig.from_dict({"model_type": "squeezebert", key: 3}, source="M/config.json")
    transformers = pytest.importorskip("transformers")
    for name in ("SqueezeBertConfig", "BertConfig", "AlbertConfig", "DistilBertConfig", "ElectraConfig",
                 "MobileBertConfig"):
        theirs = getattr(transformers, name)(vocab_size=64).to_dict()
        SqueezeBertConfig.from_dict(theirs, source=name)
        for key in set(theirs) - {"model_type"}:  # a config without one of its keys (an older transformers)
            model._check_near_misses({k: v for k, v in theirs.items() if k != key}, name)
    # without its model_type a DistilBERT config reads as SqueezeBERT's, whose fields it names its own way
    with pytest.raises(InputError, match=r"^D: 'n_layers' is no setting of a model config; 'num_hidden_layers', "
                                         r"another library's name for it\?"):
        model._check_near_misses({k: v for k, v in transformers.DistilBertConfig().to_dict().items()
                                  if k != "model_type"}, "D")
    # a family's own keys misspelt, in that family's config
    for name, odd, own in (("DistilBertConfig", "n_layer", "n_layers"), ("AlbertConfig", "num_hidden_group",
                                                                         "num_hidden_groups"),
                           ("MobileBertConfig", "normalisation_type", "normalization_type")):
        theirs = getattr(transformers, name)(vocab_size=64).to_dict()
        del theirs[own]
        with pytest.raises(InputError, match=rf"^{name}: '{odd}' is no setting of a model config; '{own}', "
                                             r"misspelt\? \(without it .* would be transformers' default\)$"):
            SqueezeBertConfig.from_dict(theirs | {odd: theirs.get(own, 1)}, source=name)



@pytest.mark.parametrize("key,field", [("num_layers", "num_hidden_layers"), ("n_head", "num_attention_heads"),
                                       ("d_model", "hidden_size"), ("d_ff", "intermediate_size"),
                                       ("n_positions", "max_position_embeddings"), ("Dropout", "hidden_dropout_prob"),
                                       ("activation_function", "hidden_act"), ("embedding_dim", "embedding_size")])
def test_another_librarys_name_for_a_field_is_refused(key, field):
    """GPT-2's, T5's or fairseq's name for a field (num_layers: 3), in a config.json without the field, left it at
    its default (12 layers) without a word: refused, naming both. Beside the field itself, it is another setting."""
    with pytest.raises(InputError, match=rf"^M/config.json: '{key}' is no setting of a model config; '{field}', "
                                         rf"another library's name for it\? \(without it {field} would be .*, the "
                                         r"default\)$"):
        SqueezeBertConfig.from_dict({"model_type": "squeezebert", key: 3}, source="M/config.json")
    model._check_near_misses({"model_type": "squeezebert", key: 3, field: 4}, "M/config.json")


@pytest.mark.parametrize("field,value", [("layer_norm_eps", 1e-5), ("layer_norm_eps", 0.5), ("initializer_range", 0),
                                         ("hidden_dropout_prob", 0), ("attention_probs_dropout_prob", 0.999)])
def test_config_float_settings_in_range_are_taken(field, value):
    assert getattr(SqueezeBertConfig.from_dict({field: value}), field) == value


@pytest.mark.parametrize("value", [False, 0])
def test_an_untied_mlm_decoder_in_config_json_is_refused_and_a_classifier_converts(tmp_path, run_cli, digest, value):
    """tie_word_embeddings false: transformers gives the MLM a decoder of its own (initialised anew, the file holding
    none), ours is the word embeddings: the converted model's MLM outputs were another model's, without a word."""
    src = hf_dir(tmp_path / "hf")
    path = os.path.join(src, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    with open(path, "w") as f:
        json.dump(cfg | {"tie_word_embeddings": value}, f)
    before = digest(src)
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    line = one_error_line(err, "from_pytorch.py")
    assert rc == 1 and f"config.json says tie_word_embeddings {json.dumps(value)}: a SqueezeBertForMaskedLM's MLM " \
                       "decoder here is its word embeddings" in line, line
    assert digest(src) == before and not (tmp_path / "m").exists()
    with pytest.raises(InputError, match="tie_word_embeddings"):
        sj.load_pretrained(src)
    # the encoder under another head reads no decoder: converted
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "enc", "--head",
                              "SqueezeBertModel")
    assert rc == 0, err


def test_from_pytorch_refuses_a_negative_layer_norm_eps(tmp_path, run_cli, digest):
    src = hf_dir(tmp_path / "hf", head="SqueezeBertForSequenceClassification")
    path = os.path.join(src, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    with open(path, "w") as f:
        json.dump(cfg | {"layer_norm_eps": -1e-12}, f)
    before = digest(src)
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    line = one_error_line(err, "from_pytorch.py")
    assert rc == 1 and f"{path}: layer_norm_eps is -1e-12; expected a number > 0 and < 1" in line, line
    assert stdout == "" and digest(src) == before and not (tmp_path / "m").exists()


# -- 5. a misspelt head ------------------------------------------------------------------------------------------------

def test_from_pytorch_head_typo_lists_the_heads(tmp_path, run_cli, digest):
    src = hf_dir(tmp_path / "hf")
    before = digest(src)
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m",
                         "--head", "SqueezeBertForMaskedLm")
    line = one_error_line(err, "from_pytorch.py")
    assert rc == 1 and "unknown --head 'SqueezeBertForMaskedLm' (did you mean SqueezeBertForMaskedLM?)" in line
    assert all(h in line for h in sj.HEADS), line
    assert digest(src) == before and not (tmp_path / "m").exists()


def test_library_head_typo_lists_the_heads(tmp_path):
    src, hf = model_dir(tmp_path / "m"), hf_dir(tmp_path / "hf")
    for call in (lambda: sj.load_pretrained(src, head="SequenceClassification"),
                 lambda: sj.load_pretrained(hf, head="SequenceClassification"),
                 lambda: sj.import_torch(hf, tmp_path / "out", head="SequenceClassification")):
        with pytest.raises(InputError, match=r"unknown head 'SequenceClassification'.*; one of SqueezeBertForMaskedLM"):
            call()
    assert not (tmp_path / "out").exists()


def test_from_pytorch_reports_new_heads_without_info_chatter(tmp_path, run_cli):
    """The console shows WARNING and above; the summary still names the randomly initialised head."""
    src = hf_dir(tmp_path / "hf", head="SqueezeBertModel")
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m",
                              "--head", "SqueezeBertForSequenceClassification")
    assert rc == 0, err
    assert "randomly initialised (absent from source): classifier.weight, classifier.bias" in stdout
    assert "INFO" not in err and "Traceback" not in err
    # --label-names sizes the new classifier (it was refused: "3 label names ... with 2 outputs"), warned once
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m3",
                              "--head", "SqueezeBertForSequenceClassification", "--label-names", "a,b,c")
    assert rc == 0, err
    m3 = sj.load_pretrained(tmp_path / "m3")
    assert m3.num_labels == 3 and m3.config.id2label == {0: "a", 1: "b", 2: "c"}
    assert err.count("randomly initialised") == 1, err


# -- 6. an empty training corpus ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["wordpiece", "sentencepiece"])
@pytest.mark.parametrize("content", ["", "\n  \n\t\n"])
def test_tokenizer_training_refuses_an_empty_corpus(tmp_path, run_cli, digest, kind, content):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(content)
    b.write_text("\n")
    before = digest(a, b)
    rc, stdout, err = run_cli("train/tokenizer.py", "--input", a, b, "--out", tmp_path / "tok", "--vocab_size", "50",
                              "--kind", kind)
    line = one_error_line(err, "tokenizer.py")
    assert rc == 1 and f"no text to train on in {a}, {b}: every file is empty or holds only blank lines" in line
    assert stdout == "" and digest(a, b) == before and not (tmp_path / "tok").exists()
    with pytest.raises(InputError, match=f"no text to train on in {a}: the file is empty"):
        train_tokenizer([a], tmp_path / "tok", 50, kind)


def test_tokenizer_command_line(tmp_path):
    a = tmp_path / "blank.txt"
    a.write_text("\n\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train", "tokenizer.py"), "--input", str(a), "--out",
                        str(tmp_path / "tok"), "--vocab_size", "50"],
                       capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
    line = [x for x in r.stderr.splitlines() if x.startswith("tokenizer.py: error: ")]
    assert r.returncode == 1 and len(line) == 1 and "no text to train on" in line[0], r.stderr
    assert "Traceback" not in r.stderr


# -- 7. a lone surrogate in tokenizer input ----------------------------------------------------------------------------

@pytest.fixture(scope="session")
def tokenizers(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    corpus = d / "corpus.txt"
    corpus.write_text("\n".join(f"the story {i} then it was a story and the end" for i in range(200)) + "\n")
    return [Tokenizer.from_file(d / "vocab.txt"), train_tokenizer([corpus], d / "sp", 40, "sentencepiece")]


@pytest.mark.parametrize("i", [0, 1], ids=["wordpiece", "sentencepiece"])
def test_lone_surrogate_is_named(tokenizers, i):
    tok = tokenizers[i]
    with pytest.raises(InputError, match=r"^text 'ab\\ud800c' has a lone surrogate '\\ud800' at character 2, "):
        tok.tokenize("ab\ud800c")
    with pytest.raises(InputError, match=r"^text 'a\\udfff' has a lone surrogate '\\udfff' at character 1"):
        tok.encode("a\udfff")
    with pytest.raises(InputError, match=r"^texts\[2\] 'the \\ud800' has a lone surrogate '\\ud800' at character 4"):
        tok.encode_batch(["the", "story", "the \ud800"])
    with pytest.raises(InputError, match=r"^text_pairs\[1\] \.\.\.'.*\\ud800.*'\.\.\. has a lone surrogate "
                                         r"'\\ud800' at character 90"):
        tok.encode_batch(["the", "a"], ["it", "it " * 30 + "\ud800" + " was" * 30])
    assert tok.encode("the story")["input_ids"][0] == tok.cls_id  # valid text is unaffected


# -- 8. weights that are not floating-point numbers --------------------------------------------------------------------

@pytest.mark.parametrize("dtype,bad", [("int64", None), ("bool", None), ("float32", float("nan")),
                                       ("float32", float("-inf"))])
def test_from_pytorch_refuses_non_float_or_non_finite_weights(tmp_path, run_cli, digest, dtype, bad):
    """An integer or bool tensor where a weight belongs is not cast to float without a word, and NaN / inf weights
    do not convert: one line names the file, the tensor (its transformers name) and its dtype or bad-value count."""
    from safetensors.numpy import load_file, save_file

    src = hf_dir(tmp_path / "hf")
    path = os.path.join(src, "model.safetensors")
    sd = load_file(path)
    key = "transformer.encoder.layers.0.attention.query.weight"
    x = sd[key].astype(dtype)
    if bad is not None:
        x.flat[[1, 4]] = bad
    save_file(sd | {key: x}, path, metadata={"format": "pt"})
    before = digest(src)
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    line = one_error_line(err, "from_pytorch.py")
    what = f"has dtype {dtype}, not a floating-point one" if bad is None else \
        f"holds 2 {'NaN' if bad != bad else 'inf'} of its {x.size:,} values"
    assert rc == 1 and f"{path}: tensor {key} {what}" in line, line
    assert stdout == "" and digest(src) == before and not (tmp_path / "m").exists()


# -- 9. checkpoint files linked out of their directory -----------------------------------------------------------------

def _link_out(src: str, name: str, tmp_path, content: bytes | None = None) -> str:
    """Move (or write) ``name`` outside ``src`` and leave a symlink to it in its place; returns the outside path."""
    outside = tmp_path / "elsewhere" / name
    outside.parent.mkdir(exist_ok=True)
    if content is None:
        os.replace(os.path.join(src, name), outside)
    else:
        outside.write_bytes(content)
    os.symlink(outside, os.path.join(src, name))
    return str(outside)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json"])
def test_a_transformers_file_linked_out_of_the_directory_is_refused(tmp_path, name):
    """Every file read from a checkpoint goes through one resolver (tokenizer.checkpoint_file): one whose real path
    is outside the directory is refused by name, whatever it is (even a well-formed file)."""
    src = hf_dir(tmp_path / "hf")
    outside = _link_out(src, name, tmp_path, b'{"do_lower_case": true}' if name == "tokenizer_config.json" else None)
    msg = f"{os.path.join(src, name)} resolves to {outside}, outside the checkpoint directory {src}"
    calls = [lambda: sj.import_torch(src, tmp_path / "m")]
    if name in ("config.json", "model.safetensors"):
        calls.append(lambda: sj.load_pretrained(src))
    else:
        calls += [lambda: Tokenizer.from_dir(src),
                  lambda: sj.save_pretrained(sj.SqueezeBertModel(SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0)),
                                             tmp_path / "m", tokenizer_dir=src)]
    for call in calls:
        with pytest.raises(InputError) as e:
            call()
        assert str(e.value).startswith(msg), str(e.value)
    assert not (tmp_path / "m").exists()


def test_to_pytorch_refuses_a_vocab_linked_to_etc_passwd(tmp_path, run_cli, digest):
    src = model_dir(tmp_path / "m")
    os.remove(os.path.join(src, "vocab.txt"))
    target = "/etc/passwd" if os.path.isfile("/etc/passwd") else _link_out(src, "x", tmp_path, b"secret\n")
    os.symlink(target, os.path.join(src, "vocab.txt"))
    params = os.path.join(src, "params.safetensors")
    before = digest(params, os.path.join(src, "config.json"))
    rc, stdout, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", tmp_path / "hf")
    line = one_error_line(err, "to_pytorch.py")
    assert rc == 1 and f"{src}/vocab.txt resolves to {os.path.realpath(target)}, outside the checkpoint" in line, line
    assert not (tmp_path / "hf").exists() and digest(params, os.path.join(src, "config.json")) == before
    os.remove(os.path.join(src, "vocab.txt"))  # MODEL_DIR's weights linked out: refused as well
    os.replace(params, tmp_path / "params.safetensors")
    os.symlink(tmp_path / "params.safetensors", params)
    with pytest.raises(InputError, match=f"^{params} resolves to {tmp_path / 'params.safetensors'}, outside"):
        sj.load_pretrained(src)


def test_links_inside_the_directory_and_a_hub_cache_snapshot_are_followed(tmp_path):
    """A symlink that stays inside the directory, ``..`` that comes back into it, a directory reached through a
    symlink, and the Hugging Face hub cache's layout (snapshots/REV/FILE -> ../../blobs/HASH) all load; a relative
    link that climbs out does not."""
    src = hf_dir(tmp_path / "hf")
    os.mkdir(os.path.join(src, "tok"))
    os.replace(os.path.join(src, "vocab.txt"), os.path.join(src, "tok", "vocab.txt"))
    os.symlink("tok/vocab.txt", os.path.join(src, "vocab.txt"))
    os.replace(os.path.join(src, "config.json"), os.path.join(src, "tok", "config.json"))
    os.symlink(os.path.join("..", "hf", "tok", "config.json"), os.path.join(src, "config.json"))
    os.symlink(src, tmp_path / "via_link")
    sj.import_torch(tmp_path / "via_link", tmp_path / "m")
    copied = tmp_path / "m" / "vocab.txt"
    assert not os.path.islink(copied) and copied.read_text().split() == VOCAB
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    for i, name in enumerate(sorted(os.listdir(tmp_path / "m"))):
        os.replace(tmp_path / "m" / name, repo / "blobs" / f"hash{i}")
        os.symlink(f"../../blobs/hash{i}", repo / "snapshots" / "abc123" / name)
    assert type(sj.load_pretrained(repo / "snapshots" / "abc123")).__name__ == "SqueezeBertForMaskedLM"
    assert Tokenizer.from_dir(repo / "snapshots" / "abc123").vocab_size == len(VOCAB)
    os.remove(os.path.join(src, "vocab.txt"))
    (tmp_path / "other").mkdir()
    os.replace(os.path.join(src, "tok", "vocab.txt"), tmp_path / "other" / "vocab.txt")
    os.symlink(os.path.join("..", "other", "vocab.txt"), os.path.join(src, "vocab.txt"))
    with pytest.raises(InputError, match="outside the checkpoint directory"):
        Tokenizer.from_dir(src)


# -- 10. a vocab.txt the model cannot use ------------------------------------------------------------------------------

@pytest.mark.parametrize("lines,message", [
    ([t for t in VOCAB if t != "[MASK]"], r"lacks the special token\(s\) \[MASK\]"),
    ([t for t in VOCAB if t not in ("[CLS]", "[PAD]")], r"lacks the special token\(s\) \[PAD\], \[CLS\]"),
    (VOCAB + ["story"], r"line 13 repeats token 'story' of line 8"),
    # a token holding white space never matches (the pre-tokenizer splits there); a word-count file's lines hold tabs
    (VOCAB[:8] + ["gr\teat"] + VOCAB[9:], r"line 9: token 'gr\\teat' holds white space \('\\t'\), where the "
                                         r"tokenizer splits words"),
    ([t + "\t7" for t in VOCAB], r"line 1: token '\[PAD\]\\t7' holds white space .*a word-count file"),
    (VOCAB[:8] + ["\xa0story"] + VOCAB[9:], r"line 9: token '\\xa0story' holds white space \('\\xa0'\)"),
    (VOCAB[:6] + ["", ""] + VOCAB[6:], r"line 8 is blank, as is line 7"),
    (VOCAB + ["extra"], r"13 tokens, but the model's vocab_size is 12: ids past 11 would have no "
                                            "embedding"),
    (VOCAB[:6] + [""] + VOCAB[6:], r"13 tokens, but the model's vocab_size is 12: .*\(line 7 is blank, a token of "
                                   r"its own: a line added by mistake\?\)"),
    # BertTokenizerFast keeps a byte-order mark: its first token would be "\ufeff[PAD]", not [PAD]
    (["\ufeff" + VOCAB[0]] + VOCAB[1:], r"line 1 starts with a byte-order mark, which BertTokenizerFast reads as "
                                         r"part of its first token"),
])
def test_from_pytorch_refuses_a_vocab_the_model_cannot_use(tmp_path, run_cli, digest, lines, message):
    """The vocabulary is read by its one reader (tokenizer.read_vocab) before a conversion copies it on; a refused one
    leaves no --out behind."""
    src = hf_dir(tmp_path / "hf")
    vocab = os.path.join(src, "vocab.txt")
    with open(vocab, "w") as f:
        f.write("\n".join(lines) + "\n")
    before = digest(src)
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    line = one_error_line(err, "from_pytorch.py")
    assert rc == 1 and re.search(f"{re.escape(vocab)}: .*{message}", line), line
    assert stdout == "" and digest(src) == before and not (tmp_path / "m").exists()


def test_a_tokenizer_json_that_is_not_the_vocab_txt_is_refused_both_ways(tmp_path, run_cli, digest):
    """transformers reads tokenizer.json, this library vocab.txt: two vocabularies would encode text two ways."""
    src = hf_dir(tmp_path / "hf")
    import transformers

    transformers.BertTokenizerFast(os.path.join(src, "vocab.txt")).save_pretrained(tmp_path / "tok")
    doc = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())
    (a, i), (b, j) = list(doc["model"]["vocab"].items())[-2:]
    doc["model"]["vocab"] |= {a: j, b: i}
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(doc))
    before = digest(src)
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    line = one_error_line(err, "from_pytorch.py")
    assert rc == 1 and f"tokenizer.json: its vocabulary differs from {src}/vocab.txt (token " in line, line
    assert re.search(r"\(token '.*': id \d+ there, id \d+ in vocab.txt\)", line), line
    assert digest(src) == before and not (tmp_path / "m").exists()
    doc["model"]["vocab"] |= {a: i, b: j, "zzzextra": len(doc["model"]["vocab"])}  # a token vocab.txt lacks
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(doc))
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    assert rc == 1 and "(token 'zzzextra': id 12 there, absent in vocab.txt)" in one_error_line(err, "from_pytorch.py")
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(doc | {"model": doc["model"] | {"vocab": {
        k: v for k, v in doc["model"]["vocab"].items() if k != "zzzextra"}}}))
    doc["model"] = {"type": "BPE", "vocab": {}, "merges": []}
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(doc))
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    assert rc == 1 and "tokenizer.json: a BPE model beside" in one_error_line(err, "from_pytorch.py")
    (tmp_path / "hf" / "tokenizer.json").unlink()  # the same vocabulary: converted, tokenizer.json carried along
    (tmp_path / "tok" / "tokenizer.json").rename(tmp_path / "hf" / "tokenizer.json")
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    assert rc == 0 and (tmp_path / "m" / "tokenizer.json").exists(), err


@pytest.mark.parametrize("name, text, message", [
    # what Tokenizer.from_dir would refuse in the converted MODEL_DIR: refused before it is written
    ("tokenizer_config.json", '{"do_lower_case": "false"}', r"do_lower_case is a string \"false\"; expected true or "
                                                           r"false"),
    ("tokenizer_config.json", '{"do_lower_case": false}', r"do_lower_case is false \(a cased model\)"),
    ("tokenizer_config.json", '{"do_lower_case": }', r"not valid JSON \(Expecting value\)"),
    # tokens vocab.txt lacks: transformers would add them, ids past the model's embeddings
    ("special_tokens_map.json", '{"unk_token": "[UNKNOWN]"}', r"unk_token '\[UNKNOWN\]' is not a token of .*vocab.txt"),
    ("special_tokens_map.json", '{"additional_special_tokens": ["[CLS]", {"content": "<x>"}]}',
     r"additional_special_tokens '<x>' is not a token of"),
    ("special_tokens_map.json", '{"mask_token": 4}', r"mask_token is an integer 4, not a token"),
])
def test_tokenizer_side_files_the_model_dir_could_not_use_are_refused(tmp_path, run_cli, digest, name, text, message):
    src = hf_dir(tmp_path / "hf")
    (tmp_path / "hf" / name).write_text(text)
    before = digest(src)
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    line = one_error_line(err, "from_pytorch.py")
    assert rc == 1 and re.search(f"{re.escape(os.path.join(src, name))}(:1:19)?: {message}", line), line
    assert stdout == "" and digest(src) == before and not (tmp_path / "m").exists()
    (tmp_path / "hf" / name).write_text('{"do_lower_case": true}' if name.startswith("tokenizer") else
                                        '{"unk_token": "[UNK]", "mask_token": {"content": "[MASK]"}}')
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    assert rc == 0 and (tmp_path / "m" / name).exists(), err


def test_from_pytorch_without_a_tokenizer_file_is_refused_unless_asked(tmp_path, run_cli, digest):
    """... and a fast tokenizer's tokenizer.json alone (not read here) is named, with how to write the vocabulary."""
    src = hf_dir(tmp_path / "hf")
    os.remove(os.path.join(src, "vocab.txt"))
    with open(os.path.join(src, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "WordPiece", "vocab": {"[PAD]": 0}}}')
    before = digest(src)
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m")
    line = one_error_line(err, "from_pytorch.py")
    assert rc == 1 and f"--src {src}: no tokenizer file (vocab.txt, " in line and "--no-tokenizer" in line, line
    assert "(its tokenizer.json, a fast tokenizer's file, is not read here: transformers writes the vocabulary " in line
    assert digest(src) == before and not (tmp_path / "m").exists()
    rc, stdout, err = run_cli("convert/from_pytorch.py", "--src", src, "--out", tmp_path / "m", "--no-tokenizer")
    assert rc == 0 and (tmp_path / "m" / "params.safetensors").exists() and not (tmp_path / "m" / "vocab.txt").exists()


def test_distilbert_weights_under_another_family_are_refused(tmp_path, run_cli, digest):
    """DistilBERT's weights have no token-type embeddings (type_vocab_size 0); with config.json's family set to
    ELECTRA they loaded, and to_pytorch.py wrote an ElectraForMaskedLM whose first forward failed in transformers."""
    cfg = SqueezeBertConfig.preset("distilbert-base-uncased", vocab_size=12, hidden_size=32, embedding_size=32,
                                   num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                                   max_position_embeddings=16)
    src = tmp_path / "d"
    sj.save_pretrained(sj.SqueezeBertForMaskedLM(cfg, rngs=nnx.Rngs(0)), src)
    config = json.loads((src / "config.json").read_text())
    assert config["family"] == "distilbert"
    (src / "config.json").write_text(json.dumps(config | {"family": "electra"}))
    before = digest(src)
    rc, stdout, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", tmp_path / "out")
    line = one_error_line(err, "to_pytorch.py")
    assert rc == 1 and "type_vocab_size is 0 (no token-type embeddings" in line and "family 'electra'" in line, line
    assert digest(src) == before and not (tmp_path / "out").exists()


def test_a_model_dirs_bad_vocab_is_refused_before_anything_is_written(tmp_path):
    src = model_dir(tmp_path / "m")
    (tmp_path / "m" / "vocab.txt").write_text("\n".join(VOCAB[1:]) + "\n")  # no [PAD]
    model = sj.load_pretrained(src)
    for call in (lambda: sj.export_torch(model, tmp_path / "hf", tokenizer_dir=src),
                 lambda: sj.save_pretrained(model, tmp_path / "copy", tokenizer_dir=src)):
        with pytest.raises(InputError, match=r"vocab.txt: vocab.txt lacks the special token\(s\) \[PAD\]"):
            call()
    assert not (tmp_path / "hf").exists() and not (tmp_path / "copy").exists()
    # a tokenizer_dir that is not there saved the model without a vocabulary; one of more tokens than the model has
    # embeddings was saved, and refused only when the MODEL_DIR was used
    for write in (sj.save_pretrained, sj.export_torch):  # export_torch wrote a checkpoint without one, silently
        with pytest.raises(InputError, match=r"^tokenizer_dir='.*nope': no such directory; give the directory"):
            write(model, tmp_path / "copy", tokenizer_dir=str(tmp_path / "nope"))
    # the API's other arguments, as a notebook passes them: one line naming the argument, not os's TypeError
    for call, msg in ((lambda: sj.export_torch(model, b"/tmp/x"), r"^hf_dir is bytes"),
                      (lambda: sj.export_torch(model, 5), r"^hf_dir is int 5"),
                      (lambda: sj.import_torch(b"/tmp/x", tmp_path / "y"), r"^hf_dir is bytes"),
                      (lambda: sj.import_torch(src, None), r"^model_dir is NoneType"),
                      (lambda: sj.save_pretrained("abc", tmp_path / "copy"), r"^model is str 'abc', not a model of "
                                                                            r"this library"),
                      (lambda: sj.save_pretrained(model, tmp_path / "copy", overwrite="yes"),
                       r"^overwrite='yes': expected True or False"),
                      (lambda: sj.load_pretrained(src, num_labels=3),
                       r"^num_labels=3: .* holds a SqueezeBertForMaskedLM, which has no classifier")):
        with pytest.raises(InputError, match=msg):
            call()
    (tmp_path / "m" / "vocab.txt").write_text("\n".join(VOCAB + [f"extra{i}" for i in range(6)]) + "\n")
    with pytest.raises(InputError, match=rf"vocab.txt: {len(VOCAB) + 6} tokens, but the model's vocab_size is "
                                         rf"{model.config.vocab_size}"):
        sj.save_pretrained(model, tmp_path / "copy", tokenizer_dir=src)
    assert not (tmp_path / "copy").exists()


def test_a_glue_models_task_goes_through_conversion_both_ways(tmp_path, run_cli):
    """A GLUE model's task (task.json's glue_task) is written where transformers' run_glue writes it (config.json's
    finetuning_task) and read back from there into the converted MODEL_DIR's task.json; a transformers checkpoint
    naming its task is scored on no other task, and predict gives it that task's number of texts (an MRPC model took
    one text; an SST-2 model lost its task through to_pytorch and from_pytorch, then was scored on CoLA)."""
    from squeezebert_jax.predict import Predictor

    src = model_dir(tmp_path / "sst2", "SqueezeBertForSequenceClassification")
    card = {"kind": "classification", "text_columns": ["sentence"], "glue_task": "sst2"}
    (tmp_path / "sst2" / "task.json").write_text(json.dumps(card))
    rc, _, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", tmp_path / "hf")
    assert rc == 0, err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["finetuning_task"] == "sst2"
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", tmp_path / "hf", "--out", tmp_path / "back")
    assert rc == 0 and json.loads((tmp_path / "back" / "task.json").read_text()) == card, err
    assert json.loads((tmp_path / "hf" / "task.json").read_text()) == card  # beside it, as to_pytorch writes it
    hf = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps(hf | {"finetuning_task": "mrpc"}))
    with pytest.raises(InputError, match=r"task.json: 'glue_task' is 'sst2', but config.json's finetuning_task is "
                                         r"'mrpc': which task"):
        Predictor(str(tmp_path / "hf"))
    os.remove(tmp_path / "hf" / "task.json")  # transformers' run_glue writes none: config.json's task alone
    with pytest.raises(InputError, match=r"^the input holds 1 text; this model reads a pair of texts"):
        Predictor(str(tmp_path / "hf"))("a story")
    assert set(Predictor(str(tmp_path / "hf"))(("a story", "the story"))) == {"label", "probabilities"}


def test_a_round_trip_through_transformers_keeps_the_task_card(tmp_path, run_cli, digest):
    """to_pytorch writes the MODEL_DIR's task.json beside the checkpoint (transformers ignores it) and from_pytorch
    takes it back: a multiple-choice model's text and ending columns came back missing, and predict read ``sent2`` as
    one more ending. A card of another kind of model beside the checkpoint is refused by name."""
    src = tmp_path / "mc"
    sj.save_pretrained(sj.HEADS["SqueezeBertForMultipleChoice"](SqueezeBertConfig(**TINY), rngs=nnx.Rngs(0)), src)
    (src / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    card = {"kind": "multiple_choice", "text_columns": ["sent1", "sent2"], "choice_columns": ["ending0", "ending1"]}
    (src / "task.json").write_text(json.dumps(card))
    rc, _, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", tmp_path / "hf")
    assert rc == 0 and json.loads((tmp_path / "hf" / "task.json").read_text()) == card, err
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", tmp_path / "hf", "--out", tmp_path / "back")
    assert rc == 0 and json.loads((tmp_path / "back" / "task.json").read_text()) == card, err
    from squeezebert_jax.predict import Predictor

    assert Predictor(str(tmp_path / "back")).columns == "sent1,sent2,ending0,ending1"
    # the export again over its own directory: its task.json is this export's file, not another model's
    rc, _, err = run_cli("convert/to_pytorch.py", "--src", src, "--out", tmp_path / "hf", "--overwrite")
    assert rc == 0, err
    (tmp_path / "hf" / "task.json").write_text(json.dumps({"kind": "token_classification", "text_columns": ["t"]}))
    before = digest(tmp_path)
    rc, _, err = run_cli("convert/from_pytorch.py", "--src", tmp_path / "hf", "--out", tmp_path / "back2")
    assert rc == 1 and "task.json: 'kind' is 'token_classification', but" in one_error_line(err, "from_pytorch.py")
    assert digest(tmp_path) == before and not (tmp_path / "back2").exists()
    # a new head of another kind asked for (--head): the card is the saved head's, left behind with a note (it was
    # blamed as "the task.json of another model")
    (tmp_path / "hf" / "task.json").write_text(json.dumps(card))
    rc, out, err = run_cli("convert/from_pytorch.py", "--src", tmp_path / "hf", "--out", tmp_path / "back3", "--head",
                           "SqueezeBertForSequenceClassification")
    assert rc == 0 and "describes the checkpoint's own head, not --head SqueezeBertForSequenceClassification: not " \
                       "carried" in out and not (tmp_path / "back3" / "task.json").exists(), err
