"""A LibreTranslate ``q`` as the sentences the model translates and the text around them: each
line of plain text is one sentence (its leading and trailing spaces kept); in HTML the tags,
comments and the insides of <script> and <style> are kept as they are and every line of the text
between tags is one sentence (entities decoded before translating, the translation escaped)."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

# a sentence: from a non-space character to the last non-space character of its line
SENTENCE = re.compile(r"\S(?:[^\n]*\S)?")
# a comment or a tag; the text between them is translated
MARKUP = re.compile(r"(<!--.*?-->|<[^<>]*>)", re.S)
RAW_TEXT = {"script", "style"}  # elements whose content is not text to translate


@dataclass
class Template:
    """A text as ``parts[0] + s[0] + parts[1] + ... + s[n-1] + parts[n]`` for its sentences s;
    ``escape``: translations are HTML-escaped when put back."""

    parts: list[str]
    sentences: list[str]
    escape: bool = False

    def render(self, translations: list[str]) -> str:
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        out = [self.parts[0]]
        for t, part in zip(translations, self.parts[1:]):
            out += [html.escape(t, quote=False) if self.escape else t, part]
        return "".join(out)


def plain_template(text: str) -> Template:
    """Plain text: each line's text between its leading and trailing spaces is a sentence."""
    parts, sentences, pos = [], [], 0
    for m in SENTENCE.finditer(text):
        parts.append(text[pos : m.start()])
        sentences.append(m.group())
        pos = m.end()
    parts.append(text[pos:])
    return Template(parts, sentences)


def tag_name(tag: str) -> tuple[str, bool]:
    """'<script type=x>' -> ('script', False), '</style >' -> ('style', True); '' for a comment."""
    m = re.match(r"<(/?)\s*([A-Za-z][\w:-]*)", tag)
    return (m.group(2).lower(), m.group(1) == "/") if m else ("", False)


def html_template(text: str) -> Template:
    """HTML: markup kept verbatim, the text between tags translated line by line."""
    parts, sentences, raw = [""], [], None
    for i, token in enumerate(MARKUP.split(text)):  # even: text, odd: a tag or a comment
        if i % 2:
            name, closing = tag_name(token)
            if raw is None and name in RAW_TEXT and not closing:
                raw = name
            elif raw == name and closing:
                raw = None
            parts[-1] += token
            continue
        if raw is not None:
            parts[-1] += token
            continue
        inner = plain_template(html.unescape(token))
        parts[-1] += html.escape(inner.parts[0], quote=False)
        for sentence, part in zip(inner.sentences, inner.parts[1:]):
            sentences.append(sentence)
            parts.append(html.escape(part, quote=False))
    return Template(parts, sentences, escape=True)
