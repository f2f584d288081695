"""The replay policy: re-emits what a recorded policy wrote, turn by turn.

For each episode it finds the recorded episode of the source run with the
same task, harness and seed, and answers turn *t* with that episode's turn
*t* output. Useful to re-score recorded outputs under a changed parser or
environment, and to test the pipeline without a model.

It lives with the records, not with the other policy backends, because it is
built from a record store: the policies layer stands below the records and
must not read them.
"""

from __future__ import annotations

from typing import Any

from tackroom.core.errors import PolicyError
from tackroom.core.policy import Policy, PolicyRequest, PolicyResponse, ToolCall
from tackroom.core.registry import register


class ReplayPolicy:
    """Replays the outputs recorded in ``run_id`` of the record store at ``db``."""

    def __init__(self, run_id: str, db: str, source_policy: str | None = None) -> None:
        from tackroom.records.store import RecordStore

        self.id = f"replay:{run_id}" + (f":{source_policy}" if source_policy else "")
        self._turns: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
        with RecordStore(db) as store:
            if store.run(run_id) is None:
                raise PolicyError(f"no run {run_id!r} to replay", db,
                                  "list runs with `tackroom runs`")
            rows = store.episodes(run_id=run_id)
            for row in rows:
                if source_policy and row["policy"] != source_policy:
                    continue
                key = (row["task"], row["harness"], int(row["seed"]))
                if key in self._turns and row["attempt"] <= self._turns[key][0]["attempt"]:
                    continue
                turns = [t.to_dict() for t in store.turns(row["episode_id"], run_id=run_id)]
                self._turns[key] = [{"attempt": row["attempt"]}, *turns]

    async def act(self, request: PolicyRequest) -> PolicyResponse:
        view = request.view
        if view is None:
            return PolicyResponse(text="(replay needs the episode context)")
        recorded = self._turns.get((view.task.key, view.harness, view.seed))
        if recorded is None or view.turn + 1 >= len(recorded):
            return PolicyResponse(text="(nothing recorded for this turn)")
        turn = recorded[view.turn + 1]
        calls = [ToolCall(tc.get("id", ""), tc.get("function", {}).get("name", ""),
                          tc.get("function", {}).get("arguments", ""))
                 for tc in turn.get("tool_calls") or []]
        return PolicyResponse(text=turn.get("raw_text"), tool_calls=calls,
                              prompt_tokens=turn.get("prompt_tokens", 0),
                              completion_tokens=turn.get("completion_tokens", 0),
                              token_ids=turn.get("token_ids"), logprobs=turn.get("logprobs"))

    async def aclose(self) -> None:
        return None


@register("policy", "replay", form="replay:RUN_ID[:POLICY]", takes_argument=True)
def _replay(spec: str, arg: str, opts: dict[str, Any], db: str | None) -> Policy:
    """The actions a recorded run took, replayed turn by turn."""
    from tackroom.records.paths import default_db

    run_id, _, source = arg.partition(":")
    return ReplayPolicy(run_id, db or default_db(), source or None)
