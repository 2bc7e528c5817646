"""Word lists of SALI's relational rule (`lit_retrieval.data.text.spans`; SALI Sec. 2 and 4).

The person lists are the defaults of `SpanSplitter`'s configurable fields; the function-word lists
are fixed: they tell a noun from the words around it (a possessive *her* from an object *her*, the
end of a verb's object, a verb used without an object).
"""

from __future__ import annotations

from lit_retrieval.data.text.wordnet_persons import shipped_person_nouns


def plural(noun: str) -> str:
    """The regular English plural of a person noun (*man* -> *men*, *lady* -> *ladies*)."""
    irregular = {"person": "people", "child": "children", "wife": "wives", "thief": "thieves", "fiance": "fiances"}
    if noun in irregular:
        return irregular[noun]
    if noun.endswith("man"):
        return noun[:-3] + "men"
    if noun.endswith(("s", "sh", "ch", "x")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


# fmt: off
# Nouns that denote one person (their plurals denote two or more), chosen by hand before issue 56; the
# rule's nouns are these and WordNet's noun.person lemmas (`WORDNET_PERSON_NOUNS`). "audience" is not one
# (in captions: the viewer).
HAND_PERSON_NOUNS: tuple[str, ...] = (
    "man", "woman", "boy", "girl", "guy", "lady", "gentleman", "person", "kid", "child", "baby", "toddler",
    "teenager", "teen", "adult", "friend", "partner", "wife", "husband", "mother", "father", "mom", "mum", "dad",
    "parent", "son", "daughter", "brother", "sister", "sibling", "grandmother", "grandfather", "grandma",
    "grandpa", "aunt", "uncle", "cousin", "niece", "nephew", "boyfriend", "girlfriend", "fiance", "fiancee",
    "bride", "groom", "lover", "spouse", "widow", "officer", "cop", "policeman", "policewoman", "detective",
    "agent", "soldier", "sergeant", "captain", "guard", "doctor", "nurse", "teacher", "student", "pupil", "coach",
    "player", "boss", "employee", "worker", "waiter", "waitress", "bartender", "customer", "client", "chef",
    "driver", "passenger", "reporter", "journalist", "host", "guest", "interviewer", "actor", "actress", "singer",
    "dancer", "comedian", "politician", "president", "king", "queen", "prince", "princess", "lawyer", "judge",
    "priest", "nun", "pastor", "neighbor", "neighbour", "stranger", "thief", "killer", "prisoner", "landlord",
    "landlady", "owner", "manager", "salesman", "saleswoman", "shopkeeper", "clerk", "receptionist", "secretary",
    "scientist", "professor", "villain", "hero", "heroine", "mentor", "enemy", "rival", "colleague", "roommate",
    "classmate", "teammate", "attorney", "opponent", "assassin", "victim", "criminal", "gangster", "cowboy",
    "sheriff", "deputy", "colonel", "lieutenant", "commander", "bodyguard", "servant", "maid", "butler", "witness",
    "suspect", "hostage", "captor", "activist", "bully", "coworker", "ally", "companion", "buddy", "pal",
)
# Collective nouns for two or more persons
COLLECTIVE_NOUNS: tuple[str, ...] = (
    "people", "folks", "family", "families", "couple", "couples", "crowd", "crowds",
)
# Subject and object pronouns of third persons, and indefinite person pronouns. First and second
# person pronouns are not persons of the scene in captions ("a man tells you how to...", "we see a
# man"): they speak as or to the viewer. Reflexives (*herself*) are the clause's subject again.
SINGULAR_PRONOUNS: tuple[str, ...] = (
    "he", "she", "him", "her", "someone", "somebody", "anyone", "anybody", "nobody",
)
PLURAL_PRONOUNS: tuple[str, ...] = ("they", "them", "everyone", "everybody")
# Possessive determiners and pronouns: never a person mention ("a man is talking about his car"),
# except *her*, which is also the object pronoun: a possessive when a noun follows it.
POSSESSIVE_WORDS: tuple[str, ...] = (
    "his", "her", "hers", "its", "their", "theirs", "my", "mine", "your", "yours", "our", "ours",
)
# Person nouns often used as a noun's modifier ("a baby stroller", "the family photos"): not a
# person when a noun follows them.
# WordNet's person nouns that are also adjectives ("a white car", "a patient man") join them.
WORDNET_PERSON_NOUNS, WORDNET_MODIFIER_NOUNS = shipped_person_nouns()
MODIFIER_PERSON_WORDS: tuple[str, ...] = ("baby", "family", "child", "kid", "teen", *WORDNET_MODIFIER_NOUNS)
# Reciprocal pronouns: two persons each ("two men are talking to each other")
RECIPROCALS: tuple[str, ...] = ("each other", "one another", "eachother")
TITLES: tuple[str, ...] = ("Mr", "Mrs", "Ms", "Dr", "Prof", "St", "Jr", "Sr")

# Prepositions, particles and adverbs: a verb followed by one has no direct object ("two boys argue
# about a toy", "a couple kisses on the beach").
PREPOSITIONS: tuple[str, ...] = (
    "about", "above", "across", "after", "against", "along", "amid", "among", "around", "at", "before", "behind",
    "below", "beneath", "beside", "besides", "between", "beyond", "by", "despite", "down", "during", "for", "from",
    "in", "inside", "into", "near", "of", "off", "on", "onto", "out", "outside", "over", "past", "since", "through",
    "throughout", "to", "toward", "towards", "under", "underneath", "until", "up", "upon", "via", "with",
    "within", "without", "away", "back", "home", "together", "again", "there", "here", "now", "then", "today",
    "tonight", "alone", "too", "also", "even", "still", "yet", "later", "first", "quietly", "loudly",
)
# Words that end a clause: the object of a verb ends before one ("talks to the camera while he
# cooks"); on the subject side *and*, *or*, *nor* join noun phrases ("a man and a woman talk") and
# do not end it.
CLAUSE_WORDS: tuple[str, ...] = (
    "while", "whilst", "as", "when", "whenever", "because", "although", "though", "but", "so", "then", "until",
    "till", "before", "after", "once", "since", "if", "unless", "whereas", "where", "that", "who", "which",
    "whom", "whose", "and", "or", "nor",
)
NOUN_PHRASE_JOINERS: tuple[str, ...] = ("and", "or", "nor")
DETERMINERS: tuple[str, ...] = (
    "a", "an", "the", "this", "that", "these", "those", "some", "any", "each", "every", "another", "all", "both",
    "either", "neither", "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "several", "many", "most", "few", "other", "others", "such",
)
AUXILIARIES: tuple[str, ...] = (
    "is", "are", "was", "were", "be", "been", "being", "am", "has", "have", "had", "does", "do", "did", "will",
    "would", "can", "could", "may", "might", "shall", "should", "must", "not", "gets", "get", "got",
)
OTHER_PRONOUNS: tuple[str, ...] = (
    "it", "i", "me", "you", "we", "us", "everything", "something", "nothing", "anything", "what", "how", "why",
)
# Capitalised words that open a sentence without being a name (`initial_names`): articles and
# determiners, numbers, non-person pronouns, conjunctions, prepositions and sentence adverbs.
INITIAL_STOP_WORDS: tuple[str, ...] = (
    "a", "an", "the", "this", "that", "these", "those", "some", "any", "each", "every", "another", "all", "both",
    "either", "neither", "no", "none", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "several", "many", "most", "few", "other", "others", "such", "it", "its", "there", "here", "what", "who", "whom",
    "whose", "which", "why", "how", "when", "whenever", "where", "while", "whilst", "and", "but", "or", "nor", "so",
    "yet", "for", "if", "unless", "because", "since", "though", "although", "as", "after", "before", "once", "until",
    "till", "despite", "during", "following", "in", "on", "at", "by", "with", "without", "within", "from", "to", "into",
    "onto", "upon", "of", "off", "out", "over", "under", "inside", "outside", "back", "behind", "near", "amid", "among",
    "against", "about", "around", "through", "meanwhile", "later", "then", "now", "next", "finally", "suddenly",
    "eventually", "soon", "still", "also", "even", "just", "only", "instead", "together", "elsewhere", "first",
    "afterwards", "afterward", "again", "not", "yes", "oh", "well", "i", "you", "we", "my", "your", "our", "his",
    "her", "their",
)
# fmt: on

FUNCTION_WORDS = frozenset((*PREPOSITIONS, *CLAUSE_WORDS, *DETERMINERS, *AUXILIARIES, *OTHER_PRONOUNS))
NOT_PERSONS = FUNCTION_WORDS | {"audience", *POSSESSIVE_WORDS}
PERSON_NOUNS: tuple[str, ...] = tuple(sorted(set(HAND_PERSON_NOUNS) | set(WORDNET_PERSON_NOUNS) - NOT_PERSONS))
PERSON_WORDS: tuple[str, ...] = (
    *SINGULAR_PRONOUNS,
    *PLURAL_PRONOUNS,
    *PERSON_NOUNS,
    *(plural(n) for n in PERSON_NOUNS),
    *COLLECTIVE_NOUNS,
)
PLURAL_PERSON_WORDS: tuple[str, ...] = (*PLURAL_PRONOUNS, *(plural(n) for n in PERSON_NOUNS), *COLLECTIVE_NOUNS)
