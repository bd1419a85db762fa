"""The old name of :mod:`benchmarks.service_attack_scenarios` (issue 41's library-level scenarios), kept so that what
cites it still resolves."""

from __future__ import annotations

from benchmarks.service_attack_scenarios import SCENARIOS

__all__ = ["SCENARIOS"]
