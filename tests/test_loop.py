"""squeezebert_jax.loop: the pieces pretraining's and fine-tuning's loops share, called directly (each loop's
end-to-end use: tests/test_pretrain_robust.py and tests/test_finetune_trainer.py)."""

from __future__ import annotations

import math

import pytest

from squeezebert_jax import errors, loop


class _Checkpoints:
    directory = "/runs/x/checkpoints"

    def __init__(self, steps):
        self.steps, self.waited = steps, False

    def all_steps(self):
        return self.steps

    def wait(self):
        self.waited = True


def test_the_first_non_finite_step_is_named_with_the_last_good_checkpoint():
    ck = _Checkpoints([4, 8])
    rows = [(9, {"loss": 1.0, "grad_norm": 2.0}), (10, {"loss": 1.0, "grad_norm": math.inf}),
            (11, {"loss": math.nan})]
    with pytest.raises(FloatingPointError, match=r"non-finite grad_norm inf at step 10 \(training diverged\); the last "
                                                 r"good checkpoint is step 8 in /runs/x/checkpoints"):
        loop.check_finite(rows, ("loss", "grad_norm"), ck)
    assert ck.waited  # an async save in flight is waited for before the last good one is named
    with pytest.raises(FloatingPointError, match=r"loss nan at step 1 .*no checkpoint was saved"):
        loop.check_finite([(1, {"loss": math.nan})], ("loss",), _Checkpoints([]))
    loop.check_finite([(1, {"loss": 0.5})], ("loss", "param_norm"), ck)  # a key a row lacks is not checked


def test_checkpoints_past_the_runs_end_are_refused():
    loop.check_checkpoints_within(_Checkpoints([2, 6]), 6, "whose run ends at step 6")
    with pytest.raises(errors.CheckpointMismatchError, match=r"steps \[8\] in /runs/x/checkpoints do not match the "
                                                              r"current config, whose run ends at step 6; they are left"):
        loop.check_checkpoints_within(_Checkpoints([4, 8]), 6, "whose run ends at step 6")
