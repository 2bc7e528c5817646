"""Subject/object spans of a query around an interpersonal verb, and relational queries (SALI
Sec. 2, 3 and 4).

SALI splits a query at an interpersonal verb: the words before it form the subject span, the words
after it the object span (Sec. 3). Queries without a verb use subject = object = the full query.

A query is *relational* when it has "a verb from a list of 11 interpersonal verbs and two person
nouns or pronouns" (Sec. 2), where "person nouns include capitalized non-initial tokens" (Sec. 4).
The query is first split into sentences, so each sentence's first token is the initial one (in an
ActivityNet paragraph "The", "Then" or "It" opening a later sentence is not a name).

The paper names three of its 11 verb patterns (confronts, talks to, looks at). The other eight are
our choice of common interpersonal verbs in movie descriptions: kisses, hugs, argues with, fights,
slaps, threatens, tells, asks. Each pattern is a regular expression over the lower-cased sentence
covering the verb's inflections; the list and the person words are configurable.

Where the paper is silent we chose:
- person mentions: each person noun or pronoun of the list counts once; a run of consecutive
  capitalised tokens is one mention ("Harry Potter", "Officer Diaz") when it holds a non-initial
  capital or a person word. Pronouns are counted as written, so a mention and its pronoun
  ("A man looks at his phone") make two, as in the paper's wording.
- `scope: query` (default, the paper's wording) counts the verb and the two mentions anywhere in
  the query; `scope: sentence` needs them in one sentence (stricter for paragraph queries).
- sentences end at `.`, `!` or `?` followed by white space, except after the titles in
  `TITLES` and single capitals ("Mr. Smith", "J. Doe" stay in one sentence).
- the first verb match of the query splits it; a span that would be empty (verb at the start or
  the end) falls back to the full query; punctuation at the span edges is stripped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

DEFAULT_VERBS: tuple[str, ...] = (
    r"confront(?:s|ed|ing)?",
    r"talk(?:s|ed|ing)? to",
    r"look(?:s|ed|ing)? at",
    r"kiss(?:es|ed|ing)?",
    r"hug(?:s|ged|ging)?",
    r"argu(?:es|ed|ing|e) with",
    r"(?:fight(?:s|ing)?|fought)",
    r"slap(?:s|ped|ping)?",
    r"threaten(?:s|ed|ing)?",
    r"(?:tell(?:s|ing)?|told)",
    r"ask(?:s|ed|ing)?",
)
DEFAULT_PERSON_WORDS: tuple[str, ...] = (
    "he", "she", "him", "her", "they", "them", "his", "hers", "himself", "herself", "i", "me", "you", "we", "us",
    "man", "men", "woman", "women", "boy", "boys", "girl", "girls", "guy", "guys", "lady", "gentleman", "person",
    "people", "friend", "friends", "wife", "husband", "mother", "father", "mom", "dad", "son", "daughter",
    "brother", "sister", "child", "kid", "kids", "boyfriend", "girlfriend", "officer", "cop", "doctor", "boss",
    "king", "queen", "soldier", "stranger", "family",
)
TITLES: tuple[str, ...] = ("Mr", "Mrs", "Ms", "Dr", "Prof", "St", "Jr", "Sr")
# Capitalised words that open a sentence without being a name (`initial_names`): articles and
# determiners, numbers, non-person pronouns, conjunctions, prepositions and sentence adverbs.
INITIAL_STOP_WORDS: tuple[str, ...] = (
    "a", "an", "the", "this", "that", "these", "those", "some", "any", "each", "every", "another", "all",
    "both", "either", "neither", "no", "none", "one", "two", "three", "four", "five", "six", "seven", "eight",
    "nine", "ten", "several", "many", "most", "few", "other", "others", "such", "it", "its", "there", "here",
    "what", "who", "whom", "whose", "which", "why", "how", "when", "whenever", "where", "while", "whilst",
    "and", "but", "or", "nor", "so", "yet", "for", "if", "unless", "because", "since", "though", "although",
    "as", "after", "before", "once", "until", "till", "despite", "during", "following", "in", "on", "at", "by",
    "with", "without", "within", "from", "to", "into", "onto", "upon", "of", "off", "out", "over", "under",
    "inside", "outside", "back", "behind", "near", "amid", "among", "against", "about", "around", "through",
    "meanwhile", "later", "then", "now", "next", "finally", "suddenly", "eventually", "soon", "still", "also",
    "even", "just", "only", "instead", "together", "elsewhere", "first", "afterwards", "afterward", "again",
    "not", "yes", "oh", "well",
)

SETTINGS = ("verbs", "person_words", "extra_person_words", "initial_names", "initial_stop_words", "scope")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")


def sentences(text: str) -> list[str]:
    """`text` cut after each `.`, `!` or `?` that white space follows (not after a title such as "Mr.")."""
    out, start = [], 0
    for end in _SENTENCE_END.finditer(text):
        words = _WORD.findall(text[start : end.start() + 1])
        initial = bool(words) and len(words[-1]) == 1 and words[-1].isupper()
        if words and text[end.start()] == "." and (words[-1] in TITLES or initial):
            continue
        out.append(text[start : end.end()])
        start = end.end()
    out.append(text[start:])
    return [s for s in out if s.strip()]


@dataclass(frozen=True)
class QuerySpans:
    """A query, its subject and object spans (equal to `full` without a verb), the verb found,
    and whether the query is relational (verb plus two person mentions)."""

    full: str
    subject: str
    object: str
    verb: str | None
    relational: bool


@dataclass
class SpanSplitter:
    """Split queries at the first interpersonal verb (SALI Sec. 3 "Shot and query embeddings") and
    flag relational queries (Sec. 2: an interpersonal verb and two person nouns or pronouns).

    Args:
        verbs: regular expressions of the verb patterns (11 by default; see the module notes).
        person_words: lower-case nouns and pronouns that denote a person. Capitalised tokens that
            do not start their sentence always count (names; Sec. 4).
        extra_person_words: added to `person_words` (e.g. the shape nouns that play the characters
            of the synthetic relational scenes).
        initial_names: also count a capitalised sentence-initial token as a name unless it is one
            of `initial_stop_words` ("Anna confronts Mark." has two mentions; "The", "A", "Then"
            open sentences without being names). On by default (see the module notes); off: only
            non-initial capitals count, the paper's literal wording (Sec. 4).
        initial_stop_words: lower-case words that are never names at the start of a sentence.
        scope: `query` (the paper's wording) finds the verb and two mentions anywhere in the query;
            `sentence` needs both in the same sentence.
    """

    verbs: list[str] = field(default_factory=lambda: list(DEFAULT_VERBS))
    person_words: list[str] = field(default_factory=lambda: list(DEFAULT_PERSON_WORDS))
    extra_person_words: list[str] = field(default_factory=list)
    initial_names: bool = True
    initial_stop_words: list[str] = field(default_factory=lambda: list(INITIAL_STOP_WORDS))
    scope: Literal["query", "sentence"] = "query"

    def __post_init__(self) -> None:
        if not self.verbs:
            raise ValueError("SpanSplitter needs at least one verb pattern")
        if self.scope not in ("query", "sentence"):
            raise ValueError(f"scope must be 'query' or 'sentence', got {self.scope!r}")
        for pattern in self.verbs:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"verb pattern {pattern!r} is not a valid regular expression: {err}") from None
        self._verb = re.compile(r"\b(?:" + "|".join(f"(?:{p})" for p in self.verbs) + r")\b", re.IGNORECASE)
        self._people = {w.lower() for w in (*self.person_words, *self.extra_person_words)}
        self._not_names = {w.lower() for w in self.initial_stop_words}

    def __getstate__(self) -> dict[str, object]:
        # Only the settings travel (checkpoints load with weights_only=True, which refuses
        # compiled patterns); the matchers are rebuilt on load.
        return {f: getattr(self, f) for f in SETTINGS}

    def __setstate__(self, state: dict[str, object]) -> None:
        # checkpoints written before these options existed
        state.setdefault("scope", "query")
        state.setdefault("initial_stop_words", list(INITIAL_STOP_WORDS))
        self.__dict__.update(state)
        self.__post_init__()

    def person_mentions(self, sentence: str) -> int:
        """Person mentions in one sentence: person words, and runs of capitalised tokens that hold a
        non-initial capital or a person word (one mention per run; "Mr. Smith" is one run)."""
        count, run, previous_end = 0, None, 0
        for i, match in enumerate(_WORD.finditer(sentence)):
            word = match.group()
            person = word.lower() in self._people
            capital = word[0].isupper()
            gap = sentence[previous_end : match.start()]
            if run is not None and not (capital and gap and not gap.replace(".", "", 1).strip()):
                count, run = count + run, None
            if capital:
                initial_name = (
                    self.initial_names and word.lower() not in self._not_names and not self._verb.fullmatch(word)
                )
                run = bool(run) or person or initial_name or i > 0
            else:
                count += person
            previous_end = match.end()
        return count + bool(run)

    def _relational(self, query: str) -> bool:
        parts = sentences(query)
        if self.scope == "sentence":
            return any(self._verb.search(s) and self.person_mentions(s) >= 2 for s in parts)
        return bool(self._verb.search(query)) and sum(self.person_mentions(s) for s in parts) >= 2

    def split(self, query: str) -> QuerySpans:
        match = self._verb.search(query)
        if match is None:
            return QuerySpans(query, query, query, None, False)
        before = query[: match.start()].strip(" ,;:.!?")
        after = query[match.end() :].strip(" ,;:.!?")
        return QuerySpans(query, before or query, after or query, match.group(), self._relational(query))
