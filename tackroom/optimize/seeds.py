"""Hand-written seed skills: the baseline an optimiser's learned skills must beat.

Each suite's seeds are procedural advice a careful person would write after reading the
suite's task families, never the tasks themselves: no task ids, seeds, file paths or
answers (the leakage guard passes them; the tests check it). BiPA's finding is that learned
skills barely beat such seeds, so the optimiser reports its gain over them, not only over the
bare harness. ``seed_edits(suite)`` is the same as an edit list, ready for
:func:`~tackroom.optimize.edits.make_candidate`.
"""

from __future__ import annotations

from tackroom.core.errors import ConfigError
from tackroom.harness.spec import Skill
from tackroom.optimize.edits import Edit

_WEB = (
    Skill("reading-the-task", "\n".join((
        "- Read the instruction word by word before acting: the quoted text is exactly what "
        "to click, select or type, with the same spelling and case.",
        "- Find the element whose visible text or label matches the quoted text exactly; "
        "similar words nearby are distractors.",
        "- When the instruction names several things (items to tick, fields to fill, buttons "
        "in an order), list them to yourself and do each one, in the order given.",
    ))),
    Skill("acting-on-the-page", "\n".join((
        "- Act only on elements that are shown; if what you need is not visible, it is behind "
        "a tab, a collapsed section or a menu: open the likely one and look again.",
        "- Click a label or the box of a checkbox or radio button to set it; click it again "
        "only to clear it. Tick exactly the items asked for and leave the others clear.",
        "- Pick an option of a list box by selecting it, not by typing its text.",
        "- To type into a field, type the exact text the instruction gives; for a form, match "
        "each value to the field whose label says what it is, not to the field's position.",
        "- When the instruction says to press Enter, press it in the field instead of looking "
        "for a button; when it says to submit, click the submit button last, after every "
        "field and choice is set.",
        "- To focus a field, click it; count fields from the top when an instruction says "
        "first, second or third.",
    ))),
    Skill("checking-your-work", "\n".join((
        "- After each action, read the new page: if nothing changed, or an error was shown, "
        "the action did not do what you meant; try a different element rather than the same "
        "one again.",
        "- For copying and arithmetic, write the value down from the page first (a code, a "
        "sum), check it against the instruction, then type only that value.",
        "- An action that ends the task (submit, a final click) cannot be undone: check every "
        "requirement of the instruction before it.",
    ))),
)

_CODE = (
    Skill("fixing-code", "\n".join((
        "- Read the issue twice and restate the behaviour it asks for, including edge cases "
        "it mentions (empty input, negative numbers, zero).",
        "- Find the function the issue is about and read it and its callers before editing.",
        "- Reproduce the problem with a short script or the existing tests before the fix, "
        "and run the same check after it.",
        "- Make the smallest change that gives the asked-for behaviour; keep existing "
        "behaviour and public signatures as they are.",
        "- Run the repository's existing tests before you finish: hidden tests check old "
        "behaviour too.",
    ))),
)

_TERMINAL = (
    Skill("working-in-a-shell", "\n".join((
        "- Look before acting: list the working directory and read the input files' first "
        "lines to learn their format.",
        "- Write the output exactly where and in the format the instruction asks (file name, "
        "column order, trailing newline).",
        "- Prefer one small script you can rerun over long one-liners; rerun it after each "
        "change and inspect its output.",
        "- Check the result yourself (count lines, compare a few values) before you finish.",
    ))),
)

#: suite -> its seed skills. MiniWoB++'s tasks are the toy suite's families at full size.
SEEDS: dict[str, tuple[Skill, ...]] = {
    "toy": _WEB, "miniwob": _WEB, "code": _CODE, "terminal": _TERMINAL,
}


def seed_skills(suite: str) -> list[Skill]:
    """The hand-written seed skills for ``suite`` (``toy``, ``miniwob``, ``code``, ``terminal``)."""
    if suite not in SEEDS:
        raise ConfigError(f"no seed skills for suite {suite!r}", "seed skills",
                          f"suites with seeds: {', '.join(sorted(SEEDS))}")
    return list(SEEDS[suite])


def seed_edits(suite: str) -> list[Edit]:
    """The seed skills as edits (one ``add_skill`` each): the hand-written baseline candidate."""
    return [Edit("add_skill", skill=s.name, text=s.text, why="hand-written seed skill")
            for s in seed_skills(suite)]
