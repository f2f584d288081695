"""Training: supervised fine-tuning from records (``sft``) and multi-harness RL.

Import-light on purpose: torch and transformers are the optional ``train``
extra, imported by the modules that need them, not here.
"""
