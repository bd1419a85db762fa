"""What tests share: toy components with known behaviour, hand-written runs, stand-in files, servers and clusters
started for a test, and the helpers that run ``geneval`` in a subprocess. The only modules of ``tests/`` a test may
import (with its folder's ``conftest.py`` fixtures)."""
