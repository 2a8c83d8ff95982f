"""GLUE fine-tuning and evaluation as a user meets them (issue 11): a refused run prints one line naming what is wrong,
exits 1 and changes nothing on disk -- a tokenizer larger than the model's vocabulary, an empty or header-less GLUE
file, a model without a classifier head, a misspelt task."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from flax import nnx

import squeezebert_jax as sj
from squeezebert_jax import corpus, distill, glue, inference
from squeezebert_jax import finetune as ft
from squeezebert_jax.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "story", "then", "and", "was", "it"]


def model_dir(path, head="SqueezeBertForSequenceClassification", vocab_size=len(VOCAB), **kw):
    cfg = sj.SqueezeBertConfig(vocab_size=vocab_size, hidden_size=16, embedding_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    sj.save_pretrained(sj.HEADS[head](cfg, rngs=nnx.Rngs(0), **kw), path)
    (path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return str(path)


@pytest.fixture
def data(tmp_path):
    return corpus.write_glue_tasks(tmp_path / "glue_data", num_train=8, num_dev=4, num_test=4, tasks=("rte",))


def one_error_line(err: str, prog: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    return lines[0]


# -- 1. a tokenizer with more ids than the model's vocab_size ------------------------------------------------------

def test_eval_refuses_a_tokenizer_larger_than_the_vocab(tmp_path, data, run_cli, digest):
    small = model_dir(tmp_path / "small", vocab_size=len(VOCAB) - 4)
    before = digest(small, data)
    rc, out, err = run_cli("eval/glue.py", "--model", small, "--task", "rte", "--data_dir", data)
    line = one_error_line(err, "glue.py")
    assert rc == 1 and small in line and f"has {len(VOCAB)} ids" in line and f"vocab_size is {len(VOCAB) - 4}" in line
    assert digest(small, data) == before and out == ""


def test_finetune_cli_refuses_a_tokenizer_larger_than_the_vocab(tmp_path, data, digest):
    """Through `python train/finetune.py` (absl): one line, exit 1, nothing written: the new workdir (made for its
    log file) is taken away again."""
    small = model_dir(tmp_path / "small", "SqueezeBertForPreTraining", vocab_size=len(VOCAB) - 4)
    before, wd = digest(small, data), tmp_path / "run"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train", "finetune.py"),
                        "--config", os.path.join(ROOT, "train", "configs", "glue.py") + ":rte",
                        "--config.init_from", small, "--config.data_dir", data, "--config.max_seq_length=16",
                        "--workdir", str(wd)],
                       capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}, timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    # (the CUDA plugin of the gpu-aot extra prints its own C++ lines at import; every Python line is ours)
    native = (r"^(WARNING: All log messages before absl::InitializeLog\(\) is called.*"
              r"|[IWE]\d{4} [\d:.]+ +\d+ \S+\] .*)\n")
    line = one_error_line(re.sub(native, "", r.stderr, flags=re.M), "finetune.py")
    assert small in line and f"vocab_size is {len(VOCAB) - 4}" in line
    assert digest(small, data) == before and not wd.exists()


def test_finetune_refuses_a_teacher_whose_tokenizer_is_larger_than_its_vocab(tmp_path, data):
    init = model_dir(tmp_path / "init", "SqueezeBertForPreTraining")
    teacher = model_dir(tmp_path / "teacher", vocab_size=len(VOCAB) - 2)
    c = _config("rte", init, data)
    c.distill.teacher = teacher
    with pytest.raises(InputError, match=rf"^teacher {teacher}: its tokenizer has {len(VOCAB)} ids but the model's "
                                         rf"vocab_size is {len(VOCAB) - 2}"):
        ft.finetune(c, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_finetune_refuses_a_max_seq_length_past_the_position_table(tmp_path, data):
    c = _config("rte", model_dir(tmp_path / "init", "SqueezeBertForPreTraining"), data)
    c.max_seq_length = 64
    with pytest.raises(InputError, match=rf"^max_seq_length 64 is more than the max_position_embeddings 32 of "
                                         rf"{tmp_path / 'init'}: set max_seq_length <= 32"):
        ft.finetune(c, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def _config(task, init_from, data_dir):
    from conftest import load_script

    c = load_script("train/configs/glue.py").get_config(task)
    c.init_from, c.data_dir, c.progress, c.max_seq_length, c.num_epochs = init_from, data_dir, False, 16, 1
    return c


# -- 2. and 3. an empty split; a file without its header row ------------------------------------------------------

def test_eval_refuses_a_dev_file_with_only_its_header(tmp_path, data, run_cli, digest):
    model = model_dir(tmp_path / "model")
    dev = os.path.join(data, "RTE", "dev.tsv")
    with open(dev) as f:
        header = f.readline()
    with open(dev, "w") as f:
        f.write(header)
    before = digest(model, data)
    rc, out, err = run_cli("eval/glue.py", "--model", model, "--task", "rte", "--data_dir", data)
    line = one_error_line(err, "glue.py")
    assert rc == 1 and f"{dev}: no examples for rte validation (only a header row)" in line
    assert digest(model, data) == before and "nan" not in out.lower()


def test_eval_refuses_a_dev_file_without_its_header(tmp_path, data, run_cli, digest):
    model = model_dir(tmp_path / "model")
    dev = os.path.join(data, "RTE", "dev.tsv")
    with open(dev) as f:
        rows = f.read().splitlines()[1:]
    with open(dev, "w") as f:
        f.write("\n".join(rows) + "\n")
    before = digest(model, data)
    rc, out, err = run_cli("eval/glue.py", "--model", model, "--task", "rte", "--data_dir", data)
    line = one_error_line(err, "glue.py")
    assert rc == 1 and f"{dev}:1: not a rte validation header row" in line
    assert "expected columns 'index', 'sentence1', 'sentence2', 'label'" in line and "header row missing" in line
    assert digest(model, data) == before


@pytest.mark.parametrize("task", sorted(glue.TASKS))
def test_every_headed_glue_file_without_its_header_is_refused(tmp_path, task):
    """Every split of every task in GLUE's layout loads; with its header line removed it is refused by name (CoLA's
    train/dev files have no header and load either way)."""
    spec = glue.get_task(task)
    for split in spec.splits:
        ex = [glue.GlueExample(i, f"text {i}", None if len(spec.text_columns) == 1 else f"other {i}",
                               None if split.startswith("test") else 2.5 if spec.is_regression else i % 2)
              for i in range(3)]
        path = glue.write_glue_tsv(task, split, ex, str(tmp_path))
        assert len(glue.load_examples(task, split, data_dir=str(tmp_path))) == 3
        lines = open(path).read().splitlines()
        if not spec.layouts[split].header:
            continue
        with open(path, "w") as f:
            f.write("\n".join(lines[1:]) + "\n")
        with pytest.raises(glue.GlueFormatError, match=rf"^{path}:1: not a {task} {split} header row"):
            glue.load_examples(task, split, data_dir=str(tmp_path))


def test_the_header_check_reads_only_the_columns_used(tmp_path):
    """Columns the reader does not take may be named anything (MNLI's parses, extra label columns); a read column
    with another name is refused; the case of a name and a byte-order mark do not matter."""
    d = tmp_path / "MNLI"
    d.mkdir()
    (d / "dev_matched.tsv").write_text(
        "index\tp\tq\tgenre\tx\tx\tx\tx\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
        "3\t-\t-\t-\t-\t-\t-\t-\tA\tB\tneutral\tneutral\t\t\t\tneutral\n")
    assert [e.idx for e in glue.load_examples("mnli", "dev_matched", data_dir=str(tmp_path))] == [3]
    (tmp_path / "SST-2").mkdir()
    (tmp_path / "SST-2" / "dev.tsv").write_bytes("\ufeffSentence\tLABEL\nit was\t1\n".encode())
    assert len(glue.load_examples("sst2", "validation", data_dir=str(tmp_path))) == 1
    (tmp_path / "SST-2" / "dev.tsv").write_text("text\tlabel\nit was\t1\n")
    with pytest.raises(glue.GlueFormatError, match=r"expected columns 'sentence', 'label', found 'text', 'label'"):
        glue.load_examples("sst2", "validation", data_dir=str(tmp_path))


def test_empty_splits_are_refused_by_name(tmp_path):
    (tmp_path / "CoLA").mkdir()
    (tmp_path / "CoLA" / "dev.tsv").write_text("\n")  # header-less: no rows at all
    with pytest.raises(glue.GlueFormatError, match=r"dev.tsv: no examples for cola validation \(no rows\)"):
        glue.load_examples("cola", "dev", data_dir=str(tmp_path))
    (tmp_path / "RTE").mkdir()
    (tmp_path / "RTE" / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\tA\tB\tmaybe\n")
    with pytest.raises(glue.GlueFormatError, match=r"no examples for rte train \(all 1 rows are malformed"):
        glue.load_examples("rte", "train", data_dir=str(tmp_path), skip_malformed=True)


# -- 4. a model without a classifier head -------------------------------------------------------------------------

@pytest.mark.parametrize("task", ["rte", "all"])
def test_eval_refuses_a_model_without_a_classifier_head(tmp_path, data, run_cli, digest, task):
    pre = model_dir(tmp_path / "pre", "SqueezeBertForPreTraining")
    before = digest(pre, data)
    rc, out, err = run_cli("eval/glue.py", "--model", pre, "--task", task, "--data_dir", data)
    line = one_error_line(err, "glue.py")
    assert rc == 1 and f"{pre}: the model (SqueezeBertForPreTraining) has no sequence-classifier head" in line
    assert "train/finetune.py" in line and "convert/from_pytorch.py --head SqueezeBertForSequenceClassification" in line
    assert "None outputs" not in line and digest(pre, data) == before


def test_a_classifier_of_your_own_files_is_scored_only_on_a_task_it_reads(tmp_path, data, run_cli, digest):
    """A classifier fine-tuned on your own files says in task.json what it reads: on RTE's pairs, one that reads one
    text (it would read each pair as one text) or a multilabel one is refused by name, for evaluation, test
    predictions and as a teacher; one that reads a pair is scored. So is a classifier whose outputs are named for
    another task."""
    one = model_dir(tmp_path / "one", num_labels=2)
    (tmp_path / "one" / "task.json").write_text('{"kind": "classification", "text_columns": ["review"]}')
    multi = model_dir(tmp_path / "multi", num_labels=2)
    (tmp_path / "multi" / "task.json").write_text('{"kind": "multilabel", "text_columns": ["a", "b"]}')
    before = digest(one, multi, data)
    for predict in ((), ("--predict", "test", "--out", str(tmp_path / "out"))):
        rc, _, err = run_cli("eval/glue.py", "--model", one, "--task", "rte", "--data_dir", data, *predict)
        assert rc == 1 and one_error_line(err, "glue.py").endswith(
            f"{one}: its task.json says the model reads 1 text (review); rte gives 2 (sentence1, sentence2): a model "
            "fine-tuned on rte's kind of input reads it")
        rc, _, err = run_cli("eval/glue.py", "--model", multi, "--task", "rte", "--data_dir", data, *predict)
        assert rc == 1 and one_error_line(err, "glue.py").endswith(
            f"{multi}: its task.json says a multilabel model; rte is a classification task")
    ex = glue.load_examples("rte", "train", data_dir=data)
    with pytest.raises(InputError, match=rf"^teacher {one}: its task.json says the model reads 1 text"):
        distill.teacher_logits(one, "rte", "train", ex, 16, str(tmp_path / "cache"))
    assert digest(one, multi, data) == before and not (tmp_path / "out").exists()
    # a GLUE model says which task it was fine-tuned on (its task.json, as fine-tuning writes it): SST-2's on RTE
    (tmp_path / "one" / "task.json").write_text('{"kind": "classification", "text_columns": ["sentence"], '
                                                '"glue_task": "sst2"}')
    rc, _, err = run_cli("eval/glue.py", "--model", one, "--task", "rte", "--data_dir", data)
    assert rc == 1 and one_error_line(err, "glue.py").endswith(
        f"{one}: its task.json says the model was fine-tuned on sst2, not rte: score a model fine-tuned on rte")
    # a checkpoint transformers' run_glue fine-tuned names its task in config.json (finetuning_task)
    (tmp_path / "one" / "task.json").unlink()
    cfg = json.loads((tmp_path / "one" / "config.json").read_text())
    (tmp_path / "one" / "config.json").write_text(json.dumps(cfg | {"finetuning_task": "sst-2"}))
    rc, _, err = run_cli("eval/glue.py", "--model", one, "--task", "rte", "--data_dir", data)
    assert rc == 1 and one_error_line(err, "glue.py").endswith(
        f"{one}: its config.json (finetuning_task 'sst-2') says the model was fine-tuned on sst2, not rte: score a "
        "model fine-tuned on rte")
    (tmp_path / "one" / "config.json").write_text(json.dumps(cfg | {"finetuning_task": "RTE"}))
    rc, _, err = run_cli("eval/glue.py", "--model", one, "--task", "rte", "--data_dir", data)
    assert rc == 0, err
    # a classifier whose outputs are named for another task (sentiment's neg, pos on RTE): another task's scores
    named = model_dir(tmp_path / "named", num_labels=2)
    cfg = json.loads((tmp_path / "named" / "config.json").read_text())
    cfg.update(id2label={"0": "neg", "1": "pos"}, label2id={"neg": 0, "pos": 1})
    (tmp_path / "named" / "config.json").write_text(json.dumps(cfg))
    rc, _, err = run_cli("eval/glue.py", "--model", named, "--task", "rte", "--data_dir", data)
    assert rc == 1 and one_error_line(err, "glue.py").endswith(
        f"{named}: the classifier's outputs are named neg, pos, not rte's labels entailment, not_entailment: a model "
        "of another task? If they do mean entailment, not_entailment in this order, write those names in its "
        "config.json's id2label")
    (tmp_path / "one" / "task.json").write_text('{"kind": "classification", "text_columns": ["premise", "claim"]}')
    rc, out, err = run_cli("eval/glue.py", "--model", one, "--task", "rte", "--data_dir", data)
    assert rc == 0 and "rte" in out, err


def test_a_teacher_without_a_classifier_head_is_refused(tmp_path, data):
    teacher = model_dir(tmp_path / "teacher", "SqueezeBertModel")
    ex = glue.load_examples("rte", "train", data_dir=data)
    with pytest.raises(inference.NoClassifierError, match=rf"^teacher {teacher}: the model \(SqueezeBertModel\) has no"):
        distill.teacher_logits(teacher, "rte", "train", ex, 16, str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


# -- 5. a misspelt task -------------------------------------------------------------------------------------------

def test_eval_names_the_valid_tasks_for_a_typo(tmp_path, run_cli):
    rc, out, err = run_cli("eval/glue.py", "--model", str(tmp_path), "--task", "rtee")
    line = one_error_line(err, "glue.py")
    assert rc == 1 and "--task: unknown GLUE task 'rtee'; known: ax, cola, mnli" in line and line.endswith("'all'")


@pytest.mark.parametrize("task,msg", [("rtee", "unknown GLUE task 'rtee'; known: cola, mnli"),
                                      ("ax", "'ax' has no training data"),
                                      # one task twice, by either name: it ran (and was recorded) twice
                                      ("SST-2 sst2", "sst2 given twice (each task runs once)"),
                                      ("", "give the tasks (e.g. --tasks rte mrpc), or leave the flag out")])
def test_recipe_names_the_valid_tasks_for_a_typo(tmp_path, run_cli, task, msg):
    tasks = ["rte", *task.split()] if task else []  # "": a bare --tasks (it planned all nine)
    rc, out, err = run_cli("train/glue_recipe.py", "--init_from", str(tmp_path), "--workdir", str(tmp_path / "runs"),
                           "--tasks", *tasks)
    line = one_error_line(err, "glue_recipe.py")
    assert rc == 1 and f"--tasks: {msg}" in line and not (tmp_path / "runs").exists()


def test_recipe_refuses_a_teacher_weight_without_teachers(tmp_path, run_cli):
    """--teacher_weight without --teacher_root trained every task undistilled, the flag ignored."""
    rc, out, err = run_cli("train/glue_recipe.py", "--init_from", str(tmp_path), "--workdir", str(tmp_path / "runs"),
                           "--teacher_weight", "0.8")
    line = one_error_line(err, "glue_recipe.py")
    assert rc == 1 and "--teacher_weight 0.8: the teacher's share of the targets, which only a distilled run reads: " \
                       "give --teacher_root too" in line and not (tmp_path / "runs").exists()


# -- 6. the scripts' console and log file ------------------------------------------------------------------------

def test_recipe_logs_to_its_workdir_and_names_a_refused_model(tmp_path, data, run_cli, digest):
    small = model_dir(tmp_path / "small", "SqueezeBertForPreTraining", vocab_size=len(VOCAB) - 1)
    before, runs = digest(small, data), tmp_path / "runs"
    rc, out, err = run_cli("train/glue_recipe.py", "--init_from", small, "--data_dir", data, "--workdir", runs,
                           "--tasks", "RTE")
    line = one_error_line(err, "glue_recipe.py")
    assert rc == 1 and small in line and f"vocab_size is {len(VOCAB) - 1}" in line
    assert digest(small, data) == before and not runs.exists()


def test_eval_console_is_the_results_and_the_table(tmp_path, data, run_cli):
    model = model_dir(tmp_path / "model", num_labels=2)
    rc, out, err = run_cli("eval/glue.py", "--model", model, "--task", "RTE", "--data_dir", data, "--max_length", "16")
    # stderr: only the count of inputs longer than 16 tokens (glue.encode_examples), one line per split read
    assert rc == 0 and all("are longer than 16 tokens and were cut" in x for x in err.splitlines()), err
    assert out.startswith("rte {\"validation\": {\"accuracy\": ") and "SqueezeBERT (paper)" in out


# -- issue 26 class 7: results never lie ---------------------------------------------------------------------------

@pytest.mark.parametrize("predict", [False, True])
def test_a_classifier_whose_outputs_overflow_gets_no_score(tmp_path, data, run_cli, digest, predict):
    """Finite weights whose outputs are not (NaN weights are refused when the model loads: tests/test_convert.py)."""
    path = model_dir(tmp_path / "nan")
    model = sj.load_pretrained(path)
    ln = model.transformer.embeddings.LayerNorm.scale  # activations near float32's largest: the layers overflow
    ln.set_value(ln[...] * 3e38)
    sj.save_pretrained(model, path, overwrite=True)
    before = digest(path, data)
    argv = ["--model", path, "--task", "rte", "--data_dir", data] + (["--predict", "test", "--out", tmp_path / "sub"]
                                                                     if predict else [])
    rc, out, err = run_cli("eval/glue.py", *argv)
    line = one_error_line(err, "glue.py")
    assert rc == 1 and "the model's outputs on rte validation are not finite numbers for 4 of 4 examples" in line
    assert "rte" not in out and digest(path, data) == before and not (tmp_path / "sub").exists()


def test_all_tasks_with_no_model_is_an_error_not_an_empty_table(tmp_path, data, run_cli):
    (tmp_path / "runs").mkdir()
    rc, out, err = run_cli("eval/glue.py", "--model", tmp_path / "runs", "--task", "all", "--data_dir", data)
    line = one_error_line(err, "glue.py")
    assert rc == 1 and "no task was evaluated" in line and "|" not in out


# -- predict loses or mangles no result: --predict test --out DIR ----------------------------------------------------

def test_predict_test_shares_its_out_dir_with_other_tasks_files(tmp_path, data, run_cli, digest):
    """The GLUE server wants every task's file in one folder: another task's file there is no reason to refuse; only
    the files this task writes are refused (unless --overwrite), and each is claimed while the command works."""
    from squeezebert_jax import files

    model = model_dir(tmp_path / "model", num_labels=2)
    sub = tmp_path / "submission"
    sub.mkdir()
    (sub / "CoLA.tsv").write_text("index\tprediction\n0\t1\n")
    (sub / "notes.txt").write_text("mine\n")
    before = digest(sub / "CoLA.tsv", sub / "notes.txt")
    argv = ["--model", model, "--task", "rte", "--data_dir", data, "--max_length", "16", "--predict", "test", "--out",
            sub]
    rc, out, err = run_cli("eval/glue.py", *argv)
    assert rc == 0, err
    assert sorted(os.listdir(sub)) == ["CoLA.tsv", "RTE.tsv", "notes.txt"]  # no lock left behind
    assert digest(sub / "CoLA.tsv", sub / "notes.txt") == before
    written = (sub / "RTE.tsv").read_text()
    (sub / "RTE.tsv").write_text("an earlier submission\n")
    rc, out, err = run_cli("eval/glue.py", *argv)
    line = one_error_line(err, "glue.py")
    assert rc == 1 and f"--out {sub / 'RTE.tsv'} already exists; pass --overwrite" in line and out == ""
    assert (sub / "RTE.tsv").read_text() == "an earlier submission\n"
    with files.claim_output_file(sub / "RTE.tsv", overwrite=True):  # another command is writing it
        rc, out, err = run_cli("eval/glue.py", *argv, "--overwrite")
    assert rc == 1 and "RTE.tsv is being written by another run" in one_error_line(err, "glue.py")
    rc, out, err = run_cli("eval/glue.py", *argv, "--overwrite")
    assert rc == 0 and (sub / "RTE.tsv").read_text() == written and digest(sub / "CoLA.tsv", sub / "notes.txt") == before
    # the file written is never one the command reads: a link to the dev file it evaluates (it was replaced by the
    # predictions), or to a file of the MODEL_DIR
    for target, what in ((os.path.join(data, "RTE", "dev.tsv"), "is .*dev.tsv, an input"),
                         (os.path.join(model, "config.json"), "is inside .*model, an input directory")):
        before_inputs = digest(data, model)
        (sub / "RTE.tsv").unlink()
        (sub / "RTE.tsv").symlink_to(target)
        rc, out, err = run_cli("eval/glue.py", *argv, "--overwrite")
        assert rc == 1 and re.search(rf"--out {sub / 'RTE.tsv'} {what}", one_error_line(err, "glue.py")), err
        assert digest(data, model) == before_inputs


def test_submission_files_are_the_files_predict_test_writes():
    assert glue.submission_files("rte") == ["RTE.tsv"] and glue.submission_files("SST-2") == ["SST-2.tsv"]
    assert glue.submission_files("mnli") == ["MNLI-m.tsv", "MNLI-mm.tsv"] and glue.submission_files("ax") == ["AX.tsv"]


@pytest.mark.parametrize("arg, msg", [
    ("sst2,lr", r"lr in 'sst2,lr': no value; lr= takes a number, e.g. lr=2e-5"),
    ("sst2,epochs=1.5", r"epochs in 'sst2,epochs=1.5': '1.5'; epochs= takes an integer"),
    ("sst2,seed=", r"seed in 'sst2,seed=': ''; seed= takes an integer"),
    ("sst2,lrate=1e-5", r"unknown sweep setting 'lrate' in 'sst2,lrate=1e-5' \(lr, dropout, epochs, seed\)"),
    ("sst2,lr=1e-5,lr=2e-5", r"lr given twice in 'sst2,lr=1e-5,lr=2e-5' \(the later would win without a word\)"),
    ("sst2,seed=1,seed=1", r"seed given twice in 'sst2,seed=1,seed=1' \(the later would win without a word\)"),
])
def test_the_config_files_sweep_suffix_names_the_setting(arg, msg):
    """glue.py:TASK,lr=...: a setting without its value, or of the wrong kind, is named (it was Python's "could not
    convert string to float: ''")."""
    from conftest import load_script

    get_config = load_script("train/configs/glue.py").get_config
    with pytest.raises(InputError, match="^" + msg + "$"):
        get_config(arg)
    assert get_config("sst2,lr=2e-5,epochs=2,dropout=0,seed=3").num_epochs == 2


def test_eval_out_is_for_predict_and_never_inside_the_data_dir(tmp_path):
    """--out (and --overwrite) without --predict wrote nothing, silently; --out inside --data_dir wrote the server's
    files among GLUE's own. Both refused before any work, in-process here."""
    from conftest import load_script

    mod = load_script("eval/glue.py")
    for flag in (["--out", str(tmp_path / "sub")], ["--overwrite"]):
        with pytest.raises(sj.errors.InputError, match=rf"^{flag[0]} is for the files --predict test writes"):
            mod.main(["--model", str(tmp_path / "m"), "--task", "sst2", *flag])
    data = tmp_path / "glue"
    (data / "SST-2").mkdir(parents=True)
    with pytest.raises(sj.errors.InputError, match=rf"^--out {data / 'SST-2' / 'SST-2.tsv'} is inside {data}, an "
                                                   r"input directory of this command"):
        mod.main(["--model", str(tmp_path / "m"), "--task", "sst2", "--data_dir", str(data), "--predict", "test",
                  "--out", str(data / "SST-2")])
    assert sorted(p.name for p in (data / "SST-2").iterdir()) == []
