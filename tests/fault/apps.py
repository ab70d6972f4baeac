"""The Apps the fault tests run in worker subprocesses (``tests.fault.apps:app``).

Topic and app names and the scenario come from the environment, read at import
time, so every test gives its workers fresh topics, a fresh consumer group and a
fresh checkpoint topic. Each operator is written twice: for the engine, and for
the brute-force reference (``tests/expect.py``) that the outputs are checked
against. The aggregations depend on the values (a sum, a max), not only on how
many records there are, so a lost, duplicated or reordered record shows.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from streamremat import (
    App,
    Collect,
    Count,
    Hopping,
    Max,
    Operator,
    Quantiles,
    Session,
    Sum,
    Tumbling,
)
from tests.expect import RefOperator
from tests.unit.reference import RefWindow, ref_quantile

SOURCE = os.environ.get("STREAMREMAT_FAULT_SOURCE", "fault-source")
APP_NAME = os.environ.get("STREAMREMAT_FAULT_APP", "fault")
SCENARIO = os.environ.get("STREAMREMAT_FAULT_SCENARIO", "tumbling")
#: the operator of the single-operator scenarios (names its dead-letter topic)
OPERATOR = "sums"
WINDOW_MS = 1_000


def _count_sum(values: list[dict[str, Any]]) -> dict[str, int]:
    return {"n": len(values), "total": sum(v["x"] for v in values)}


def _count_max(values: list[dict[str, Any]]) -> dict[str, int]:
    return {"n": len(values), "top": max(v["x"] for v in values)}


@dataclass(frozen=True)
class FaultOperator:
    """One operator of a scenario: the engine's definition and the reference's."""

    name: str
    sink_suffix: str
    window: Any
    ref_window: RefWindow
    aggregate: Callable[[], Any]
    result: Callable[[list[dict[str, Any]]], Any]
    rematerialize: str = "auto"

    def engine(self, source: str) -> Operator:
        return Operator(name=self.name, source=source, sink=f"{source}-{self.sink_suffix}",
                        window=self.window, aggregate=self.aggregate(),
                        rematerialize=self.rematerialize)

    def reference(self, source: str) -> RefOperator:
        return RefOperator(name=self.name, source=source, sink=f"{source}-{self.sink_suffix}",
                           window=self.ref_window, fields=("x",), result=self.result)


def _count_quantiles(values: list[dict[str, Any]]) -> dict[str, Any]:
    xs = [v["x"] for v in values]
    return {"n": len(xs), "q": [ref_quantile(xs, q) for q in QS]}


def _sums() -> dict[str, Any]:
    return {"n": Count(), "total": Sum("x")}


QS = (0.5, 0.99)


def _quantiles() -> dict[str, Any]:
    return {"n": Count(), "q": Quantiles("x", QS)}


def _maxes() -> dict[str, Any]:
    return {"n": Count(), "top": Max("x")}


TUMBLING = FaultOperator(OPERATOR, "out", Tumbling(WINDOW_MS),
                         RefWindow("tumbling", WINDOW_MS), _sums, _count_sum)
HOPPING = FaultOperator(OPERATOR, "out", Hopping(WINDOW_MS, 250, grace_ms=10),
                        RefWindow("hopping", WINDOW_MS, 250, grace=10), _sums, _count_sum)
SESSION = FaultOperator(OPERATOR, "out", Session(60),
                        RefWindow("session", 60), _maxes, _count_max)
SESSIONS_TOO = FaultOperator("sessions", "sessions", Session(60, grace_ms=5),
                             RefWindow("session", 60, grace=5), _maxes, _count_max)

#: exact quantiles: state that grows with the data (issue 14), stored or recomputed
QUANTILES_STORE = FaultOperator(OPERATOR, "out", Tumbling(WINDOW_MS),
                                RefWindow("tumbling", WINDOW_MS), _quantiles, _count_quantiles,
                                rematerialize="store")
QUANTILES_RECOMPUTE = dataclasses.replace(QUANTILES_STORE, rematerialize="recompute")

#: Long sessions of every value (state that grows with the data), stored or recomputed.
COLLECT_RECOMPUTE = FaultOperator(OPERATOR, "out", Session(90), RefWindow("session", 90),
                                  lambda: Collect("x"), lambda vs: [v["x"] for v in vs],
                                  rematerialize="recompute")
COLLECT_STORE = FaultOperator(OPERATOR, "out", Session(90), RefWindow("session", 90),
                              lambda: Collect("x"), lambda vs: [v["x"] for v in vs],
                              rematerialize="store")

#: scenario -> its operators (all read the same source)
SCENARIOS: dict[str, tuple[FaultOperator, ...]] = {
    "tumbling": (TUMBLING,),
    "hopping": (HOPPING,),
    "session": (SESSION,),
    "two-operators": (TUMBLING, SESSIONS_TOO),
    "quantiles-store": (QUANTILES_STORE,),
    "quantiles-recompute": (QUANTILES_RECOMPUTE,),
    "collect-recompute": (COLLECT_RECOMPUTE,),
    "collect-store": (COLLECT_STORE,),
}

app = App(APP_NAME, [op.engine(SOURCE) for op in SCENARIOS[SCENARIO]])
