"""Types of streamremat's native fast path (``native/src``)."""

from typing import Any

class Folder:
    def __init__(
        self, kinds: list[str], fields: list[str | None], time_field: str | None,
        decode: bool, composite: bool, hopping: bool,
    ) -> None: ...
    def fold(self, state: Any, records: list[Any]) -> tuple[list[int], list[int]] | None: ...

def scan_json(data: bytes, fields: list[str] | None = None) -> Any: ...
