"""The bundled policy: a small model trained by our own pipeline, shipped in the package.

``make policy`` records expert episodes under one MiniWoB++ harness
(``som-tools``), builds a fresh model with ``tackroom model init`` and
fine-tunes it with ``tackroom sft``; :func:`install` copies the result here.
It needs no GPU, no API key and no model hub, so ``make demo`` and every
example have a learned policy to evaluate. ``--policy bundled`` (or
``hf:bundled``) loads it; its id carries a hash of its weights, so records
of two versions of it never mix.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from tackroom.core.errors import PolicyError
from tackroom.policies.chat_format import MODEL_CARD

#: Where the bundled checkpoint lives (package data).
BUNDLED_DIR = Path(__file__).parent / "bundled_model"
#: Files copied from a trained model directory (no optimiser state, no checkpoints).
_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
          "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
          MODEL_CARD)
#: The package may hold at most this much model (a wheel stays small).
MAX_BYTES = 20 * 1024 * 1024


def bundled_dir() -> Path:
    """The bundled model's directory; a clear error if this checkout has none."""
    if not (BUNDLED_DIR / "config.json").is_file():
        raise PolicyError("this tackroom has no bundled policy", "bundled",
                          "run `make policy` to train it (about 30 minutes on 2 CPU cores)")
    return BUNDLED_DIR


def bundled_id() -> str:
    """``bundled@<hash>``: names the exact weights in records."""
    card = json.loads((bundled_dir() / MODEL_CARD).read_text())
    return f"bundled@{card.get('weights_sha256', '')[:8]}"


def make_bundled_policy(**opts: Any) -> Any:
    """The bundled model as an :class:`~tackroom.policies.hf_policy.HFPolicy`.

    One torch thread unless asked otherwise: a 5M-parameter model's matrices are
    too small to split, and on a busy CPU two threads that wait for each other
    decode it several times slower than one.
    """
    from tackroom.policies.hf_policy import make_hf_policy

    opts.setdefault("threads", 1)
    policy = make_hf_policy(f"hf:{bundled_dir()}", **opts)
    policy.id = bundled_id()
    return policy


def install(model_dir: str | Path, target: Path = BUNDLED_DIR) -> Path:
    """Copy a trained model into the package, recording its weights' hash and size."""
    src = Path(model_dir)
    if not (src / "model.safetensors").is_file():
        raise PolicyError(f"{src} holds no full model (model.safetensors)", "install",
                          "install the `final` directory of a full (not LoRA) `tackroom sft`")
    weights = (src / "model.safetensors").read_bytes()
    size = sum((src / f).stat().st_size for f in _FILES if (src / f).is_file())
    if size > MAX_BYTES:
        raise PolicyError(f"{src} is {size / 2**20:.1f} MiB, over the "
                          f"{MAX_BYTES / 2**20:.0f} MiB limit of the bundled policy", "install",
                          "train a smaller size or save with --save-dtype float16")
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in _FILES:
        if (src / name).is_file():
            shutil.copy(src / name, target / name)
    card_path = target / MODEL_CARD
    card = json.loads(card_path.read_text()) if card_path.is_file() else {}
    card.update({"bundled": True, "bytes": size,
                 "weights_sha256": hashlib.sha256(weights).hexdigest()})
    card_path.write_text(json.dumps(card, indent=1))
    return target


if __name__ == "__main__":  # python -m tackroom.policies.bundled install DIR
    if len(sys.argv) != 3 or sys.argv[1] != "install":
        sys.exit("usage: python -m tackroom.policies.bundled install MODEL_DIR")
    path = install(sys.argv[2])
    print(f"installed {path} ({bundled_id()})")
