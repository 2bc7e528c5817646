"""The grid tests' local steps (`fit`, `test`, `convert-checkpoint`) run in children of the fork server
(`tests/helpers/cli_server.py`), each a process of its own writing to its step's log, as `subprocess.run`'s."""

from __future__ import annotations

import pytest

from helpers.cli_server import grid_steps_forked


@pytest.fixture(autouse=True)
def _forked_grid_steps():
    with grid_steps_forked():
        yield
