"""Fine-tuning configs (ml_collections). The argument is a GLUE task (TFDS name) or ``files`` (your own CSV, TSV or
JSON Lines files), optionally with sweep settings: "rte", "rte,lr=3e-5,dropout=0.1", "stsb,lr=4e-5,epochs=5".

    # your own data: a CSV of text and label (label names read from the training file)
    python train/finetune.py --config train/configs/glue.py:files --config.init_from MODEL_DIR \
        --config.data.train_file train.csv --config.data.validation_file dev.csv \
        --config.data.text_columns text --config.data.label_column label --workdir runs/mine

    # extractive QA on SQuAD v1.1 / v2.0 files (windows as run_qa: 384 pieces, doc stride 128)
    python train/finetune.py --config train/configs/glue.py:files --config.init_from MODEL_DIR \
        --config.data.kind question_answering --config.data.train_file train-v2.0.json \
        --config.data.validation_file dev-v2.0.json --config.max_seq_length 384 --config.data.doc_stride 128 \
        --workdir runs/squad
    # multiple choice, SWAG's CSV columns
    python train/finetune.py --config train/configs/glue.py:files --config.init_from MODEL_DIR \
        --config.data.kind multiple_choice --config.data.train_file train.csv --config.data.validation_file val.csv \
        --config.data.text_columns sent1,sent2 --config.data.choice_columns ending0,ending1,ending2,ending3 \
        --workdir runs/swag

    python train/finetune.py --config train/configs/glue.py:rte --config.init_from MODEL_DIR \
        --config.data_dir glue_data --workdir runs/rte
    # distillation from a teacher MODEL_DIR, starting from the MNLI-finetuned student (paper §4.2.2):
    python train/finetune.py --config train/configs/glue.py:rte,lr=3e-5 --config.init_from runs/mnli/model \
        --config.distill.teacher bert_base_rte --config.distill.teacher_weight 0.5 --config.data_dir glue_data \
        --workdir runs/rte_ds
    # layer-wise and pre-trained distillation (README, "Distillation recipes"): a PKD-Skip 6-layer student
    python train/finetune.py --config train/configs/glue.py:rte --config.init_from TEACHER \
        --config.student_layers 6 --config.distill.teacher TEACHER --config.distill.patient_weight 100 \
        --config.distill.transfer_text unlabeled_pairs.txt --config.data_dir glue_data --workdir runs/rte_pkd6

Paper (and its appendix Table 4): AdamW, batch 16, b1 0.9, b2 0.999, no weight decay; learning rate in
{1e-5 .. 5e-5} and dropout swept per task.
"""

import ml_collections

from squeezebert_jax import distill, prune
from squeezebert_jax.errors import InputError
from squeezebert_jax.glue import FINETUNE_TASKS as TASKS
from squeezebert_jax.tasks import DATA_SETTINGS
# The paper's chosen learning rates with bells and whistles (appendix Table 5), as defaults.
PAPER_LR = {"mnli": 3e-5, "qqp": 3e-5, "qnli": 4e-5, "sst2": 3e-5, "cola": 3e-5, "stsb": 2e-5, "mrpc": 4e-5,
            "rte": 3e-5, "wnli": 3e-5}


def get_config(arg: str = "rte") -> ml_collections.ConfigDict:
    task, *settings = arg.split(",")
    if task not in TASKS and task != "files":
        raise InputError(f"unknown GLUE task {task!r}; one of {', '.join(TASKS)}, or files (your own data)")
    c = ml_collections.ConfigDict()
    c.task = task
    # task=files: your own labelled text (squeezebert_jax.tasks). CSV/TSV/JSON Lines files; text_columns one column
    # or "a,b" for pairs; kind classification (labels: "" reads them from the training file, sorted), regression,
    # multilabel, token_classification (CoNLL files), question_answering (SQuAD JSON / JSON Lines; run_qa's windows:
    # max_seq_length 384 with doc_stride 128) or multiple_choice (choice_columns: the endings, e.g. SWAG's
    # "ending0,ending1,ending2,ending3" with text_columns "sent1,sent2"). A *_file may name a dataset split instead:
    # hf:DIR_OR_NAME[:SPLIT] (datasets) or tfds:NAME[:SPLIT] (squeezebert_jax.sources).
    # The defaults: squeezebert_jax.tasks.DATA_SETTINGS (text_columns "sentence", label_column "label", kind
    # "classification", max_query_length 64, doc_stride 32, max_answer_length 30, n_best 20, null_threshold 0).
    c.data = ml_collections.ConfigDict(dict(DATA_SETTINGS))
    c.init_from = ""  # MODEL_DIR (pretrained, or MNLI-finetuned for transfer)
    c.data_dir = ""  # GLUE_DIR written by the original download script; empty: TFDS glue/<task>
    c.skip_malformed = False
    c.seed = 0
    c.rng_impl = "threefry2x32"  # dropout masks' bits: "threefry2x32" (every platform alike) or "rbg" (cheaper)
    c.max_seq_length = 128
    # Batches padded to their length bucket, not all to max_seq_length (squeezebert_jax.batching): "auto" (the 4
    # widths that pad the training rows least, and max_seq_length), "auto:K" (K widths), "none" (fixed padding) or
    # widths "32,64,96".
    c.length_buckets = "auto"
    # How the encoder's layers run (the same numbers either way): "scan" (one compiled layer under lax.scan: compile
    # time and code size), "unrolled" (each layer its own code: ~10% faster steps on CPU, 1.2x on an H100), "auto":
    # unrolled on CPU and GPU, the scan on TPU (model.AUTO_LAYERS).
    c.layers = "auto"
    # "fused": the attention core as one kernel (cuDNN's flash attention on a GPU), no dropout on the attention
    # probabilities; "reference": explicit probabilities with attention_dropout (or the model's own rate), as the
    # paper fine-tunes. The same numbers at evaluation either way.
    c.attention = "fused"
    c.batch_size = 16
    c.learning_rate = PAPER_LR.get(task, 3e-5)
    c.warmup_fraction = 0.1
    c.weight_decay = 0.0
    c.num_epochs = 3
    c.dropout = ml_collections.FieldReference(None, field_type=float)
    c.attention_dropout = ml_collections.FieldReference(None, field_type=float)
    c.compute_dtype = "float32"
    c.max_train_examples = 0  # 0: all
    c.eval_batch_size = 64  # rounded up to a multiple of the devices
    c.progress = True
    # The mesh, as in pretraining: every device (or the first num_devices), data parallel; fsdp shards parameters and
    # AdamW state over the devices too. batch_size must divide by the devices.
    c.num_devices = 0
    c.fsdp = False
    # Metrics every log_every steps (and each epoch's evaluation) in WORKDIR/metrics.jsonl; checkpoints every
    # checkpoint_every steps and at each epoch's end (the newest keep_checkpoints kept): a rerun on the workdir resumes.
    c.log_every = 50
    c.checkpoint_every = 1000
    c.keep_checkpoints = 2
    c.async_checkpoints = True
    c.preemption_sync_every = 10  # multi-host: steps between the hosts' agreement on a SIGTERM
    c.stop_at_step = 0  # > 0: stop after this step with a checkpoint, as on SIGTERM (a rerun resumes); 0: off
    # A student of fewer layers built from init_from's (squeezebert_jax.distill): 0 keeps init_from's depth;
    # layer map "skip" (every k-th: 1,3,5 of 6), "first" (the first k) or 1-based layers "1,3,5".
    c.student_layers = 0
    c.student_layer_map = distill.STUDENT_LAYER_MAP  # "skip"
    # Distillation from distill.teacher: the final-layer target mix (teacher_weight) and, when their weights are
    # > 0, PKD's patient loss and TinyBERT's hidden-state and attention MSE over layer_map ("skip" = PKD-Skip,
    # "last" = PKD-Last, "uniform" = TinyBERT, or "student:teacher,..." pairs, 0 = embeddings).
    # Defaults (squeezebert_jax.distill.SETTINGS): no teacher, teacher_weight 0.5, the layer weights 0, layer_map skip.
    c.distill = ml_collections.ConfigDict(dict(distill.SETTINGS))
    # distill.transfer_text: "a.txt,b.txt", unlabeled text (a sentence per line, tab-separated pairs for pair
    # tasks) the student also learns from, on the teacher's soft labels (pre-trained distillation, Turc et al.).
    # Gradual magnitude pruning (squeezebert_jax.prune): target sparsity (0: off), unstructured | heads | ffn, the
    # cubic ramp from begin to end (fractions of the run), masks recomputed every `every` steps.
    # Defaults (squeezebert_jax.prune.SETTINGS): target 0 (off), unstructured, begin 0, end 0.75, every 10.
    c.prune = ml_collections.ConfigDict(dict(prune.SETTINGS))
    fields = {"lr": ("learning_rate", float, "a number, e.g. lr=2e-5"), "dropout": ("dropout", float, "a number"),
              "epochs": ("num_epochs", int, "an integer"), "seed": ("seed", int, "an integer")}
    for i, s in enumerate(settings):
        key, eq, value = s.partition("=")
        if key not in fields:
            raise InputError(f"unknown sweep setting {key!r} in {arg!r} (lr, dropout, epochs, seed)")
        if any(earlier.partition("=")[0] == key for earlier in settings[:i]):
            raise InputError(f"{key} given twice in {arg!r} (the later would win without a word)")
        field, kind, what = fields[key]
        try:
            if not eq:
                raise ValueError
            c[field] = kind(value)
        except ValueError:
            raise InputError(f"{key} in {arg!r}: {'no value' if not eq else repr(value)}; {key}= takes {what}") \
                from None
    return c
