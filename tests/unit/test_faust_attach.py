"""attach() refuses what the faust integration cannot run, with the fix in the message."""

from __future__ import annotations

import pytest

from streamremat import App, Count, Operator, Tumbling
from streamremat.core.exceptions import ConfigError

faust = pytest.importorskip("faust", reason="the faust extra is part of `make venv`")
from streamremat.integrations.faust import attach  # noqa: E402


def _op(**kw: object) -> Operator:
    return Operator(name="per_shop", source="orders", sink="per-shop", window=Tumbling(60_000),
                    aggregate={"n": Count()}, **kw)  # type: ignore[arg-type]


def test_attach_refuses_key_by_and_says_how_to_rekey() -> None:
    app = faust.App("shops", broker="streamremat://127.0.0.1:9")
    with pytest.raises(ConfigError) as err:
        attach(app, App("shops", [_op(key_by=lambda v: v["shop"])]))
    message = str(err.value)
    assert "per_shop" in message and "key_by" in message
    assert "key=<the key_by value>" in message and "streamremat worker" in message


def test_attach_needs_the_streamremat_scheme() -> None:
    app = faust.App("shops", broker="kafka://127.0.0.1:9")
    with pytest.raises(ConfigError, match=r"streamremat://"):
        attach(app, _op())
