"""The ``streamremat`` command. Thin: each command group registers itself.

To add a command group, write ``add_<name>_commands(subparsers)`` next to its
logic, have each leaf parser ``set_defaults(handler=fn)`` where
``fn(args) -> int`` is the exit code, and list the function in ``_COMMANDS``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from streamremat.dev.commands import add_broker_commands
from streamremat.dev.demo import add_demo_commands
from streamremat.dev.loadgen import add_loadgen_commands
from streamremat.runtime.commands import add_tune_commands, add_worker_commands

AddCommands = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

_COMMANDS: list[AddCommands] = [
    add_broker_commands,
    add_demo_commands,
    add_loadgen_commands,
    add_worker_commands,
    add_tune_commands,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamremat",
        description="Stateful stream processing on Kafka with compact checkpoints and replay.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
