"""Named entities without a model, for the entity lane.

A deliberately small heuristic (no LLM, no NER model, microseconds per text):

* runs of capitalised words (``Smoky Mountains``, ``Grand Canyon``) that do not open a
  sentence (a capitalised sentence opener is usually not a name) and are not stop words;
* all-caps acronyms of two or more letters (``LGBTQ``, ``NYC``);
* a run is split on stop words and the possessive ``'s`` is dropped.

Each entity is returned with its canonical key: trimmed, lower-cased, NFKD-normalised with
combining marks stripped (so ``CAFÉ`` and ``Cafe`` are one entity), the Comis rule.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

import regex

from .._util import STOPWORDS, short_text_cache

__all__ = ["canonical_key", "extract_entities"]

# capitalised words, acronyms and digits-with-letters; apostrophe suffixes kept for stripping
_WORD = regex.compile(r"[\p{Lu}][\p{L}\p{N}]*(?:['’][\p{L}]+)?|[\p{Ll}\p{N}][\p{L}\p{N}]*(?:['’][\p{L}]+)?|[.!?;:\n]")
# Words that are capitalised at the start of a sentence or as interjections, never names.
_NOT_NAMES = frozenset(
    """i i'm i've i'd i'll im ive hey hi hello wow oh ah aw aww yeah yes no nope ok okay thanks thank
    congrats congratulations sure great awesome cool nice good glad sorry haha lol omg hmm well so but and
    or also anyway btw yep yup sounds that's it's what's how's there's here's let's you're we're they're
    can't don't didn't won't isn't wasn't i'll you'll that this these those it my your our their his her
    what when where who why how which by the a an in on at for with from to of as if just really totally
    absolutely definitely maybe love lots happy dear mom dad mum monday tuesday wednesday thursday friday
    saturday sunday january february march april may june july august september october november december
    today tomorrow yesterday tonight last next""".split()
)
_STOP = STOPWORDS | _NOT_NAMES


@short_text_cache(maxsize=8192)  # the lane reads the same stored rows query after query
def canonical_key(name: str) -> str:
    """Trim, lower-case, NFKD, strip combining marks: ``"CAFÉ"`` → ``"cafe"``."""
    if name.isascii():
        return name.strip().lower()
    decomposed = unicodedata.normalize("NFKD", name.strip().lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def _strip_possessive(word: str) -> str:
    for suffix in ("'s", "’s", "'", "’"):
        if word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def extract_entities(text: str, *, max_entities: int = 32) -> dict[str, str]:
    """``{canonical key: display name}`` of the named entities in ``text``, in order of appearance."""
    return dict(_entities(text, max_entities))


@short_text_cache(maxsize=8192)
def _entities(text: str, max_entities: int) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    run: list[str] = []
    sentence_start = True

    def flush() -> None:
        if run:
            name = " ".join(run)
            key = canonical_key(name)
            if key and key not in out and len(out) < max_entities:
                out[key] = name
            run.clear()

    for match in _WORD.finditer(text):
        word = match.group(0)
        if word in ".!?;:\n":
            flush()
            sentence_start = True
            continue
        bare = _strip_possessive(word)
        acronym = len(bare) >= 2 and bare.isupper() and bare.isalpha()
        # a capitalised word opening a sentence is usually just an opener, not a name
        is_name = (
            len(bare) >= 2 and bare[:1].isupper() and bare.lower() not in _STOP and (acronym or not sentence_start)
        )
        if is_name:
            run.append(bare)
            if bare != word:  # a possessive ends the name
                flush()
        else:
            flush()
        sentence_start = False
    flush()
    return tuple(out.items())


def shared_entities(a: Iterable[str], b: Iterable[str]) -> int:
    """How many canonical keys two entity sets share."""
    return len(set(a) & set(b))
