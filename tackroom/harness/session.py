"""A harness applied to one episode: messages in, actions out.

The session is the only place where a harness spec turns into behaviour:
it builds the conversation the model sees (system prompt, action format,
skills, budgets, history window), parses the model's reply through the
harness's parser and interface, and writes the feedback the model is shown
after a malformed reply or a rejected action.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tackroom.core.actions import Action
from tackroom.core.observation import Observation
from tackroom.core.policy import PolicyResponse
from tackroom.core.registry import get
from tackroom.harness.content import merge_text, parts_of, text_part
from tackroom.harness.interfaces import ActionInterface, Call, CallError
from tackroom.harness.parsers import OutputParser, ParseError
from tackroom.harness.spec import HarnessSpec

#: Stands for ``{observation}`` while a template is formatted around content parts.
_SLOT = "\x00tackroom-observation\x00"


@dataclass
class Parsed:
    """The result of reading one reply: actions to run, or the error the model sees."""

    actions: list[Action] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    error: str | None = None
    dropped: int = 0  # calls beyond actions_per_turn, ignored


@dataclass
class _Exchange:
    """One past turn: what the model wrote, and the tool results that answered it."""

    assistant: dict[str, Any]
    tool_results: list[dict[str, Any]]


class HarnessSession:
    """Per-episode harness state. Create one per episode with the first observation."""

    def __init__(self, spec: HarnessSpec, instruction: str) -> None:
        self.spec = spec
        self.instruction = instruction
        self.interface: ActionInterface = spec.interface
        self.parser: OutputParser = spec.parser
        self._render = get("renderer", spec.observation["renderer"])
        self._render_opts = {"max_chars": spec.observation["max_chars"],
                             **spec.observation["options"]}
        self._tools = spec.tools
        self.history = int(spec.loop["history"])
        self.per_turn = int(spec.loop["actions_per_turn"])
        self._system = self._system_prompt()
        # users[k] is the k-th user turn (observation + feedback); exchanges[k] answers it.
        # A user turn is a string, or content parts when the renderer showed images.
        self._users: list[str | list[dict[str, Any]]] = []
        self._exchanges: list[_Exchange] = []
        # The page last shown: the one the next reply acts on (for interfaces that look
        # their targets up in it, ``ActionInterface.resolve``).
        self._shown: Observation | None = None

    @classmethod
    def open(cls, spec: HarnessSpec, instruction: str) -> HarnessSession:
        """The session for ``spec``: its parser's own conversation when the format brings
        one (:attr:`OutputParser.conversation`, e.g. terminus-2's), else this one."""
        conversation = getattr(spec.parser, "conversation", None) or cls
        session: HarnessSession = conversation(spec, instruction)
        return session

    # -- prompt --------------------------------------------------------------------------
    @property
    def preamble(self) -> str:
        """What the model reads before the first observation: the system prompt."""
        return self._system

    def _system_prompt(self) -> str:
        parts = [self.spec.prompt["system"].strip(), self.parser.describe(self.interface)]
        if self.per_turn > 1:
            parts.append(f"You may give up to {self.per_turn} actions per turn; "
                         "they run in order.")
        else:
            parts.append("Give exactly one action per turn.")
        for skill in self.spec.skills:
            parts.append(f"## Skill: {skill.name}\n{skill.text.strip()}")
        return "\n\n".join(p for p in parts if p)

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """Tool schemas to send with each request (``None`` for text formats)."""
        return self._tools

    def render(self, obs: Observation) -> str:
        """The observation as this harness shows it: text, or text with images
        (a :class:`~tackroom.harness.content.RenderedParts`, or a list of content parts)."""
        self._shown = obs
        return self._render(obs, self._render_opts)

    def budget_line(self, turn: int, tokens_used: int, seconds_left: float | None) -> str:
        """The budget statement appended to each user turn, if the harness states it."""
        b = self.spec.budget
        if not b["state_to_model"]:
            return ""
        parts = [f"turn {turn + 1} of {b['turns']}"]
        if b["tokens"]:
            parts.append(f"{max(0, b['tokens'] - tokens_used)} tokens left")
        if seconds_left is not None:
            parts.append(f"{max(0.0, seconds_left):.0f} s left")
        return "\n\nBudget: " + "; ".join(parts) + "."

    def add_observation(self, rendered: str | list[dict[str, Any]], feedback: str | None,
                        budget: str) -> None:
        """Append the next user turn (the first one carries the task).

        When ``rendered`` has content parts (images), the turn's content is a list of
        parts: the template's text around ``{observation}`` as text parts, the
        observation's parts in its place.
        """
        parts = parts_of(rendered)
        fields: dict[str, Any] = {"instruction": self.instruction, "budget": budget,
                                  "observation": _SLOT if parts is not None else rendered}
        if not self._users:
            text = self.spec.prompt["first_turn"].format(**fields)
        else:
            fb = f"{feedback.strip()}\n\n" if feedback else ""
            text = self.spec.prompt["next_turn"].format(**fields, feedback=fb)
        if parts is None:
            self._users.append(text)
            return
        pieces = text.split(_SLOT)
        content: list[dict[str, Any]] = [text_part(pieces[0])]
        for piece in pieces[1:]:
            content.extend(parts)
            content.append(text_part(piece))
        self._users.append(merge_text(content))

    def messages(self) -> list[dict[str, Any]]:
        """The conversation for the next model call, cut to the history window."""
        n = len(self._users)
        first = max(0, n - 1 - self.history)
        msgs: list[dict[str, Any]] = [{"role": "system", "content": self._system}]
        for k in range(first, n):
            content = self._users[k]
            if k == first and k > 0:
                # The task line must survive the window; older turns are summarised.
                head = f"Task: {self.instruction}\n({k} earlier turn(s) omitted)\n\n"
                content = (head + content if isinstance(content, str)
                           else merge_text([text_part(head), *content]))
            msgs.append({"role": "user", "content": content})
            if k < len(self._exchanges):
                ex = self._exchanges[k]
                msgs.append(ex.assistant)
                msgs.extend(ex.tool_results)
        return msgs

    # -- replies -------------------------------------------------------------------------
    def parse(self, response: PolicyResponse) -> Parsed:
        """Read a reply into actions (at most ``actions_per_turn``) or a model-facing error."""
        try:
            calls = self.parser.parse(response, self.interface)
        except ParseError as e:
            return Parsed(error=str(e))
        kept = calls[: self.per_turn]
        actions: list[Action] = []
        for call in kept:
            try:
                actions.extend(self.interface.resolve(call, self._shown))
            except CallError as e:
                return Parsed(calls=calls, error=str(e))
        return Parsed(actions=actions, calls=kept, dropped=len(calls) - len(kept))

    def record_reply(self, response: PolicyResponse, results: list[str]) -> None:
        """Remember what the model wrote; ``results`` answer its tool calls in order."""
        assistant: dict[str, Any] = {"role": "assistant", "content": response.text or ""}
        tool_results: list[dict[str, Any]] = []
        if response.tool_calls:
            assistant["tool_calls"] = [tc.to_dict() for tc in response.tool_calls]
            for i, tc in enumerate(response.tool_calls):
                content = results[i] if i < len(results) else "not executed"
                tool_results.append({"role": "tool", "tool_call_id": tc.id, "content": content})
        self._exchanges.append(_Exchange(assistant, tool_results))

    def feedback_for_parse_error(self, error: str) -> str:
        return (f"Your last reply could not be read as an action: {error}. "
                f"Nothing was done. Reply again in the required format.")

    def feedback_for_action_error(self, error: str) -> str:
        text = f"Your last action failed: {error}."
        if self.spec.loop["on_action_error"] == "reflect":
            text += " " + self.spec.loop["reflect_prompt"].strip()
        return text

    # -- experts -------------------------------------------------------------------------
    def encode(self, actions: list[Action], obs: Observation) -> PolicyResponse | None:
        """Write ``actions`` the way a model would under this harness (for experts).

        Returns ``None`` when the harness cannot express one of them. At most
        ``actions_per_turn`` calls are written; a scripted expert re-plans from
        the next observation.
        """
        calls: list[Call] = []
        for action in actions:
            expressed = self.interface.express(action, obs)
            if expressed is None:
                return None if not calls else self.parser.encode(calls, self.interface)
            if len(calls) + len(expressed) > self.per_turn and calls:
                break
            calls.extend(expressed)
            if len(calls) >= self.per_turn:
                break
        if not calls:
            return None
        return self.parser.encode(calls[: max(self.per_turn, 1)], self.interface)
