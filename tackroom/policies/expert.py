"""The expert policy: scripted solvers that act through the harness's own interface.

The expert decides abstract actions from the observation (``Click(ref)``),
then the harness writes them in its own format — tool calls, commands, JSON,
coordinates — and the episode loop parses that text back like any model
reply. So an expert's success under a harness is a lower bound of what the
harness allows (the *expert* ceiling estimator).
"""

from __future__ import annotations

from tackroom.core.actions import Action
from tackroom.core.policy import PolicyRequest, PolicyResponse


class ExpertPolicy:
    """Scripted solvers of the suite, one per task; ``id = "expert"``.

    Subclasses may refuse actions (:meth:`refuse`) or annotate the reply
    (:meth:`finish`); ``skill-expert`` (:mod:`tackroom.policies.skill_gated`) does both.
    """

    id = "expert"

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        view = request.view
        if view is None or view.expert is None:
            return PolicyResponse(text="(no expert solver for this task)")
        actions = view.expert(view.observation, view.state)
        if not actions:
            return PolicyResponse(text="(the expert has no action for this state)")
        refused = self.refuse(request, actions)
        if refused is not None:
            return refused
        response = view.encode(actions)
        if response is None:
            kinds = ", ".join(sorted({a.kind for a in actions}))
            return PolicyResponse(text=f"(this harness cannot express: {kinds})")
        return self.finish(request, actions, response)

    def refuse(self, request: PolicyRequest, actions: list[Action]) -> PolicyResponse | None:
        """The reply instead of taking ``actions`` (``None``: take them)."""
        return None

    def finish(self, request: PolicyRequest, actions: list[Action],
               response: PolicyResponse) -> PolicyResponse:
        """The encoded reply, as sent."""
        return response

    async def aclose(self) -> None:
        return None
