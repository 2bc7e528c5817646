"""The WordNet person lexicon (`lit_retrieval/data/text/wordnet_persons.py`): read from database files written
here in WordNet's own format with known content, and the shipped list it made from WordNet 3.1."""

from __future__ import annotations

from lit_retrieval.data.text import lexicon
from lit_retrieval.data.text.wordnet_persons import person_nouns, shipped_person_nouns, write_person_nouns

LICENSE = "  1 This software and database is being provided to you, the LICENSEE, by Princeton University\n"
# index.noun: lemma pos synset_cnt p_cnt [ptr...] sense_cnt tagsense_cnt offsets (most frequent first)
INDEX_NOUN = """nurse n 2 2 @ ~ 2 2 10000001 10000002
dog n 2 2 @ ~ 2 1 02000001 10000003
stroller n 2 1 @ 2 0 10000004 03000001
latecomer n 1 1 @ 1 0 10000005
lincoln n 1 1 @i 1 1 10000006
white n 2 1 @ 2 2 10000007 04000001
flight_attendant n 1 1 @ 1 1 10000008
table n 1 1 @ 1 1 03000002
"""
# data.noun: offset lex_filenum ss_type w_cnt (hex) word lex_id ... p_cnt pointers (symbol offset pos src/tgt) | gloss
DATA_NOUN = """02000001 05 n 01 dog 0 001 @ 02000009 n 0000 | a domestic animal
03000001 06 n 01 stroller 1 001 @ 03000009 n 0000 | a pram
03000002 06 n 01 table 0 001 @ 03000009 n 0000 | furniture
04000001 07 n 01 white 0 001 @ 04000009 n 0000 | a colour
10000001 18 n 01 nurse 0 001 @ 10000009 n 0000 | one who cares for the sick
10000002 18 n 01 nurse 1 001 @ 10000009 n 0000 | a nanny
10000003 18 n 02 dog 1 frump 0 001 @ 10000009 n 0000 | an unpleasant person
10000004 18 n 01 stroller 0 001 @ 10000009 n 0000 | someone who strolls
10000005 18 n 01 latecomer 0 001 @ 10000009 n 0000 | one who comes late
10000006 18 n 01 Lincoln 0 001 @i 10000009 n 0000 | a president
10000007 18 n 01 white 0 001 @ 10000009 n 0000 | a white person
10000008 18 n 01 flight_attendant 0 001 @ 10000009 n 0000 | cabin crew
"""
INDEX_ADJ = "white a 1 1 & 1 1 00000001\n"


def dict_folder(tmp_path):
    for name, text in (("index.noun", INDEX_NOUN), ("data.noun", DATA_NOUN), ("index.adj", INDEX_ADJ)):
        (tmp_path / name).write_text(LICENSE + text)
    return tmp_path


def test_first_counted_sense_a_person_no_instance_single_word(tmp_path):
    nouns, modifiers = person_nouns(dict_folder(tmp_path))
    # dog: first sense an animal; stroller: untagged senses, one a thing; lincoln: an instance (a name);
    # flight_attendant: two words; table: no person sense
    assert nouns == ["latecomer", "nurse", "white"]
    assert modifiers == ["white"]  # also an adjective: no person before a noun ("a white car")


def test_written_list_reads_back(tmp_path):
    out = tmp_path / "persons.txt"
    assert write_person_nouns(dict_folder(tmp_path), out, source="a test") == 3
    assert out.read_text().count("# ") == 4 and "white modifier" in out.read_text()
    assert shipped_person_nouns(out) == (("latecomer", "nurse", "white"), ("white",))


def test_shipped_list_holds_role_and_social_nouns_and_not_their_animal_or_thing_homonyms():
    nouns, modifiers = shipped_person_nouns()
    assert len(nouns) > 5000  # WordNet 3.1's noun.person, not a short hand list
    assert {"nurse", "patient", "speaker", "officer", "teacher", "referee", "senator", "villager"} <= set(nouns)
    assert not {"dog", "cat", "star", "stroller", "table", "camera", "crowd"} & set(nouns)
    assert {"patient", "white"} <= set(modifiers) and "nurse" not in modifiers
    assert {"patient", "speaker", "patients", "speakers"} <= set(lexicon.PERSON_WORDS)
    assert "patient" in lexicon.MODIFIER_PERSON_WORDS and "audience" not in lexicon.PERSON_WORDS
