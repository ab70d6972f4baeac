"""Top products by revenue per hour, updated every five minutes.

Source ``orders``: JSON values ``{"product": "tv", "price": 499.0, "quantity": 1,
"category": "electronics"}`` with the order time as the Kafka record timestamp.
Sink ``top-products-by-revenue``: per category and hopping hour (advancing by five
minutes), the five products with the most revenue,
``{"category": ..., "start_ms": ..., "end_ms": ..., "top": [{"product": "tv",
"revenue": 998.0}, ...]}``, by revenue descending, then product name.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from streamremat import App, Hopping, Operator, TopK


def revenue(order: dict[str, Any]) -> Any:
    return order["price"] * order.get("quantity", 1)


def ranking(category: Any, start_ms: int, end_ms: int, top: Any) -> dict[str, Any]:
    return {
        "category": category,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "top": [{"product": product, "revenue": total} for product, total in top],
    }


operator = Operator(
    name="top-products-by-revenue",
    source="orders",
    sink="top-products-by-revenue",
    window=Hopping(timedelta(hours=1), timedelta(minutes=5)),
    aggregate=TopK(5, of="product", weight=revenue),
    key_by=lambda order: order.get("category", "all"),
    output=ranking,
)

app = App("top-products", [operator])
