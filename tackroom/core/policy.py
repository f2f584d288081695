"""The policy protocol: chat messages (+ tool schemas) in, text and/or tool calls out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from tackroom.core.actions import Action
from tackroom.core.observation import Observation
from tackroom.core.task import Expert, Task


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters; part of the episode id, so two runs that differ here differ.

    ``top_k`` keeps the ``k`` most likely tokens before ``top_p`` is applied (as
    vLLM and transformers do); ``0`` is off. It is left out of :meth:`to_dict` when
    off, so records, run configs and episode ids made before it existed are unchanged.
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None
    logprobs: bool = False
    top_k: int = 0

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p,
                               "max_tokens": self.max_tokens, "seed": self.seed,
                               "logprobs": self.logprobs}
        if self.top_k:
            out["top_k"] = self.top_k
        return out


@dataclass(frozen=True)
class ToolCall:
    """An OpenAI-style tool call; ``arguments`` is the raw JSON string the model wrote."""

    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class PolicyResponse:
    """One model answer.

    ``token_ids`` / ``logprobs`` are the sampled completion tokens and their
    log-probabilities when the backend returns them (``None`` otherwise).
    ``adapter`` names the LoRA adapter that served the call, when any.
    ``notes`` say what the backend could not take as the server sent it (usage
    counts that are not counts, log-probs that are not finite): that value is
    recorded as missing (``0`` / ``None``) and the note kept with the turn.
    ``prompt_token_ids`` are the prompt's token ids as the backend tokenised it,
    when it returns them (``tackroom serve``, vLLM's ``return_token_ids``).
    """

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    model: str = ""
    adapter: str | None = None
    finish_reason: str = "stop"
    notes: list[str] = field(default_factory=list)
    prompt_token_ids: list[int] | None = None


@dataclass
class ExpertView:
    """What a scripted policy (expert, replay) may see besides the messages.

    ``encode`` is the harness's own encoder: it writes actions the way a model
    would have to (text commands or tool calls) and returns ``None`` for an
    action the harness cannot express.
    """

    task: Task
    observation: Observation
    state: dict[str, Any]
    encode: Callable[[list[Action]], PolicyResponse | None]
    expert: Expert | None = None
    seed: int = 0
    harness: str = ""
    turn: int = 0


@dataclass
class PolicyRequest:
    """Everything a policy gets for one turn."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    sampling: Sampling = field(default_factory=Sampling)
    view: ExpertView | None = None


@runtime_checkable
class Policy(Protocol):
    """Anything that answers chat messages.

    ``id`` names the policy in records (never contains secrets).
    """

    id: str

    async def act(self, request: PolicyRequest) -> PolicyResponse: ...

    async def aclose(self) -> None: ...
