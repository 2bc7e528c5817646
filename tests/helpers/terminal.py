"""What a terminal, and no log file, should see: the escape and carriage-return characters of a progress bar."""

from __future__ import annotations

import re

ESCAPE = re.compile(r"\x1b|\r")
