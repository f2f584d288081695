"""Policy backends by spec string, each registered as kind ``policy``.

``expert``, ``skill-expert`` (the expert gated by the harness's skills, a scripted
stand-in for a model that reads skills), ``bundled``, ``hf:MODEL_DIR[:ADAPTER_DIR]``,
``openai:MODEL[@BASE_URL]`` and ``replay:RUN_ID[:POLICY]``. Each backend is a build
function registered with ``@register("policy", KIND, form=..., takes_argument=...,
options=...)``: which spec form it reads, which loose options (``base_url``,
``timeout``, ``threads`` …) it takes, and how to build it. :func:`check_policy_spec`
(form only, nothing loaded, e.g. for a manifest sealed before the policy runs),
:func:`make_policy` and ``--help`` read the registry when called, so a backend a plug-in
registers (through the ``tackroom`` entry-point group) is checked and built like these::

    @register("policy", "mine", form="mine:MODEL", takes_argument=True,
              options=frozenset({"timeout"}))
    def build_mine(spec: str, argument: str, options: dict, db: str | None) -> Policy:
        ...
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tackroom.core.errors import PolicyError
from tackroom.core.policy import Policy
from tackroom.core.registry import Entry, entries, entry, has, names, register

__all__ = ["Backend", "backend_of", "backends", "check_policy_spec", "make_policy",
           "policy_forms"]


@dataclass(frozen=True)
class Backend:
    """One kind of policy, as its registry entry describes it.

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

    @classmethod
    def of(cls, e: Entry) -> Backend:
        """The backend a ``policy`` registry entry describes (its meta holds the rest)."""
        takes = bool(e.meta.get("takes_argument", False))
        form = str(e.meta.get("form") or (f"{e.name}:ARGUMENT" if takes else e.name))
        return cls(e.name, form, takes, frozenset(e.meta.get("options", ())), e.obj)


_HF_OPTIONS = frozenset({"device", "dtype", "max_batch", "batch_wait_ms", "threads", "adapter"})
_OPENAI_OPTIONS = frozenset({"base_url", "api_key", "timeout", "max_retries", "max_concurrency",
                             "backoff_base", "backoff_max", "return_token_ids", "extra_body",
                             "client"})


@register("policy", "expert", form="expert", takes_argument=False)
def _expert(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    """The task's scripted expert (the harness's ceiling)."""
    from tackroom.policies.expert import ExpertPolicy

    return ExpertPolicy()


@register("policy", "skill-expert", form="skill-expert", takes_argument=False)
def _skill_expert(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    """The expert, gated by the harness's skills (a scripted model that reads skills)."""
    from tackroom.policies.skill_gated import SkillGatedPolicy

    return SkillGatedPolicy()


@register("policy", "bundled", form="bundled", takes_argument=False, options=_HF_OPTIONS)
def _bundled(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    """The small model shipped with tackroom (local transformers, no network)."""
    from tackroom.policies.bundled import make_bundled_policy

    return make_bundled_policy(**opts)


@register("policy", "hf", form="hf:MODEL_DIR[:ADAPTER_DIR]", takes_argument=True,
          options=_HF_OPTIONS)
def _hf(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    """A local transformers checkpoint, with an optional LoRA adapter."""
    if arg == "bundled":  # hf:bundled is the bundled policy
        return _bundled(spec, arg, opts, db)
    from tackroom.policies.hf_policy import make_hf_policy

    return make_hf_policy(spec, **opts)


@register("policy", "openai", form="openai:MODEL[@BASE_URL]", takes_argument=True,
          options=_OPENAI_OPTIONS)
def _openai(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    """Any OpenAI-compatible chat-completions server (vLLM, SGLang, hosted APIs)."""
    from tackroom.policies.openai_policy import make_openai_policy

    return make_openai_policy(spec, **opts)


def backends() -> dict[str, Backend]:
    """Every registered policy backend, by kind (read from the registry when called)."""
    return {e.name: Backend.of(e) for e in entries("policy")}


def policy_forms() -> list[str]:
    """The spec forms of every backend (``expert``, ``openai:MODEL[@BASE_URL]`` …), for
    messages and ``--help``."""
    return [b.form for b in backends().values()]


def backend_of(spec: str) -> tuple[Backend, str]:
    """The backend a spec names and the spec's argument; :class:`PolicyError` if none."""
    kind, _, arg = spec.partition(":")
    if has("policy", kind):
        found = Backend.of(entry("policy", kind))
        if found.takes_argument == bool(arg):
            return found, arg
    close = difflib.get_close_matches(kind, names("policy"), n=2)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise PolicyError(f"unknown policy {spec!r}", "--policy",
                      f"{hint}use one of: {', '.join(policy_forms())}")


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
        opts: backend options; each backend takes those it knows (see :func:`backends`)
            and ignores the rest, so one set of run options fits every policy.

    ::

        policy = make_policy("openai:Qwen/Qwen3-8B", base_url="http://127.0.0.1:8000/v1")
    """
    backend, arg = backend_of(spec)
    mine = {k: v for k, v in opts.items() if k in backend.options and v is not None}
    return backend.build(spec, arg, mine, db)
