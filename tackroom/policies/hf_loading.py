"""Loading an ``hf`` policy's model: the checkpoint, its tokenizer, its stop tokens, adapters' names.

Everything here runs once, when an :class:`~tackroom.policies.hf_policy.HFPolicy` is
built or an adapter loaded; every failure is one :class:`PolicyError` line that says
how to make a model directory (``tackroom model init DIR``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tackroom.core.errors import PolicyError
from tackroom.policies.chat_format import model_dir_problem, no_progress_bars

__all__ = ["ADAPTER_NAME", "ADAPTER_VERSION_FILE", "INIT_HINT", "adapter_name", "first_line",
           "load_pretrained", "stop_ids"]

INIT_HINT = "run `tackroom model init DIR` to build a model there, or give a save_pretrained directory"
#: What a peft adapter name may hold (peft module keys cannot hold dots).
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")
_DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16",
           "half": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16"}


def load_pretrained(model_dir: str, policy_id: str, device: str, dtype: str | None,
                    threads: int | None) -> tuple[Any, Any, str]:
    """``(tokenizer, model, dtype name)`` from a ``save_pretrained`` directory, local files only.

    Every failure (no such directory, torch or transformers missing, a bad dtype, CUDA
    asked for but absent, a loader error, a tokenizer without a chat template) is a
    :class:`PolicyError` naming ``policy_id``. ``threads`` sets torch's CPU threads
    (process-wide) when given.
    """
    path = Path(model_dir)
    if (problem := model_dir_problem(path)) is not None:
        raise PolicyError(problem, policy_id, INIT_HINT)
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as e:
        raise PolicyError(f"the hf policy needs torch and transformers ({e.name} is "
                          "missing)", policy_id, "pip install 'tackroom[train]'") from None
    torch_dtype = torch.float32
    if dtype is not None:
        name = _DTYPES.get(str(dtype).lower().removeprefix("torch."))
        if name is None:
            raise PolicyError(f"unknown dtype {dtype!r}", policy_id,
                              "use float32, bfloat16 or float16")
        torch_dtype = getattr(torch, name)
    if threads is not None:
        torch.set_num_threads(threads)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PolicyError(f"device {device!r} asked for but CUDA is not available",
                          policy_id, "use device=cpu")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - any loader failure is one clear line
        raise PolicyError(f"cannot load the tokenizer in {model_dir} "
                          f"({type(e).__name__}: {first_line(e)})", policy_id,
                          INIT_HINT) from None
    if not getattr(tokenizer, "chat_template", None):
        raise PolicyError(f"the tokenizer in {model_dir} has no chat template",
                          policy_id, "add one (tokenizer.chat_template) or " + INIT_HINT)
    try:
        with no_progress_bars():
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True,
                                                         dtype=torch_dtype)
    except Exception as e:  # noqa: BLE001 - any loader failure is one clear line
        raise PolicyError(f"cannot load the model in {model_dir} "
                          f"({type(e).__name__}: {first_line(e)})", policy_id,
                          INIT_HINT) from None
    # transformers wraps to() with functools.wraps, whose stub hides the bound self
    model.to(device)  # type: ignore[arg-type]
    model.eval()
    return tokenizer, model, str(torch_dtype).removeprefix("torch.")


def stop_ids(model: Any, tokenizer: Any, pad_id: int | None) -> list[int]:
    """Token ids that end a reply: the generation config's eos ids, the tokenizer's, pad."""
    ids: list[int] = []
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for v in (gen_eos, tokenizer.eos_token_id, pad_id):
        for i in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(i, int) and i not in ids:
                ids.append(i)
    return ids


#: Written next to an adapter by ``tackroom train``: ``{"version": ...}`` names its weights.
ADAPTER_VERSION_FILE = "tackroom_adapter.json"


def adapter_name(path: str) -> str:
    """A peft-safe adapter name from a path (peft module keys cannot hold dots).

    An adapter saved by ``tackroom train`` carries its weight version (run and
    step) in ``tackroom_adapter.json``; that version is its name, so turns it
    serves record the same version as the trainer's own rollouts did.
    """
    version_file = Path(path) / ADAPTER_VERSION_FILE
    if version_file.is_file():
        try:
            version = json.loads(version_file.read_text()).get("version")
        except (OSError, ValueError, AttributeError):
            version = None
        if isinstance(version, str) and ADAPTER_NAME.match(version):
            return version
    name = re.sub(r"[^A-Za-z0-9_\-]", "_", Path(path).name or "adapter")
    return name or "adapter"


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters), for one-line errors."""
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:200]
