"""The App of the re-keying fault test (``tests.fault.rekey_app:app``): a re-keyed
operator and a re-keyed operator chained after it, so both stages of both run.

Orders ``{"shop": "s3", "amount": 7}`` arrive without keys; ``shop-totals`` sums
them per shop and second (repartitioned by shop); ``region-totals`` reads its
results and sums them per region and 2 s (repartitioned by region). Graces cover
the whole input's event-time span, so no record is late however the source
partitions interleave in the repartition topics. Names come from the environment,
as in ``tests/fault/apps.py``.
"""

from __future__ import annotations

import os
from typing import Any

from streamremat import App, Count, Operator, Sum, Tumbling

SOURCE = os.environ.get("STREAMREMAT_FAULT_SOURCE", "rekey-orders")
SINK = os.environ.get("STREAMREMAT_FAULT_SINK", f"{SOURCE}-out")
APP_NAME = os.environ.get("STREAMREMAT_FAULT_APP", "rekey")
SHOP_MS, REGION_MS, GRACE_MS = 1_000, 2_000, 12_000


def region(shop: str) -> str:
    return f"r{int(shop[1:]) % 3}"


def shop_result(shop: str, start_ms: int, end_ms: int, value: Any) -> dict[str, Any]:
    return {"shop": shop, "region": region(shop), "start_ms": start_ms, "end_ms": end_ms,
            "value": value}


def make_app(source: str = SOURCE, sink: str = SINK, name: str = APP_NAME) -> App:
    shops = Operator(
        name="shop-totals", source=source, sink=sink,
        window=Tumbling(SHOP_MS, grace_ms=GRACE_MS),
        aggregate={"n": Count(), "total": Sum("amount")},
        key_by=lambda order: order["shop"], output=shop_result,
    )
    regions = Operator(
        name="region-totals", source=shops.sink, sink=f"{sink}-regions",
        window=Tumbling(REGION_MS, grace_ms=GRACE_MS),
        aggregate={"windows": Count(), "total": Sum(lambda r: r["value"]["total"])},
        key_by=lambda r: r["region"],
    )
    return App(name, [shops, regions])


app = make_app()
