"""The query layer: one immutable :class:`Query` made at the edge, a table decider that says which
rollup answers each part exactly and what the raw table must add, and SQL builders that turn the
two into parameterised SQL. Pure Python: it imports neither storage nor http; the runner that
executes the SQL is ``tally.storage.dashboard``. Filters, ranges and comparisons (issue 17) extend
:class:`Query` and the builders, not the controllers."""

from .decider import Plan, decide
from .model import Query, resolve_zone

__all__ = ["Plan", "Query", "decide", "resolve_zone"]
