"""The wall clock, as ``ports.Clock``."""

from __future__ import annotations

import time


class SystemClock:
    def now(self) -> float:
        return time.time()
