"""The ``mcpbridge`` command: the operator's command line (``mcpbridge --help`` lists the commands).

Run where the data is (the data directory, or with ``MCPBRIDGE_BACKEND=aws`` the table, with the operator's AWS
credentials), every command acts as the operator: full authority in ``--workspace`` (by default the platform's own,
the one ``init`` created), without an API key. With ``MCPBRIDGE_API_KEY`` set, it acts as that key's user instead,
with that key's authority. Commands call the REST API's routes in this process (:mod:`mcpbridge.cli.api`), so they
apply the same rules and print, with ``--json``, the same bodies.

Only the parser is imported up front (argparse and this package's help texts): ``mcpbridge --help`` and
``mcpbridge --version`` load nothing else; a command imports what it needs when it runs.
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from mcpbridge.cli.parser import build_parser

    args = build_parser().parse_args(argv)
    from mcpbridge.cli.running import run

    return run(args)
