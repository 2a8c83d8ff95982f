"""Extractive QA from SQuAD files (squeezebert_jax.squad): windows equal BertTokenizerFast's overflowing windows, span
targets equal run_qa's, decoding returns the gold span (also across a window boundary, and "no answer" in v2.0), EM/F1
equal torchmetrics' SQuAD metric (the official v1.1 script's normalisation), a tiny model trained on v1.1 JSON and v2.0
JSON Lines answers its questions, and loader errors name file and line through the CLI."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from flax import nnx

import squeezebert_jax as sj
from conftest import glue_config, tiny_init
from squeezebert_jax import batching, losses, squad
from squeezebert_jax import finetune as ft

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "film", "was", "shot", "in", "york", "##shire", "by",
         "john", "smith", "and", "mary", "jones", "new", "para", "##mount", "##s", "at", ".", "who", "where", "?", ",",
         "paris", "sold", "it"]
PERSONS = ["John Smith", "Mary Jones", "Mary", "John"]
PLACES = ["York", "Yorkshire", "New York", "Paris"]
CONTEXT = ("The film was shot in Yorkshire by John Smith, and Mary Jones shot the film in New York at Paramount. "
           "Paramount sold it in Paris.")


@pytest.fixture(scope="module")
def init(tmp_path_factory):
    return tiny_init(tmp_path_factory.mktemp("qa") / "init", VOCAB)


def _qa(rng, i, unanswerable=False):
    """A context of two sentences; 'who shot the film ?' -> the person, 'where was the film shot ?' -> the place;
    (v2.0) 'who sold it ?' has no answer."""
    person, place = PERSONS[rng.integers(4)], PLACES[rng.integers(4)]
    first = (f"{person} shot the film in {place}." if rng.random() < 0.5 else
             f"The film was shot in {place} by {person}.")
    context = f"{first} The film was shot at Paramount." if rng.random() < 0.5 else f"Paramount. {first}"
    if unanswerable:
        return {"id": f"q{i}", "question": "Who sold it?", "context": context, "answers": []}
    question, answer = ("Who shot the film?", person) if rng.random() < 0.5 else ("Where was the film shot?", place)
    return {"id": f"q{i}", "question": question, "context": context,
            "answers": [{"text": answer, "answer_start": context.index(answer)}]}  # one person, one place


def _write_squad_json(path, n, seed):
    """The official layout: articles of paragraphs of questions."""
    rng = np.random.default_rng(seed)
    qas = [_qa(rng, i) for i in range(n)]
    data = [{"title": "films", "paragraphs": [{"context": q.pop("context"), "qas": [q]} for q in qas]}]
    path.write_text(json.dumps({"version": "1.1", "data": data}, indent=1))
    return path


def _write_squad_jsonl(path, n, seed):
    """datasets' layout (a question per line, answers as {"text": [...], "answer_start": [...]}); a third of the
    questions unanswerable."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        q = _qa(rng, i, unanswerable=i % 3 == 0)
        q["answers"] = {"text": [a["text"] for a in q["answers"]], "answer_start": [a["answer_start"]
                                                                                   for a in q["answers"]]}
        rows.append(json.dumps(q))
    path.write_text("\n".join(rows) + "\n")
    return path


def _config(init, train, dev, **kw):
    c = glue_config("rte", init, "", **{"learning_rate": 2e-3, "num_epochs": 4, "dropout": 0.0, "max_seq_length": 48,
                                        **kw})
    c.task, c.data.kind = "files", "question_answering"
    c.data.train_file, c.data.validation_file = str(train), str(dev)
    c.data.doc_stride, c.data.max_query_length = 8, 16
    return c


@pytest.mark.parametrize("max_length, stride", [(24, 4), (32, 8), (36, 0)])
def test_windows_and_targets_equal_transformers(init, max_length, stride):
    import transformers

    tok = sj.Tokenizer.from_dir(init)
    hf = transformers.BertTokenizerFast(str(init / "vocab.txt"), do_lower_case=True)
    examples = [squad.QAExample(i, f"q{i}", q, CONTEXT, ((a, CONTEXT.index(a)),), "x")
                for i, (q, a) in enumerate([("Who shot the film?", "Mary Jones"), ("Who sold it?", "Paramount sold"),
                                            ("Where?", "Paris")])]
    ours = squad.encode_features(examples, tok, max_length, 64, stride)
    enc = hf([e.question for e in examples], [e.context for e in examples], truncation="only_second",
             max_length=max_length, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True,
             padding="max_length")
    assert len(enc["input_ids"]) == len(ours["input_ids"]) > len(examples)  # some questions span windows
    for f in range(len(enc["input_ids"])):
        assert ours["input_ids"][f].tolist() == enc["input_ids"][f]
        assert ours["token_type_ids"][f].tolist() == enc["token_type_ids"][f]
        assert ours["example_index"][f] == enc["overflow_to_sample_mapping"][f]
        seq, offsets = enc.sequence_ids(f), enc["offset_mapping"][f]
        assert ours["offsets"][f].tolist() == [list(o) if s == 1 else [-1, -1] for o, s in zip(offsets, seq)]
        # run_qa's targets: the answer's pieces when the window holds it whole, else [CLS]
        text, a = examples[enc["overflow_to_sample_mapping"][f]].answers[0]
        ctx = [i for i, s in enumerate(seq) if s == 1]
        start = end = 0
        if offsets[ctx[0]][0] <= a and offsets[ctx[-1]][1] >= a + len(text):
            start = max(i for i in ctx if offsets[i][0] <= a)
            end = min(i for i in ctx if offsets[i][1] >= a + len(text))
        assert (ours["start_positions"][f], ours["end_positions"][f]) == (start, end)


def test_questions_cut_to_max_query_length_are_counted_in_a_warning(init, caplog):
    import logging

    examples = [squad.QAExample(i, f"q{i}", q, CONTEXT, ((a, CONTEXT.index(a)),), "x")
                for i, (q, a) in enumerate([("Who shot the film?", "Mary Jones"), ("Where?", "Paris")])]
    with caplog.at_level(logging.WARNING, logger="squeezebert_jax.tokenizer"):
        squad.encode_features(examples, sj.Tokenizer.from_dir(init), 32, 3, 4)
    assert [r.getMessage() for r in caplog.records] == [
        "1 of 2 questions (50.0%) are longer than 3 tokens and were cut to fit (the model reads none of the rest); a "
        "larger config.data.max_query_length keeps more"]


def _logits_at(features, spans):
    """Logits [F, S, 2] that point each window at ``spans[f]`` (start, end) with score 10 each, elsewhere 0."""
    logits = np.zeros((*features["input_ids"].shape, 2), np.float32)
    for f, (s, e) in enumerate(spans):
        logits[f, s, 0] = logits[f, e, 1] = 10.0
    return logits


def test_decoding_finds_the_span_in_the_window_that_holds_it_whole(init):
    tok = sj.Tokenizer.from_dir(init)
    answer = "New York at Paramount"
    ex = squad.QAExample(0, "q", "Where?", CONTEXT, ((answer, CONTEXT.index(answer)),), "x")
    f = squad.encode_features([ex], tok, 24, 64, 6)
    holding = [i for i in range(len(f["input_ids"])) if f["start_positions"][i]]
    # the answer crosses a window boundary: a window holds only a part of it, and another holds it whole
    a, b = CONTEXT.index(answer), CONTEXT.index(answer) + len(answer)
    spans = [(o[o[:, 0] >= 0][0, 0], o[o[:, 0] >= 0][-1, 1]) for o in f["offsets"]]
    cut = [i for i, (s, e) in enumerate(spans) if s < b and e > a and not (s <= a and e >= b)]
    assert holding and cut
    got = squad.decode(_logits_at(f, zip(f["start_positions"], f["end_positions"])), f, [ex], version_2=False)
    assert got[0]["answer"] == answer and got[0]["start"] == CONTEXT.index(answer)
    assert got[0]["probability"] > 0.99  # the same span from two windows counts once
    # a span longer than max_answer_length pieces, or ending before it starts, is never chosen
    s, e = int(f["start_positions"][holding[0]]), int(f["end_positions"][holding[0]])
    assert squad.decode(_logits_at(f, [(s, e)] * len(f["input_ids"])), f, [ex], False, max_answer_length=2
                        )[0]["answer"] != answer
    assert squad.decode(_logits_at(f, [(e, s)] * len(f["input_ids"])), f, [ex], False)[0]["answer"] != answer


def test_v2_says_no_answer_when_the_null_score_wins(init):
    tok = sj.Tokenizer.from_dir(init)
    ex = squad.QAExample(0, "q", "Who sold it?", CONTEXT, (), "x")
    f = squad.encode_features([ex], tok, 64, 64, 8)
    logits = np.zeros((*f["input_ids"].shape, 2), np.float32)
    logits[:, 0, :] = 6.0  # [CLS]: 12
    logits[0, 10, 0] = logits[0, 11, 1] = 5.0  # a span: 10
    assert squad.decode(logits, f, [ex], version_2=True)[0]["answer"] == ""
    assert squad.decode(logits, f, [ex], version_2=True, null_threshold=3.0)[0]["answer"] != ""
    assert squad.decode(logits, f, [ex], version_2=False)[0]["answer"] != ""  # v1.1 always answers


CASES = [("the Cat", ["a cat"]), ("John Smith", ["John Smith", "Smith"]), ("in New York", ["New York"]),
         ("Mary", ["John"]), ("Smith, John!", ["john smith"]), ("the the", ["a"]), ("Paris Paris", ["Paris"]),
         ("an apple and a pear", ["the apple, the pear", "pear"]), ("", ["York"])]


def test_exact_match_and_f1_equal_torchmetrics_squad():
    from torchmetrics.functional.text import squad as tm_squad

    examples = [squad.QAExample(i, str(i), "q", " ".join(g), tuple((t, 0) for t in g), "x")
                for i, (_, g) in enumerate(CASES)]
    ours = squad.squad_scores([p for p, _ in CASES], examples)
    for i, (pred, golds) in enumerate(CASES):  # each case, and their mean
        one = tm_squad([{"prediction_text": pred, "id": str(i)}],
                       [{"answers": {"text": golds, "answer_start": [0] * len(golds)}, "id": str(i)}])
        mine = squad.squad_scores([pred], [examples[i]])
        assert mine["exact_match"] == pytest.approx(float(one["exact_match"]))
        assert mine["f1"] == pytest.approx(float(one["f1"]), abs=1e-4)
    both = tm_squad([{"prediction_text": p, "id": str(i)} for i, (p, _) in enumerate(CASES)],
                    [{"answers": {"text": g, "answer_start": [0] * len(g)}, "id": str(i)} for i, (_, g) in
                     enumerate(CASES)])
    assert ours["exact_match"] == pytest.approx(float(both["exact_match"]))
    assert ours["f1"] == pytest.approx(float(both["f1"]), abs=1e-4)


def test_v2_scores_unanswerable_questions_as_the_official_script():
    examples = [squad.QAExample(0, "a", "q", "c", (("York", 0),), "x"), squad.QAExample(1, "b", "q", "c", (), "x"),
                squad.QAExample(2, "c", "q", "c", (), "x")]
    got = squad.squad_scores(["york", "", "Paris"], examples)  # the v2.0 script: "" is right where there is none
    assert got == pytest.approx({"exact_match": 200 / 3, "f1": 200 / 3, "HasAns_exact": 100.0, "HasAns_f1": 100.0,
                                 "NoAns_exact": 50.0, "NoAns_f1": 50.0})


def test_the_span_loss_of_bucketed_batches_equals_fixed_padding(init, tmp_path):
    tok = sj.Tokenizer.from_dir(init)
    examples = squad.read_squad(str(_write_squad_jsonl(tmp_path / "t.jsonl", 12, 0)))
    f = squad.encode_features(examples, tok, 48, 16, 8)
    model = sj.SqueezeBertForQuestionAnswering(sj.pretrained.read_model_config(init)[0], rngs=nnx.Rngs(1))
    model.eval()
    full = batching.assemble(f, np.arange(12), 12, 48)
    width = int(batching.lengths(f).max())
    assert width < 48
    cut = batching.assemble(f, np.arange(12), 12, width)
    got = []
    for b in (full, cut):
        out = model(b["input_ids"], b["attention_mask"], b["token_type_ids"])
        got.append(float(losses.span_loss(out.logits, b["start_positions"], b["end_positions"], b["attention_mask"],
                                          b["weights"])))
    assert got[0] == pytest.approx(got[1], rel=1e-5)


@pytest.mark.parametrize("version", ["v1.1 json", "v2.0 jsonl"])
def test_a_tiny_model_learns_to_answer(init, tmp_path, version, run_cli):
    write = _write_squad_json if version == "v1.1 json" else _write_squad_jsonl
    train, dev = write(tmp_path / f"train{train_ext(version)}", 384, 0), write(tmp_path / f"dev{train_ext(version)}",
                                                                                 48, 1)
    res = ft.finetune(_config(init, train, dev, num_epochs=10), str(tmp_path / "run"))
    best = res["best"]
    assert best["validation/f1"] > 80 and best["validation/exact_match"] > 70, res["history"]
    assert ("validation/NoAns_f1" in best) == (version == "v2.0 jsonl")
    model_dir = tmp_path / "run" / "model"
    assert type(sj.load_pretrained(model_dir)) is sj.SqueezeBertForQuestionAnswering
    card = json.loads((model_dir / "task.json").read_text())
    assert card["version_2"] == (version == "v2.0 jsonl") and card["doc_stride"] == 8
    # predict: a question and its context per line -> the answer's text and characters
    rows = [{"question": "Who shot the film?", "context": "Paramount. The film was shot in Paris by Mary Jones."},
            {"question": "Where was the film shot?",
             "context": "John shot the film in Yorkshire. The film was shot at Paramount."}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rc, out, err = run_cli("eval/predict.py", "--model", model_dir, "--input", tmp_path / "in.jsonl", "--out",
                           tmp_path / "out.jsonl", "--max_length", 48)
    assert rc == 0, err
    got = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [g["answer"] for g in got] == ["Mary Jones", "Yorkshire"]
    assert rows[0]["context"][got[0]["start"]:got[0]["end"]] == "Mary Jones" and 0 < got[0]["probability"] <= 1


def train_ext(version):
    return ".json" if version.endswith("json") else ".jsonl"


BAD = [
    ('{"id": "a", "question": "Who?", "context": "John shot it.", "answers": {"text": ["Mary"], "answer_start": [0]}}',
     r"bad.jsonl:1: question 'a': answer 'Mary' is not at answer_start 0 of its context \(there: 'John'\)"),
    ('{"id": "a", "question": "Who?", "context": "John shot it.", "answers": []}\n'
     '{"id": "a", "question": "Who?", "context": "John shot it.", "answers": []}',
     r"bad.jsonl:2: question id 'a' appears twice \(also at .*bad.jsonl:1\)"),
    ('{"id": "a", "context": "John shot it.", "answers": []}', r"bad.jsonl:1: no 'question' text"),
    # what no text holds, as every reader of texts refuses it (files.text_problem): a NUL, a lone surrogate
    ('{"id": "a", "question": "Who\\u0000?", "context": "John shot it.", "answers": []}',
     r"bad.jsonl:1: the question holds a NUL character at character 4"),
    ('{"id": "a", "question": "Who?", "context": "John \\ud800shot it.", "answers": []}',
     r"bad.jsonl:1: the context holds a lone surrogate '\\ud800' at character 6"),
    # a line without an id takes its line number: a clash with another's id says so
    ('{"question": "Who?", "context": "John shot it.", "answers": []}\n'
     '{"id": "1", "question": "Who?", "context": "John shot it.", "answers": []}',
     r"bad.jsonl:2: question id '1' appears twice \(also at .*bad.jsonl:1\); a line without an \"id\" takes its line "
     r"number as its id"),
    # the same letters in two Unicode forms (a composed é in the answer, e and a combining accent in the context)
    ('{"id": "a", "question": "Where?", "context": "the cafe\u0301 bar", "answers": [{"text": "caf\u00e9", '
     '"answer_start": 4}]}',
     r"bad.jsonl:1: question 'a': answer 'caf\u00e9' is not at answer_start 4 .*; the answer and the context write a "
     r"character in two Unicode forms .*write both in one form \(NFC\)"),
    ('{"id": "a", "question": "Who?", "context": "John shot it.", "answers": [{"text": null, "answer_start": 5}]}',
     r'bad.jsonl:1: question \'a\': an answer needs a "text" and an integer "answer_start", got an object '
     r'\{"text": null, "answer_start": 5\}'),
    ('{"id": "a", "question": "Who?", "context": "John shot it."}', r"bad.jsonl:1: question 'a' has no \"answers\""),
    ('{"data": [{"paragraphs": [{"context": "John shot it.", "qas": [\n{"id": "q7", "question": "Who?",\n'
     '"answers": [{"text": "John", "answer_start": 3}]}]}]}]}',
     r"bad.jsonl:2: question 'q7': answer 'John' is not at answer_start 3"),
]


@pytest.mark.parametrize("doc, msg", [
    ({"data": ["films"]}, r"sq.json: data\[0\]: no \"paragraphs\" list \(a string\)"),
    ({"data": [{"title": "t", "paragraph": []}]},
     r"sq.json: data\[0\]: no \"paragraphs\" list \(has title, paragraph\)"),
    ({"data": [{"paragraphs": [{"context": "John shot it.", "qa": []}]}]},
     r"sq.json: data\[0\].paragraphs\[0\]: no \"qas\" list of questions \(has context, qa\)"),
])
def test_an_official_layout_with_a_missing_or_misspelt_level_is_refused_by_place(tmp_path, doc, msg):
    """Every level of SQuAD's layout is read or refused: an article or paragraph without its list is never skipped
    with its questions."""
    (tmp_path / "sq.json").write_text(json.dumps(doc))
    with pytest.raises(sj.errors.DataFileError, match=msg):
        squad.read_squad(str(tmp_path / "sq.json"))


def test_an_official_layout_that_is_not_valid_json_is_named_by_line_or_key(tmp_path):
    """A syntax error deep in a pretty-printed file is named by its line and column (not read as JSON Lines from line
    1), and a key given twice (the later "answers": [] would make the question unanswerable) is refused; so are an
    "is_impossible" that is not a boolean ("false" would read as true) and an unanswerable question in a file that
    declares SQuAD v1.1."""
    good = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "John went home", "qas": [
        {"id": "q1", "question": "who?", "answers": [{"text": "John", "answer_start": 0}], "is_impossible": False}]}]}]}
    text = json.dumps(good, indent=1)
    for bad, msg in ((text.replace('"is_impossible": false', '"is_impossible": false,'),
                      r"sq.json:20:7: not valid JSON \(Expecting property name"),
                     (text.replace('"is_impossible": false', '"is_impossible": "false"'),
                      r"sq.json:\d+: question 'q1': \"is_impossible\" is \"false\"; it is true or false"),
                     (text.replace('"v2.0"', '"1.1"').replace('"is_impossible": false', '"is_impossible": true'),
                      r"sq.json:\d+: question 'q1' is marked is_impossible but has answers \(and \"version\" \"1.1\" "
                      r"has no unanswerable question\): drop the one that is wrong"),
                     (json.dumps(good | {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
                         "context": "John went home", "qas": [{"id": "q1", "question": "who?", "answers": [],
                                                              "is_impossible": True}]}]}]}, indent=1),
                      r"sq.json:\d+: question 'q1' has no answer, but the file says \"version\": \"1.1\""),
                     (text.replace('"is_impossible": false', '"is_impossible": false, "answers": []'),
                      r"sq.json: the key 'answers' appears twice in one object"),
                     # ... on one line: that, not "more text after the SQuAD JSON object"
                     (json.dumps(good).replace('"question": ', '"question": "who?", "question": '),
                      r"sq.json: the key 'question' appears twice in one object"),
                     # answerable by its mark, unanswerable by its answers: neither is taken (it made the task v2.0)
                     (json.dumps(good).replace('"answers": [{"text": "John", "answer_start": 0}]', '"answers": []'),
                      r"sq.json:\d+: question 'q1' is marked \"is_impossible\": false but has no answers"),
                     # no "data": named, not read as JSON Lines ("no 'question' text (has id, version)")
                     (json.dumps({"version": "v2.0"}, indent=1),
                      r'sq.json: a JSON object with no "data" list of articles \(it has version\)'),
                     # the official layout on one line, then another object: not JSON Lines ("no 'question' text")
                     (json.dumps(good) + "\n" + json.dumps(good) + "\n",
                      r"sq.json:2: more text after the SQuAD JSON object of the line before"),
                     # an id twice: each place by its own line
                     (json.dumps(good | {"data": [{"title": "t", "paragraphs": [{"context": "John went home", "qas": [
                         good["data"][0]["paragraphs"][0]["qas"][0]] * 2}]}]}, indent=1),
                      r"sq.json:22: question id 'q1' appears twice \(also at .*sq.json:11\)")):
        (tmp_path / "sq.json").write_text(bad)
        with pytest.raises(sj.errors.DataFileError, match=msg):
            squad.read_squad(str(tmp_path / "sq.json"))


@pytest.mark.parametrize("qid", [{"a": 1}, ["q"], None, True, 1.5, "", " \u200b"])
def test_a_question_id_is_a_string_or_an_integer(tmp_path, qid):
    row = {"id": qid, "question": "Who?", "context": "John shot it.", "answers": [{"text": "John", "answer_start": 0}]}
    (tmp_path / "sq.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(sj.errors.DataFileError, match=r"sq.jsonl:1: the question's \"id\" is .*; an id is a string or"):
        squad.read_squad(str(tmp_path / "sq.jsonl"))


def test_a_json_lines_context_may_hold_a_line_separator_character(tmp_path):
    """U+2028 and U+0085 are text inside a JSON string (valid JSON written raw): only "\n" ends a JSON Lines line."""
    row = {"id": "a", "question": "Who?", "context": "John\u2028shot\x85it.", "answers": [{"text": "John",
                                                                                           "answer_start": 0}]}
    (tmp_path / "sq.jsonl").write_text(json.dumps(row, ensure_ascii=False) + "\n")
    [ex] = squad.read_squad(str(tmp_path / "sq.jsonl"))
    assert ex.context == "John\u2028shot\x85it." and ex.answers[0][0] == "John"


@pytest.mark.parametrize("text, msg", BAD)
def test_loader_errors_name_the_file_and_line(init, tmp_path, text, msg):
    train = _write_squad_jsonl(tmp_path / "train.jsonl", 6, 0)
    (tmp_path / "bad.jsonl").write_text(text)
    with pytest.raises(sj.errors.InputError, match=msg):
        ft.finetune(_config(init, train, tmp_path / "bad.jsonl"), str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_the_cli_names_an_answer_off_its_offset_in_one_line_and_writes_nothing(init, tmp_path, digest):
    from test_cli_convert import one_error_line

    train = _write_squad_json(tmp_path / "train.json", 6, 0)
    dev = tmp_path / "dev.json"
    dev.write_text(BAD[-1][0])
    before = digest(tmp_path)
    r = subprocess.run([sys.executable, os.path.join(ROOT, "train", "finetune.py"), "--config",
                        os.path.join(ROOT, "train", "configs", "glue.py") + ":files", f"--config.init_from={init}",
                        "--config.data.kind=question_answering", f"--config.data.train_file={train}",
                        f"--config.data.validation_file={dev}", "--config.max_seq_length=48",
                        "--config.data.doc_stride=8", "--config.data.max_query_length=16", "--workdir",
                        str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    native = r"^(WARNING: All log messages before absl::InitializeLog\(\) is called.*|[IWE]\d{4} [\d:.]+ +\d+ \S+\] .*)\n"
    line = one_error_line(re.sub(native, "", r.stderr, flags=re.M), "finetune.py")
    assert f"{dev}:2: question 'q7': answer 'John' is not at answer_start 3 of its context (there: 'n sh')" in line
    assert digest(train, dev) == {k: v for k, v in before.items() if k in (str(train), str(dev))}
    assert not (tmp_path / "run").exists()


def test_a_doc_stride_that_leaves_no_room_is_refused_before_reading(init, tmp_path):
    c = _config(init, tmp_path / "missing.json", tmp_path / "missing.json")
    c.data.doc_stride = 40
    with pytest.raises(sj.errors.InputError, match=r"config.data.doc_stride=40 must be below .* 29 pieces"):
        ft.finetune(c, str(tmp_path / "run"))


@pytest.mark.parametrize("answer", [" ", "\u200b"])  # white space; a zero-width space alone (files.has_text)
def test_a_blank_answer_is_refused(tmp_path, answer):
    row = {"id": "q1", "question": "where?", "context": f"shot in {answer}york",
           "answers": {"text": [answer], "answer_start": [8]}}
    (tmp_path / "blank.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(sj.errors.DataFileError, match=r"blank.jsonl:1: question 'q1': an answer needs a \"text\""):
        squad.read_squad(str(tmp_path / "blank.jsonl"))
    row |= {"question": "\u200b\u200b", "answers": {"text": ["york"], "answer_start": [9]}}  # a question of no text
    (tmp_path / "blank.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(sj.errors.DataFileError, match=r"blank.jsonl:1: no 'question' text"):
        squad.read_squad(str(tmp_path / "blank.jsonl"))


@pytest.mark.parametrize("start", [-25, 10_000])  # context[-25:-21] is "york": a slice from the end
def test_an_answer_start_outside_its_context_is_refused(tmp_path, start):
    """Python slices from the end for a negative start: the offset is checked as an offset, not as a slice, and said
    to lie outside the context (the message showed the answer's own text "there", from the context's start)."""
    context = "the film was shot in york by john smith . york"
    row = {"id": "q1", "question": "where?", "context": context,
           "answers": {"text": ["york"], "answer_start": [start]}}
    (tmp_path / "neg.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(sj.errors.DataFileError, match=rf"neg.jsonl:1: question 'q1': answer_start {start} of answer "
                                                      rf"'york' is outside its context \(0 to 42: a character offset "
                                                      r"into it\)$"):
        squad.read_squad(str(tmp_path / "neg.jsonl"))


def test_an_answers_key_no_squad_layout_has_is_refused(tmp_path):
    """A typo in an answer's keys ("texts", "Answer_start") read as no answer: the question silently unanswerable and
    the task SQuAD v2.0. Refused by name; a converter's empty text at -1 is told how an unanswerable question is
    written."""
    base = {"id": "q1", "question": "where?", "context": "shot in new york"}
    for answers, msg in (({"texts": ["york"], "answer_starts": [12]}, r"\"answers\" holds 'answer_starts', 'texts', "
                                                                      r"which no SQuAD layout has"),
                         ({"text": ["york"], "answer_start": [12], "Text": ["x"]}, r"\"answers\" holds 'Text'"),
                         ([{"text": "york", "answer_start": 12, "Answer_start": 3}], r"an answer holds "
                                                                                     r"'Answer_start', which no"),
                         ({"text": [""], "answer_start": [-1]}, r"an answer needs a \"text\" .*; an unanswerable "
                                                                r"question is \"answers\": \[\]")):
        (tmp_path / "a.jsonl").write_text(json.dumps(base | {"answers": answers}) + "\n")
        with pytest.raises(sj.errors.DataFileError, match=rf"^{tmp_path / 'a.jsonl'}:1: question 'q1': {msg}"):
            squad.read_squad(str(tmp_path / "a.jsonl"))
    for row, key in (({"answers": [], "Answers": [{"text": "york", "answer_start": 12}]}, "Answers"),
                     ({"answers": [], "isImpossible": False}, "isImpossible"), ({"answer": "york"}, "answer")):
        (tmp_path / "a.jsonl").write_text(json.dumps(base | row) + "\n")
        with pytest.raises(sj.errors.DataFileError, match=rf"a.jsonl:1: question 'q1': the key '{key}' reads as "
                                                          r"\"answers\" or \"is_impossible\" misspelt"):
            squad.read_squad(str(tmp_path / "a.jsonl"))
    (tmp_path / "a.jsonl").write_text(json.dumps(base | {"answers": [{"text": "york", "answer_start": 12,
                                                                      "answer_end": 16}]}) + "\n")
    assert squad.read_squad(str(tmp_path / "a.jsonl"))[0].answers == (("york", 12),)


def test_special_tokens_and_missing_value_markers_in_questions_and_contexts_are_counted(tmp_path, caplog):
    """files.warn_texts, the one check of the texts a file gives a model, reads SQuAD's questions and contexts too (a
    context "[SEP]" was read as that token without a word)."""
    rows = [{"id": "1", "question": "where?", "context": "shot in [SEP] york", "answers": []},
            {"id": "2", "question": "nan", "context": "shot in york", "answers": []}]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING"):
        squad.SquadTask("s", {"train": str(tmp_path / "s.jsonl")}, True).load("train")
    assert f"{tmp_path / 's.jsonl'}: 1 of 2 rows have a text holding a special token written out ([SEP] at line 1)" \
        in caplog.text
    assert f"{tmp_path / 's.jsonl'}: 1 of 2 rows have a text that is how pandas or a spreadsheet writes a missing " \
           "value ('nan' at line 2)" in caplog.text
