"""Default prompt templates of the LLM/LMM stages of `build-melon` (MELON Sec. 3, supp. C.3 and F).

The paper shows its prompts only as figures (supp. F, Figs. 18-20); these are written in our own words
to carry the same intent:

- qa-to-caption (Sec. 3 "Data Merging", supp. F.1): rewrite one timestamped question-answer pair into a
  fluent, self-contained caption of that interval, with rules by question type (wh-, yes/no, counting);
- summarise (Sec. 3 "Multi-Event Summary", supp. F.2): from a video's dense timed segments, skip noisy or
  trivial ones and keep K = 3-5 narrative highlights, each as Theme + Description + Timestamp, in JSON;
- judge (supp. C.3, F.3): look at frames from each event's interval and say whether the description and
  the timestamp match them, with the reason and a suggested correction for each mismatch.

Templates use `string.Template` placeholders (`$name`; `$$` is a literal dollar sign), so the JSON
examples inside them need no escaping. Every field can be replaced from the build config
(`PromptTemplates(...)`); a template that names an unknown placeholder, or lacks one the stage needs,
is refused with a `ConfigError` naming the field.
"""

from __future__ import annotations

import string
from dataclasses import dataclass, fields

from lit_retrieval.errors import ConfigError

QA_TO_CAPTION_SYSTEM = """\
You write captions for a video retrieval dataset. You are given one question about a video, its \
answer, and the time interval of the video they refer to. Rewrite them as one caption that describes \
what happens in that interval, as a person searching for this moment would describe it.

Rules:
- Keep every fact the answer states; add nothing that the question and answer do not support.
- Wh-questions (what, who, where, how, why): state the answer as a full description of the scene, \
e.g. Q "What does the man pour into the bowl?" A "milk" -> "A man pours milk into a bowl."
- Yes/no questions: describe what is true. If the answer is yes, state the questioned fact as seen; \
if no, describe the scene without it, e.g. Q "Is the man wearing a hat while he cooks?" A "no" -> \
"A bare-headed man cooks."
- Counting or attribute questions: fold the number or attribute into the description.
- Write one to three fluent sentences in the present tense; do not mention the question, the answer, \
the video, or timestamps.

Answer with JSON only: {"caption": "<the caption>"}"""

QA_TO_CAPTION_USER = """\
Interval: $start s to $end s
Question: $question
Answer: $answer"""

SUMMARISE_SYSTEM = """\
You condense the dense, timed descriptions of one long video into its main events, for a dataset in \
which a search query describes several events of one video.

Rules:
- Choose between $min_events and $max_events events that together tell the video's story; prefer \
fewer, larger events over many small ones.
- Ignore segments that are noise: repeated, trivial, off-topic, or that describe no visible action.
- Each event covers one continuous interval built from the segments it summarises; events must not \
overlap, must lie inside the video (0 to $duration s) and are listed in time order.
- theme: a short label of a few words for the event (e.g. "Preparing the dough").
- description: three to five sentences (about 70 to 90 words), concrete and visual, that someone \
could use to find this part of the video; use only what the segments say.
- start, end: the event's interval in seconds.

Answer with JSON only:
{"events": [{"theme": "...", "description": "...", "start": 0.0, "end": 0.0}, ...]}"""

SUMMARISE_USER = """\
Video length: $duration s
Segments ([start-end] in seconds, then the description):
$segments"""

JUDGE_SYSTEM = """\
You check the annotations of a video retrieval dataset. For each event you see frames sampled from \
the event's time interval, the interval, and the event's description. Decide whether the description \
matches what the frames show in that interval.

Mark an event inconsistent when the description names objects, people or actions that the frames do \
not show (hallucination), when it is too vague to identify the interval, or when the frames show that \
the interval covers a different part of the video. Minor wording issues are consistent.

For every event give: index (as given), consistent (true or false), reason (one sentence; what does \
not match, or "matches" when consistent) and suggestion (a corrected description or interval when \
inconsistent, else an empty string).

Answer with JSON only:
{"events": [{"index": 0, "consistent": true, "reason": "...", "suggestion": ""}, ...]}"""

JUDGE_USER = """\
The video has $num_events events. Each event's frames follow its text."""

JUDGE_EVENT = """\
Event $index: [$start-$end] s. Theme: $theme. Description: $description"""


def placeholders(template: str) -> set[str]:
    """The `$name` / `${name}` placeholders a template uses (`$$` is an escaped dollar sign)."""
    names = set()
    for match in string.Template.pattern.finditer(template):
        name = match.group("named") or match.group("braced")
        if name:
            names.add(name)
        elif match.group("invalid") is not None:
            raise ValueError(f"a '$' not followed by a placeholder name at position {match.start('invalid')}")
    return names


# field -> (placeholders it may use, placeholders it must use)
_PLACEHOLDERS: dict[str, tuple[set[str], set[str]]] = {
    "qa_to_caption_system": ({"start", "end"}, set()),
    "qa_to_caption_user": ({"start", "end", "question", "answer"}, {"question", "answer"}),
    "summarise_system": ({"min_events", "max_events", "duration"}, set()),
    "summarise_user": ({"min_events", "max_events", "duration", "segments"}, {"segments"}),
    "judge_system": ({"num_events"}, set()),
    "judge_user": ({"num_events"}, set()),
    "judge_event": ({"index", "start", "end", "theme", "description"}, {"description"}),
}


@dataclass(frozen=True)
class PromptTemplates:
    """The prompts of the three LLM/LMM stages; each field may be overridden in the build config.

    qa_to_caption_*: `$question`, `$answer`, `$start`, `$end` (seconds). summarise_*: `$segments` (one
    `[start-end] text` line per segment), `$duration`, `$min_events`, `$max_events`. judge_system /
    judge_user: `$num_events`; judge_event (one text part per event, followed by the
    event's frames): `$index`, `$start`, `$end`, `$theme`, `$description`.
    """

    qa_to_caption_system: str = QA_TO_CAPTION_SYSTEM
    qa_to_caption_user: str = QA_TO_CAPTION_USER
    summarise_system: str = SUMMARISE_SYSTEM
    summarise_user: str = SUMMARISE_USER
    judge_system: str = JUDGE_SYSTEM
    judge_user: str = JUDGE_USER
    judge_event: str = JUDGE_EVENT

    def __post_init__(self) -> None:
        for f in fields(self):
            template = getattr(self, f.name)
            if not isinstance(template, str) or not template.strip():
                raise ConfigError(f"prompts.{f.name} must be a non-empty string")
            allowed, required = _PLACEHOLDERS[f.name]
            try:
                used = placeholders(template)
            except ValueError as err:
                raise ConfigError(f"prompts.{f.name}: {err}") from None
            if used - allowed:
                raise ConfigError(
                    f"prompts.{f.name} uses unknown placeholder(s) {sorted(used - allowed)}; "
                    f"it may use {sorted(allowed)}"
                )
            if required - used:
                raise ConfigError(f"prompts.{f.name} must contain the placeholder(s) {sorted(required - used)}")

    def render(self, name: str, **values: object) -> str:
        """Template `name` with its placeholders filled from `values` (extra values are ignored)."""
        return string.Template(getattr(self, name)).substitute({k: str(v) for k, v in values.items()})
