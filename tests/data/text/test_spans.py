"""Subject/object span splitting and relational queries (SALI Sec. 2-3).

Expected flags are worked by hand from the paper's rule read as in `lit_retrieval/data/text/spans.py`:
relational = one of the 11 interpersonal verbs relating two people (Sec. 2), names being
capitalised tokens (Sec. 4 names the non-initial ones; a sentence-initial capital counts unless it
is a function word such as "The"), each sentence having its own initial token. The labelled set
`tests/fixtures/sali_relational/labels.jsonl` was written from the definition before the rule."""

import json
from pathlib import Path

import pytest

from lit_retrieval.data.text.spans import SpanSplitter, sentences
from lit_retrieval.data.datasets.synthetic import CHARACTER_WORDS, RELATIONAL_VERBS

TABLE = [
    # query, subject, object, verb, relational
    ("The woman confronts Mark about the ledger.", "The woman", "Mark about the ledger", "confronts", True),
    ("Anna talks to her father in the kitchen", "Anna", "her father in the kitchen", "talks to", True),
    ("Then Anna talks to her father", "Then Anna", "her father", "talks to", True),
    ("He looked at the stranger, then left.", "He", "the stranger, then left", "looked at", True),
    ("A boy is hugging his sister", "A boy is", "his sister", "hugging", True),
    ("The detective argues with Sam", "The detective", "Sam", "argues with", True),
    ("She told Jake the truth", "She", "Jake the truth", "told", True),
    ("The dog looks at the ball", "The dog", "the ball", "looks at", False),  # verb, but no people
    ("A man rides a horse across the field", None, None, None, False),  # no verb: spans = full
    ("Confronts him at the door", None, "him at the door", "Confronts", False),  # empty subject -> full; 1 person
    # empty object -> full; a symmetric verb with two people as its subject
    ("The man and the woman kiss.", "The man and the woman", None, "kiss", True),
    ("Anna kisses Mark before she leaves", "Anna", "Mark before she leaves", "kisses", True),
    ("The waiter talks to Anna and Mark", "The waiter", "Anna and Mark", "talks to", True),
]


@pytest.mark.parametrize("query,subject,obj,verb,relational", TABLE)
def test_span_table(query, subject, obj, verb, relational):
    spans = SpanSplitter().split(query)
    assert spans.full == query
    assert spans.subject == (subject if subject is not None else query)
    assert spans.object == (obj if obj is not None else query)
    assert spans.verb == verb
    assert spans.relational is relational


@pytest.mark.parametrize(
    "query, relational",
    [
        ("Anna confronts Mark.", True),  # the paper's example (Sec. 1): Anna opens the sentence
        ("Forrest talks to Jenny about the war.", True),
        ("The room is dark. Nora confronts Eli.", True),  # a later sentence's initial name
        ("A woman talks to the camera.", False),  # woman; "A" is no name
        ("The dog looks at Mark.", False),  # Mark; "The" is no name
        ("Then Anna talks to the camera.", False),  # Anna; "Then" is no name
        ("It looks at Mark.", False),  # Mark; "It" is no name (and no person pronoun)
        ("Confronts him at the door", False),  # him; the verb itself is no name
    ],
)
def test_sentence_initial_names_count_but_function_words_do_not(query, relational):
    assert SpanSplitter().split(query).relational is relational
    # the literal wording (Sec. 4: "capitalized non-initial tokens") misses every initial name
    assert SpanSplitter(initial_names=False).split(query).relational is False


LABELS = [
    json.loads(line) for line in (Path(__file__).parents[2] / "fixtures" / "sali_relational" / "labels.jsonl").open()
]
# The rule's known misses on the labelled set (docs/sali.md): verbs outside the 11 and a place name
KNOWN_MISSES = {
    "A man slaps another man.",  # slaps: a kind of fighting, not among the 11
    "A journalist interviews an actor on stage.",  # interviews: a kind of asking, not among the 11
    "Anna looks at the Eiffel Tower.",  # the paper's capital rule takes a place name for a person
}


def test_labelled_set_accuracy():
    """72 captions labelled from the definition before the rule was written: 69 right (95.8 %),
    asserted at >= 90 %; the misses are exactly the known ones."""
    assert len(LABELS) >= 40
    wrong = {row["caption"] for row in LABELS if SpanSplitter().split(row["caption"]).relational != row["relational"]}
    assert wrong == KNOWN_MISSES
    assert 1 - len(wrong) / len(LABELS) >= 0.90


@pytest.mark.parametrize(
    "query, relational",
    [
        ("A man is talking about his car.", False),  # his: a possessive, never a second person
        ("A man looks at his phone.", False),
        ("He looks at her phone.", False),  # her before a noun is a possessive
        ("He hugs her.", True),  # her as the object pronoun
        ("He kisses her gently.", True),
        ("He tells her the truth.", True),
        ("The man's wife talks to the camera.", False),  # a possessive noun names no party
        ("Anna's brother argues with the landlord.", True),
        ("Her brother talks to Mark.", True),  # sentence-initial possessive: brother + Mark
        ("A woman is talking about a baby stroller.", False),  # baby modifies stroller
        ("A woman looks at a baby stroller.", False),
        ("A mother kisses her baby.", True),
    ],
)
def test_possessives_and_modifiers_are_no_persons(query, relational):
    assert SpanSplitter().split(query).relational is relational


@pytest.mark.parametrize(
    "query, relational",
    [
        ("They argue.", True),  # a plural person subject is two people
        ("Two boys argue about a toy.", True),
        ("people are talking", True),
        ("A couple kisses on the beach.", True),
        ("two men are talking about cars", True),
        ("They look at the painting.", False),  # plural subject, but the object is a thing
        ("People are looking at the fireworks.", False),
        ("They ask for directions.", False),  # asking is directed: its other party must be named
        ("Two kids talk to the camera.", False),
        ("a women is talking about her day", False),  # "a" + plural: one person (a caption's typo)
        ("children are eating and a man is talking", False),  # "and" after a verb ends the clause
        ("A man and a woman are talking.", True),  # "and" joining two nouns does not
    ],
)
def test_plural_subjects_count_as_two_people(query, relational):
    assert SpanSplitter().split(query).relational is relational


def test_person_mentions_weigh_plurals_and_names():
    splitter = SpanSplitter()
    assert splitter.person_mentions("They hug each other") == 4  # They (2) + each other (2)
    assert splitter.person_mentions("the women talk to one another") == 4
    assert splitter.person_mentions("A couple talks to a man.") == 3
    assert splitter.person_mentions("Mr. Smith looks at Harry Potter") == 2  # two runs of capitals
    assert splitter.person_mentions("Officer Diaz talks to Anna's dog") == 1  # Anna's is a possessive
    assert splitter.person_mentions("We see a man tell you a story") == 1  # we / you: the viewer


@pytest.mark.parametrize(
    "query, relational",
    [
        ("Forrest talks to Jenny on the bench.", True),  # names: initial and non-initial capitals
        ("Then Rick confronts Ilsa at the bar.", True),
        ("Mr. Smith speaks to Dr. Jones.", True),
        ("A waiter talks to Anna.", True),
        ("Anna talks to the camera.", False),
        ("Anna walks in and talks to Mark.", True),  # the elided subject is the sentence's
        ("Sammy meets a fast-talking hustler named Joey.", False),  # no verb inside a hyphenated word
    ],
)
def test_names(query, relational):
    assert SpanSplitter().split(query).relational is relational


def test_talks_leaves_talks_to_to_the_papers_pattern():
    # the paper's "talks to" splits before "to"; our intransitive pattern never ends before " to"
    spans = SpanSplitter().split("Anna talks to Mark")
    assert (spans.verb, spans.subject, spans.object) == ("talks to", "Anna", "Mark")
    assert SpanSplitter().split("Anna talks with Mark").object == "Mark"
    assert [SpanSplitter(verbs=[v]).split("Anna talks to Mark").verb for v in SpanSplitter().verbs[:4]] == [
        None,
        "talks to",
        None,
        None,
    ]


def test_reflexive_and_reciprocal_pronouns_and_word_lists_are_configurable():
    assert not SpanSplitter().split("She talks to herself.").relational  # a reflexive is the subject again
    assert SpanSplitter(extra_person_words=["herself"]).split("She talks to herself.").relational
    assert SpanSplitter().split("two men are talking to each other").relational
    assert (
        not SpanSplitter(reciprocals=[], plural_person_words=[]).split("two men are talking to each other").relational
    )
    assert not SpanSplitter(symmetric_verbs=[]).split("They argue.").relational
    assert SpanSplitter(possessive_words=[], person_words=["man", "his"]).split("a man talks to his car").relational
    assert SpanSplitter(modifier_person_words=[]).split("A woman looks at a baby stroller.").relational


def test_synthetic_relational_scenes_use_the_default_verbs():
    # the synthetic corpus describes its relational scenes with the splitter's own verbs
    splitter = SpanSplitter(extra_person_words=CHARACTER_WORDS)
    for verb in RELATIONAL_VERBS:
        assert splitter.split(f"The red circle {verb} the blue square.").relational, verb


def test_custom_verbs_and_person_words():
    splitter = SpanSplitter(verbs=[r"salut(?:es|ed)"], extra_person_words=CHARACTER_WORDS)
    spans = splitter.split("The red circle salutes the blue square.")
    assert (spans.subject, spans.object, spans.relational) == ("The red circle", "the blue square", True)
    assert SpanSplitter().split("The red circle confronts the blue square").relational is False
    assert SpanSplitter(extra_person_words=CHARACTER_WORDS).split("The red circle confronts the blue square").relational


def test_default_list_has_eleven_patterns_and_bad_patterns_are_refused():
    verbs = SpanSplitter().verbs
    assert len(verbs) == 11
    # the paper's three (Sec. 3) come first, each matching its own phrase
    assert [SpanSplitter(verbs=[v]).split(p).verb for v, p in zip(verbs, ("confronts", "talks to", "looks at"))] == [
        "confronts",
        "talks to",
        "looks at",
    ]
    with pytest.raises(ValueError, match="not a valid regular expression"):
        SpanSplitter(verbs=["talk(s to"])


PARAGRAPH = "A man is seen on a pier. The camera looks at the lake. Then it pans to the boats."


def test_later_sentence_starts_are_not_names():
    # sentence 1: man (1); sentence 2: "The" initial, camera and lake are no persons (0);
    # sentence 3: "Then" initial, "it" is no person pronoun of the list (0) -> one mention only
    assert SpanSplitter().split(PARAGRAPH).relational is False
    # the verb's two parties are sought in its own sentence: "She" (= the woman) talks to the camera
    assert SpanSplitter().split("A woman walks in. She talks to the camera.").relational is False
    assert SpanSplitter().split("The room is dark. Then Anna talks to Mark.").relational is True
    assert SpanSplitter().split("A man talks to the camera while he cooks.").relational is False


def test_sentences_and_name_runs():
    assert sentences(PARAGRAPH) == [
        "A man is seen on a pier. ",
        "The camera looks at the lake. ",
        "Then it pans to the boats.",
    ]
    assert sentences("Mr. Smith looks at J. Doe! Why?") == ["Mr. Smith looks at J. Doe! ", "Why?"]
    # "Mr. Smith" and "Harry Potter" are one name each: 2 mentions; "Mr" alone at the start is initial
    assert SpanSplitter().person_mentions("Mr. Smith looks at Harry Potter") == 2
    assert SpanSplitter().person_mentions("Mr. Smith talks to the camera.") == 1
    assert SpanSplitter().split("Mr. Smith talks to the camera.").relational is False


def test_old_pickles_load_with_their_lists():
    restored = SpanSplitter.__new__(SpanSplitter)
    restored.__setstate__(
        {"verbs": ["greet(?:s)?"], "person_words": ["man"], "extra_person_words": [], "initial_names": False,
         "scope": "sentence"}
    )  # fmt: skip
    assert restored.split("The man greets Ann").relational  # the pickled verb and person lists are kept
    assert not restored.split("Bob greets Ann").relational  # the pickled initial_names=False is kept
    assert restored.symmetric_verbs == SpanSplitter().symmetric_verbs and not hasattr(restored, "scope")


HELD_OUT = [
    json.loads(line)
    for line in (Path(__file__).parents[2] / "fixtures" / "sali_relational" / "heldout_round6.jsonl").open()
]


def test_held_out_round6_set_accuracy():
    """221 captions written by meaning before the rule was changed (issue 56, item 3: role and social
    nouns, passive and progressive-passive forms of the verbs, both classes); the accuracy is in
    docs/sali.md and asserted at >= 90 %."""
    assert len(HELD_OUT) >= 200 and {row["relational"] for row in HELD_OUT} == {True, False}
    rule = SpanSplitter()
    wrong = [row["caption"] for row in HELD_OUT if rule.split(row["caption"]).relational != row["relational"]]
    assert 1 - len(wrong) / len(HELD_OUT) >= 0.90, wrong
