"""Run a coroutine to completion from synchronous code, inside a running loop or not."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


def run_sync(coro: Coroutine[Any, Any, _T]) -> _T:
    """``asyncio.run(coro)``; when a loop already runs in this thread, run it in a helper thread.

    For tooling and test fixtures only: it blocks the calling thread (and its loop).
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    results: list[_T] = []
    errors: list[BaseException] = []

    def target() -> None:
        try:
            results.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=target, name="streamremat-run-sync")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]
