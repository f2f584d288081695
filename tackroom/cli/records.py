"""``tackroom runs``, ``show`` and ``export``: reading the record store (:mod:`tackroom.app.records`)."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tackroom.cli.common import DEFAULT_DB, DbOpt, console


def runs_cmd(db: DbOpt = DEFAULT_DB,
             limit: Annotated[int, typer.Option(help="How many runs to list.")] = 20) -> None:
    """List recorded runs, newest first.

    [bold]Example[/bold]:  tackroom runs --db ./tackroom-runs/tackroom.duckdb
    """
    from tackroom.app.records import list_runs

    runs = list_runs(store=db, limit=limit)
    table = Table(title=f"Runs in {escape(str(db))}", title_justify="left")
    for col in ("run", "created", "command", "status", "episodes", "success", "infra err"):
        table.add_column(col)
    for r in runs:
        created = r.get("created_at")
        if isinstance(created, (int, float)):
            created = _dt.datetime.fromtimestamp(created).strftime("%Y-%m-%d %H:%M")
        n = r.get("n_episodes", 0)
        rate = r.get("success_rate")
        table.add_row(*(escape(str(v)) for v in (
            r["run_id"], str(created)[:16], r.get("command", ""), r.get("status", ""),
            f"{n}/{r.get('n_planned', '?')}", f"{100 * rate:.0f}%" if rate is not None else "",
            r.get("infra_errors", 0) or "")))
    console.print(table)


def _who_acted(rec: dict | None) -> str:
    """``model``, or which decision point the decision model took, how sure, at what τ."""
    if not rec or rec.get("acted") != "decision":
        return "model"
    point = rec["points"][rec["point"]]
    p = point.get("p") or []
    conf = p[rec["choice"]] if rec["choice"] is not None and rec["choice"] < len(p) else None
    saved = rec.get("saved") or {}
    return (f"decision model ({point['type']}"
            + (f", p {conf:.2f} ≥ τ {point.get('tau') or 0:.2f}" if conf is not None else "")
            + (f"; saved ~{saved.get('prompt_tokens', 0) + saved.get('completion_tokens', 0)}"
               " LLM tokens" if saved else "") + ")")


def show_cmd(run: Annotated[str, typer.Argument(help="Run id (or 'latest').")],
             episode: Annotated[str | None, typer.Argument(
                 help="Episode id or prefix: replay it turn by turn.")] = None,
             db: DbOpt = DEFAULT_DB,
             full: Annotated[bool, typer.Option(help="Show every message, not the last.")] = False,
             ) -> None:
    """Summarise a run, or replay one of its episodes turn by turn.

    [bold]Examples[/bold]

      tackroom show latest

      tackroom show 20261129-101500-ab12 3f9c2a
    """
    from tackroom.app.records import read_episode, read_run
    from tackroom.report.terminal import summary_table

    if episode is not None:
        _replay(read_episode(run, episode, store=db), full)
        return
    recorded = read_run(run, store=db)
    console.print(summary_table(recorded.rows, title=f"Run {recorded.run_id}"))
    table = Table(title="Episodes (first 40)", title_justify="left")
    for col in ("episode", "task", "harness", "policy", "seed", "outcome", "turns"):
        table.add_column(col)
    for r in recorded.rows[:40]:
        table.add_row(*(escape(str(v)) for v in (
            r["episode_id"][:10], r["task"], r["harness"], r["policy"], r["seed"],
            r["outcome"], r["n_turns"])))
    console.print(table)


def _image_note(part: dict) -> str:
    """An image part as one line: its size and, when stored, its file (images are not
    printed; a stored screenshot lives in the store's ``blobs/`` folder)."""
    import base64
    import hashlib

    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url.startswith("data:"):
        return f"[image {url}]"
    data = base64.b64decode(url.split(",", 1)[-1], validate=False)
    return f"[image {len(data) // 1024} kB, sha256 {hashlib.sha256(data).hexdigest()[:12]}]"


def _replay(ep, full: bool) -> None:
    from rich.panel import Panel

    from tackroom.harness.content import text_of

    console.print(Panel(
        f"[bold]{escape(ep.task)}[/bold] under [bold]{escape(ep.harness)}[/bold]"
        f"@{escape(ep.harness_hash)} by {escape(ep.policy)}, seed {ep.seed}, "
        f"attempt {ep.attempt}\n"
        f"instruction: {escape(ep.instruction)}\noutcome: [bold]{ep.outcome.value}[/bold] "
        f"reward {ep.reward:.2f}" + (f"\nerror: {escape(ep.error)}" if ep.error else "")
        + (f"\nfailure mode: {escape(ep.failure_mode)}" if ep.failure_mode else ""),
        title=f"episode {escape(ep.episode_id)}"))
    for t in ep.turns:
        msgs = t.messages if full else t.messages[-1:]
        body = []
        for m in msgs:
            content = text_of(m.get("content"), image=_image_note)
            if m.get("tool_calls"):
                content += "\n" + json.dumps(m["tool_calls"])
            body.append(f"[cyan]{escape(str(m['role']))}[/cyan]: {escape(content)}")
        out = t.raw_text or ""
        if t.tool_calls:
            out += "\n" + "\n".join(f"{c['function']['name']}({c['function']['arguments']})"
                                    for c in t.tool_calls)
        who = _who_acted(t.delegation)
        body.append(f"[green]{who}[/green]: {escape(out.strip())}")
        if t.delegation and t.delegation.get("fallback"):
            body.append(f"[red]decision model fell back to the LLM[/red]: "
                        f"{escape(t.delegation['fallback'])}")
        if t.parse_error:
            body.append(f"[red]parse error[/red]: {escape(t.parse_error)}")
        if t.actions:
            body.append("[yellow]actions[/yellow]: " + escape(", ".join(
                json.dumps(a) for a in t.actions)))
        if t.action_error:
            body.append(f"[red]action error[/red]: {escape(t.action_error)}")
        if t.feedback:
            body.append(f"[magenta]feedback[/magenta]: {escape(t.feedback)}")
        kind = f"side call ({t.side})" if t.side else "turn"
        thread = f" · thread {t.thread}" if t.thread else ""
        console.print(Panel("\n".join(body), title=f"{kind} {t.index}{thread}",
                            subtitle=f"policy {t.t_policy * 1000:.0f} ms · env "
                            f"{t.t_env * 1000:.0f} ms · tokens "
                            f"{t.prompt_tokens}+{t.completion_tokens}"))
    agent = ep.meta.get("agent") if isinstance(ep.meta, dict) else None
    if isinstance(agent, dict):
        console.print(_agent_panel(agent, ep.turns))
    verifier = ep.meta.get("verifier") if isinstance(ep.meta, dict) else None
    if isinstance(verifier, dict):
        notes = "".join(f"note: {n}\n" for n in verifier.get("notes") or [])
        console.print(Panel(escape(notes + str(verifier.get("output") or "(no output)")),
                            title=f"verifier (exit {escape(str(verifier.get('exit')))})"))


#: Lines of an agent CLI's output ``tackroom show`` prints (its tail: errors come last).
AGENT_TAIL_LINES = 30


def _agent_panel(agent: dict, turns: list) -> object:
    """The agent CLI's run (``meta.agent``): exit status, time, calls, and its output's tail."""
    from rich.panel import Panel

    exit_ = agent.get("exit")
    how = "timed out" if agent.get("timed_out") else f"exit {exit_}"
    if agent.get("killed") and not agent.get("timed_out"):
        how += f", killed ({agent['killed']})"
    seconds = agent.get("seconds")
    facts = [how]
    if isinstance(seconds, (int, float)):
        facts.append(f"{seconds:.1f} s")
    if isinstance(agent.get("startup_s"), (int, float)):
        facts.append(f"first model call after {agent['startup_s']:.1f} s")
    side = sum(1 for t in turns if getattr(t, "side", None))
    facts.append(f"{len(turns) - side} agent turn(s)" + (f", {side} side call(s)" if side else ""))
    for key, what in (("refused_calls", "refused past the budget"),
                      ("backend_errors", "backend error(s)"),
                      ("unanswered_calls", "call(s) to an API no dialect answers"),
                      ("side_calls", "token count(s)")):
        n = agent.get(key)
        n = len(n) if isinstance(n, list) else n
        if n:
            facts.append(f"{n} {what}")
    output = str(agent.get("output") or "").rstrip()
    lines = output.splitlines()
    tail = "\n".join(lines[-AGENT_TAIL_LINES:]) if lines else "(no output)"
    if len(lines) > AGENT_TAIL_LINES:
        tail = f"[... {len(lines) - AGENT_TAIL_LINES} earlier line(s) ...]\n{tail}"
    name = f"{agent.get('cli', '?')} {agent.get('version', '')}".strip()
    return Panel(escape(" · ".join(facts) + "\n" + tail), title=f"agent CLI {escape(name)}")


def export_cmd(run: Annotated[str, typer.Argument(help="Run id (or 'latest').")],
               fmt: Annotated[str, typer.Option("--format", "-f",
                                                help="jsonl | parquet | atif")] = "jsonl",
               out: Annotated[str | None, typer.Option("--out", "-o", help="Output path.")] = None,
               db: DbOpt = DEFAULT_DB) -> None:
    """Export a run's episodes: JSONL, Parquet (for `datasets`), or ATIF trajectory.json files.

    [bold]Examples[/bold]

      tackroom export latest --format parquet --out episodes.parquet

      tackroom export latest --format atif --out trajectories/
    """
    from tackroom.app.records import export_run

    done = export_run(run, fmt=fmt, out=out, store=db)
    console.print(f"wrote {done.n_episodes} episodes to {out or done.path}", markup=False,
                  highlight=False)
