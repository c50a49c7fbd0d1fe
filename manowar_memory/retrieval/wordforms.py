"""Word forms the stemmer does not join, for the keyword lane: "When did Nate win ...?" asks about "I won".

Porter stemming joins regular forms (paint, painted, painting) but not irregular ones (win,
won; meet, met; buy, bought), and a question asks in the base form ("When did she meet ...?")
what a memory tells in the past ("I met ..."). Nor does it take ``-ship`` and ``-hood`` off
("mentorship": "mentor", "childhood": "child"), so "When did Jon receive mentorship?" missed
"I got mentored yesterday". :func:`with_word_forms` adds to a query the past forms of each
irregular verb it names in its base form and the root of each such noun, so the keyword lane
(an OR of the query's words) matches them too. Left out: the light verbs (go, make, take, come,
give, know, think, tell), whose past forms fill every chat and match rows about anything, and
the forms that are common words of another meaning (left, found, saw, felt, led).
"""

from __future__ import annotations

import regex

__all__ = ["VERB_FORMS", "with_word_forms", "word_forms"]

_TABLE = (
    "begin began begun|break broke broken|bring brought|build built|buy bought|catch caught|choose chose chosen|"
    "drink drank drunk|drive drove driven|eat ate eaten|fight fought|fly flew flown|forget forgot forgotten|"
    "grow grew grown|hear heard|hold held|keep kept|lend lent|lose lost|meet met|pay paid|ride rode ridden|run ran|"
    "sell sold|send sent|sing sang sung|sleep slept|speak spoke spoken|spend spent|steal stole stolen|swim swam swum|"
    "teach taught|throw threw thrown|wake woke woken|wear wore worn|win won|write wrote written|shake shook shaken|"
    "draw drew drawn|bite bit bitten|hide hid hidden|freeze froze frozen|forgive forgave forgiven|sink sank sunk|"
    "seek sought|dig dug|feed fed|hang hung|bend bent|deal dealt|dream dreamt"
)

#: Each irregular verb's base form (lower case) with its past forms.
VERB_FORMS: dict[str, tuple[str, ...]] = {
    forms[0]: forms[1:] for forms in (tuple(group.split()) for group in _TABLE.split("|"))
}

_WORD = regex.compile(r"\p{L}+")


_SUFFIXES = ("ship", "hood")


def word_forms(text: str) -> list[str]:
    """The forms to add to ``text``'s words, in order, each once, none already in ``text``: the
    past forms of the irregular verbs it names in their base form, and the root of each word
    ending in ``-ship`` or ``-hood`` (a root of four letters at least: "mentorship": "mentor",
    not "ship" alone)."""
    words = [w.lower() for w in _WORD.findall(text)]
    present = set(words)
    out: dict[str, None] = {}
    for word in words:
        forms = list(VERB_FORMS.get(word, ()))
        forms += [word[: -len(end)] for end in _SUFFIXES if word.endswith(end) and len(word) - len(end) >= 4]
        for form in forms:
            if form not in present:
                out.setdefault(form, None)
    return list(out)


def with_word_forms(text: str) -> str:
    """``text`` followed by :func:`word_forms` of it (unchanged when there are none)."""
    extra = word_forms(text)
    return f"{text} {' '.join(extra)}" if extra else text
