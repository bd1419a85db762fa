"""Hostile model files and job runners of issue 41's attacks (tests/foundation/test_sandbox.py,
tests/service/server/test_service_sandbox.py): they live in :mod:`benchmarks.harness.hostile`, which
benchmarks/service_attacks.py shares."""

from benchmarks.harness.hostile import (
    HangsInForward,
    Looping,
    ReadsAFile,
    ReadsInForward,
    TinyNet,
    WritesAFile,
    export_with_guard,
    hanging_runner,
    script,
    slow_exit_runner,
    snooping_runner,
)

__all__ = [
    "HangsInForward",
    "Looping",
    "ReadsAFile",
    "ReadsInForward",
    "TinyNet",
    "WritesAFile",
    "export_with_guard",
    "hanging_runner",
    "script",
    "slow_exit_runner",
    "snooping_runner",
]
