"""Ahead-of-time compilation of the pretraining and fine-tuning steps for a TPU topology or a GPU target, on a CPU-only
host.

XLA compiles for devices it does not have: ``jax.experimental.topologies`` gives compile-only TPU devices of a
named topology (libtpu, the ``tpu`` extra) or compile-only GPUs described by a target config (the CUDA plugin,
the ``gpu-aot`` extra; ``gpu_targets/*.txtpb``). ``compile_phase`` lowers and compiles *the* step that
``pretrain.py`` runs (``pretrain.build_phase_step``: same model, LAMB, shardings, FSDP, microbatches, dtype)
over a mesh of those devices, and reads XLA's memory and cost analyses: does it fit in HBM, how many FLOPs and
bytes, and the roofline bound on its time. MaxText's ``train_compile.py`` does the same job for its models.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import time
from typing import Any

from squeezebert_jax import (chips, distill, finetune, glue, inference, kernels, losses, parallel, pretrain,
                             pretrain_settings, trainer)
from squeezebert_jax.errors import InputError
from squeezebert_jax.finetune import layer_execution
from squeezebert_jax.flops import flops as analytic
from squeezebert_jax.layers import cudnn_version
from squeezebert_jax.model import (abstract_model, set_execution, SqueezeBertForPreTraining,
                                   SqueezeBertForSequenceClassification, SqueezeBertModel, Structure)
from squeezebert_jax.pretrain_data import batch_spec

GiB = 2 ** 30
GPU_TARGETS = {"h100": "h100_sxm_80gb.txtpb", "a100": "a100_sxm_80gb.txtpb"}
# A topology's form per chip: TPU v4 and v5p are 3-D tori (AxBxC chips), v5e and v6e 2-D (AxB); a GPU target is
# HOSTSxGPUS (h100:1x8: one host of 8). The 2-D TPUs' slice shapes are the ones Cloud TPU offers
# (cloud.google.com/tpu/docs/v5e, /v6e); libtpu itself takes other shapes (v5e:2x2x2 even) and describes chips that
# no slice has.
TOPOLOGY_DIMS = {"v4": 3, "v5p": 3, "v5e": 2, "v6e": 2}
GPU_TOPOLOGY_DIMS = 2
GPUS_PER_HOST = 8  # an NVIDIA host's NVLink domain: HGX/DGX boards hold at most 8 (the GPU targets' compile hosts)
MAX_CHIPS = 16384  # the largest slice or cluster a --topology describes (v5p's largest pod: 8,960 chips)
SLICE_SHAPES = {chip: ((1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16)) for chip in ("v5e", "v6e")}
_EXAMPLES = {"v4": "v4:2x2x1", "v5p": "v5p:2x2x2", "v5e": "v5e:2x4", "v6e": "v6e:2x4"}
# libtpu's names for the chips; ``v5e:2x2`` -> topology "v5e:2x2" (what get_topology_desc accepts)
_TPU_CHIPS = tuple(TOPOLOGY_DIMS)


class TopologyError(InputError):
    """A --topology this host cannot describe (unknown chip, bad shape, the extra not installed)."""


@dataclasses.dataclass(frozen=True)
class Target:
    chip: chips.Chip
    key: str  # CHIPS key: v5e, h100, ...
    topology: str  # as given, e.g. "v5e:2x4"
    devices: tuple
    num_slices: int

    @property
    def platform(self) -> str:
        return "tpu" if self.key in _TPU_CHIPS else "gpu"


@contextlib.contextmanager
def quiet_native_stderr(path: str | None):
    """libtpu/PJRT write start-up chatter to fd 2 from C++; send it to ``path`` (or /dev/null) meanwhile."""
    fd = os.dup(2)
    with open(path or os.devnull, "ab") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(fd, 2)
            os.close(fd)


def topology_form(chip: str) -> str:
    """How a --topology for ``chip`` is written: "v5e:AxB (e.g. v5e:2x4)", "h100:HOSTSxGPUS (e.g. h100:1x8)"."""
    if chip in TOPOLOGY_DIMS:
        return f"{chip}:{'x'.join('ABC'[:TOPOLOGY_DIMS[chip]])} (e.g. {_EXAMPLES[chip]})"
    return f"{chip}:HOSTSxGPUS (e.g. {chip}:1x8)"


def parse_topology(topology: str) -> tuple[str, tuple[int, ...]]:
    """"v5e:2x4" -> ("v5e", (2, 4)); "h100:1x8" -> ("h100", (1, 8)). Refused, naming --topology and the form expected:
    an unknown chip, a shape of another rank than the chip's (``TOPOLOGY_DIMS``), a dimension that is not a positive
    integer, a 2-D TPU shape that is no slice of that chip (``SLICE_SHAPES``)."""
    text = str(topology).strip().lower()
    m = re.fullmatch(r"([a-z0-9]+):(\d+(?:x\d+)*)", text)
    chip = text.partition(":")[0]
    if chip not in chips.CHIPS or not m:
        known = chip in chips.CHIPS and ":" in text
        raise TopologyError(f"--topology {topology!r}: expected CHIP:AxB[xC] with CHIP one of "
                            f"{', '.join(chips.CHIPS)} (e.g. v5e:2x2, v4:2x2x1, h100:1x8)"
                            + (f"; a {chip} topology is {topology_form(chip)}" if known else ""))
    dims = tuple(int(d) for d in m[2].split("x"))
    rank = TOPOLOGY_DIMS.get(chip, GPU_TOPOLOGY_DIMS)
    if len(dims) != rank:
        raise TopologyError(f"--topology {topology!r}: expected CHIP:AxB[xC]; {chip} is {rank}-D, {len(dims)} "
                            f"dimension{'s' if len(dims) != 1 else ''} given: {topology_form(chip)}")
    if not all(dims):
        raise TopologyError(f"--topology {topology!r}: every dimension is a positive integer (0 chips along one); "
                            f"{topology_form(chip)}")
    if chip not in TOPOLOGY_DIMS and dims[1] > GPUS_PER_HOST:
        raise TopologyError(f"--topology {topology!r}: {dims[1]} GPUs on one host; a host holds 1 to {GPUS_PER_HOST} "
                            f"({topology_form(chip)}: more GPUs are more hosts)")
    if math.prod(dims) > MAX_CHIPS:
        raise TopologyError(f"--topology {topology!r}: {math.prod(dims):,} chips; at most {MAX_CHIPS:,} "
                            f"({topology_form(chip)})")
    if chip in SLICE_SHAPES and dims not in SLICE_SHAPES[chip]:
        raise TopologyError(f"--topology {topology!r}: no {chip} slice has that shape; {chip} slices are "
                            f"{', '.join('x'.join(map(str, s)) for s in SLICE_SHAPES[chip])}")
    if chip in CUBE_SLICES and not _cube_slice(dims):
        raise TopologyError(f"--topology {topology!r}: no {chip} slice has that shape; {chip} slices are 2x2x1, "
                            "2x2x2, 2x2x4 and 2x4x4, then from 64 chips every dimension a multiple of 4 (4x4x4, "
                            "4x4x8, 8x8x8, ...)")
    return chip, dims


CUBE_SLICES = ("v4", "v5p")  # 3-D torus chips: their slice shapes follow one rule (``_cube_slice``)


def _cube_slice(dims: tuple[int, ...]) -> bool:
    """A v4 / v5p slice shape (Cloud TPU's topologies): 2x2x1 (one host), 2x2x2, 2x2x4 and 2x4x4, then, from 64
    chips, a 3-D torus whose every dimension is a multiple of 4; in any order."""
    s = tuple(sorted(dims))
    return s in ((1, 2, 2), (2, 2, 2), (2, 2, 4), (2, 4, 4)) or (math.prod(s) >= 64 and all(d % 4 == 0 for d in s))


def get_target(topology: str, num_slices: int = 1, log_path: str | None = None) -> Target:
    """Compile-only devices for ``topology`` (all slices). Raises ``TopologyError`` with what to install/fix."""
    from jax.experimental import topologies

    key, dims = parse_topology(topology)
    if num_slices < 1:
        raise TopologyError(f"--num_slices {num_slices}: must be >= 1")
    if math.prod(dims) * num_slices > MAX_CHIPS:
        raise TopologyError(f"--num_slices {num_slices}: {num_slices:,} slices of {math.prod(dims):,} chips are "
                            f"{math.prod(dims) * num_slices:,} chips; at most {MAX_CHIPS:,} in all")
    if key in _TPU_CHIPS:
        try:
            import libtpu  # noqa: F401
        except ImportError as e:
            raise TopologyError(f"compiling for {topology} needs libtpu: pip install -e '.[tpu]'") from e
        # libtpu takes a host-wide lock meant for real chips; compiling needs none, and without this a second compile
        # (another shell, or the tests' parallel workers) fails with "Internal error when accessing libtpu lockfile"
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
        bounds = (*dims, 1)[:3] if len(dims) == 2 else dims
        # one host holds up to 4 chips (2x2x1); larger topologies are several (compile-only) hosts
        per_host = tuple(min(d, m) for d, m in zip(bounds, (2, 2, 1)))
        with quiet_native_stderr(log_path):
            try:
                # v4 as real runs see it: one device per chip, its two TensorCores as one ("megacore"; libtpu's
                # default here would be one device per core); v5p is megacore by default, v5e/v6e have one core
                desc = topologies.get_topology_desc(
                    topology_name=f"{key}:{'x'.join(map(str, dims))}", platform="tpu",
                    chip_config_name="megacore" if key == "v4" else "default",
                    chips_per_host_bounds=per_host, num_slices=num_slices, wrap=(False, False, False))
            except Exception as e:  # noqa: BLE001 -- libtpu's message, with the input named
                raise TopologyError(f"--topology {topology!r}: libtpu refused it ({str(e).splitlines()[0][:300]})") \
                    from e
    else:
        if key not in GPU_TARGETS:
            raise TopologyError(f"--topology {topology!r}: no GPU target config for {key} (have "
                                f"{', '.join(GPU_TARGETS)})")
        if num_slices != 1:
            raise TopologyError("--num_slices applies to TPU topologies only")
        with open(os.path.join(os.path.dirname(__file__), "gpu_targets", GPU_TARGETS[key])) as f:
            cfg = f.read()
        with quiet_native_stderr(log_path):
            try:
                desc = topologies.get_topology_desc(key, "cuda", target_config=cfg, topology=f"1x{dims[0]}x{dims[1]}")
            except Exception as e:  # noqa: BLE001
                raise TopologyError(f"compiling for {topology} needs the CUDA PJRT plugin (pip install -e "
                                    f"'.[gpu-aot]'; no CUDA libraries or GPU needed): {str(e)[:200]}") from e
        declare_cudnn_for_compiling()
    devices = tuple(desc.devices)
    if key in _TPU_CHIPS and len(devices) != math.prod(dims) * num_slices:  # never a report for chips not asked for
        raise TopologyError(f"--topology {topology!r}: libtpu describes {len(devices)} chips, not the "
                            f"{math.prod(dims) * num_slices} of {num_slices} slice(s) of {'x'.join(map(str, dims))}")
    return Target(chips.CHIPS[key], key, topology, devices, num_slices)


CUDNN_FOR_COMPILING = 91000  # cuDNN 9.10, as jax's CUDA 12 wheels install it


def declare_cudnn_for_compiling() -> None:
    """Let a host without cuDNN compile cuDNN's fused attention for a GPU target, as a GPU host runs it. XLA builds
    the kernel's custom call without the library; jax asks the library's version only to check what the kernel
    supports, so on a host without one this declares ``CUDNN_FOR_COMPILING`` (the process then compiles, and its
    programs lowered for a GPU contain cuDNN attention; nothing runs on a GPU here)."""
    from jax._src.cudnn import fused_attention_stablehlo

    if cudnn_version() is None:
        fused_attention_stablehlo.check_cudnn_version = lambda: CUDNN_FOR_COMPILING


# --------------------------------------------------------------------------------------------------
# Compile one phase's step
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class PhaseReport:
    phase: str
    seq_len: int
    global_batch: int
    per_chip_batch: int
    microbatches: int
    argument_gib: float
    output_gib: float
    alias_gib: float
    temp_gib: float
    code_gib: float
    peak_gib: float
    hbm_gib: float
    xla_flops: float | None  # per step, all chips (the HLO's dots and element-wise ops)
    analytic_flops: float  # per step, all chips (train_flops_per_sequence x batch)
    bytes_accessed: float | None  # per step per chip: the compiled program, its loops multiplied out (compile_phase)
    compile_s: float
    num_steps: int
    chip: chips.Chip
    num_chips: int
    hlo: str | None = dataclasses.field(default=None, repr=False)  # the compiled program (``keep_hlo``)
    measured_mfu: float | None = None  # chips.MEASURED_MFU for this chip, model and seq, where this step was timed

    @property
    def fits(self) -> bool:
        return self.peak_gib <= self.hbm_gib

    @property
    def flop_bound_s(self) -> float:
        """FLOPs per chip / peak: a strict lower bound on one step (the HLO's FLOPs, remat recomputation included)."""
        return (self.xla_flops or self.analytic_flops) / self.num_chips / self.chip.peak_bf16

    @property
    def bytes_bound_s(self) -> float | None:
        """XLA's bytes accessed per chip / HBM bandwidth. XLA's cost model counts every operand access (measured
        here on v5e: 2.3x the ideal traffic of a 4096^2 matmul, 4x a LayerNorm's, 1x an element-wise op's), so this
        is XLA's estimate of the memory time, not a strict bound."""
        return self.bytes_accessed / (self.chip.hbm_gbs * 1e9) if self.bytes_accessed else None

    @property
    def roofline_s(self) -> float:
        """max(FLOPs / peak, bytes / HBM bandwidth) per chip, the bytes being XLA's count (see ``bytes_bound_s``)."""
        return max(self.flop_bound_s, self.bytes_bound_s or 0.0)

    def hours_at_mfu(self, mfu: float) -> float:
        return self.num_steps * self.analytic_flops / (self.num_chips * self.chip.peak_bf16 * mfu) / 3600


def _memory(compiled) -> dict[str, float]:
    m = compiled.memory_analysis()
    arg, out, alias = m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes
    temp, code = m.temp_size_in_bytes, m.generated_code_size_in_bytes
    # Live at once: the arguments, the outputs not written in place of a donated argument, temporaries and code.
    peak = arg + out - alias + temp + code
    return {"argument_gib": arg / GiB, "output_gib": out / GiB, "alias_gib": alias / GiB, "temp_gib": temp / GiB,
            "code_gib": code / GiB, "peak_gib": peak / GiB}


def abstract_batch(batch: int, seq_len: int, max_predictions: int, sharding) -> dict[str, Any]:
    """The pretraining batch (pretrain_data's layout and dtypes) as ShapeDtypeStructs."""
    import jax
    import numpy as np

    return {k: jax.ShapeDtypeStruct(shape, np.dtype(dt), sharding=sharding)
            for k, (shape, dt) in batch_spec(batch, seq_len, max_predictions).items()}


def _lower(config, phase, model, mesh, rng):
    """The phase's jitted step (``pretrain.build_phase_step``) for ``model`` on ``mesh``, lowered for abstract
    inputs (state, batch and key as ShapeDtypeStructs with their shardings)."""
    import jax
    import numpy as np

    graphdef, params, rest = pretrain.split_model(model)
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params)
    ps = pretrain.build_phase_step(config, phase, params, graphdef, rest, mesh, config.fsdp)
    batch = abstract_batch(config.global_batch_size, phase.seq_len, phase.max_predictions_per_seq,
                           parallel.batch_sharding(mesh))
    with kernels.lowering_for(mesh.devices.flat[0].platform):  # a GPU target's kernels, traced on this host
        return ps.step_fn.lower(ps.abstract, batch, rng, jax.ShapeDtypeStruct((), np.float32))


def _cost(lowered_or_compiled) -> dict:
    cost = lowered_or_compiled.cost_analysis() or {}
    if isinstance(cost, list):  # older jax: one dict per program
        cost = cost[0] if cost else {}
    return cost


def compile_phase(config, phase, target: Target, model=None, costs: bool = True,
                  bytes_accessed: bool = False, keep_hlo: bool = False) -> PhaseReport:
    """Lower and compile ``pretrain.build_phase_step`` for ``phase`` on ``target``'s devices; XLA's numbers.

    The memory analysis (does it fit) comes with the step's own compile. XLA's cost analysis counts a while loop's
    body once, not once per iteration: the layer scan and the microbatch loop would count one layer of one
    microbatch. With ``costs``: FLOPs are read from the same step lowered for the host with the layers unrolled and
    one microbatch (no compile, seconds; the FLOPs of the HLO, recomputation under remat included). With
    ``bytes_accessed`` (two more compiles for the target: minutes at full size) the bytes accessed (TPU only; XLA:GPU
    reports none) come from compiled programs without loops: the step of one microbatch (global batch / k) with 1 and with 2
    unrolled layers is compiled for the same devices, their difference is one layer's bytes, and the total is
    ``k x (B1 + (L - 1) x (B2 - B1))`` -- the layers exact, the optimizer update's bytes counted k times instead of
    once (a few GB against hundreds); a model of L <= 2 layers is compiled once, unrolled (``k x B_L``). The scanned
    program's own count is not used: it counts the stacked residual buffers whole at every iteration's dynamic
    slice, several times the bytes really moved.
    """
    import jax

    model = model if model is not None else abstract_model(lambda: pretrain.new_model(config, platform=target.platform))
    n_chips = len(target.devices)
    pretrain_settings.check_batch_division(config, phase, n_chips)
    k = pretrain_settings.microbatches(config, phase)
    mesh = parallel.make_mesh(devices=target.devices, num_slices=target.num_slices)
    rng = jax.eval_shape(lambda: trainer.run_key(0, config.rng_impl))
    t0 = time.perf_counter()
    compiled = _lower(config, phase, model, mesh, rng).compile()
    compile_s = time.perf_counter() - t0
    flops = nbytes = None
    if costs:
        from flax import nnx

        host = parallel.make_mesh(devices=jax.devices("cpu")[:1])
        unrolled = set_execution(nnx.clone(model), scan_layers=False)
        flops = _cost(_lower(config, dataclasses.replace(phase, num_microbatches=1), unrolled, host, rng)).get("flops")
        if bytes_accessed and _cost(compiled).get("bytes accessed"):
            micro = config.copy_and_resolve_references()
            micro.global_batch_size = config.global_batch_size // k
            per_layers = {}
            num_layers = model.config.num_hidden_layers
            for n in (1, 2) if num_layers > 2 else (num_layers,):  # a model of 1 or 2 layers: itself, unrolled
                cfg = model.config.replace(num_hidden_layers=n, scan_layers=False)
                small = abstract_model(lambda cfg=cfg: SqueezeBertForPreTraining(
                    cfg, dtype=trainer.compute_dtype(config), rngs=nnx.Rngs(0)))
                lowered = _lower(micro, dataclasses.replace(phase, num_microbatches=1), small, mesh, rng)
                per_layers[n] = _cost(lowered.compile()).get("bytes accessed")
            if num_layers <= 2:
                nbytes = k * per_layers[num_layers]
            else:
                nbytes = k * (per_layers[1] + (num_layers - 1) * (per_layers[2] - per_layers[1]))
    seq_flops = pretrain.train_flops_per_sequence(model.config, phase.seq_len, phase.max_predictions_per_seq)
    return PhaseReport(
        phase=phase.name, seq_len=phase.seq_len, global_batch=config.global_batch_size,
        per_chip_batch=config.global_batch_size // n_chips, microbatches=k,
        **_memory(compiled), hbm_gib=target.chip.hbm_gib, xla_flops=flops,
        analytic_flops=seq_flops * config.global_batch_size, bytes_accessed=nbytes,
        compile_s=compile_s, num_steps=phase.num_steps, chip=target.chip, num_chips=n_chips,
        hlo=compiled.as_text() if keep_hlo else None, measured_mfu=_measured_mfu(config, phase, target))


def _measured_mfu(config, phase, target: Target) -> float | None:
    """The MFU measured on ``target``'s chip for this step (``chips.MEASURED_MFU``), if the step is the one timed: a
    preset without overrides, bf16, remat "minimal", fused attention, the layers as the platform runs them by default
    (``layers`` auto); None otherwise."""
    m = config.model
    if (m.overrides or config.compute_dtype != "bfloat16" or m.remat != "minimal" or m.get("attention") != "fused"
            or m.get("layers", "auto") != "auto" or m.get("ffn", "xla") != "xla"
            or m.get("layernorm", "xla") != "xla"):
        return None
    return chips.MEASURED_MFU.get((target.key, m.preset, phase.seq_len))



# --------------------------------------------------------------------------------------------------
# Compile the fine-tuning step (and a distillation teacher)
# --------------------------------------------------------------------------------------------------

def finetune_model(config, model_config):
    """``config.task``'s classifier of architecture ``model_config`` with no weights drawn (``abstract_model``)."""
    from flax import nnx

    num_labels = glue.get_task(config.task).num_labels
    scan, remat = layer_execution(config.layers, "tpu")  # "auto": the accelerators' choice
    model_config = model_config.replace(scan_layers=scan, remat=remat)
    return abstract_model(lambda: SqueezeBertForSequenceClassification(
        model_config, num_labels=num_labels, dtype=trainer.compute_dtype(config), rngs=nnx.Rngs(0)))


def _layer_teacher(config, student_config, teacher_config):
    """(LayerLoss, LayerTeacher with abstract weights, abstract projection) for the config's layer losses; (None, None,
    {}) when their weights are 0 or there is no teacher."""
    import jax
    from flax import nnx

    if teacher_config is None:
        return None, None, {}
    loss = distill.config_layer_loss(config.distill, student_config.num_hidden_layers,
                                     teacher_config.num_hidden_layers)
    if loss is None:
        return None, None, {}
    encoder = abstract_model(lambda: SqueezeBertModel(teacher_config, dtype=trainer.compute_dtype(config),
                                                      rngs=nnx.Rngs(0)))
    encoder.eval()
    graphdef, state = nnx.split(encoder)
    proj = jax.eval_shape(lambda: distill.init_projection(student_config.hidden_size, teacher_config.hidden_size))
    return loss, distill.LayerTeacher(graphdef, nnx.to_pure_dict(state)), proj


def _finetune_lowered(config, model, mesh, rng, teacher_config=None):
    """The step ``train/finetune.py`` runs (``finetune.build_step``: AdamW, shardings, FSDP, dtype, the layer losses'
    teacher inside the step) for ``model`` on ``mesh``, lowered for abstract inputs."""
    import jax
    import numpy as np
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    spec = glue.get_task(config.task)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), nnx.to_pure_dict(params))
    layer_loss, layer_teacher, proj = _layer_teacher(config, model.config, teacher_config)
    trainable = {"model": params} | ({"proj": proj} if proj else {})
    fs = finetune.build_step(config, graphdef, nnx.to_pure_dict(rest), trainable, 1, mesh,
                             losses.LOSSES["mse" if spec.is_regression else "cross_entropy"], layer_loss, layer_teacher)
    b, s, sharding = config.batch_size, config.max_seq_length, parallel.batch_sharding(mesh)
    batch = {k: jax.ShapeDtypeStruct((b, s), np.int32, sharding=sharding) for k in inference.INPUT_KEYS}
    batch["labels"] = jax.ShapeDtypeStruct((b,), np.float32 if spec.is_regression else np.int32, sharding=sharding)
    batch["weights"] = jax.ShapeDtypeStruct((b,), np.float32, sharding=sharding)
    if teacher_config is not None:  # the final-layer target: the teacher's logits, computed before training
        batch["teacher"] = jax.ShapeDtypeStruct((b, spec.num_labels), np.float32, sharding=sharding)
    consts = ()
    if layer_teacher is not None:
        replicated = NamedSharding(mesh, P())
        consts = (jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                               layer_teacher.state),)
    with kernels.lowering_for(mesh.devices.flat[0].platform):
        return fs.step_fn.lower(fs.abstract, batch, rng, jax.ShapeDtypeStruct((), np.float32), *consts)


def compile_finetune(config, target: Target, model, teacher_config=None, num_steps: int = 0,
                     costs: bool = True) -> PhaseReport:
    """Lower and compile the fine-tuning step of ``config`` (its task, batch, sequence length, dtype, FSDP; with
    ``teacher_config``, distillation: the teacher's logits in the batch and, when the config's layer-loss weights are
    set, the teacher's forward inside the step) for ``model`` on ``target``'s devices. ``num_steps``: the run's steps,
    for the hours. FLOPs as ``compile_phase`` reads them (the step lowered for the host, unrolled)."""
    import jax
    from flax import nnx

    n_chips = len(target.devices)
    if config.batch_size % n_chips:
        raise InputError(f"config.batch_size={config.batch_size}: a multiple of the {n_chips} chips of {target.topology}")
    mesh = parallel.make_mesh(devices=target.devices, num_slices=target.num_slices)
    rng = jax.eval_shape(lambda: trainer.run_key(0, config.rng_impl))
    t0 = time.perf_counter()
    compiled = _finetune_lowered(config, model, mesh, rng, teacher_config).compile()
    compile_s = time.perf_counter() - t0
    xla_flops = None
    if costs:
        host = parallel.make_mesh(devices=jax.devices("cpu")[:1])
        unrolled = set_execution(nnx.clone(model), scan_layers=False)
        unrolled_teacher = teacher_config.replace(scan_layers=False) if teacher_config is not None else None
        xla_flops = _cost(_finetune_lowered(config, unrolled, host, rng, unrolled_teacher)).get("flops")
    seq = config.max_seq_length
    per_seq = 3.0 * analytic(model.config, seq, model.num_labels)
    if _layer_teacher(config, model.config, teacher_config)[0] is not None:
        per_seq += analytic(teacher_config, seq)  # the teacher's forward, in the step
    name = f"finetune {config.task}" + (" + teacher" if teacher_config is not None else "")
    return PhaseReport(
        phase=name, seq_len=seq, global_batch=config.batch_size, per_chip_batch=config.batch_size // n_chips,
        microbatches=1, **_memory(compiled), hbm_gib=target.chip.hbm_gib, xla_flops=xla_flops,
        analytic_flops=per_seq * config.batch_size, bytes_accessed=None, compile_s=compile_s, num_steps=num_steps,
        chip=target.chip, num_chips=n_chips)


def compile_teacher_logits(config, target: Target, teacher_config, num_examples: int = 0) -> PhaseReport:
    """The distillation teacher's logits pass (``distill.teacher_logits``: the eval forward, batches of
    ``eval_batch_size`` rounded to the chips) compiled for ``target``: it runs once over the training set."""
    import jax
    import numpy as np
    from flax import nnx
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = parallel.make_mesh(devices=target.devices, num_slices=target.num_slices)
    teacher = finetune_model(config, teacher_config)
    teacher.eval()
    graphdef, *state = nnx.split(teacher, nnx.Param, ...)
    replicated = NamedSharding(mesh, P())
    state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                         tuple(nnx.to_pure_dict(x) for x in state))
    b, s = inference.eval_batch_size(config.eval_batch_size, mesh), config.max_seq_length
    batch = {k: jax.ShapeDtypeStruct((b, s), np.int32, sharding=parallel.batch_sharding(mesh))
             for k in inference.INPUT_KEYS}
    t0 = time.perf_counter()
    with kernels.lowering_for(mesh.devices.flat[0].platform):
        compiled = inference.eval_logits.lower(Structure(graphdef), state, batch).compile()
    n_chips = len(target.devices)
    return PhaseReport(
        phase="teacher logits", seq_len=s, global_batch=b, per_chip_batch=b // n_chips, microbatches=1,
        **_memory(compiled), hbm_gib=target.chip.hbm_gib, xla_flops=None,
        analytic_flops=analytic(teacher_config, s, teacher.num_labels) * b, bytes_accessed=None,
        compile_s=time.perf_counter() - t0, num_steps=-(-num_examples // b), chip=target.chip, num_chips=n_chips)


class DoesNotFit(Exception):
    """XLA refused to compile: the step needs more HBM than the chip has (``RESOURCE_EXHAUSTED``)."""

    def __init__(self, message: str, required_gib: float | None):
        super().__init__(message)
        self.required_gib = required_gib


def oom_as_does_not_fit(compile_fn, *args, **kwargs):
    """``compile_fn(*args, **kwargs)``; XLA's out-of-memory refusal becomes ``DoesNotFit`` with the bytes it asked
    for."""
    try:
        return compile_fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 -- jax.errors.JaxRuntimeError, matched by message
        msg = str(e)
        if "RESOURCE_EXHAUSTED" not in msg and "out of memory" not in msg.lower():
            raise
        raise DoesNotFit(msg.splitlines()[0][:400], required_gib(msg)) from None


def compile_or_oom(config, phase, target: Target, model=None, costs: bool = True, bytes_accessed: bool = False,
                   keep_hlo: bool = False) -> PhaseReport:
    """``compile_phase``, XLA's out-of-memory refusal as ``DoesNotFit``."""
    return oom_as_does_not_fit(compile_phase, config, phase, target, model, costs, bytes_accessed, keep_hlo)


def required_gib(message: str) -> float | None:
    """What XLA's out-of-memory refusal asked for, in GiB: the largest size it names, "total memory required for
    HLO temporaries (314.60G) exceeds available HBM (30.75G)" -> 314.6 (the available amount is always smaller)."""
    sizes = [float(v) * {"K": 2 ** -20, "M": 2 ** -10, "G": 1.0, "T": 1024.0}[u]
             for v, u in re.findall(r"(\d+(?:\.\d+)?)\s*([KMGT])i?B?\b", message.split("\n\n")[0])]
    return max(sizes) if sizes else None


# --max-batch tries no per-chip batch past this many tokens (2^24: at BERT-base's width one [tokens, 3072] bf16
# activation alone is 103 GB, beyond any chip's HBM)
MAX_TOKENS_PER_CHIP = 2 ** 24


def max_per_chip_batch(config, phase, target: Target, model=None, multiple: int = 8,
                       max_compiles: int = 6) -> tuple[int, list[tuple[int, float | None]]]:
    """The largest per-chip batch (a multiple of ``multiple``, one microbatch) whose step fits in HBM.

    Peak memory is close to linear in the batch, so two compiles give the line, its crossing with HBM is tried
    next, and each further compile moves by the remaining gap; returns (batch, [(batch tried, peak GiB or None
    when XLA refused)]). No batch past ``MAX_TOKENS_PER_CHIP`` tokens is tried (a tiny model's line is nearly flat:
    its crossing was a batch of 1.6e10, whose shapes overflow XLA's and abort the process); that cap is returned
    when it fits."""
    n = len(target.devices)
    tried: dict[int, float | None] = {}
    cap = max(multiple, MAX_TOKENS_PER_CHIP // phase.seq_len // multiple * multiple)

    def peak(b: int) -> float | None:
        if b not in tried:
            c = config.copy_and_resolve_references()
            c.global_batch_size, c.num_microbatches = b * n, 1
            try:
                tried[b] = compile_or_oom(c, dataclasses.replace(phase, num_microbatches=1), target, model, costs=False).peak_gib
            except DoesNotFit:
                tried[b] = None
        return tried[b]

    fits = lambda b: peak(b) is not None and peak(b) <= target.chip.hbm_gib  # noqa: E731
    lo, hi = multiple, None  # lo fits (checked below), hi does not
    if not fits(lo):
        return 0, sorted(tried.items())
    b2 = 4 * multiple
    if fits(b2):
        slope = (peak(b2) - peak(lo)) / (b2 - lo)
        guess = min(cap, int((target.chip.hbm_gib - peak(lo)) / max(slope, 1e-9) + lo) // multiple * multiple)
        lo = b2
        while len(tried) < max_compiles and guess > lo:
            if fits(guess):
                lo = guess
                guess = min(cap, guess + max(multiple, (guess // 16) // multiple * multiple))
            else:
                hi = guess
                break
    else:
        hi = b2
    while hi is not None and hi - lo > multiple and len(tried) < max_compiles:
        mid = (lo + hi) // 2 // multiple * multiple
        if peak(hi) is not None and peak(hi) > peak(lo):  # a GPU's compile over HBM says by how much: the line's
            at = lo + (target.chip.hbm_gib - peak(lo)) * (hi - lo) / (peak(hi) - peak(lo))  # crossing, in the bracket
            mid = min(hi - multiple, max(lo + multiple, int(at) // multiple * multiple))
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo, sorted(tried.items())


def fewest_microbatches(global_batch: int, num_chips: int, max_per_chip: int) -> int | None:
    """The fewest microbatches k (k divides the per-chip batch) with global_batch / (chips x k) <= max_per_chip."""
    if max_per_chip <= 0 or global_batch % num_chips:
        return None
    per_chip = global_batch // num_chips
    return next((k for k in range(1, per_chip + 1) if per_chip % k == 0 and per_chip // k <= max_per_chip), None)


def report_row(r: PhaseReport) -> list:
    """One table row: batch, memory against HBM, FLOPs (XLA vs analytic), bytes, the roofline's two terms, hours."""
    ratio = f"{r.xla_flops / r.analytic_flops:.3f}" if r.xla_flops else "-"
    mem = r.bytes_bound_s
    return [r.phase, r.seq_len, r.global_batch, r.per_chip_batch, r.microbatches,
            f"{r.argument_gib:.3f}", f"{r.temp_gib:.3f}", f"{r.code_gib * 1024:.1f}",
            f"{r.peak_gib:.3f} / {r.hbm_gib:.2f}", "yes" if r.fits else "NO",
            f"{r.xla_flops / 1e12:.3g}" if r.xla_flops else "-", f"{r.analytic_flops / 1e12:.3g}",
            ratio, f"{r.bytes_accessed / 1e9:.1f}" if r.bytes_accessed else "-", f"{r.flop_bound_s * 1e3:.1f}",
            "-" if mem is None else f"{mem * 1e3:.1f}", f"{r.roofline_s * 1e3:.1f}",
            f"{r.num_steps * r.flop_bound_s / 3600:.1f}", f"{r.num_steps * r.roofline_s / 3600:.1f}",
            f"{r.hours_at_mfu(0.5):.1f}", f"{r.hours_at_mfu(0.35):.1f}",
            f"{r.hours_at_mfu(r.measured_mfu):.1f} ({100 * r.measured_mfu:.1f}%)" if r.measured_mfu else "-",
            f"{r.compile_s:.0f}"]


REPORT_HEADERS = ["phase", "seq", "global batch", "per chip", "micro", "args GiB", "temp GiB", "code MiB",
                  "peak / HBM GiB", "fits", "XLA TFLOP/step", "analytic TFLOP/step", "XLA/analytic",
                  "XLA GB accessed/chip", "FLOP-bound ms", "XLA-bytes ms", "roofline ms/step", "h at FLOP bound",
                  "h at roofline", "h at 50% MFU", "h at 35% MFU", "h at measured MFU", "compile s"]
