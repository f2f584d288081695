"""A real TRL ``GRPOTrainer`` on a tiny random Qwen2: moved to :mod:`tackroom.testing.trl_reference`.

Kept so the tests that import it by this name (tests/test_losses.py,
tests/test_advantages.py) keep working; bench/train.py imports the package copy.
"""

from tackroom.testing.trl_reference import (  # noqa: F401
    EOS,
    PAD,
    VOCAB,
    FixedRollouts,
    given_reward,
    last_metric,
    make_trainer,
    tiny_model,
    tiny_tokenizer,
    trl_batch,
)
