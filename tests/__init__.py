"""The tests, one folder per package of the library (CONTRIBUTING.md, "The tests' layout"). A test module imports
the library and :mod:`tests.support` only, never another test module (``tests/test_layers.py`` checks it)."""
