"""A fine-tuned MODEL_DIR against a task: ``align_to_task`` fits a classifier's outputs to a task's labels (used by
fine-tuning, its teacher, and evaluation), ``evaluate`` scores it on a GLUE task's dev splits and ``predict_test`` writes
the GLUE server's files (``eval/glue.py``)."""

from __future__ import annotations

import logging
import os
import re

from squeezebert_jax import glue, inference, predict, tasks
from squeezebert_jax.errors import InputError
from squeezebert_jax.model import HEADS
from squeezebert_jax.pretrained import load_pretrained, read_model_config

log = logging.getLogger(__name__)

HEAD_NAMES = {"SqueezeBertForSequenceClassification": "sequence-classifier",
              "SqueezeBertForTokenClassification": "token-classifier",
              "SqueezeBertForQuestionAnswering": "question-answering",
              "SqueezeBertForMultipleChoice": "multiple-choice"}


# --------------------------------------------------------------------------------------------------
# A classifier for a task
# --------------------------------------------------------------------------------------------------

class TaskMismatchError(InputError):
    """A sequence classifier whose output count does not fit the GLUE task."""


def align_to_task(model, task, source: str, trained: bool = False):
    """Check that ``model`` (a sequence classifier) fits ``task`` (a GLUE name or a ``tasks`` Task) and put its outputs
    in the task's label order. Outputs named for another task (RTE's entailment, not_entailment on SST-2's 0, 1) are
    read as the task's in order, with a warning, where the model is to be fine-tuned (its head trains anyway); where
    it is taken as ``trained`` for the task (scored, or a teacher), they are refused: its scores would be another
    task's.

    When the config's ``id2label`` names the task's labels in another order (e.g. an MNLI checkpoint trained
    with transformers' old contradiction/entailment/neutral order), the classifier's columns are permuted
    once, here, so predictions, metrics, server files and teacher targets all use the task's order.
    """
    spec = tasks.task_by_name(task)
    task = spec.name
    if not isinstance(model, HEADS[spec.head]):
        raise inference.NoClassifierError(
            f"{source}: the model ({type(model).__name__}) has no {HEAD_NAMES[spec.head]} head, so "
            f"it cannot be used for {task}: fine-tune it on {task} first (train/finetune.py with --config.init_from "
            f"set to it), or convert a PyTorch model with convert/from_pytorch.py --head {spec.head}")
    if spec.kind in ("question_answering", "multiple_choice"):  # no label outputs to fit
        return model
    n = getattr(model, "num_labels", None)
    if n != spec.num_labels:
        raise TaskMismatchError(f"{source}: a classifier with {n} outputs cannot be used for {task} "
                                f"({spec.num_labels} {'output' if spec.is_regression else 'labels'})")
    perm = glue.label_permutation(model.config.id2label, spec.labels)
    named = [str(model.config.id2label[i]) for i in range(n)] if model.config.id2label and not spec.is_regression \
        else []
    if perm is None and named and not all(re.fullmatch(r"LABEL_\d+", x) for x in named) and \
            [x.lower() for x in named] != [x.lower() for x in spec.labels]:
        # another task's classifier (a/b for neg/pos): its outputs are read as the task's, in order -- say which
        if trained:
            raise TaskMismatchError(
                f"{source}: the classifier's outputs are named {', '.join(named)}, not {task}'s labels "
                f"{', '.join(spec.labels)}: a model of another task? If they do mean {', '.join(spec.labels)} in this "
                f"order, write those names in its config.json's id2label")
        log.warning("%s: the classifier's outputs are named %s, not %s's labels %s: kept in order, read as %s",
                    source, named, task, list(spec.labels),
                    ", ".join(f"{a} -> {b}" for a, b in zip(named, spec.labels)))
    if perm is not None:
        log.info("%s: classifier outputs %s reordered to %s's order %s", source,
                 [model.config.id2label[i] for i in range(n)], task, list(spec.labels))
        model.classifier.kernel.set_value(model.classifier.kernel[...][:, perm])
        model.classifier.bias.set_value(model.classifier.bias[...][perm])
    model.config.id2label = None if spec.is_regression else dict(enumerate(spec.labels))
    if spec.kind in tasks.PROBLEM_TYPE:  # a sequence classifier's, as transformers reads it (not a tagger's)
        model.config.problem_type = tasks.PROBLEM_TYPE[spec.kind]
    return model


# --------------------------------------------------------------------------------------------------
# Evaluation and test predictions
# --------------------------------------------------------------------------------------------------

def load_for_task(model_dir: str, task, source: str | None = None):
    """``model_dir``'s model for ``task`` (a GLUE name or a ``tasks`` Task), its outputs fitted to the task's labels
    (``align_to_task``): what evaluation and a teacher read. A classifier fine-tuned on your own files says in its
    ``task.json`` what it reads: one of another kind (multilabel or regression against class labels), or one that
    reads another number of texts than the task gives (a one-text classifier on RTE's pairs would read each pair as
    one text), is refused by name. ``source`` names the model in messages (default: ``model_dir``)."""
    spec = tasks.task_by_name(task)
    model = load_pretrained(model_dir)
    card = {}
    if isinstance(model, HEADS["SqueezeBertForSequenceClassification"]):
        card = predict.read_card(model_dir, "classifier", model.num_labels)
    where = f"{source or model_dir}: its {tasks.TASK_CARD}"
    if card and not os.path.exists(os.path.join(model_dir, tasks.TASK_CARD)):  # read from config.json (run_glue's)
        said = read_model_config(model_dir)[1].get("finetuning_task")
        where = f"{source or model_dir}: its config.json (finetuning_task {said!r})"
    trained_on = card.get("glue_task")
    if trained_on and isinstance(spec, tasks.GlueTask) and trained_on != spec.name and (trained_on, spec.name) != (
            "mnli", "ax"):  # AX is scored with the MNLI model
        wanted = "mnli (AX is scored with it)" if spec.name == "ax" else spec.name
        raise TaskMismatchError(f"{where} says the model was fine-tuned on {trained_on}, not {spec.name}: score a "
                                f"model fine-tuned on {wanted}")
    if card and card["kind"] != spec.kind:
        raise TaskMismatchError(f"{where} says a {card['kind']} model; {spec.name} is a {spec.kind} task")
    cols = card.get("text_columns", ())
    if cols and len(cols) != len(spec.text_columns):
        raise TaskMismatchError(
            f"{where} says the model reads {len(cols)} text{'s' * (len(cols) != 1)} ({', '.join(cols)}); "
            f"{spec.name} gives {len(spec.text_columns)} ({', '.join(spec.text_columns)}): a model fine-tuned on "
            f"{spec.name}'s kind of input reads it")
    return align_to_task(model, spec, source or model_dir, trained=True)


def evaluate(model_dir: str, task: str, data_dir: str | None, split: str | None = None,
             max_length: int | None = None) -> dict[str, dict[str, float]]:
    """Dev metrics of a fine-tuned MODEL_DIR: {split: compute_metrics(...)} for the task's eval splits."""
    spec = glue.get_task(task)
    model = load_for_task(model_dir, task)
    tok = inference.model_tokenizer(model_dir, model.config.vocab_size)
    max_length = tasks.input_length(max_length, model.config.max_position_embeddings, "--max_length",
                                    f"the model at {model_dir}")
    out = {}
    for s in ([split] if split else spec.eval_splits):
        arr = glue.encode_examples(glue.load_examples(task, s, data_dir=data_dir), tok, max_length, task=task)
        logits = inference.predict_logits(model, arr)
        inference.check_finite(logits, model_dir, f"{task} {s}")
        out[s] = glue.compute_metrics(task, logits[:, 0] if spec.is_regression else logits.argmax(-1), arr["labels"])
    return out


def predict_test(model_dir: str, task: str, data_dir: str | None, out_dir: str,
                 max_length: int | None = None) -> list[str]:
    """GLUE-server files for the task's test splits (AX: pass task="ax" with the MNLI model)."""
    spec = glue.get_task(task)
    model = load_for_task(model_dir, task)
    tok = inference.model_tokenizer(model_dir, model.config.vocab_size)
    max_length = tasks.input_length(max_length, model.config.max_position_embeddings, "--max_length",
                                    f"the model at {model_dir}")
    paths = []
    for s in spec.test_splits:
        arr = glue.encode_examples(glue.load_examples(task, s, data_dir=data_dir), tok, max_length, task=task)
        logits = inference.predict_logits(model, arr)
        inference.check_finite(logits, model_dir, f"{task} {s}")
        paths.append(glue.write_predictions(task, arr["idx"], logits[:, 0] if spec.is_regression else logits,
                                            out_dir, split_name=s))
    return paths
