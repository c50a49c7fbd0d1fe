"""Forged wrapper markers and chat-template control sequences, found by what a reader sees.

Stored text is data. Two kinds of sequence in it could make a model read it as something
else, and both are replaced before the text reaches a prompt:

* **untrusted-content markers** (``<<<UNTRUSTED_<delim>>>>``, ``<<<END_UNTRUSTED_<delim>>>>``,
  ``<<<EXTERNAL_UNTRUSTED_CONTENT>>>``) become ``[[MARKER_SANITIZED]]`` /
  ``[[END_MARKER_SANITIZED]]``: a memory can neither close the wrapper early nor open a fake one;
* **chat-template control sequences** of the common model families (``<|im_start|>``,
  ``<|begin_of_text|>``, ``<|start_header_id|>`` and any other ``<|...|>`` token, ``[INST]``,
  ``<<SYS>>``, ``<start_of_turn>``, ``<system>``, ``</s>``...) become ``[[CONTROL_SANITIZED]]``.

Matching runs on a *reader's view* of the text, not on its spelling. The view is built in
passes, each remembering which original characters every view character came from:

1. fold: letters that look like ASCII ones become them, per Unicode's confusables data
   (UTS #39, as shipped by the ``confusable-homoglyphs`` package: Cyrillic, Greek, Lisu,
   Cherokee, Canadian syllabics, mathematical alphabets...); then NFKC, then accents dropped,
   then ``anyascii``. Angle brackets, triangles and pointers that look like ``<`` / ``>``
   become them; vertical bars become ``|``. Every invisible or blank character (format,
   control, combining and private-use characters, the braille blank, Hangul fillers) is
   dropped, other spaces become one space. Unicode tag characters, invisible to a person but
   read by some models, become the ASCII they encode;
2. decode: HTML character references (named and numeric, with or without ``;``),
   percent-escapes and ``\\uXXXX`` / ``\\xXX`` escapes are decoded (three rounds, for
   double encoding), and the result is folded again.

The marker pattern then takes any number of brackets, any case, up to three separators
(spaces, ``_``, ``.``, ``-``...) between the letters of a word, a delimiter of any length,
and a marker with no closing bracket (cut off at the end of an item).

Most text holds nothing that could fold to ``<`` or ``[``, ``&``, ``%`` or ``\\``: a scan of
its distinct characters (each folded once per process) finds that and returns the text
untouched, so the reader's view is built only for the few items that need it.
"""

from __future__ import annotations

import html
import re
import threading
import unicodedata
from urllib.parse import unquote

import regex
from anyascii import anyascii

from .._util import short_text_cache

__all__ = ["CONTROL_REPLACEMENT", "END_MARKER_REPLACEMENT", "MARKER_REPLACEMENT", "neutralize"]

MARKER_REPLACEMENT = "[[MARKER_SANITIZED]]"
END_MARKER_REPLACEMENT = "[[END_MARKER_SANITIZED]]"
CONTROL_REPLACEMENT = "[[CONTROL_SANITIZED]]"

# Characters that begin something worth a closer look once folded or decoded.
_ASCII_TRIGGERS = "<[&%\\"
_ASCII_TRIGGER = re.compile("[" + re.escape(_ASCII_TRIGGERS) + "]")  # one scan for any of them
# Unicode blocks whose bracket- and bar-like characters are found by name (scanned once).
_SYMBOL_BLOCKS = ((0x2000, 0x2BFF), (0x2E00, 0x2E7F), (0x3000, 0x303F), (0xFE10, 0xFE6F), (0xFF00, 0xFFEF),
                  (0x1D200, 0x1D24F))
_LEFT_NAMES = ("LEFT-POINTING", "LESS-THAN", "LEFT ANGLE", "LEFT DOUBLE ANGLE", "LEFTWARDS ARROW THROUGH LESS")
_RIGHT_NAMES = ("RIGHT-POINTING", "GREATER-THAN", "RIGHT ANGLE", "RIGHT DOUBLE ANGLE")
# Canadian syllabics drawn as triangles (named by sound, not shape): A/PA series point left, O/PO right.
_SYLLABIC_LEFT = (0x140A, 0x140B, 0x1438, 0x1439)
_SYLLABIC_RIGHT = (0x1405, 0x1406, 0x1433, 0x1434)
# Vertical bars that are letters or marks elsewhere (the confusables data reads them as "l").
_BARS = (0x01C0, 0x05C0, 0x2223, 0x2758, 0x23D0, 0xFFE8, 0x2502, 0x2503, 0xFF5C)
# Blank symbols that are not in a blank category: braille blank, Hangul fillers, ...
_BLANKS = (0x2800, 0x3164, 0x115F, 0x1160, 0xFFA0, 0x17B4, 0x17B5, 0x1D159, 0x1D173, 0x1D174, 0x1D175, 0x1D176,
           0x1D177, 0x1D178, 0x1D179, 0x1D17A)
_INVISIBLE_CATEGORIES = frozenset({"Cf", "Mn", "Me", "Cc", "Co", "Cs", "Zl", "Zp"})


class _Tables:
    """The fold table (non-ASCII code point -> ASCII text) and the trigger scanner, built once."""

    def __init__(self) -> None:
        from confusable_homoglyphs import utils as confusable_data

        fold: dict[int, str] = {}
        for source, entries in confusable_data.load("confusables.json").items():
            if len(source) != 1 or source.isascii():
                continue
            targets = [e["c"] for e in entries if e["c"].isascii() and e["c"]]
            if targets:
                fold[ord(source)] = min(targets, key=len)
        for lo, hi in _SYMBOL_BLOCKS:
            for code in range(lo, hi + 1):
                name = unicodedata.name(chr(code), "")
                if any(n in name for n in _LEFT_NAMES):
                    fold[code] = "<"
                elif any(n in name for n in _RIGHT_NAMES):
                    fold[code] = ">"
                elif "VERTICAL LINE" in name or "VERTICAL BAR" in name:
                    fold[code] = "|"
        for code in (0x00AB, 0x2039, *_SYLLABIC_LEFT):
            fold[code] = "<"
        for code in (0x00BB, 0x203A, *_SYLLABIC_RIGHT):
            fold[code] = ">"
        for code in _BARS:
            fold[code] = "|"
        for code in _BLANKS:
            fold[code] = ""
        for code in range(0xE0020, 0xE007F):  # tag characters: invisible, but a model may read them
            fold[code] = chr(code - 0xE0000)
        self.fold = fold
        self._triggers: dict[str, bool] = {}

    def triggers(self, text: str) -> bool:
        """Whether a character of ``text`` reads as (or decodes to) ``<``, ``[``, ``&``, ``%`` or ``\\``;
        each distinct character is looked at once per process."""
        known = self._triggers
        for ch in set(text):
            hit = known.get(ch)
            if hit is None:
                hit = known[ch] = any(t in _fold_one(ch, self.fold) for t in _ASCII_TRIGGERS)
            if hit:
                return True
        return False


_tables: _Tables | None = None
_tables_lock = threading.Lock()


def _get_tables() -> _Tables:
    global _tables
    if _tables is None:
        with _tables_lock:
            if _tables is None:
                _tables = _Tables()
    return _tables


def _fold_one(ch: str, fold: dict[int, str]) -> str:
    code = ord(ch)
    if code < 0x80:
        return ch
    hit = fold.get(code)
    if hit is not None:
        return hit
    category = unicodedata.category(ch)
    if category in _INVISIBLE_CATEGORIES:
        return ""
    if category == "Zs":
        return " "
    norm = unicodedata.normalize("NFKC", ch)
    if norm.isascii():
        return norm
    if len(norm) == 1 and ord(norm) in fold:
        return fold[ord(norm)]
    bare = "".join(c for c in unicodedata.normalize("NFD", norm) if not unicodedata.combining(c))
    if bare.isascii():
        return bare
    return str(anyascii(bare))


# A view of a text: its characters, and for each the span [lo, hi) of the original it came from.
_View = tuple[str, list[int], list[int]]


def _fold_view(text: str, lo: list[int], hi: list[int], fold: dict[int, str]) -> _View:
    out: list[str] = []
    new_lo: list[int] = []
    new_hi: list[int] = []
    for i, ch in enumerate(text):
        piece = ch if ch.isascii() else _fold_one(ch, fold)
        if piece:
            out.append(piece)
            new_lo.extend([lo[i]] * len(piece))
            new_hi.extend([hi[i]] * len(piece))
    return "".join(out), new_lo, new_hi


_ESCAPE = regex.compile(
    r"&(?:#[0-9]{1,8}|#[xX][0-9a-fA-F]{1,8}|[A-Za-z][A-Za-z0-9]{1,31});?"
    r"|(?:%[0-9A-Fa-f]{2})+|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8}|\\x[0-9a-fA-F]{2}"
)


def _decode_escape(token: str) -> str:
    if token[0] == "&":
        return html.unescape(token)
    if token[0] == "%":
        return unquote(token, errors="replace")
    code = int(token[2:], 16)
    return chr(code) if code <= 0x10FFFF else token


def _decode_view(view: _View) -> _View | None:
    """One round of decoding, or None when there was nothing to decode."""
    text, lo, hi = view
    out: list[str] = []
    new_lo: list[int] = []
    new_hi: list[int] = []
    last = 0
    changed = False
    for match in _ESCAPE.finditer(text):
        decoded = _decode_escape(match.group())
        if decoded == match.group():
            continue
        changed = True
        out.append(text[last:match.start()])
        new_lo.extend(lo[last:match.start()])
        new_hi.extend(hi[last:match.start()])
        span_lo, span_hi = lo[match.start()], hi[match.end() - 1]
        out.append(decoded)
        new_lo.extend([span_lo] * len(decoded))
        new_hi.extend([span_hi] * len(decoded))
        last = match.end()
    if not changed:
        return None
    out.append(text[last:])
    new_lo.extend(lo[last:])
    new_hi.extend(hi[last:])
    return "".join(out), new_lo, new_hi


def _word(word: str) -> str:
    """``word`` with up to three separators allowed between its letters ('O' also reads as '0')."""
    letters = ["[o0]" if c == "O" else regex.escape(c) for c in word]
    return _SEP.join(letters)


_SEP = r"(?:[^\w<>\n]|_){0,3}"
_NAMED_TAGS = (
    "system", "user", "assistant", "human", "bot", "model", "tool", "tool_call", "tool_calls", "tool_response",
    "tool_result", "function", "function_call", "ipython", "s", "bos", "eos", "sys", "inst", "im_start", "im_end",
    "start_of_turn", "end_of_turn", "begin_of_text", "end_of_text", "start_header_id", "end_header_id", "eot_id",
)
_BRACKET_TAGS = ("INST", "SYS", "SYSTEM", "SYSTEM_PROMPT", "TOOL_CALLS", "AVAILABLE_TOOLS", "TOOL_RESULTS",
                 "ASSISTANT", "USER")
_PATTERN = regex.compile(
    # an untrusted-content marker: brackets, END?, the marker word(s), a delimiter of any length,
    # then the closing brackets, or nothing (a marker cut off at the end of an item)
    r"(?P<marker><+" + _SEP + r"(?P<end>" + _word("END") + _SEP + r")?"
    r"(?:" + _word("EXTERNAL") + _SEP + _word("UNTRUSTED") + _SEP + _word("CONTENT") + "|" + _word("UNTRUSTED") + ")"
    r"[^<>\s]*(?:" + _SEP + r">+)?)"
    # a chat-template control sequence
    r"|(?P<control><+\s*\|[^<>|\n]{1,64}\|\s*>+"
    r"|<+\s*/?\s*(?:" + "|".join(_NAMED_TAGS) + r")\s*/?\s*>+"
    r"|\[\s*/?\s*(?:" + "|".join(_BRACKET_TAGS) + r")\s*\])",
    regex.IGNORECASE | regex.VERSION0,
)


def _find(view: _View) -> list[tuple[int, int, str]]:
    text, lo, hi = view
    found = []
    for match in _PATTERN.finditer(text):
        if match.group("marker") is not None:
            replacement = END_MARKER_REPLACEMENT if match.group("end") else MARKER_REPLACEMENT
        else:
            replacement = CONTROL_REPLACEMENT
        found.append((lo[match.start()], hi[match.end() - 1], replacement))
    return found


def _neutralize(text: str) -> str:
    fold = _get_tables().fold
    view: _View = _fold_view(text, list(range(len(text))), list(range(1, len(text) + 1)), fold)
    spans = _find(view)
    for _ in range(3):
        decoded = _decode_view(view)
        if decoded is None:
            break
        view = _fold_view(*decoded, fold)
        spans += _find(view)
    if not spans:
        return text
    pieces: list[str] = []
    last = 0
    for start, end, replacement in sorted(spans, key=lambda s: (s[0], -s[1])):
        if start < last:
            if end > last:  # overlaps the previous one: extend it
                last = end
            continue
        pieces.append(text[last:start])
        pieces.append(replacement)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


@short_text_cache()  # stored rows come back query after query: each search makes candidates of them
def neutralize(text: str) -> str:
    """``text`` with every forged untrusted-content marker and chat-template control sequence
    replaced (see the module's docstring for how they are found)."""
    if not text:
        return text
    if text.isascii():
        if _ASCII_TRIGGER.search(text) is None:
            return text
    elif not _get_tables().triggers(text):
        return text
    return _neutralize(text)
