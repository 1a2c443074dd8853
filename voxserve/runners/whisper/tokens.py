"""Whisper's special tokens, prompts and word splitting over a `tokenizers.Tokenizer`.

The torch runner uses this instead of faster-whisper's helper, because importing
faster-whisper imports ctranslate2, and a GPU machine may have neither. It offers what
the engine reads of a tokenizer (`engine/segments.py: WhisperTokenizer`): `eot`,
`timestamp_begin`, `decode` and `split_to_word_tokens`, and what the runner needs to
build prompts. Pure Python; one instance per (task, language), shared by threads.
"""

from __future__ import annotations

import string

import tokenizers

__all__ = ["WhisperTokens"]

NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
"""Languages written without spaces between words: their words are split wherever the
text decodes to whole characters."""
REPLACEMENT = "\ufffd"


class WhisperTokens:
    """The tokenizer of one model, for one task and language."""

    def __init__(self, hf: tokenizers.Tokenizer, multilingual: bool, task: str, language: str | None):
        self.hf = hf
        self.multilingual = multilingual
        self.language_code = language or "en"
        self.eot = self.id("<|endoftext|>")
        self.sot = self.id("<|startoftranscript|>")
        self.sot_prev = self.id("<|startofprev|>")
        self.no_timestamps = self.id("<|notimestamps|>")
        self.timestamp_begin = self.no_timestamps + 1
        found = hf.token_to_id("<|nospeech|>")
        self.no_speech = int(found if found is not None else self.id("<|nocaptions|>"))
        if multilingual:
            self.sot_sequence: tuple[int, ...] = (
                self.sot,
                self.id(f"<|{self.language_code}|>"),
                self.id(f"<|{task}|>"),
            )
        else:
            self.sot_sequence = (self.sot,)

    def id(self, token: str) -> int:
        """A special token's id; a tokenizer without it is not a Whisper tokenizer."""
        found = self.hf.token_to_id(token)
        if found is None:
            raise ValueError(f"the tokenizer has no {token} token")
        return int(found)

    def encode(self, text: str) -> list[int]:
        """Text tokens of `text`, without special tokens."""
        return list(self.hf.encode(text, add_special_tokens=False).ids)

    def decode(self, tokens: list[int]) -> str:
        """The text of the text tokens among `tokens` (special ones are left out)."""
        return str(self.hf.decode([t for t in tokens if t < self.eot]))

    def _piece(self, tokens: list[int]) -> str:
        """Text tokens decoded, special ones written as their names (word splitting keeps
        the end of text as a word of its own)."""
        out: list[str] = []
        run: list[int] = []
        for t in tokens:
            if t < self.eot:
                run.append(t)
                continue
            if run:
                out.append(str(self.hf.decode(run)))
                run = []
            out.append(str(self.hf.id_to_token(t)))
        if run:
            out.append(str(self.hf.decode(run)))
        return "".join(out)

    def split_to_word_tokens(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Words and the tokens of each: at spaces and punctuation, or at character
        boundaries for languages written without spaces."""
        pieces, piece_tokens = self._split_on_characters(tokens)
        if self.language_code in NO_SPACE_LANGUAGES:
            return pieces, piece_tokens
        words: list[str] = []
        word_tokens: list[list[int]] = []
        for piece, ids in zip(pieces, piece_tokens, strict=True):
            starts_word = (
                not words or ids[0] >= self.eot or piece.startswith(" ") or piece.strip() in string.punctuation
            )
            if starts_word:
                words.append(piece)
                word_tokens.append(list(ids))
            else:
                words[-1] += piece
                word_tokens[-1].extend(ids)
        return words, word_tokens

    def _split_on_characters(self, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
        """Runs of tokens that each decode to whole characters: a token that ends inside a
        multi-byte character joins the next one."""
        whole = self._piece(tokens)
        pieces: list[str] = []
        groups: list[list[int]] = []
        current: list[int] = []
        at = 0
        for token in tokens:
            current.append(token)
            text = self._piece(current)
            broken = text.find(REPLACEMENT)
            if broken < 0 or (at + broken < len(whole) and whole[at + broken] == REPLACEMENT):
                pieces.append(text)
                groups.append(current)
                current = []
                at += len(text)
        return pieces, groups

