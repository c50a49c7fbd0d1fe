"""Fact extraction: turn a conversation turn into durable, atomic facts (graph layer).

Two extractors share one protocol:

* :class:`RuleBasedExtractor` (the default) works offline: first-person statements of
  the user ("I prefer...", "my sister...", "I work at...") become third-person facts.
* :class:`LLMExtractor` asks any chat model (a callable from messages to text) for JSON
  ``{"facts": [{"fact", "type", "confidence"}]}`` and validates every row.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import regex

from ._util import collapse_ws, truncate
from .errors import ExtractionError, ManowarError
from .records import FACT_TYPES, Message
from .timeexpr import resolve_time

__all__ = [
    "ChatFunction", "ExtractedFact", "FactExtractor", "LLMExtractor", "RuleBasedExtractor", "fact_time_metadata",
    "parse_facts",
]


@dataclass(frozen=True)
class ExtractedFact:
    """One durable fact with its type and the extractor's confidence."""

    fact: str
    type: str
    confidence: float
    event_date: str | None = None
    event_phrase: str | None = None


def fact_time_metadata(fact: ExtractedFact) -> dict[str, str]:
    """The metadata a stored fact gets for the time it mentions: ``eventDate`` (ISO, of the
    phrase's precision) and ``eventPhrase`` (as said), when the extractor resolved one."""
    if not fact.event_date:
        return {}
    return {"eventDate": fact.event_date, "eventPhrase": fact.event_phrase or ""}


@runtime_checkable
class FactExtractor(Protocol):
    """Extracts durable facts from the messages of one turn."""

    name: str

    def extract(self, messages: Sequence[Message]) -> list[ExtractedFact]:
        """Facts found in ``messages`` (may be empty)."""
        ...


_SENTENCE = regex.compile(r"[^.!?\n]+[.!?]?")

# (fact type, confidence, pattern on one sentence of a user message)
_RULES: list[tuple[str, float, regex.Pattern[str]]] = [
    ("identity", 0.9, regex.compile(r"\b(?:my name is|call me)\s+\p{Lu}[\p{L}'-]+", regex.I)),
    ("identity", 0.8, regex.compile(r"\bI(?:'m| am)\s+(?:now\s+)?(?:a|an)\s+(?!big fan\b)[\p{L}-]+(?:\s+[\p{L}-]+){0,4}", regex.I)),
    ("identity", 0.8, regex.compile(r"\bI (?:work|am working) (?:as|at|for|in)\b", regex.I)),
    ("identity", 0.75, regex.compile(r"\bI(?:'m| am) from\b", regex.I)),
    ("preference", 0.85, regex.compile(
        r"\bI (?:really |strongly |usually |always |do not |don't )?(?:prefer|like|love|enjoy|hate|dislike|want)\b", regex.I)),
    ("preference", 0.8, regex.compile(r"\bmy (?:new |all-time )?favou?rite\b", regex.I)),
    ("preference", 0.75, regex.compile(r"\bI (?:do not|don't|never) (?:eat|drink)\b", regex.I)),
    ("preference", 0.75, regex.compile(r"\bI(?:'m| am) (?:a big fan of|into|allergic to|vegetarian|vegan)\b", regex.I)),
    ("relationship", 0.8, regex.compile(
        r"\bmy (?:new )?(?:wife|husband|partner|boyfriend|girlfriend|son|daughter|kids?|children|mother|mom|father|dad|"
        r"brother|sister|friend|best friend|boss|manager|colleague|coworker|dog|cat|pet)\b", regex.I)),
    ("context", 0.75, regex.compile(
        r"\b(?:I (?:live|moved|relocated|settled)|I(?:'m| am) (?:living|moving|based)|I(?:'ve| have) (?:been living|lived|relocated|moved))"
        r" (?:in|to|with|back to|out of|away from)\b", regex.I)),
    ("context", 0.7, regex.compile(r"\b(?:I|we) (?:use|are using|run|deploy)\b\s+\S+", regex.I)),
    ("context", 0.7, regex.compile(r"\bI(?:'m| am) (?:working on|building|studying|learning)\b", regex.I)),
    ("context", 0.7, regex.compile(r"\bI (?:study|attend)\b", regex.I)),
    ("relationship", 0.75, regex.compile(
        r"\bI(?:'m| am)? (?:broke up with|split up with|divorced|dating|married to|engaged to|got engaged to|"
        r"got married to|married)\b", regex.I)),
    ("context", 0.7, regex.compile(
        r"\bI(?:'m| am)? (?:plan|planning|intend|going|cancelled|canceled|called off|postponed|scrapped) (?:to|on|a|an|the|my)\b",
        regex.I)),
    ("skill", 0.75, regex.compile(r"\b(?:I (?:know how to|can speak|speak|code in|program in)|I(?:'m| am) good at)\b", regex.I)),
    # a talk, a class or an event the user takes part in: "I'm speaking at PyCon in March", "I'll be teaching a workshop"
    ("event", 0.7, regex.compile(
        r"\bI(?:'m| am|'ll be| will be) (?:(?:also |now |going to be )?)(?:speaking|presenting|giving (?:a|the|my|an) "
        r"(?:talk|keynote|workshop|presentation|lecture|class|course)|teaching|hosting|organi[sz]ing|running|leading|"
        r"attending|performing|competing|exhibiting) (?:at|on|about|in|a|an|the|my|our)\b", regex.I)),
    ("event", 0.7, regex.compile(
        r"\bI (?:went|visited|attended|started|finished|graduated|bought|adopted|joined|ran|met|got)\b.{0,400}"
        r"\b(?:yesterday|today|last|ago|on|in \d{4}|this (?:week|month|year))\b", regex.I)),
    # a change of job, partner, taste or plan said in its own words (see _REWRITES), when no rule above took it
    ("identity", 0.8, regex.compile(
        r"\b(?:I (?:was hired by|quit \p{Lu}|joined \p{Lu})|I(?:'m| am) working (?:as|at|for)\b|"
        r"I(?:'ve| have) been working (?:as|at|for)\b|I(?:'ve| have)? (?:quit|left|lost) my (?:job|position)\b|"
        r"I(?:'ve| have)? (?:got|landed|found|took|started|accepted|began) (?:a |an )?(?:new )?(?:job|position|role)\b|"
        r"I(?:'ve| have)? (?:retrained|became) (?:as )?(?:a|an)\b)")),  # no regex.I: \p{Lu} is a name
    ("relationship", 0.75, regex.compile(
        r"\bI(?:'m| am|'ve| have)? (?:now |been )?(?:seeing|started seeing|started dating|in a relationship with|"
        r"living with my (?:new )?(?:partner|girlfriend|boyfriend|wife|husband)|single)\b|\bI live with my partner\b", regex.I)),
    ("preference", 0.75, regex.compile(
        r"\bI(?:'m| am|'ve| have)? (?:(?:so|really|totally|completely|kind of) )?(?:sick of|tired of|done with|over|gone off|into|come around (?:on|to)|switched from|can't stand|"
        r"cannot stand|used to (?:love|like|enjoy))\b", regex.I)),
    ("preference", 0.75, regex.compile(r"\b(?:grew|has grown|have grown|'s grown) on me\b", regex.I)),
]

_PRONOUNS = [
    (regex.compile(r"^call me\b", regex.I), "the user goes by"),
    (regex.compile(r"\bI'm\b", regex.I), "the user is"),
    (regex.compile(r"\bI am\b"), "the user is"),
    (regex.compile(r"\bI've\b", regex.I), "the user has"),
    (regex.compile(r"\bI'd\b", regex.I), "the user would"),
    (regex.compile(r"\bI'll\b", regex.I), "the user will"),
    (regex.compile(r"\bI was\b"), "the user was"),
    # "we" statements are the user's too ("we use Postgres", "when we eat out"): a fact names no "we"
    (regex.compile(r"\bwe're\b|\bwe are\b", regex.I), "the user is"),
    (regex.compile(r"\bwe've\b|\bwe have\b", regex.I), "the user has"),
    (regex.compile(r"\bwe'd\b", regex.I), "the user would"),
    (regex.compile(r"\bwe'll\b", regex.I), "the user will"),
    (regex.compile(r"\bwe were\b", regex.I), "the user was"),
    (regex.compile(r"\bwe\b", regex.I), "the user"),
    (regex.compile(r"\bour\b|\bours\b", regex.I), "the user's"),
    (regex.compile(r"\bourselves\b", regex.I), "themselves"),
    (regex.compile(r"\bI\b"), "the user"),
    (regex.compile(r"\bmy\b", regex.I), "the user's"),
    (regex.compile(r"\bmine\b", regex.I), "the user's"),
    (regex.compile(r"\bme\b", regex.I), "the user"),
    (regex.compile(r"\bmyself\b", regex.I), "themselves"),
]
_ADVERBS = (
    "really|strongly|usually|always|often|also|still|now|never|just|sometimes|recently|finally|already|even|only|"
    "mostly|rarely|currently|actually|definitely|absolutely|totally|truly|genuinely|seriously|generally|normally|"
    "no longer|barely|hardly|occasionally|regularly|mainly|basically|kind of|sort of"
)
#: verbs ending in -ly, which the adverb pattern below must not take for adverbs
_LY_VERBS = frozenset("apply reply rely fly supply comply imply multiply ally bully rally tally".split())
#: any adverb: the listed ones, "almost", "pretty much", and a word in -ly that is no verb ("typically", "honestly")
_ANY_ADVERB = rf"(?:{_ADVERBS}|almost|nearly|pretty much|more or less|(?!(?:{'|'.join(sorted(_LY_VERBS))})\b)\p{{Ll}}+ly)"
#: a word after "the user" (past any adverbs) that is a bare verb needing the third-person -s
_AFTER_USER = regex.compile(rf"\b(the user )((?:{_ANY_ADVERB} )*)(\p{{Ll}}+)\b(?!')")
_NOT_VERBS = frozenset((
    "is was has had will would can could should shall may might must did does doesn't didn't isn't wasn't "
    "and or but nor with to in at for from of on by who that which because if when while than as so too "
    "herself himself themselves first then also a an the"
).split())
_IRREGULAR_PAST = frozenset((
    "went got met ran bought had made took saw left began came found gave knew said told thought wrote became "
    "quit broke brought built caught chose drove ate fell felt flew forgot grew heard held kept lost meant paid put "
    "read rode sang sat slept sold sent spent spoke stood swam taught threw understood woke won wore"
).split())
_NEGATION = regex.compile(r"\bthe user (don't|do not)\b", regex.I)
_ADVERB_RUN = regex.compile(rf"\b(I) (?:(?:(?!really\b|strongly\b|usually\b|always\b|never\b){_ANY_ADVERB}) )+")
_DISCOURSE = regex.compile(
    r"^(?:(?:so|well|oh|ok|okay|also|and|but|anyway|actually|first|firstly|second|then|btw|by the way|fyi|"
    r"just so you know|for the record|to be honest|honestly|fun fact|guess what|you know what|as you know)"
    r"\b[,:]?\s+"
    r"|(?:let me tell you|I (?:must|should|have to|want to|wanted to|need to|'ll|will|can|could) "
    r"(?:tell|mention to|mention|say to|say|remind) you|I (?:tell|told) you|I should mention|I forgot to mention|"
    r"I (?:have to|must|want to) (?:say|mention|admit)|you should know|remember)\b[,:]?\s+(?:that\s+)?)+",
    regex.I,
)
#: where a sentence splits into clauses: ";" always; "and" / "but" / "so" when a clause follows
_CLAUSE_SPLIT = regex.compile(r"\s*;\s*|,?\s+(?:and|but|so|and then|while)\s+(?=(?:I|I'm|I've|I'd|I'll|my|My|we|he|she|they)\b"
                              r"|(?:(?:also|now|still|then|just|recently|finally|really|usually|even|never) )*"
                              r"(?:am|have|work|live|study|like|love|hate|enjoy|prefer|own|play|speak|moved|started|"
                              r"plan|want|need|use|go|went|got|joined|quit|left|adopted|bought|visited|met|"
                              r"finished|graduated|teach|run|do|don't|can|can't)\b)")
_SUBJECT_START = regex.compile(r"^(?:I|I'm|I've|I'd|I'll|my|My|we|he|she|they)\b")


# ---------------------------------------------------------------- changes said in other words
# Everyday ways of saying a change ("X hired me", "Porto is home now", "the Japan trip is off")
# are rewritten, before the rules run, into the plain first-person statement the rules and the
# slot parser (manowar_memory.lifecycle) read: "I was hired by X", "I now live in X", "I
# cancelled the trip to Japan". Each rewrite is one construction family, not one sentence.
_N = r"\p{Lu}[\p{L}\d&'.-]*(?:\s+(?:of\s+|de\s+)?\p{Lu}[\p{L}\d&'.-]*){0,3}"  # a proper name: "Porto", "New York", "Acme Labs"
_WE = r"(?:I|[Ww]e)"
_STAY = (r"this week|this weekend|tonight|today|for (?:a|the|two|three|a few|some) (?:days?|nights?|weeks?|weekend|"
         r"conference|trip|holidays?)|on (?:holiday|vacation|business|a trip)|visiting|for work")  # a stay, not a home
_MORE = r"(?:\s*[,:—–-]+\s*(?:and |so |but )?(?P<more>.+))?$"  # what follows a comma: a statement of its own
_IM = r"(?:I(?:'m| am)|[Ww]e(?:'re| are))"
_AS_I = {"are": "am", "were": "was", "'re": "am", "'ve": "have"}  # "Sam and I are" -> "I am"
_PARTNER_WORDS = r"girlfriend|boyfriend|partner|wife|husband|fianc[eé]e?|spouse"
_RELATIONSHIP_CONTEXT = regex.compile(
    r"\b(?:broke up|split up|separated|dating|seeing|relationship|single|met someone|together|in love|anniversary|"
    r"engaged|married|didn't work out|did not work out|things ended|" + _PARTNER_WORDS + r")\b",
    regex.I)
#: "now I work as a chef" / "these days I'm at Acme": the opener goes
_OPENER = regex.compile(r"^(?i:now|nowadays|these days|today|lately|recently|funny|honestly),? (?=I\b)")
#: a tag question after a statement ("I'm a Porto resident now, can you believe it?"): the statement stays
_TAG_QUESTION = regex.compile(
    r",\s*(?:can you believe (?:it|that)|right|isn't it|aren't I|don't you think|you know|who knew|huh|eh)\s*\?$",
    regex.I)
_REWRITES: list[tuple[regex.Pattern[str], str | Callable[[regex.Match[str]], str]]] = [
    # residence ---------------------------------------------------------------------------
    # "now that I'm in Porto, ..." / "now that I live in Porto" (not a stay: "now that I'm in Rome for the weekend")
    (regex.compile(rf"^(?i:now that|since) I(?:'m| am| live| now live)(?: (?:living|based|settled))? in (?P<x>{_N})\b"
                   rf"(?!.*\b(?:{_STAY})\b).*$"),
     r"I now live in \g<x>"),
    # "Porto is home now" / "Porto is my home now" / "home is Porto now"
    (regex.compile(rf"^(?P<x>{_N})(?: is|'s) (?:now )?(?:my |our )?(?:new )?home(?: now)?{_MORE}"), r"I now live in \g<x>; \g<more>"),
    (regex.compile(rf"^(?i:my |our )?(?i:new )?(?i:home) is (?:now )?(?:in )?(?P<x>{_N})(?: now)?$"),
     r"I now live in \g<x>"),
    # "I'm a Porto resident now" / "we're officially Berlin residents"
    (regex.compile(rf"^{_IM} (?:now |officially )*(?:an? )?(?:proud |happy |new )?(?P<x>{_N}) residents?\b.*$"),
     r"I now live in \g<x>"),
    # "we settled into a new flat in Porto" / "I've settled in Porto"
    (regex.compile(rf"^{_WE}(?:'ve| have)? (?:finally |just )?settled (?:into |in )?(?:an? |our |my )?(?:new )?"
                   rf"(?:place|flat|apartment|house|home)?\s*in (?P<x>{_N})(?P<rest>.*)$"),
     r"I settled in \g<x>\g<rest>"),
    # "we relocated to Porto" / "we moved to Porto" / "we moved out of Lisbon"
    (regex.compile(r"^[Ww]e(?:'ve| have)? (?P<v>(?:just |recently |finally )?(?:relocated|moved)) "), r"I \g<v> "),
    # employer ----------------------------------------------------------------------------
    # "Acme hired me" / "I got hired by Acme" / "I was hired at Acme"
    (regex.compile(rf"^(?P<x>{_N}) (?:just |finally |has |have )?hired me\b(?P<rest>.*)$"), r"I was hired by \g<x>\g<rest>"),
    (regex.compile(rf"^I(?: just| got| just got| was| have been|'ve been| have just been|'ve just been) hired (?:by|at) (?P<x>{_N})(?P<rest>.*)$"),
     r"I was hired by \g<x>\g<rest>"),
    # "I left Acme to join Globex" / "I quit Acme for Globex"
    (regex.compile(rf"^I (?:just )?(?:left|quit) (?P<a>{_N}) (?:to join|for|and moved to) (?P<x>{_N})\b(?P<rest>.*)$"),
     r"I quit \g<a>; I joined \g<x>\g<rest>"),
    # "it's my first week at Acme" / "my first day at Acme was great"
    (regex.compile(rf"^(?i:it's |this is |I'm in |I am in |(?:last|this) (?:week|month) (?:was|is) |"
                   rf"(?:yesterday|today|monday|tuesday|wednesday|thursday|friday) (?:was|is) )?"
                   rf"(?i:my) first (?:day|week|month|weeks|days) (?:at|with) (?P<x>{_N})\b.*$"),
     r"I now work at \g<x>"),
    # "I switched jobs, I'm at Acme now" / "I switched jobs to Acme" / "I changed jobs and joined Acme"
    (regex.compile(rf"^I(?:'ve| have)? (?:switched|changed) (?:jobs|employers|companies)(?: from {_N})?"
                   rf"(?: to|,? (?:and )?(?:I'm|I am|now) (?:now )?(?:at|with|working (?:at|for))) (?P<x>{_N})\b.*$"),
     r"I now work at \g<x>"),
    # "I'm on the team at Acme" / "I'm part of the team at Acme"
    (regex.compile(rf"^I(?:'m| am) (?:now )?(?:on|part of) (?:the|a) (?:\p{{Ll}}+ )?team (?:at|of) (?P<x>{_N})\b(?P<rest>.*)$"),
     r"I work at \g<x>\g<rest>"),
    # "I handed in my notice at Acme" / "I gave notice at Acme"
    (regex.compile(rf"^I(?:'ve| have)? (?:handed in|gave|put in|turned in) (?:my )?notice (?:at|to) (?P<x>{_N})\b"
                   rf"(?:,? (?:and |so )?(?:now )?(?P<more>I.+))?.*$"),
     r"I quit \g<x>; \g<more>"),
    # "I've been at Acme since 2018" ("I've been with X" is read in _rewrite: a partner or an employer)
    (regex.compile(rf"^I(?:'ve| have) been at (?P<x>{_N})(?P<rest>.*)$"), r"I have been working at \g<x>\g<rest>"),
    # job title ---------------------------------------------------------------------------
    # "I retrained and I'm working as a nurse now": the clause splitter leaves "I'm working as a nurse"
    # "I'm not a teacher anymore, I became a nurse" -> "I became a nurse" (the "not" clause gives no fact)
    (regex.compile(r"^I(?:'m| am) (?:not|no longer) an? [\p{L} -]+?(?: anymore| any more)?[,;:]\s*(?:now\s+)?(?P<rest>I .+)$"),
     r"\g<rest>"),
    # "I earn my living as a nurse" / "I make a living as a nurse"
    (regex.compile(r"^I(?:'m| am)? (?:now |currently )?(?:earn|earning|make|making) (?:my|a) living as (?P<x>.+)$"),
     r"I work as \g<x>"),
    # "I got a job as a nurse (at X)"
    (regex.compile(r"^I(?:'ve| have)? (?P<v>got|landed|found|took) (?:a |an )?(?:new )?job as (?P<x>.+)$"),
     r"I \g<v> a job as \g<x>"),
    # partner -----------------------------------------------------------------------------
    # "Ana and I broke up" / "Ana and I split" / "Ana and I are done"
    (regex.compile(rf"^(?P<x>{_N}) and I (?:have |just |finally )*(?:broke up|split up|split|separated|called it quits|"
                   rf"are done|are over|are through|aren't together(?: anymore)?|are no longer together)\b{_MORE}"),
     r"I broke up with \g<x>; \g<more>"),
    # "things with Ana didn't work out" / "things ended with Ana"
    (regex.compile(rf"^(?i:things|it) (?:with (?P<x>{_N}) (?:didn't|did not|just didn't) work out|"
                   rf"(?:ended|are over|is over|didn't work out|did not work out) with (?P<x>{_N}))\b{_MORE}"),
     r"I broke up with \g<x>; \g<more>"),
    # "Theo and I got engaged" / "Theo and I are dating"
    (regex.compile(rf"^(?P<x>{_N}) and I (?:have |just |finally )*(?P<v>got engaged|got married|are dating|started dating|"
                   rf"started seeing|are seeing each other|are together|moved in together)\b(?P<rest>[^;]*)$"),
     lambda m: {"got engaged": "I got engaged to ", "got married": "I got married to ", "started dating": "I started dating ",
                "started seeing": "I started seeing ", "moved in together": "I live with my partner "}.get(
                    m["v"], "I'm dating ") + m["x"] + m["rest"]),
    # "I've got a new girlfriend, Lucia" / "I have a new boyfriend called Jonas"
    (regex.compile(rf"^I(?:'ve| have)?(?: got)? (?:a )?new (?P<rel>{_PARTNER_WORDS})[,:]? (?:called |named )?(?P<x>{_N})\b(?P<rest>[^;]*)$"),
     r"my new \g<rel> is \g<x>\g<rest>"),
    # "I met someone: Sofia" / "I've met someone new, her name is Sofia"
    (regex.compile(rf"^I(?:'ve| have)? met someone(?: new| special)?\s*[:,—–-]+\s*(?:(?:her|his|their) name is |called |named )?"
                   rf"(?P<x>{_N})\b.*$"), r"I'm seeing \g<x>"),
    # "Sofia moved in with me"
    (regex.compile(rf"^(?P<x>{_N}) (?:has |just |finally )*moved in with me\b.*$"), r"I live with my partner \g<x>"),
    # "my partner Sam and I are moving to Porto" / "my friend Ana and I went to Rome": the user is the subject
    (regex.compile(rf"^[Mm]y (?P<rel>(?:new |best )?\p{{Ll}}+)(?: (?P<x>{_N}))? and I (?P<verb>\p{{Ll}}+|'ve|'re) (?P<rest>.+)$"),
     lambda m: f"I {_AS_I.get(m['verb'], m['verb'])} {m['rest']} with my {m['rel']}{' ' + m['x'] if m['x'] else ''}"),
    # favourites and opinions -------------------------------------------------------------
    # "I used to love jazz but I can't stand it anymore" -> "I can't stand jazz anymore"
    (regex.compile(r"^I used to (?:love|like|enjoy|adore) (?P<x>[^,;]+?),? but (?:now )?"
                   r"(?:I(?:'m| am) (?:now )?(?P<state>tired of|sick of|over|done with)|(?:I )?(?P<verb>can't stand|cannot stand|"
                   r"hate|don't like|do not like|dislike)) (?:it|them|that)\b(?P<rest>.*)$"),
     lambda m: f"I {m['verb'] or 'am ' + m['state']} {m['x']}{m['rest']}"),
    # "I used to hate jazz but now I love it" -> "I love jazz now"
    (regex.compile(r"^I used to (?:hate|dislike|can't stand|cannot stand|not like) (?P<x>[^,;]+?),? but (?:now )?"
                   r"(?:I(?:'m| am) (?:now )?(?:a fan of|into)|(?:I )?(?:now )?(?P<verb>love|like|enjoy|adore)) "
                   r"(?:it|them|that)\b(?P<rest>.*)$"),
     lambda m: f"I {m['verb'] or 'love'} {m['x']} now{m['rest']}"),
    # "I'm a convert when it comes to sushi" / "I'm a sushi convert now"
    (regex.compile(r"^I(?:'m| am) (?:now )?(?:a )?(?:total |complete |full )?convert (?:when it comes to|on|to) (?P<x>.+)$"),
     r"I love \g<x>"),
    # "Sencha is my favourite now" / "sencha is my new favourite tea"
    (regex.compile(rf"^(?P<x>{_N}|\p{{L}}[\p{{Ll}}-]*(?: [\p{{Ll}}-]+){{0,2}}?) (?:is|are) (?P<now>now )?my (?P<new>new )?"
                   rf"(?:absolute |all-time |very |total )?(?:favou?rites?|go-to)(?P<kind> (?!now$)[\p{{Ll}} -]+?)?(?P<now2> now)?$"),
     lambda m: f"my {'new ' if m['new'] or m['now'] or m['now2'] else ''}favourite{m['kind'] or ''} is {m['x']}"),
    # "I'm all about oat milk these days" / "I'm hooked on padel"
    (regex.compile(r"^I(?:'m| am) (?:now |totally |really |so )*(?:all about|hooked on|obsessed with) (?P<x>.+)$"),
     r"I love \g<x>"),
    # plans -------------------------------------------------------------------------------
    # "the Japan trip is off" / "our trip to Japan is cancelled"
    (regex.compile(rf"^(?i:the|our|my) (?:(?P<x>{_N}) (?:trip|holiday|vacation)|(?:trip|holiday|vacation) to (?P<x>{_N})) "
                   rf"(?:is|'s) (?:off|cancelled|canceled|postponed|scrapped|called off|not happening)\b{_MORE}"), r"I cancelled the trip to \g<x>; \g<more>"),
    # "plans changed, we're off to Lisbon": the opener goes
    (regex.compile(r"^(?i:plans? (?:have )?changed|change of plans?|(?:we|I) changed (?:our |my |the )?plans?)\s*[:,—–-]+\s*"
                   rf"(?=(?:we|I)\b|{_N} it is)"), ""),
    # "we changed plans: Rome instead of Japan" / "change of plans, Rome instead of Japan"
    (regex.compile(rf"^(?:{_WE} changed (?:our |my |the )?plans?|(?i:change of plans?))\s*[:,—–-]*\s*(?:we're going to |we are going to |"
                   rf"I'm going to |going to |it's )?(?P<x>{_N}) instead of (?P<a>{_N})\b.*$"),
     r"I cancelled the trip to \g<a>; I'm going to \g<x> instead"),
    # "forget Japan, we booked Rome" / "scratch Japan; we're doing Rome"
    (regex.compile(rf"^(?i:forget|scratch|never mind|no more) (?:the )?(?P<a>{_N})(?: trip)?\s*[,;:—–-]+\s*{_WE}(?:'ve| have)? "
                   rf"(?:booked|chose|picked|are doing|'re doing|are going to|'re going to|going to) (?:a trip to |flights to )?(?P<x>{_N})\b.*$"),
     r"I cancelled the trip to \g<a>; I'm going to \g<x> instead"),
    # "we postponed Japan, Rome it is"
    (regex.compile(rf"^{_WE}(?:'ve| have)? (?P<v>postponed|cancelled|canceled|called off|scrapped|dropped) (?:the |our )?(?:trip to )?"
                   rf"(?P<a>{_N})(?: trip)?(?: indefinitely| for now| for a while| until next year)?\s*[,;:—–-]+\s*(?:so )?"
                   rf"(?P<x>{_N}) it is\b.*$"),
     r"I \g<v> the trip to \g<a>; I'm going to \g<x> instead"),
    # "we're saving up for our Chile trip" / "I'm saving for a trip to Chile"
    (regex.compile(rf"^{_IM} (?:now )?saving (?:up )?for (?:our |my |a |the )?(?:(?P<x>{_N}) (?:trip|holiday|vacation)|"
                   rf"(?:trip|holiday|vacation) to (?P<x>{_N}))\b(?P<rest>.*)$"),
     r"I'm planning a trip to \g<x>\g<rest>"),
    # "we're planning a trip to Chile" / "we plan to visit Peru"
    (regex.compile(r"^[Ww]e(?:'re| are) (?=(?:now )?(?:planning|going|heading|flying) )"), "I'm "),
    (regex.compile(r"^[Ww]e (?=(?:plan|intend|want) to )"), "I "),
    # "we're going to Peru instead of Chile" / "we decided on Greece instead of Turkey"
    (regex.compile(rf"^{_WE}(?:'re| are|'m| am|'ve| have)? (?:now )?(?:going to|heading to|flying to|off to|decided on|chose|picked|booked|"
                   rf"went with|are doing|'re doing) (?:a trip to )?(?P<x>{_N}) instead of (?P<a>{_N})\b.*$"),
     r"I cancelled the trip to \g<a>; I'm going to \g<x> instead"),
    # "Norway it is"
    (regex.compile(rf"^(?:so )?(?P<x>{_N}) it is$"), r"I'm going to \g<x> instead"),
    # "we cancelled Japan" / "we're heading to Rome instead" ("we" plans are the user's plans)
    (regex.compile(rf"^{_WE}(?:'ve| have)? (?P<v>postponed|cancelled|canceled|called off|scrapped|dropped) (?:the |our )?(?:trip to )?"
                   rf"(?P<a>{_N})(?: trip)?(?: indefinitely| for now| for a while| until next year)?$"),
     r"I \g<v> the trip to \g<a>"),
    (regex.compile(rf"^{_IM} (?:now )?(?:heading|going|flying|off) to (?P<x>{_N})(?P<rest>.*)$"), r"I'm going to \g<x>\g<rest>"),
    (regex.compile(rf"^{_WE}(?:'ve| have)? booked (?:a trip to |flights to |a holiday in |a trip in )?(?P<x>{_N})(?P<rest>.*)$"),
     r"I'm going to \g<x>\g<rest>"),
]
#: a clause that starts with a past verb and no subject ("Relocated to Porto in May") is the user's
_NO_SUBJECT = regex.compile(
    r"^(?=(?:just |recently |finally )?(?:relocated|moved|settled|started|joined|quit|left|switched|retrained|got|met|"
    r"broke up|booked|cancelled|canceled|postponed)\b)", regex.I)

#: "I'm with X now" / "I'm now at X": a partner when the turn talks of a relationship, else an employer
_WITH_NOW = regex.compile(rf"^I(?:'m| am) (?:now )?(?P<prep>with|at) (?P<x>{_N})(?: now)?(?P<rest>[^;]*)$")
#: "I've been with X for years": a partner when the turn talks of a relationship, else an employer
_BEEN_WITH = regex.compile(rf"^I(?:'ve| have) been with (?P<x>{_N})(?P<rest>[^;]*)$")


def _rewrite(text: str, turn: str) -> str:
    """``text`` with each ";"-piece rewritten into the plain statement its construction means
    (see ``_REWRITES``); ``turn`` (the whole message) decides what "I'm with X now" is about."""
    out: list[str] = []
    for piece in regex.split(r"\s*;\s*", text):
        piece = _OPENER.sub("", piece)
        if _NO_SUBJECT.match(piece):
            piece = "I " + piece[:1].lower() + piece[1:]
        for pattern, repl in _REWRITES:
            piece = pattern.sub(repl, piece, count=1)
        m = _WITH_NOW.match(piece)
        if m and (m.group("prep") == "at" or regex.search(r"\bnow\b", piece)):
            partner = m.group("prep") == "with" and _RELATIONSHIP_CONTEXT.search(turn)
            piece = (f"I'm now in a relationship with {m.group('x')}" if partner
                     else f"I now work at {m.group('x')}{m.group('rest')}")
        m = _BEEN_WITH.match(piece)
        if m:
            piece = (f"I have been in a relationship with {m.group('x')}{m.group('rest')}"
                     if _RELATIONSHIP_CONTEXT.search(turn) else f"I have been working at {m.group('x')}{m.group('rest')}")
        out.extend(_OPENER.sub("", p) for p in regex.split(r"\s*;\s*", piece) if p.strip(" ,"))
    return "; ".join(out)


def _clauses(sentence: str) -> list[str]:
    """``sentence`` as one clause per statement: split at ";" and at "and" / "but" / "so"
    when a subject or a verb follows; a clause with no subject of its own takes "I"."""
    parts = [p.strip(" ,") for p in _CLAUSE_SPLIT.split(sentence) if p and p.strip(" ,")]
    if len(parts) < 2:
        return [sentence]
    out = [parts[0]]
    for part in parts[1:]:
        out.append(part if _SUBJECT_START.match(part) else f"I {part}")
    return out


def _verb_s(word: str) -> str:
    lower = word.lower()
    if lower in ("have",):
        return "has"
    if lower in ("do", "go"):
        return lower + "es"
    if lower.endswith("y") and len(lower) > 2 and lower[-2] not in "aeiou":
        return lower[:-1] + "ies"
    if lower.endswith(("s", "sh", "ch", "x", "z", "o")):
        return lower + "es"
    return lower + "s"


def _agree(m: regex.Match[str]) -> str:
    user, adverbs, word = m.group(1), m.group(2), m.group(3)
    lower = word.lower()
    if (lower in _NOT_VERBS or lower in _IRREGULAR_PAST or lower.endswith(("ed", "ing"))
            or (lower.endswith("ly") and lower not in _LY_VERBS)
            or (lower.endswith("s") and not lower.endswith("ss"))):
        return m.group(0)
    return f"{user}{adverbs}{_verb_s(word)}"


def _third_person(sentence: str) -> str:
    out = sentence.strip().rstrip(".!?").strip()
    out = _DISCOURSE.sub("", out)
    for pattern, repl in _PRONOUNS:
        out = pattern.sub(repl, out)
    out = _NEGATION.sub(lambda m: "the user doesn't" if "'" in m.group(1) else "the user does not", out)
    out = _AFTER_USER.sub(_agree, out)
    out = out[0].upper() + out[1:] if out else out
    return out + "."


class RuleBasedExtractor:
    """Offline extractor: first-person statements in user messages become facts."""

    name = "rules"

    def __init__(self, *, max_per_turn: int = 5, min_confidence: float = 0.6, max_chars: int = 240) -> None:
        self.max_per_turn = max_per_turn
        self.min_confidence = min_confidence
        self.max_chars = max_chars

    def extract(self, messages: Sequence[Message]) -> list[ExtractedFact]:
        """Facts from the user messages of a turn, at most ``max_per_turn``."""
        facts: list[ExtractedFact] = []
        seen: set[str] = set()
        for msg in messages:
            if msg.role != "user":
                continue
            for raw in _SENTENCE.findall(msg.content):
                whole = _TAG_QUESTION.sub("", collapse_ws(raw))
                if len(whole) < 8 or whole.endswith("?"):
                    continue
                said = _rewrite(_DISCOURSE.sub("", whole.rstrip(".!")).strip(), msg.content)
                for clause in _clauses(said):
                    for sentence in _clauses(_rewrite(clause, msg.content)):
                        self._extract_clause(sentence, msg.timestamp, facts, seen)
                        if len(facts) >= self.max_per_turn:
                            return facts[: self.max_per_turn]
        return facts

    def _extract_clause(self, sentence: str, said_at: int, facts: list[ExtractedFact], seen: set[str]) -> None:
        """Add the fact of one clause (the first rule that matches) to ``facts``."""
        if len(sentence) < 8:
            return
        plain = _ADVERB_RUN.sub(r"\1 ", sentence)  # "I now work at" matches the rules as "I work at"
        for fact_type, confidence, pattern in _RULES:
            if confidence < self.min_confidence or not pattern.search(plain):
                continue
            text = _third_person(sentence)
            if len(text) > self.max_chars:
                text = truncate(text, self.max_chars)
            key = text.lower()
            if key not in seen:
                seen.add(key)
                when = resolve_time(sentence, said_at)
                facts.append(ExtractedFact(text, fact_type, confidence, when.date if when else None,
                                           when.phrase if when else None))
            break


ChatFunction = Callable[[list[dict[str, str]]], str]

_SYSTEM_PROMPT = (
    "You turn one conversation turn into durable, atomic facts about the user. "
    'Answer with a JSON object and nothing else, shaped {{"facts":[{{"fact":string,"type":string,"confidence":number}}]}}. '
    "type is one of: {types}. "
    "Return at most {max_facts} facts; each confidence is between 0 and 1 and at least {min_conf}; "
    "each fact is at most {max_chars} characters. "
    "Keep stable identity, preferences, skills, relationships, lasting context and dated events. "
    "Leave out facts about the assistant, small talk, tool plumbing and guesses. "
    "Write one standalone fact per row, never a summary of the turn. "
    "Drop anything that fits none of the types. "
    'If there is no durable fact, answer {{"facts":[]}}.'
)


def model_json(raw: object, key: str, error: type[ManowarError]) -> dict[str, Any]:
    """A chat model's JSON answer: an object with a ``key`` list, read from the whole text or
    from its outermost braces (models wrap JSON in prose); ``error`` says what was wrong."""
    if not isinstance(raw, str):
        raise error(f"the model answered with {type(raw).__name__}, not text")
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, TypeError):
        start, end = raw.find("{"), raw.rfind("}")
        if start < 0 or end <= start:
            raise error("the model's answer holds no JSON object") from None
        try:
            data = json.loads(raw[start : end + 1])
        except json.JSONDecodeError as exc:
            raise error(f"the model's answer is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise error(f'the model\'s answer must be an object with a "{key}" list')
    return data


def parse_facts(raw: str, *, max_per_turn: int = 5, min_confidence: float = 0.6, max_chars: int = 240) -> list[ExtractedFact]:
    """Validate a model's JSON answer into facts (rows that break a rule are skipped)."""
    data = model_json(raw, "facts", ExtractionError)
    out: list[ExtractedFact] = []
    for row in data["facts"]:
        if not isinstance(row, dict):
            continue
        fact = row.get("fact")
        if not isinstance(fact, str) or not fact.strip():
            continue
        conf = row.get("confidence")
        confidence = min(1.0, max(0.0, float(conf))) if isinstance(conf, (int, float)) and not isinstance(conf, bool) else 0.0
        kind = row.get("type")
        kind = kind.strip().lower() if isinstance(kind, str) else ""
        if confidence < min_confidence or kind not in FACT_TYPES or len(fact.strip()) > max_chars:
            continue
        out.append(ExtractedFact(fact.strip(), kind, confidence))
        if len(out) >= max_per_turn:
            break
    return out


class LLMExtractor:
    """Extracts facts with any chat model: ``chat(messages) -> str`` (OpenAI-style message dicts)."""

    def __init__(
        self, chat: ChatFunction, *, name: str = "llm", max_per_turn: int = 5, min_confidence: float = 0.6,
        max_chars: int = 240,
    ) -> None:
        self.chat = chat
        self.name = name
        self.max_per_turn = max_per_turn
        self.min_confidence = min_confidence
        self.max_chars = max_chars

    def prompt(self, messages: Sequence[Message]) -> list[dict[str, str]]:
        """The chat messages sent to the model for one turn."""
        system = _SYSTEM_PROMPT.format(
            types=", ".join(FACT_TYPES), max_facts=self.max_per_turn, min_conf=self.min_confidence,
            max_chars=self.max_chars,
        )
        turn = [m for m in messages if m.role in ("user", "assistant")][-6:]
        lines = "\n".join(f"{m.role}: {truncate(collapse_ws(m.content), 1200)}" for m in turn)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Conversation turn:\n{lines}\n\nExtract durable user facts as JSON."},
        ]

    def extract(self, messages: Sequence[Message]) -> list[ExtractedFact]:
        """Ask the model and validate its answer; raises :class:`ExtractionError` on failure."""
        if not any(m.role in ("user", "assistant") for m in messages):
            return []
        try:
            raw = self.chat(self.prompt(messages))
        except Exception as exc:
            raise ExtractionError(f"{self.name} extractor call failed: {exc}") from exc
        return parse_facts(
            raw, max_per_turn=self.max_per_turn, min_confidence=self.min_confidence, max_chars=self.max_chars
        )
