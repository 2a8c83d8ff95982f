"""The comparison table: parameters, FLOPs at seq 128 and our CPU latency of BERT-base, PKD-style students,
the 24 BERT miniatures, SqueezeBERT, a 50%-pruned BERT-base and the networks the paper compares (MobileBERT, ALBERT,
ELECTRA-Small, TinyBERT, DistilBERT; squeezebert_jax/models), beside the published figures of MobileBERT's Table 3
(Sun et al.) and the SqueezeBERT paper, each quoted with its source.

Ours: parameters counted from the built Flax ``SqueezeBertModel`` (embeddings, encoder, pooler: what the published
"#Params" of BERT-base, 109M, counts), built abstractly (``nnx.eval_shape``, nothing allocated); FLOPs from
``squeezebert_jax.flops`` (the paper's count: matmuls only, a multiply-add is 2 FLOPs); latency of a random-weight
sequence classifier (values do not change the time), batch 1, in PyTorch's lite interpreter (its exported ``.ptl``) or
our jitted Flax forward (``RUNTIMES``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from typing import Sequence

import numpy as np
from flax import nnx

from squeezebert_jax import mobile, prune
from squeezebert_jax.errors import InputError
from squeezebert_jax.flops import flops, flops_breakdown
from squeezebert_jax.model import count_params, GroupedConv1x1, HEADS, SqueezeBertConfig, SqueezeBertModel
from squeezebert_jax.benchmarks.timing import (REFERENCE, LoadMonitor, blocking, format_table, time_interleaved,
                                               tiny_config, torch_call, torch_tensor)

# --------------------------------------------------------------------------------------------------
# What is compared, and what was published (copied from shared/seeds/001_*, 003_*, 004_*)
# --------------------------------------------------------------------------------------------------

SOURCES = {
    "003": "MobileBERT (Sun et al.), Table 3 as quoted there: #Params, #FLOPS, GLUE test MNLI-m/mm",
    "004": "BERT miniatures (Turc et al.), GLUE test MNLI-m/mm",
    "P3": "SqueezeBERT paper, Table 3 (GLUE test): #MParams, GFLOPs, Pixel 3 latency (batch 1, seq 128), "
          "MNLI-m/mm",
    "P2": "SqueezeBERT paper, Table 2 (GLUE dev, no bells and whistles): #MParams, GFLOPs, Pixel 3 "
          "latency (batch 1, seq 128)",
}


@dataclasses.dataclass(frozen=True)
class Published:
    source: str  # a key of SOURCES
    params_m: float | None = None
    gflops: float | None = None
    pixel3_ms: float | None = None
    mnli: str | None = None  # MNLI-m/mm accuracy, as printed
    every_token: bool = False  # gflops with the pooler at every position (squeezebert_jax.flops: as MobileBERT counts)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One row: a preset (with overrides) built here, or ``preset=None`` for published numbers only."""
    name: str
    preset: str | None
    overrides: dict = dataclasses.field(default_factory=dict)
    published: tuple[Published, ...] = ()
    sparsity: float = 0.0  # unstructured, of the encoder's position-wise kernels

    def config(self, tiny: bool = False) -> SqueezeBertConfig:
        if tiny:  # the preset's groups at tiny dimensions: checks the plumbing, not the numbers
            return tiny_config(self.preset)
        return SqueezeBertConfig.preset(self.preset, **self.overrides)


def _miniatures() -> list[Entry]:
    named = {(2, 128): ("BERT-Tiny", "70.2/70.3"), (4, 256): ("BERT-Mini", "74.8/74.3"),
             (4, 512): ("BERT-Small", "77.6/77.0"), (8, 512): ("BERT-Medium", "80.0/79.1")}
    out = []
    for layers in (2, 4, 6, 8, 10, 12):
        for hidden in (128, 256, 512, 768):
            alias, mnli = named.get((layers, hidden), (None, None))
            pub = (Published("004", mnli=mnli),) if mnli else ()
            if (layers, hidden) == (6, 768):  # the paper's "Turc 6/768" (pre-trained distillation)
                pub = (Published("P3", 67.5, 11.3, 814, "82.8/82.2", every_token=True),)
            name = f"BERT-L{layers}-H{hidden}" + (f" ({alias})" if alias else "")
            out.append(Entry(name, f"bert-L{layers}-H{hidden}", published=pub))
    return out


ENTRIES: tuple[Entry, ...] = (
    Entry("BERT-base", REFERENCE, published=(Published("003", 109, 22.5, mnli="84.6/83.4", every_token=True),
                                             Published("P3", 109, 22.5, 1690, "84.6/83.4", every_token=True))),
    Entry("PKD-6 (BERT-base, 6 layers)", REFERENCE, dict(num_hidden_layers=6),
          (Published("003", 66.5, 11.3, mnli="81.5/81.0", every_token=True),
           Published("P3", 67.0, 11.3, 814, "81.5/81.0", every_token=True))),
    Entry("PKD-3 (BERT-base, 3 layers)", REFERENCE, dict(num_hidden_layers=3),
          (Published("003", 45.3, 5.7, mnli="76.7/76.3", every_token=True),)),
    Entry("SqueezeBERT (groups 4/4/4/1/4/4)", "squeezebert-uncased",
          published=(Published("P3", 51.1, 7.42, 390, "82.0/81.1"),)),
    Entry("BERT-base, 50% pruned*", REFERENCE, sparsity=0.5),
    Entry("Theseus 6/768 (BERT-base, 6 layers)", REFERENCE, dict(num_hidden_layers=6),
          (Published("P3", 66, 11.3, 814, "82.4/82.1", every_token=True),)),
    Entry("DistilBERT 6/768", "distilbert-base-uncased",
          published=(Published("P3", 66, 11.3, 814, "82.2/-", every_token=True),)),
    Entry("ELECTRA-Small (discriminator)", "electra-small-discriminator",
          published=(Published("P3", 14.0, 2.62, 248, "81.6/-"),)),
    Entry("ALBERT-base", "albert-base-v2", published=(Published("P2", 12.0, 22.5, 1690, every_token=True),)),
    Entry("TinyBERT 4/312", "tinybert-4-312", published=(Published("P3", 14.5, 1.2, 118, "82.5/81.8"),)),
    Entry("MobileBERT", "mobilebert-uncased", published=(Published("003", 25.3, 5.7, mnli="83.3/82.6"),
                                                        Published("P3", 25.3, 5.36, 572, "84.3/83.4"))),
    *_miniatures(),
)

PAPER_BERT_MS = 1690.0  # the paper's BERT-base on the Pixel 3: its speedups are against it

FOOTNOTES = [
    "pub.: published, [source]; ours: measured or counted here. "
    "Ours: MParams = parameters of the built Flax SqueezeBertModel (embeddings, encoder, pooler; no task head), "
    "as BERT-base's published 109M counts them; GFLOPs = squeezebert_jax.flops at seq 128 (the paper's count: "
    "the encoder's position-wise matmuls, QK^T and probs.V, the pooler at [CLS]; a multiply-add is 2 FLOPs); "
    "GFLOPs 003 count = the same plus the pooler at every position (see the note on MobileBERT's FLOPs); (+x%) is ours "
    "against the first published value, in the column counted as that value was; speedup = our BERT-base ms / "
    "the row's ms, timed in the same run.",
    "* {pct:.0f}% pruned: the encoder's position-wise kernels (Q, K, V, post-attention, FFN expand and contract; "
    "{kernels:.1f}M of BERT-base's {total:.1f}M parameters) at {pct:.0f}% unstructured sparsity. MParams counts "
    "nonzero parameters: those kernels' nonzero part plus everything else dense (embeddings, biases, LayerNorms, "
    "pooler). GFLOPs are dense (zeros multiplied, as a dense kernel does); skipping the zeros would take "
    "{pct:.0f}% off the position-wise matmuls: {sparse_gflops:.2f} GFLOPs. Latency: BERT-base with those "
    "kernels magnitude-pruned, run dense. Seed 003's pruning rows are "
    "BERT-Large (e.g. NIP at 50.0%: MNLI 77.0 (-9.1)); no BERT-base figures are published there.",
    "PKD-6/PKD-3: BERT-base's first 6 / 3 layers' shapes (PKD's students). BERT-L12-H768 is BERT-base's shape "
    "(Turc et al.: included for completeness) and BERT-L6-H768 PKD-6's. Theseus 6/768 (BERT-of-Theseus, progressive "
    "module replacing) ends as the same 6-layer BERT: its row is PKD-6's network, timed again in the same run.",
    "Seed 003's FLOPs of BERT-base and its 6- and 3-layer students (22.5, 11.3, 5.7; the paper quotes 22.5 and "
    "11.3) are the paper's count plus the pooler's hidden x hidden matmul at the other 127 positions (0.150 GFLOPs, "
    "as if the pooler ran on every token): so counted, ours are 22.50 / 11.32 / 5.74, each the published figure at its "
    "printed precision (the paper's count: 22.35 / 11.17 / 5.59). The paper's own SqueezeBERT figure, 7.42, is the "
    "paper's count (ours 7.40; 7.55 the other way).",
    "MobileBERT: mobilebert-uncased's shape (24 layers of a 512 body around a 128 bottleneck, 4 heads, 4 stacked "
    "FFNs of 512, NoNorm, the 3-gram embedding of 128 projected to 512, no pooler dense: classifier_activation is "
    "off in the released config): 24.58M as transformers' MobileBertModel counts it, 2.8% under the published "
    "25.3M, a difference its sources do not explain (the MLM head's transform and its 384 x 30522 decoder part "
    "are not in either). GFLOPs: 5.34 in the layers plus 0.05 for the 3-gram projection; the published figures "
    "differ between the sources (5.7 in MobileBERT's own Table 3; 5.36 in the paper), and neither says how "
    "it counted.",
    "ALBERT-base: one set of BERT-base's layer weights run 12 times, embeddings of 128 projected to 768, a 30,000 "
    "piece vocabulary: 11.68M as transformers' AlbertModel counts it (the paper's 12.0M rounds ALBERT's own '12M'); "
    "its FLOPs are BERT-base's plus the projection (0.025 GFLOPs), and the same latency as BERT-base is expected: "
    "sharing saves memory, not compute.",
    "DistilBERT 6/768: BERT-base's first 6 layers with no token-type embeddings and no pooler (its classifiers' "
    "pre_classifier with a ReLU takes the pooler's place): 66.36M as transformers' DistilBertModel counts it; "
    "GFLOPs count the pre_classifier as the pooler.",
    "ELECTRA-Small: the discriminator's shape (12 x 256, 4 heads, FFN 1024, embeddings 128 projected to 256) as "
    "transformers' ElectraModel counts it (13.48M; with the discriminator's head 13.55M). The paper's row is "
    "ELECTRA-Small++ (the same network, trained longer) at 14.0M, as the ELECTRA paper rounds it: 3.7% above the "
    "encoder's count, a difference its sources do not explain. GFLOPs (2.63 against 2.62) count the classifier's "
    "dense layer as the pooler, and the 128 -> 256 projection.",
    "TinyBERT 4/312: the shape of TinyBERT's general-distillation student (BERT, 4 layers, hidden 312, 12 heads, "
    "FFN 1200): 14.35M as transformers' BertModel counts it; the published 14.5M matches it plus the 312 -> 768 "
    "projection TinyBERT trains beside the student to compare its hidden states with BERT-base's (240,384 "
    "parameters: 14.59M), used in distillation only. Its 1.2 GFLOPs is ours (1.25) at the printed precision.",
    "MNLI-m/mm: GLUE test accuracy of the model so named in the source, each trained its own way (PKD: patient "
    "distillation; Turc 6/768: pre-trained distillation; Theseus: module replacing; MobileBERT: distillation of "
    "encoder layers; SqueezeBERT: without bells and whistles); not measured here.",
]


# --------------------------------------------------------------------------------------------------
# Counts
# --------------------------------------------------------------------------------------------------


def _encoder_kernels(model: nnx.Module) -> list[GroupedConv1x1]:
    """The encoder's position-wise layers (Q, K, V, post-attention, FFN expand and contract)."""
    return [m for path, m in nnx.iter_graph(model) if isinstance(m, GroupedConv1x1) and "encoder" in path]


def param_counts(config: SqueezeBertConfig, sparsity: float = 0.0) -> int:
    """Nonzero parameters of ``SqueezeBertModel(config)`` with the encoder's position-wise kernels at ``sparsity``
    (counted from the abstract model: nothing is allocated)."""
    model = nnx.eval_shape(lambda: SqueezeBertModel(config, rngs=nnx.Rngs(0)))
    pruned = sum(int(sparsity * m.kernel.size) for m in _encoder_kernels(model))
    if config.pooler_in_heads:  # its pooler is the classifier's dense layer, not the base model's
        pruned += count_params(model.pooler)
    return count_params(model) - pruned


def magnitude_prune(model: nnx.Module, sparsity: float) -> nnx.Module:
    """Zero the ``sparsity`` fraction of smallest-magnitude weights of each encoder position-wise kernel, in place:
    the masks of the pruning recipe (``squeezebert_jax.prune``, unstructured) at its final sparsity."""
    import jax

    state = nnx.state(model, nnx.Param)
    params = nnx.to_pure_dict(state)
    masks = prune.compute_masks(params, "unstructured", sparsity, model.config.num_attention_heads)
    nnx.replace_by_pure_dict(state, jax.tree.map(lambda p, m: p * m, params, masks))
    nnx.update(model, state)
    return model


# --------------------------------------------------------------------------------------------------
# Latency: every row timed interleaved with BERT-base in chunks (bounded memory), ratios within a chunk
# --------------------------------------------------------------------------------------------------


RUNTIMES = {"lite": "PyTorch's lite interpreter running the row's exported .ptl (the paper's runtime on the Pixel 3; "
                    "frozen trace, optimize_for_mobile where XNNPACK is built in)",
            "flax": "our jitted Flax forward"}


def _forward(entry: Entry, tiny: bool, seq_len: int, runtime: str = "flax", workdir: str | None = None):
    """A zero-argument call of the row's random-weight classifier at batch 1 in ``runtime``: "flax" (jitted) or
    "lite" (exported to ``workdir/<row>.ptl`` through transformers' PyTorch model, checked against Flax, loaded in the
    lite interpreter)."""
    config = entry.config(tiny)
    model = HEADS["SqueezeBertForSequenceClassification"](config, num_labels=2, rngs=nnx.Rngs(0))
    if entry.sparsity:
        magnitude_prune(model, entry.sparsity)
    ids, mask, tt = mobile.example_inputs(config, 1, seq_len, seed=4)
    if runtime == "flax":
        return blocking(mobile.make_flax_forward(model), ids, mask, tt)
    path = os.path.join(workdir, re.sub(r"[^A-Za-z0-9]+", "_", entry.name).strip("_") + ".ptl")
    logging.info("%s: exporting to the lite interpreter (checked against Flax)", entry.name)
    lite = mobile.load_lite(mobile.export_lite(model, path, batch=1, seq_len=seq_len).path)
    return torch_call(lite, torch_tensor(ids), torch_tensor(mask), torch_tensor(tt))


def latencies(entries: Sequence[Entry], tiny: bool = False, seq_len: int = 128, runs: int = 10, warmup: int = 2,
              chunk: int = 6, runtime: str = "flax") -> tuple[dict[str, tuple[float, float]], str]:
    """``({row name: (median ms, BERT-base ms / row ms)}, load note)``, batch 1, in ``runtime`` (``RUNTIMES``). Rows
    are timed ``chunk`` at a time, interleaved with BERT-base, so that at most ``chunk + 1`` models are in memory;
    each speedup is against the BERT-base timings of its own chunk, and BERT-base's ms is the median over all
    chunks."""
    import tempfile

    if runtime not in RUNTIMES:
        raise InputError(f"runtime {runtime!r}; one of {', '.join(RUNTIMES)}")
    with tempfile.TemporaryDirectory(prefix="sqb-compare-") as workdir:
        return _latencies(entries, tiny, seq_len, runs, warmup, chunk,
                          lambda e: _forward(e, tiny, seq_len, runtime, workdir))


def _latencies(entries, tiny, seq_len, runs, warmup, chunk, forward):
    ref = next(e for e in entries if e.preset == REFERENCE and not e.overrides and not e.sparsity)
    ref_fwd = forward(ref)
    others = [e for e in entries if e.preset is not None and e is not ref]
    out, ref_times, mon = {}, [], LoadMonitor()
    for i in range(0, len(others), chunk):
        fns = {"__ref__": ref_fwd} | {e.name: forward(e) for e in others[i:i + chunk]}
        t = time_interleaved(fns, runs, warmup)
        ref_times += t["__ref__"].times_ms
        for e in others[i:i + chunk]:
            out[e.name] = (t[e.name].median, t["__ref__"].median / t[e.name].median)
        del fns
    out[ref.name] = (float(np.median(ref_times)), 1.0)
    return out, mon.note()


# --------------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------------


def _published(entry: Entry, field: str) -> str | None:
    """``entry``'s published values of ``field``, each with its sources: "66.5 [003]; 67.0 [P3]"."""
    vals: dict[float, list[str]] = {}
    for p in entry.published:
        if getattr(p, field) is not None:
            vals.setdefault(getattr(p, field), []).append(p.source)
    return "; ".join(f"{v} [{', '.join(s)}]" for v, s in vals.items()) or None


def _ours(value: float, entry: Entry, field: str, comparable: bool, every_token: bool | None = None) -> str:
    """Our count, with its difference from the first published value of ``field`` where ``comparable`` (for FLOPs:
    and where that value was counted ``every_token`` or not, as ours was)."""
    first = next((p for p in entry.published if getattr(p, field)), None)
    pub = first and comparable and (every_token is None or first.every_token == every_token) and getattr(first, field)
    return f"{value:.2f}" + (f" ({100 * (value / pub - 1):+.1f}%)" if pub else "")


def _row(e: Entry, tiny: bool, seq_len: int, lat: dict[str, tuple[float, float]]) -> list:
    pix = next((p for p in e.published if p.pixel3_ms), None)
    pixel3 = f"{pix.pixel3_ms:.0f}, {PAPER_BERT_MS / pix.pixel3_ms:.1f}x [{pix.source}]" if pix else None
    params = fl = fl_003 = ms = speedup = None
    if e.preset is not None:
        c = e.config(tiny)
        params = _ours(param_counts(c, e.sparsity) / 1e6, e, "params_m", not tiny)
        comparable = not tiny and seq_len == 128  # published at seq 128
        fl = _ours(flops(c, seq_len) / 1e9, e, "gflops", comparable, every_token=False)
        fl_003 = _ours(flops(c, seq_len, pooler_every_token=True) / 1e9, e, "gflops", comparable, every_token=True)
    if e.name in lat:
        t, x = lat[e.name]
        ms, speedup = f"{t:.1f}", f"{x:.2f}x" if x < 10 else f"{x:.1f}x"
    return [e.name, params, _published(e, "params_m"), fl, fl_003, _published(e, "gflops"), ms, speedup, pixel3,
            _published(e, "mnli")]


def _pruning_facts(entries: Sequence[Entry], tiny: bool, seq_len: int) -> dict[str, float]:
    """What the pruned row's footnote states: its sparsity, the pruned kernels' and the whole model's size (M),
    and its FLOPs were the zeros skipped."""
    e = next((e for e in entries if e.sparsity), Entry("", REFERENCE, sparsity=0.5))
    c = e.config(tiny)
    fl = flops_breakdown(c, seq_len)
    model = nnx.eval_shape(lambda: SqueezeBertModel(c, rngs=nnx.Rngs(0)))
    return dict(pct=100 * e.sparsity, kernels=sum(m.kernel.size for m in _encoder_kernels(model)) / 1e6,
                total=count_params(model) / 1e6,
                sparse_gflops=(sum(fl.values()) - e.sparsity * (fl["attention_fc"] + fl["ffn_fc"])) / 1e9)


def select(patterns: Sequence[str] | None) -> tuple[Entry, ...]:
    """The rows whose name contains one of ``patterns`` (case-insensitive), BERT-base always first (speedups are
    against it); all rows for None."""
    if not patterns:
        return ENTRIES
    for p in patterns:
        if not any(p.lower() in e.name.lower() for e in ENTRIES):
            raise InputError(f"--only {p}: no row's name contains it; rows: {', '.join(e.name for e in ENTRIES)}")
    return tuple(e for i, e in enumerate(ENTRIES) if i == 0 or any(p.lower() in e.name.lower() for p in patterns))


def compare_table(entries: Sequence[Entry] = ENTRIES, tiny: bool = False, seq_len: int = 128,
                  latency: bool = True, runs: int = 10, warmup: int = 2, runtime: str = "flax") -> str:
    """The comparison table (Markdown) under its title, the sources and footnotes below it. ``entries[0]`` is
    BERT-base; latency in ``runtime`` (``RUNTIMES``). A ``seq_len`` past a model's positions is refused (its FLOPs
    would count a model that cannot read that length)."""
    for e in entries:
        if e.preset is not None and seq_len > (n := e.config(tiny).max_position_embeddings):
            raise InputError(f"--seq-len {seq_len} > the max_position_embeddings of {e.name} ({n})")
    lat, note = latencies(entries, tiny, seq_len, runs, warmup, runtime=runtime) if latency else ({}, "")
    rows = [_row(e, tiny, seq_len, lat) for e in entries]
    headers = ["model", "MParams ours", "MParams pub.", "GFLOPs ours", "GFLOPs ours, 003 count", "GFLOPs pub.",
               "CPU ms ours", "speedup ours", "Pixel 3 ms, speedup pub.", "MNLI-m/mm pub."]
    timing = "latency not measured (--no-latency)"
    if latency:
        timing = (f"our CPU latency: batch 1, {RUNTIMES[runtime]}, float32, random weights, median of {runs}, "
                  f"interleaved with BERT-base; {note}")
    title = (f"Compression methods compared, seq {seq_len}{' (tiny configs: plumbing only)' if tiny else ''}; "
             f"{timing}")
    facts = _pruning_facts(entries, tiny, seq_len)
    notes = [f"[{k}] {v}" for k, v in SOURCES.items()] + [n.format(**facts) for n in FOOTNOTES]
    return format_table(headers, rows, title) + "\n\n" + "\n".join(notes)


