"""The self-contained HTML report: one file, no network, every number with its interval.

:func:`build_report` reads the records of some runs and writes one HTML file
with inline CSS, inline SVG plots and a small inline script. It shows:

* an overview: the runs, their dates, episode counts, infra errors apart;
* for sealed runs only, every cell of the manifest with the manifest hash
  (held-out harnesses marked, inexpressible pairs and infra errors apart);
* success by harness × policy and by task × harness (per policy), as
  heatmaps with Wilson 95% intervals in each cell's tooltip;
* *ceiling vs achieved*: every lower-bound estimate of the ceiling C(h),
  labelled with its estimator, each policy's success J and the mismatch
  M = C − J (docs/research.md §1);
* the transfer matrix (success of policies trained under one harness,
  evaluated under each) with drops from the diagonal, when told which
  harness each policy was trained under;
* the gain scatter (ΔJ against C and M) when gain data exists;
* an episode browser: a filterable list and a turn-by-turn viewer
  (messages, raw output, parse errors, actions, feedback, observations).

Sections whose data is absent are replaced by a one-line note saying why.
Every number comes from one :class:`~tackroom.report.view.ReportView`
(:func:`~tackroom.report.view.report_view`), the same the terminal tables read,
so they agree with the page; :func:`render_html` writes the page of a view,
:func:`build_report` builds the view and writes its page. The sections are
:mod:`tackroom.report.run_sections` (runs, success tables) and
:mod:`tackroom.report.analysis_sections` (ceiling, transfer, conflation, gain), on
the pieces of :mod:`tackroom.report.html_parts`. The episode
browser's payload is :mod:`tackroom.report.browser`'s.

Model output is untrusted: everything written into the HTML goes through
:func:`~tackroom.report.plots.esc`, the embedded JSON has ``<``, ``>`` and
``&`` escaped as ``\\u003c`` etc. (a ``</script>`` in a model's output cannot
end the data block), the script builds the browser with ``textContent``
only, and a Content-Security-Policy allows no network at all and no script
but the report's own (pinned by its SHA-256).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tackroom.core.errors import ConfigError
from tackroom.report.analysis_sections import (
    _section_ceiling,
    _section_conflation,
    _section_gain,
    _section_transfer,
)
from tackroom.report.assets import CSS, JS
from tackroom.report.browser import MAX_IMAGE_BYTES, browser_data
from tackroom.report.html_parts import ESTIMATOR_NOTES, _note, _when
from tackroom.report.plots import esc
from tackroom.report.run_sections import (
    _section_optimizer,
    _section_overview,
    _section_sealed,
    _section_selfhpo,
    _section_success,
    _section_tasks,
)
from tackroom.report.view import OUTCOMES, ReportView, report_data, report_view

__all__ = ["build_report", "render_html", "report_data", "ESTIMATOR_NOTES", "OUTCOMES"]



def _script_json(obj: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&``."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))






































def _section_browser(d: Mapping[str, Any], index: Mapping[str, Any]) -> str:
    n, k = len(index["rows"]), index["embedded"]
    lede = ("Every recorded episode of these runs (superseded attempts included). Pick one to "
            "step through its turns: the messages the model saw, its raw output, parse errors, "
            "the actions sent, feedback and the observation that followed (← / → keys step).")
    out = [f'<section id="episodes"><h2>Episodes</h2><p class="lede">{esc(lede)}</p>']
    if k < n:
        out.append(_note(
            f"Turns are embedded for {k:,} of {n:,} episodes (limit max_episodes_in_browser="
            f"{index['limit']:,}), spread over every (policy, harness, task, outcome) group; "
            "the others are listed, greyed, with their summary only (see them with "
            "`tackroom show RUN EPISODE`). All numbers above use every episode."))
    shown, cut = index.get("images", [0, 0])
    if cut:
        out.append(_note(
            f"{shown:,} images are embedded; {cut:,} more are not (the report embeds at most "
            f"{MAX_IMAGE_BYTES // 2**20} MB of images). See them with `tackroom show` or in "
            "the store's blobs/ folder."))
    out.append('<div id="browser"></div><noscript><p class="note">The episode browser needs '
               "JavaScript.</p></noscript></section>")
    return "".join(out)


def _page(d: Mapping[str, Any], index: Mapping[str, Any], turns: Mapping[str, Any]) -> str:
    from tackroom.core.version import __version__

    script = JS
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode()
    csp = (f"default-src 'none'; script-src 'sha256-{digest}'; style-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    runs = ", ".join(d["run_ids"])
    title = f"tackroom report — {runs}"
    c = d["counts"]
    created = [r["created_at"] for r in d["runs"] if r["created_at"] is not None]
    when = (_when(min(created)) + ("" if len(created) < 2 else f" to {_when(max(created))}")
            if created else "–")
    sub = (f"runs <code>{'</code>, <code>'.join(esc(r) for r in d['run_ids'])}</code> · "
           f"recorded {esc(when)} · {c['recorded']:,} episodes · "
           f"{c['infra_errors']:,} infra errors (apart) · generated {esc(d['generated_at'])}")
    toc = [("overview", "Overview"), ("success", "Harness × policy"), ("tasks", "Per task"),
           ("ceiling", "Ceiling vs achieved"), ("transfer", "Transfer"),
           ("conflation", "Conflation"), ("gain", "Gain"),
           ("episodes", "Episodes")]
    if d.get("sealed"):
        toc.insert(1, ("sealed", "Sealed evaluation"))
    if d.get("optimizer"):
        toc.insert(1, ("optimizer", "Optimiser"))
    if d.get("selfhpo"):
        toc.insert(1, ("selfhpo", "Self-HPO"))
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">',  # no " & < in it
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f'<meta name="generator" content="tackroom {esc(__version__)}">',
        '<link rel="icon" href="data:,">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        '<header class="top"><div class="wrap">',
        '<h1><span class="brand">tackroom</span> report</h1>',
        f'<div class="sub">{sub}</div><nav class="toc">',
        "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in toc),
        "</nav></div></header><main>",
        _section_overview(d), _section_optimizer(d) if d.get("optimizer") else "",
        _section_selfhpo(d) if d.get("selfhpo") else "",
        _section_sealed(d) if d.get("sealed") else "", _section_success(d), _section_tasks(d),
        _section_ceiling(d),
        _section_transfer(d), _section_conflation(d), _section_gain(d),
        _section_browser(d, index),
        f"<footer>tackroom {esc(__version__)} · one self-contained file: no network, "
        "all data inline</footer></main>",
        f'<script type="application/json" id="tr-index">{_script_json(index)}</script>',
        f'<script type="application/json" id="tr-turns">{_script_json(turns)}</script>',
        f'<script type="application/json" id="tr-data">{_script_json(d)}</script>',
        f"<script>{script}</script></body></html>\n",
    ]
    return "".join(parts)


def render_html(view: ReportView, store: Any, out_path: str | Path, *,
                max_episodes_in_browser: int = 2000) -> Path:
    """Write the HTML page of ``view`` to ``out_path`` (parent folders created); its path.

    ``store`` is the record store the view was built from: the episode browser
    reads the turns of at most ``max_episodes_in_browser`` episodes from it (a
    spread over every policy, harness, task and outcome; all episodes are
    listed and every number uses all of them). The file is written whole and
    then moved into place; on any failure the temporary file is removed, and a
    full disk is a :class:`~tackroom.core.errors.ConfigError` that says so.
    """
    index, turns = browser_data(store, view, max(0, max_episodes_in_browser))
    page = _page(view.data, index, turns)
    out = Path(out_path)
    tmp = out.with_name(out.name + ".tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(page, encoding="utf-8")
        tmp.replace(out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)  # never a half-written page left behind
        raise _write_error(exc, out) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    return out


def _write_error(exc: OSError, out: Path) -> ConfigError:
    """One line for a report that could not be written: a full disk named as such."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ConfigError("no space left on device: the report was not written", str(out),
                           f"free space on the file system of {out.parent}, or pass --out "
                           "on another one")
    return ConfigError(f"cannot write the report ({exc.strerror or exc})", str(out),
                       "pass a writable path with --out")


def build_report(store: Any, run_ids: Sequence[str], out_path: str | Path, *,
                 train_harness: Mapping[str, str] | None = None,
                 max_episodes_in_browser: int = 2000,
                 gain_pairs: Sequence[Sequence[str]] | None = None,
                 compare: Sequence[tuple[tuple[str, str], tuple[str, str]]] | None = None
                 ) -> Path:
    """Write the HTML report of ``run_ids`` to ``out_path`` and return its path.

    :func:`~tackroom.report.view.report_view` (``train_harness``,
    ``gain_pairs`` and ``compare`` are its) and then :func:`render_html`.

    Raises:
        RecordStoreError: a run id is unknown to the store.
    """
    view = report_view(store, run_ids, train_harness=train_harness, gain_pairs=gain_pairs,
                       compare=compare)
    return render_html(view, store, out_path, max_episodes_in_browser=max_episodes_in_browser)
