"""Subject/object spans of a query around an interpersonal verb (SALI Sec. 2 and 3).

SALI splits a query at an interpersonal verb: the words before it form the subject span, the words
after it the object span. A query is *relational* when it has such a verb and both spans name a
person (a person noun or pronoun, or a capitalised token that does not start the sentence, i.e. a
name). Queries without a verb use subject = object = the full query.

The paper names three of its 11 verb patterns (confronts, talks to, looks at). The other eight are
our choice of common interpersonal verbs in movie descriptions: kisses, hugs, argues with, fights,
slaps, threatens, tells, asks. Each pattern is a regular expression over the lower-cased sentence
covering the verb's inflections; the list and the person words are configurable.

Where the paper is silent we chose: the first verb match splits the sentence; a span that would be
empty (verb at the start or the end) falls back to the full query; punctuation at the span edges
is stripped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]*")


@dataclass(frozen=True)
class QuerySpans:
    """A query, its subject and object spans (equal to `full` without a verb), the verb found,
    and whether the query is relational (verb plus a person on each side)."""

    full: str
    subject: str
    object: str
    verb: str | None
    relational: bool


@dataclass
class SpanSplitter:
    """Split queries at the first interpersonal verb (SALI Sec. 3 "Shot and query embeddings").

    Args:
        verbs: regular expressions of the verb patterns (11 by default; see the module notes).
        person_words: lower-case nouns and pronouns that denote a person. Capitalised tokens that
            do not start the sentence always count (names).
        extra_person_words: added to `person_words` (e.g. the shape nouns that play the characters
            of the synthetic relational scenes).
        initial_names: also count a capitalised sentence-initial token as a name. Off by default:
            the paper counts only non-initial capitalised tokens, since every sentence starts with
            a capital ("Nora confronts Eli" is then relational only if "Nora" is a person word).
    """

    verbs: list[str] = field(default_factory=lambda: list(DEFAULT_VERBS))
    person_words: list[str] = field(default_factory=lambda: list(DEFAULT_PERSON_WORDS))
    extra_person_words: list[str] = field(default_factory=list)
    initial_names: bool = False

    def __post_init__(self) -> None:
        if not self.verbs:
            raise ValueError("SpanSplitter needs at least one verb pattern")
        for pattern in self.verbs:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"verb pattern {pattern!r} is not a valid regular expression: {err}") from None
        self._verb = re.compile(r"\b(?:" + "|".join(f"(?:{p})" for p in self.verbs) + r")\b", re.IGNORECASE)
        self._people = {w.lower() for w in (*self.person_words, *self.extra_person_words)}

    def __getstate__(self) -> dict[str, object]:
        # Only the settings travel (checkpoints load with weights_only=True, which refuses
        # compiled patterns); the matchers are rebuilt on load.
        return {f: getattr(self, f) for f in ("verbs", "person_words", "extra_person_words", "initial_names")}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self.__post_init__()

    def names_person(self, text: str, sentence_start: bool) -> bool:
        """Does `text` contain a person word or a name (a capitalised, non-sentence-initial token)?"""
        for i, match in enumerate(_WORD.finditer(text)):
            word = match.group()
            if word.lower() in self._people:
                return True
            if word[0].isupper() and (self.initial_names or not (i == 0 and sentence_start)):
                return True
        return False

    def split(self, query: str) -> QuerySpans:
        match = self._verb.search(query)
        if match is None:
            return QuerySpans(query, query, query, None, False)
        before = query[: match.start()].strip(" ,;:.!?")
        after = query[match.end() :].strip(" ,;:.!?")
        relational = bool(before and after) and self.names_person(before, True) and self.names_person(after, False)
        return QuerySpans(query, before or query, after or query, match.group(), relational)
