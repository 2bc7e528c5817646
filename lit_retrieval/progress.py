"""Progress of the long commands (`cache-frames`, `shots`, `index`, `build-melon`, `uvrb`, ...): one
helper, two ways to show it.

- In a terminal: rich's live bar, the counts of the job (failed, cached, ...) beside its label.
- Without one (Slurm's `.out`, CI, `> log`): plain lines, readable with `tail -f`, no control
  sequences: one when the job starts, one every `every` (seconds, or a share of the total), one at
  the end, e.g. `shard 3/16: caching frames 1,204/6,250 videos (19%), 41/s, ETA 3 min; failed 2`.

The interval comes from `--progress-every 30s|2min|5%` (commands that call `add_progress_arguments`),
else the environment variable `LIT_RETRIEVAL_PROGRESS_EVERY`, else 30 s; `--quiet` (or
`LIT_RETRIEVAL_PROGRESS_EVERY=off`) shows nothing. A shard shows as `--shard K` of `--num-shards N`.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, TextIO, TypeVar

from rich.console import Console
from rich.progress import Progress as RichProgress

from lit_retrieval.errors import ConfigError

ENV = "LIT_RETRIEVAL_PROGRESS_EVERY"
T = TypeVar("T")


@dataclass(frozen=True)
class Every:
    """How often a plain line is written: every `seconds`, or every `percent` of the total; `off`:
    nothing is shown (neither lines nor a bar)."""

    seconds: float | None = 30.0
    percent: float | None = None
    off: bool = False


def parse_every(text: str) -> Every:
    """`30s`, `30` (seconds), `2min`, `5%` or `off` as `Every`; `ValueError` naming the forms otherwise."""
    text = text.strip().lower()
    if text == "off":
        return Every(None, None, off=True)
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|min|%)?", text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a positive interval like 30s, 2min or 5% (or off), got {text!r}")
    value, unit = float(match.group(1)), match.group(2) or "s"
    if unit == "%":
        return Every(None, value)
    return Every(value * (60 if unit == "min" else 1), None)


_settings: dict = {"every": None, "shard": None}  # set by `configure`; every None: the environment's


def configure(every: str | None = None, quiet: bool = False, shard: tuple[int, int] | None = None) -> None:
    """This process's setting (a command's `--progress-every` / `--quiet`, and its shard K of N,
    which every line then names)."""
    _settings["every"] = parse_every("off" if quiet else every) if quiet or every else None
    _settings["shard"] = shard


def current_every() -> Every:
    """The configured interval, else `LIT_RETRIEVAL_PROGRESS_EVERY`'s, else every 30 s."""
    if _settings["every"] is not None:
        return _settings["every"]
    env = os.environ.get(ENV)
    if not env:
        return Every()
    try:
        return parse_every(env)
    except ValueError as err:
        raise ConfigError(f"{ENV}: {err}") from None


def _every_argument(text: str) -> str:
    try:
        parse_every(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_progress_arguments(parser: argparse.ArgumentParser) -> None:
    """`--progress-every` and `--quiet`; the command then calls `configure_from(args)`."""
    parser.add_argument(
        "--progress-every",
        type=_every_argument,
        metavar="30s|2min|5%",
        help=f"without a terminal, a progress line this often (default: ${ENV}, else 30s)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar or lines")


def configure_from(args: argparse.Namespace, shard: tuple[int, int] | None = None) -> None:
    """`configure` from `add_progress_arguments`' options; the shard from `shard`, else `--shard K --num-shards N`."""
    if shard is None and hasattr(args, "num_shards"):
        shard = (args.shard, args.num_shards)
    configure(args.progress_every, args.quiet, shard)
    current_every()  # a bad LIT_RETRIEVAL_PROGRESS_EVERY is refused before the job starts


def quiet_library_bars() -> None:
    """Turn off the progress bars that libraries draw on stderr while loading a model (transformers'
    `Loading weights`, huggingface_hub's): a command shows its own progress, on stdout, and keeps stderr
    for its one-line error. huggingface_hub's switch is the one transformers reads when it is imported, so
    transformers (seconds of import time) is imported here only if it already is."""
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    if "transformers" in sys.modules:  # imported already: it read the switch before it was turned off
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def format_count(n: int) -> str:
    return f"{n:,}"


def format_rate(per_second: float) -> str:
    """`41/s`, `2.5/s`; `12/min` below one a second, `3.6/h` below one a minute."""
    if per_second >= 10:
        return f"{per_second:.0f}/s"
    if per_second >= 1:
        return f"{per_second:.1f}/s"
    return f"{per_second * 60:.2g}/min" if per_second * 60 >= 1 else f"{per_second * 3600:.2g}/h"


def format_duration(seconds: float) -> str:
    """`42 s`, `2 min`, `3 h 05 min` (minutes rounded up: an ETA is not optimistic)."""
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    minutes = math.ceil(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """Progress of one loop over `total` items, `completed` of them done before it starts (cached).

    `counts`: the named counts shown from the start (e.g. `cached`, `failed`: 0). `advance(n,
    failed=1, ...)` counts finished items and adds to named counts; `set(in_flight=4)` sets a count
    as it stands now; `live()`: counts read whenever a line is shown (e.g. LLM calls so far). Counts
    are shown in the order first given. `heartbeat`: a thread also writes the due lines while no
    item finishes (not where the loop forks worker processes). Thread-safe."""

    def __init__(
        self,
        label: str,
        total: int,
        unit: str = "videos",
        *,
        completed: int = 0,
        counts: dict[str, int] | None = None,
        live: Callable[[], dict[str, int]] | None = None,
        shard: tuple[int, int] | None = None,  # default: the configured one
        enabled: bool = True,
        every: Every | None = None,
        stream: TextIO | None = None,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
        heartbeat: bool = False,
    ) -> None:
        shard = shard or _settings["shard"]
        self.label = f"shard {shard[0]}/{shard[1]}: {label}" if shard and shard[1] > 1 else label
        self.total, self.unit, self.done, self.start_done = total, unit, completed, completed
        self.counts: dict[str, int] = dict(counts or {})
        self.live = live
        self.every = every or current_every()
        self.stream = stream or sys.stdout
        self.console = console or Console(file=self.stream)
        self.clock = clock
        self.mode = "off" if not enabled or self.every.off else "bar" if self.console.is_terminal else "lines"
        self._lock = threading.RLock()
        self._heartbeat = heartbeat and self.mode == "lines" and self.every.seconds is not None
        self._stop = threading.Event()
        self._bar: RichProgress | None = None
        self.started: float | None = None
        self.skipped = 0  # items another process holds (`skip`): out of the rich bar's count, so out of its speed
        self._written: tuple = ()

    # ------------------------------------------------------------------ counting
    def advance(self, n: int = 1, **counts: int) -> None:
        with self._lock:
            self.done += n
            for name, value in counts.items():
                self.counts[name] = self.counts.get(name, 0) + value
            self._show()

    def skip(self, n: int = 1, **counts: int) -> None:
        """`n` items accounted for without work here (another process holds them): done, but not in the rate,
        so the ETA is that of the items this process works on."""
        with self._lock:
            self.start_done += n
            self.skipped += n
            self.advance(n, **counts)

    def track(self, items: Iterable[T]) -> Iterator[T]:
        """`items`, each counted done once the loop's body for it ends (a `continue` too)."""
        for item in items:
            yield item
            self.advance()

    def set(self, **counts: int) -> None:
        with self._lock:
            self.counts.update(counts)
            self._show()

    # ------------------------------------------------------------------ text
    def line(self) -> str:
        """`label 1,204/6,250 videos (19%), 41/s, ETA 3 min; failed 2, cached 10`."""
        with self._lock:
            elapsed = 0.0 if self.started is None else self.clock() - self.started
            text = f"{self.label} {format_count(self.done)}/{format_count(self.total)} {self.unit}"
            if self.total:
                text += f" ({100 * self.done / self.total:.0f}%)"
            ran = self.done - self.start_done
            if self.done >= self.total:
                text += f", done in {format_duration(elapsed)}"
            elif ran > 0 and elapsed > 0:
                rate = ran / elapsed
                text += f", {format_rate(rate)}, ETA {format_duration((self.total - self.done) / rate)}"
            return text + self._counts_text("; ")

    def _counts_text(self, lead: str) -> str:
        counts = {**self.counts, **(self.live() if self.live else {})}
        shown = ", ".join(f"{name.replace('_', ' ')} {format_count(n)}" for name, n in counts.items())
        return lead + shown if shown else ""

    # ------------------------------------------------------------------ showing
    def __enter__(self) -> Progress:
        self.started = self._last_time = self.clock()
        self._last_percent = self._percent()
        if self.mode == "bar":
            self._bar = RichProgress(console=self.console)
            self._bar.__enter__()
            description = self.label + self._counts_text(" · ")
            self._task = self._bar.add_task(description, total=self.total, completed=self.done)
        elif self.mode == "lines":
            self._write()
            if self._heartbeat:
                threading.Thread(target=self._beat, daemon=True, name="progress").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._bar is not None:
            self._show()
            self._bar.__exit__(*exc)
        elif self.mode == "lines":
            with self._lock:
                if self._state() != self._written:  # the last line, unless it was just written
                    self._write()

    def _state(self) -> tuple:
        return self.done, self._counts_text("")

    def _percent(self) -> float:
        return 100 * self.done / self.total if self.total else 100.0

    def _show(self) -> None:
        """The bar updated, or a line when one is due (a time or percent step passed)."""
        if self._bar is not None:
            self._bar.update(
                self._task,
                completed=self.done - self.skipped,
                total=self.total - self.skipped,
                description=self.label + self._counts_text(" · "),
            )
        elif self.mode == "lines" and self.started is not None and self._due():
            self._write()

    def _due(self) -> bool:
        if self.every.percent is not None:
            step = self.every.percent
            return math.floor(self._percent() / step) > math.floor(self._last_percent / step)
        return self.clock() - self._last_time >= (self.every.seconds or math.inf)

    def _write(self) -> None:
        self._last_time, self._last_percent = self.clock(), self._percent()
        self._written = self._state()
        self.stream.write(self.line() + "\n")
        self.stream.flush()

    def _beat(self) -> None:
        """Lines also while no item finishes (a stage waiting on LLM calls shows its calls in flight)."""
        step = min(1.0, (self.every.seconds or 1.0) / 4)
        while not self._stop.wait(step):
            with self._lock:
                if self._due():
                    self._write()
