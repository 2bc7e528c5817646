"""Modules the tests share (no tests here): test media, fit configs, fake endpoints and servers, and the
callbacks that test configs name by class path (`helpers.stop_callbacks.StopAfterEpoch`): `tests/` is on
`sys.path` (pyproject.toml's `pythonpath`) and on the PYTHONPATH of the processes the tests start."""
