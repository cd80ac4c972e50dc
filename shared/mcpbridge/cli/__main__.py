"""``python -m mcpbridge.cli``: the ``mcpbridge`` command where the script is not on PATH."""

import sys

from mcpbridge.cli import main

sys.exit(main())
