"""The BiPA audit of a skill optimiser: selection effect, dev → test, read graphs, cost.

Everything here works on plain data, so the optimiser loop (or ``tackroom
audit``) can feed it from the records. One module per question:

* :mod:`.replay` — **acceptance replay** (:func:`acceptance_replay`) re-runs an
  acceptance rule (:mod:`tackroom.optimize.acceptance`) on the same candidates scored
  on fresh seeds: the gain seen at selection minus the gain of the same selected
  candidates on fresh units is the *selection effect* (the winner's curse).
* :mod:`.devtest` — **dev → test** (:func:`dev_test`): each accepted candidate's gain
  on the dev split against its gain on the held-out test split, paired-bootstrap
  intervals.
* :mod:`.readgraph` — the **read graph** (:func:`read_graph`): the bipartite graph
  turns × text units of one episode, with an ``in_context`` edge when the unit was in
  the turn's messages and an ``acted_on`` edge when the turn's output followed it.
  :func:`unit_usage` sums graphs over episodes: which skill rules are ever acted on,
  and which never are.
* :mod:`.cost` — **cost** (:func:`edit_cost`): input tokens and turns per episode
  added by an accepted edit, paired on shared (task, seed).

Every result is a frozen dataclass with ``to_dict()`` (JSON-able: NaN becomes
``None``); :func:`tackroom.report.audit_tables.render_audit_tables` renders them as
rich tables.
"""

from tackroom.optimize.audit.cost import Cost, CostDelta, edit_cost, edit_costs
from tackroom.optimize.audit.devtest import DevTestRow, dev_test
from tackroom.optimize.audit.readgraph import (
    Edge,
    ReadGraph,
    Unit,
    UnitUsage,
    read_graph,
    unit_usage,
)
from tackroom.optimize.audit.replay import (
    Agreement,
    SelectionEffect,
    acceptance_replay,
    replay_agreement,
)
from tackroom.optimize.audit.results import Interval

__all__ = [
    "Interval", "SelectionEffect", "Agreement", "acceptance_replay", "replay_agreement",
    "DevTestRow", "dev_test",
    "Unit", "Edge", "ReadGraph", "UnitUsage", "read_graph", "unit_usage",
    "CostDelta", "Cost", "edit_cost", "edit_costs",
]
