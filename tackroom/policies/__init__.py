"""Policy backends by spec string: ``expert``, ``openai:MODEL``, ``replay:RUN_ID``."""

from __future__ import annotations

from typing import Any

from tackroom.core.errors import PolicyError
from tackroom.core.policy import Policy

POLICY_KINDS = ("expert", "bundled", "openai:MODEL[@BASE_URL]", "hf:MODEL_DIR[:ADAPTER_DIR]",
                "replay:RUN_ID[:POLICY]")


def check_policy_spec(spec: str) -> None:
    """Raise :class:`PolicyError` unless ``spec`` names a policy kind :func:`make_policy` builds.

    Checks the form only (nothing is loaded): for manifests written before
    the policy is run, e.g. ``tackroom seal``.
    """
    kind, _, rest = spec.partition(":")
    if spec in ("expert", "bundled") or (kind in ("openai", "hf", "replay") and rest):
        return
    raise PolicyError(f"unknown policy {spec!r}", "--policy",
                      f"use one of: {', '.join(POLICY_KINDS)}")


def make_policy(spec: str, *, db: str | None = None, **opts: Any) -> Policy:
    """Build a policy from its spec string.

    Args:
        spec: ``expert``; ``bundled`` (the small model shipped with tackroom);
            ``hf:MODEL_DIR`` (a local transformers checkpoint);
            ``openai:MODEL`` (base URL from ``--base-url`` or
            ``OPENAI_BASE_URL``, key from ``OPENAI_API_KEY``); ``replay:RUN_ID``.
        db: the record store, for ``replay``.
        opts: backend options (``base_url``, ``timeout``, ``max_retries``, ``concurrency``).
    """
    kind, _, rest = spec.partition(":")
    if kind == "expert" and not rest:
        from tackroom.policies.expert import ExpertPolicy

        return ExpertPolicy()
    if kind == "openai" and rest:
        from tackroom.policies.openai_policy import make_openai_policy

        return make_openai_policy(spec, **opts)
    if spec in ("bundled", "hf:bundled"):
        from tackroom.policies.bundled import make_bundled_policy

        return make_bundled_policy(**{k: v for k, v in opts.items() if k not in
                                      ("base_url", "timeout")})
    if kind == "hf" and rest:
        from tackroom.policies.hf_policy import make_hf_policy

        return make_hf_policy(spec, **{k: v for k, v in opts.items() if k not in
                                       ("base_url", "timeout")})
    if kind == "replay" and rest:
        from tackroom.policies.replay import ReplayPolicy

        run_id, _, source = rest.partition(":")
        return ReplayPolicy(run_id, db or "./tackroom-runs/tackroom.duckdb", source or None)
    check_policy_spec(spec)
    raise AssertionError(f"check_policy_spec accepted {spec!r} that make_policy cannot build")
