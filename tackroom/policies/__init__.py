"""Policy backends by spec string: one table that both checks and builds them.

``expert``, ``skill-expert`` (the expert gated by the harness's skills, a scripted
stand-in for a model that reads skills), ``bundled``, ``hf:MODEL_DIR[:ADAPTER_DIR]``,
``openai:MODEL[@BASE_URL]`` and ``replay:RUN_ID[:POLICY]``. Each :class:`Backend` says which spec form it
reads, which loose options (``base_url``, ``timeout``, ``threads`` …) it takes,
and how to build it; :func:`check_policy_spec` (form only, nothing loaded, e.g.
for a manifest sealed before the policy runs) and :func:`make_policy` read the
same table, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tackroom.core.errors import PolicyError
from tackroom.core.policy import Policy


@dataclass(frozen=True)
class Backend:
    """One kind of policy.

    Attributes:
        kind: the spec's prefix (``openai`` in ``openai:M``), or the whole spec
            for kinds without an argument (``expert``, ``bundled``).
        form: the spec as users write it, for messages and ``--help``.
        takes_argument: whether the spec needs ``KIND:ARGUMENT``.
        options: the loose options it accepts; others are dropped, so one set of
            run options (``timeout``, ``base_url``) can go to every policy.
        build: ``(spec, argument, options, db) -> Policy``.
    """

    kind: str
    form: str
    takes_argument: bool
    options: frozenset[str]
    build: Callable[[str, str, dict[str, Any], str | None], Policy]


def _expert(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    from tackroom.policies.expert import ExpertPolicy

    return ExpertPolicy()


def _skill_expert(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    from tackroom.policies.skill_gated import SkillGatedPolicy

    return SkillGatedPolicy()


def _bundled(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    from tackroom.policies.bundled import make_bundled_policy

    return make_bundled_policy(**opts)


def _hf(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    if arg == "bundled":  # hf:bundled is the bundled policy
        return _bundled(spec, arg, opts, db)
    from tackroom.policies.hf_policy import make_hf_policy

    return make_hf_policy(spec, **opts)


def _openai(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    from tackroom.policies.openai_policy import make_openai_policy

    return make_openai_policy(spec, **opts)


def _replay(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    from tackroom.policies.replay import ReplayPolicy
    from tackroom.records import default_db

    run_id, _, source = arg.partition(":")
    return ReplayPolicy(run_id, db or default_db(), source or None)


_HF_OPTIONS = frozenset({"device", "dtype", "max_batch", "batch_wait_ms", "threads", "adapter"})

#: Every policy backend, by kind.
BACKENDS: dict[str, Backend] = {b.kind: b for b in (
    Backend("expert", "expert", False, frozenset(), _expert),
    Backend("skill-expert", "skill-expert", False, frozenset(), _skill_expert),
    Backend("bundled", "bundled", False, _HF_OPTIONS, _bundled),
    Backend("hf", "hf:MODEL_DIR[:ADAPTER_DIR]", True, _HF_OPTIONS, _hf),
    Backend("openai", "openai:MODEL[@BASE_URL]", True,
            frozenset({"base_url", "api_key", "timeout", "max_retries", "max_concurrency",
                       "backoff_base", "backoff_max", "return_token_ids", "extra_body",
                       "client"}),
            _openai),
    Backend("replay", "replay:RUN_ID[:POLICY]", True, frozenset(), _replay),
)}

#: The spec forms, for messages and ``--help``.
POLICY_KINDS = tuple(b.form for b in BACKENDS.values())


def backend_of(spec: str) -> tuple[Backend, str]:
    """The backend a spec names and the spec's argument; :class:`PolicyError` if none."""
    kind, sep, arg = spec.partition(":")
    backend = BACKENDS.get(kind)
    if backend is not None and backend.takes_argument == bool(arg):
        return backend, arg
    raise PolicyError(f"unknown policy {spec!r}", "--policy",
                      f"use one of: {', '.join(POLICY_KINDS)}")


def check_policy_spec(spec: str) -> None:
    """Raise :class:`PolicyError` unless ``spec`` names a policy kind :func:`make_policy` builds.

    Checks the form only (nothing is loaded): for manifests written before
    the policy is run, e.g. ``tackroom seal``.
    """
    backend_of(spec)


def make_policy(spec: str, *, db: str | None = None, **opts: Any) -> Policy:
    """Build a policy from its spec string.

    Args:
        spec: ``expert``; ``bundled`` (the small model shipped with tackroom);
            ``hf:MODEL_DIR[:ADAPTER_DIR]`` (a local transformers checkpoint);
            ``openai:MODEL[@BASE_URL]`` (base URL also from ``base_url`` or
            ``OPENAI_BASE_URL``, key from ``OPENAI_API_KEY``); ``replay:RUN_ID``.
        db: the record store, for ``replay`` (default: :func:`tackroom.records.default_db`).
        opts: backend options; each backend takes those it knows (see :data:`BACKENDS`)
            and ignores the rest, so one set of run options fits every policy.

    ::

        policy = make_policy("openai:Qwen/Qwen3-8B", base_url="http://127.0.0.1:8000/v1")
    """
    backend, arg = backend_of(spec)
    mine = {k: v for k, v in opts.items() if k in backend.options and v is not None}
    return backend.build(spec, arg, mine, db)
