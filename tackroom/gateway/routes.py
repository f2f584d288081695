"""A gateway route: one episode's way in (its token), and what its calls recorded.

:class:`Route` is what :meth:`ModelGateway.open_episode
<tackroom.gateway.server.ModelGateway.open_episode>` hands out and what the
runner reads back when the CLI is done: the turns, what each call asked for,
the backend's failures, the side calls (token counting) and the requests no
API dialect answers (a CLI calling an API this gateway does not speak).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from tackroom.core.episode import Turn
from tackroom.core.policy import Sampling
from tackroom.gateway.calls import CallClassifier
from tackroom.wire import ApiError

__all__ = ["BUDGET_STATUS", "DEFAULT_MODEL_NAME", "BudgetExhausted", "Route", "digest"]

#: The model name ``/v1/models`` lists unless the gateway is given another.
DEFAULT_MODEL_NAME = "tackroom"
#: The status of a call refused because its route's turn budget is used up.
BUDGET_STATUS = 400
#: Requests for a route no dialect has, kept per route at most (a CLI in a loop of 404s).
MAX_UNANSWERED = 64


def digest(token: str) -> bytes:
    """A token's SHA-256: routes are looked up by it, so lookup time says nothing of a token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass
class Route:
    """One episode's way in: its token, base URL, enforced sampling and what it recorded.

    ``turns[i]`` is the i-th answered call (in the order the answers came);
    ``requested[i]`` is everything else that call's body held (the client's own
    ``temperature``, ``max_tokens``, ``stream``, ``model``, ...; ``dialect`` when
    the call came in another API than chat completions); ``errors`` the calls
    the backend failed (status sent, error kind, the full error line).
    """

    token: str
    base_url: str
    sampling: Sampling
    label: str = ""
    model: str = DEFAULT_MODEL_NAME
    turns: list[Turn] = field(default_factory=list)
    requested: list[dict[str, Any]] = field(default_factory=list)
    #: ``tools[i]``: the tool schemas call ``i`` offered (a CLI's own; ``None``: none).
    tools: list[list[dict[str, Any]] | None] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    #: Requests for a route no dialect answers (404): ``method``, ``path``, ``user_agent``
    #: (which CLI), ``at`` — the API the CLI needed and this gateway does not speak.
    unanswered: list[dict[str, Any]] = field(default_factory=list)
    #: Calls answered without a model turn: ``{"kind": "count_tokens", "dialect", "tokens"}``.
    side_calls: list[dict[str, Any]] = field(default_factory=list)
    closed: bool = False
    opened_at: float = field(default_factory=time.time)
    #: When the first call arrived (``time.time()``; ``None`` before): a CLI's start-up.
    first_call_at: float | None = None
    #: Answers this route's calls instead of the gateway's policy (an agent harness's
    #: scripted expert, which knows its episode's task), when set.
    policy: Any = field(default=None, repr=False)
    #: Model calls this route answers at most (the harness's ``[budget] turns``); a call
    #: past it is refused (see :data:`BUDGET_STATUS`) and counted in ``refused``.
    max_turns: int | None = None
    #: Calls refused because ``max_turns`` were used (the CLI asked for more).
    refused: int = 0
    #: Agent turns being answered now (they count against ``max_turns`` while in flight).
    pending: int = field(default=0, repr=False)
    #: Tells agent turns from side calls and threads (:mod:`tackroom.gateway.calls`).
    calls: CallClassifier = field(default_factory=CallClassifier, repr=False)

    @property
    def agent_turns(self) -> int:
        """Agent turns answered (side calls — ``Turn.side`` set — are not counted)."""
        return sum(1 for t in self.turns if t.side is None)

    @property
    def exhausted(self) -> bool:
        """Whether the turn budget is used up: ``max_turns`` agent turns answered or in flight
        (side calls never count against it)."""
        return self.max_turns is not None and self.agent_turns + self.pending >= self.max_turns

    def relabel(self, threads: dict[int, str]) -> None:
        """The turns of ``threads`` turned out to be side calls: label them so."""
        for t in self.turns:
            if t.thread in threads and t.side is None:
                t.side = threads[t.thread]

    @property
    def root_url(self) -> str:
        """The base URL without ``/v1``: what Anthropic's and Gemini's SDKs take as a base."""
        return self.base_url.removesuffix("/v1")

    def env(self) -> dict[str, str]:
        """Environment variables that point an OpenAI-, Anthropic- or Gemini-SDK CLI here."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_BASE": self.base_url,
                "OPENAI_API_KEY": self.token, "OPENAI_MODEL": self.model,
                "ANTHROPIC_BASE_URL": self.root_url, "ANTHROPIC_API_KEY": self.token,
                "GOOGLE_GEMINI_BASE_URL": self.root_url, "GEMINI_API_KEY": self.token}

    def note_unanswered(self, method: str, path: str, user_agent: str | None) -> None:
        """Record a request for a route no dialect answers (the first :data:`MAX_UNANSWERED`)."""
        if len(self.unanswered) < MAX_UNANSWERED:
            self.unanswered.append({"method": method, "path": path[:200],
                                    "user_agent": (user_agent or "")[:200], "at": time.time()})

    def missing_api(self, cli: str = "the CLI") -> str | None:
        """One line naming the API the CLI called that no dialect answers; ``None`` if none."""
        if not self.unanswered:
            return None
        first = self.unanswered[0]
        agent = f" (User-Agent {first['user_agent']!r})" if first["user_agent"] else ""
        more = f", and {len(self.unanswered) - 1} more such call(s)" \
            if len(self.unanswered) > 1 else ""
        return (f"{cli} called {first['method']} {first['path']}{agent}, which no dialect of "
                f"this gateway answers{more}")

    def __repr__(self) -> str:  # never the token
        return (f"Route(label={self.label!r}, base_url={self.base_url!r}, "
                f"turns={len(self.turns)}, errors={len(self.errors)}, closed={self.closed})")


class BudgetExhausted(ApiError):
    """The refusal of a call past its route's ``max_turns``: final, not to be retried.

    A 400 (``invalid_request_error``, code ``budget_exhausted``): what every
    client library treats as final. OpenAI's SDKs retry 408/409/429/5xx, and
    litellm (under mini-swe-agent, Aider and OpenHands) maps the other statuses
    it has no class for — 403 and 402 among them — to a generic ``APIError``
    that Aider retries for a minute; a 400 is a ``BadRequestError``, which none
    of the shipped CLIs retries more than once. The message names no context
    length (a CLI would compact its history and call again).
    """

    def __init__(self, max_turns: int) -> None:
        super().__init__(BUDGET_STATUS, f"this episode's turn budget of {max_turns} model "
                                        "call(s) is used up; stop here",
                         code="budget_exhausted")
