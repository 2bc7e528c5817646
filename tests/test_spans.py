"""Subject/object span splitting and relational queries (SALI Sec. 2-3)."""

import pytest

from lit_retrieval.data.spans import SpanSplitter
from lit_retrieval.data.synthetic import CHARACTER_WORDS

TABLE = [
    # query, subject, object, verb, relational
    ("The woman confronts Mark about the ledger.", "The woman", "Mark about the ledger", "confronts", True),
    ("Anna talks to her father in the kitchen", "Anna", "her father in the kitchen", "talks to", False),  # initial name
    ("Then Anna talks to her father", "Then Anna", "her father", "talks to", True),
    ("He looked at the stranger, then left.", "He", "the stranger, then left", "looked at", True),
    ("A boy is hugging his sister", "A boy is", "his sister", "hugging", True),
    ("The detective argues with Sam", "The detective", "Sam", "argues with", False),  # detective: no person word
    ("She told Jake the truth", "She", "Jake the truth", "told", True),
    ("The dog looks at the ball", "The dog", "the ball", "looks at", False),  # verb, but no people
    ("A man rides a horse across the field", None, None, None, False),  # no verb: spans = full
    ("Confronts him at the door", None, "him at the door", "Confronts", False),  # empty subject -> full
    ("The man and the woman kiss.", "The man and the woman", None, "kiss", False),  # empty object -> full
]


@pytest.mark.parametrize("query,subject,obj,verb,relational", TABLE)
def test_span_table(query, subject, obj, verb, relational):
    spans = SpanSplitter().split(query)
    assert spans.full == query
    assert spans.subject == (subject if subject is not None else query)
    assert spans.object == (obj if obj is not None else query)
    assert spans.verb == verb
    assert spans.relational is relational


def test_names_count_only_when_not_sentence_initial_unless_asked():
    query = "Nora confronts Eli on the pier"
    assert not SpanSplitter().split(query).relational  # paper rule: initial capitals are not names
    assert SpanSplitter(initial_names=True).split(query).relational


def test_custom_verbs_and_person_words():
    splitter = SpanSplitter(verbs=[r"salut(?:es|ed)"], extra_person_words=CHARACTER_WORDS)
    spans = splitter.split("The red circle salutes the blue square.")
    assert (spans.subject, spans.object, spans.relational) == ("The red circle", "the blue square", True)
    assert SpanSplitter().split("The red circle confronts the blue square").relational is False
    assert SpanSplitter(extra_person_words=CHARACTER_WORDS).split("The red circle confronts the blue square").relational


def test_default_list_has_eleven_patterns_and_bad_patterns_are_refused():
    assert len(SpanSplitter().verbs) == 11
    with pytest.raises(ValueError, match="not a valid regular expression"):
        SpanSplitter(verbs=["talk(s to"])
