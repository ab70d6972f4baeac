"""The ready-made operators in ``operators/``, driven through the public TestDriver."""

from __future__ import annotations

from typing import Any

from operators import clicks, sessions, top_products
from streamremat import App, Operator
from streamremat.testing import TestDriver

MIN = 60_000
HOUR = 60 * MIN
T0 = 10 * HOUR  # 10:00 on day 0


def _sink(driver: TestDriver, op: Operator) -> list[Any]:
    """Sink values as the worker writes them: the operator's ``output`` hook applied."""
    return [op.output(e.key, e.start_ms, e.end_ms, e.value) for e in driver.emitted()]


def test_every_module_has_an_operator_and_an_app() -> None:
    for module in (clicks, sessions, top_products):
        assert isinstance(module.operator, Operator)
        assert isinstance(module.app, App)
        assert list(module.app.operators.values()) == [module.operator]


# -- clicks per user per minute -------------------------------------------------------------


def _feed_clicks(driver: TestDriver, faults: bool) -> None:
    driver.send("k1", {"user": "alice", "url": "/"}, timestamp_ms=10_000)
    driver.send("k2", {"user": "bob", "url": "/"}, timestamp_ms=30_000)
    if faults:
        driver.checkpoint()
    driver.send("k1", {"user": "alice", "url": "/a"}, timestamp_ms=50_000)
    driver.send("k1", {"user": "alice", "url": "/b"}, timestamp_ms=61_000)
    driver.send("k2", {"user": "bob", "url": "/c"}, timestamp_ms=59_000)  # within 5 s grace
    if faults:
        driver.crash()
    driver.send("k1", {"user": "alice", "url": "/d"}, timestamp_ms=65_000)  # closes minute 0
    if faults:
        driver.recover()
        driver.checkpoint()
    driver.send("k2", {"user": "bob", "url": "/e"}, timestamp_ms=59_500)  # late
    driver.send("k3", {"url": "/no-user"}, timestamp_ms=66_000)  # dead letter
    if faults:
        driver.crash()
        driver.recover()
    driver.send("k3", {"user": "carol", "url": "/"}, timestamp_ms=200_000)


def test_clicks_per_user_minute() -> None:
    driver = TestDriver(clicks.app)
    _feed_clicks(driver, faults=False)
    assert _sink(driver, clicks.operator) == [
        {"user": "alice", "start_ms": 0, "end_ms": 60_000, "clicks": 2},
        {"user": "bob", "start_ms": 0, "end_ms": 60_000, "clicks": 2},
        {"user": "alice", "start_ms": 60_000, "end_ms": 120_000, "clicks": 2},
    ]
    assert [x.timestamp_ms for x in driver.late()] == [59_500]
    assert [(d.stage, d.offset) for d in driver.dead_letters()] == [("key", 7)]


def test_clicks_survive_crash_and_recover() -> None:
    clean, faulty = TestDriver(clicks.app), TestDriver(clicks.app)
    _feed_clicks(clean, faults=False)
    _feed_clicks(faulty, faults=True)
    assert faulty.emitted() == clean.emitted()
    assert len(faulty.emitted()) == 3


# -- top products by revenue ------------------------------------------------------------------


def _order(driver: TestDriver, minute: int, product: str, price: int, qty: int = 1, **kw: Any):
    value = {"product": product, "price": price, "quantity": qty, **kw}
    driver.send(None, value, timestamp_ms=T0 + minute * MIN)


def _feed_orders(driver: TestDriver, faults: bool) -> None:
    _order(driver, 1, "tv", 500, category="electronics")
    _order(driver, 2, "pen", 2, qty=3, category="electronics")
    if faults:
        driver.checkpoint()
    _order(driver, 3, "tv", 250, qty=2, category="electronics")
    _order(driver, 4, "novel", 20, category="books")
    if faults:
        driver.crash()
        driver.recover()
    _order(driver, 6, "mug", 5, category="electronics")
    _order(driver, 6, "cable", 5, category="electronics")
    _order(driver, 180, "closing", 1, category="zzz")  # 13:00 closes every window above


def test_top_products_by_revenue() -> None:
    driver = TestDriver(top_products.app)
    _feed_orders(driver, faults=False)
    out = _sink(driver, top_products.operator)
    by_window = {(o["category"], o["start_ms"] - T0): o["top"] for o in out}
    five = 5 * MIN
    # hour windows start every 5 minutes: orders at 10:01-10:04 are in those starting
    # 9:05 .. 10:00; the 10:06 orders in those starting 9:10 .. 10:05
    electronics = sorted(s for c, s in by_window if c == "electronics")
    assert electronics == [s * five for s in range(-11, 2)]
    assert by_window[("electronics", -11 * five)] == [
        {"product": "tv", "revenue": 1000},
        {"product": "pen", "revenue": 6},
    ]
    assert by_window[("electronics", 0)] == [
        {"product": "tv", "revenue": 1000},
        {"product": "pen", "revenue": 6},
        {"product": "cable", "revenue": 5},  # ties: by product name
        {"product": "mug", "revenue": 5},
    ]
    assert by_window[("electronics", five)] == [
        {"product": "cable", "revenue": 5},
        {"product": "mug", "revenue": 5},
    ]
    assert by_window[("books", 0)] == [{"product": "novel", "revenue": 20}]
    assert len([c for c, _ in by_window if c == "books"]) == 12
    assert all(o["end_ms"] - o["start_ms"] == HOUR for o in out)


def test_top_products_keeps_only_five() -> None:
    driver = TestDriver(top_products.app)
    for i, product in enumerate("abcdefg"):
        _order(driver, 1, product, 10 + i)
    _order(driver, 200, "closing", 1)
    top = _sink(driver, top_products.operator)[-1]["top"]
    assert [p["product"] for p in top] == ["g", "f", "e", "d", "c"]


def test_top_products_survive_crash_and_recover() -> None:
    clean, faulty = TestDriver(top_products.app), TestDriver(top_products.app)
    _feed_orders(clean, faults=False)
    _feed_orders(faulty, faults=True)
    assert faulty.emitted() == clean.emitted()


# -- user sessions ----------------------------------------------------------------------------


def _click(driver: TestDriver, user: str, minute: int, url: str, seconds: int = 0) -> None:
    t = T0 + minute * MIN + seconds * 1000
    driver.send(user, {"user": user, "url": url}, timestamp_ms=t)


def _feed_sessions(driver: TestDriver, faults: bool) -> None:
    _click(driver, "alice", 0, "/")
    _click(driver, "bob", 5, "/")
    _click(driver, "alice", 10, "/cart")
    if faults:
        driver.checkpoint()
    # 30 min 5 s after bob's first click: a second session; the first one (closing at
    # 5 + 30 min + 10 s grace) is still open...
    _click(driver, "bob", 35, "/cart", seconds=5)
    if faults:
        driver.crash()
        driver.recover()
    _click(driver, "bob", 20, "/pay")  # ...so this click bridges them into one
    _click(driver, "alice", 40, "/")  # exactly 30 min after 10: same session
    if faults:
        driver.checkpoint()
        driver.crash()
    _click(driver, "alice", 71, "/")  # 31 min of silence: a new session
    _click(driver, "carol", 300, "/")  # closes everything before 14:30
    if faults:
        driver.recover()


def test_user_sessions() -> None:
    driver = TestDriver(sessions.app)
    _feed_sessions(driver, faults=False)
    # both close with the click at 71: bob's at 35:05 + 30:10, alice's at 40 + 30:10
    assert _sink(driver, sessions.operator) == [
        {
            "user": "bob",
            "start_ms": T0 + 5 * MIN,
            "end_ms": T0 + 35 * MIN + 5_000,
            "duration_ms": 30 * MIN + 5_000,
            "clicks": 3,
            "pages": 3,
        },
        {
            "user": "alice",
            "start_ms": T0,
            "end_ms": T0 + 40 * MIN,
            "duration_ms": 40 * MIN,
            "clicks": 3,
            "pages": 2,
        },
        {
            "user": "alice",
            "start_ms": T0 + 71 * MIN,
            "end_ms": T0 + 71 * MIN,
            "duration_ms": 0,
            "clicks": 1,
            "pages": 1,
        },
    ]
    assert driver.late() == []


def test_user_sessions_survive_crash_and_recover() -> None:
    clean, faulty = TestDriver(sessions.app), TestDriver(sessions.app)
    _feed_sessions(clean, faults=False)
    _feed_sessions(faulty, faults=True)
    assert faulty.emitted() == clean.emitted()
    assert len(faulty.emitted()) == 3
