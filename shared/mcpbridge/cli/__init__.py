"""The ``mcpbridge`` command: the operator's command line (``mcpbridge --help`` lists the commands).

Every command but ``init``, ``serve``, ``keys create --admin`` and ``services authorize`` is a client of a running
mcpbridge's REST API (:mod:`mcpbridge.cli.api`): the server and API key of ``mcpbridge login URL`` or of
``MCPBRIDGE_URL`` and ``MCPBRIDGE_API_KEY``; the server applies its rules and, with ``--json``, the command prints
its bodies. Those four act on the data itself, as the operator.

Only the parser of the command named is built (argparse and this package's help texts): ``mcpbridge --help`` and
``mcpbridge --version`` load nothing else; a command imports what it needs when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from mcpbridge.cli.parser import build_parser

    if argv is None:
        import sys

        argv = sys.argv[1:]
    args = build_parser(argv).parse_args(argv)
    from mcpbridge.cli.running import run

    return run(args)
