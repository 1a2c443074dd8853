"""Moonshine's token ids back to text, read from the `tokenizer.bin` that ships beside its
graphs: the decoder's output needs only decoding, so no encoder and no merges are kept.

The file is the vocabulary in id order, each entry its byte length (one byte) followed by
its bytes. Ids 0-2 are `<unk>`, `<s>` and `</s>`; ids 3-258 are the byte fallback, the
bytes 0x00-0xff themselves; the rest are SentencePiece pieces, "\u2581" marking a space.
Ids past the file's entries (the model's 768 reserved specials, up to 32767) and the three
specials decode to nothing. Pure: no I/O past `from_file`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["BYTE_TOKENS", "SPECIAL_TOKENS", "MoonshineTokenizer"]

SPECIAL_TOKENS = 3
"""`<unk>`, `<s>`, `</s>`: ids 0, 1 and 2."""
BYTE_TOKENS = range(SPECIAL_TOKENS, SPECIAL_TOKENS + 256)
"""The byte fallback: id 3 + b is the byte b."""
_SPACE = "\u2581".encode()


class MoonshineTokenizer:
    """Decodes Moonshine token ids: whole text, or one string per token."""

    def __init__(self, pieces: Sequence[bytes]):
        if len(pieces) < BYTE_TOKENS.stop:
            raise ValueError(
                f"a Moonshine vocabulary has over {BYTE_TOKENS.stop} entries; got {len(pieces)}"
            )
        # A byte-fallback token is a raw byte: it must not be read as part of a space mark.
        self._bytes = [
            piece if i in BYTE_TOKENS else piece.replace(_SPACE, b" ")
            for i, piece in enumerate(pieces)
        ]
        for i in range(SPECIAL_TOKENS):
            self._bytes[i] = b""

    @classmethod
    def from_file(cls, path: Path) -> MoonshineTokenizer:
        return cls(parse_vocabulary(path.read_bytes()))

    @property
    def size(self) -> int:
        """Entries in the vocabulary file (the model's logits cover more: reserved ids)."""
        return len(self._bytes)

    def token_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        """Each token's bytes, spaces as b" "; b"" for specials and reserved ids."""
        return [self._bytes[t] if 0 <= t < len(self._bytes) else b"" for t in tokens]

    def token_strings(self, tokens: Sequence[int]) -> list[str]:
        """Each token as text, its leading space kept (as OpenAI's logprobs show tokens). A
        byte-fallback token that is part of a longer character reads as U+FFFD alone."""
        return [b.decode("utf-8", errors="replace") for b in self.token_bytes(tokens)]

    def decode(self, tokens: Sequence[int]) -> str:
        """The text of `tokens`, without the space that starts its first word."""
        text = b"".join(self.token_bytes(tokens)).decode("utf-8", errors="replace")
        return text.removeprefix(" ")


def parse_vocabulary(data: bytes) -> list[bytes]:
    """The entries of a `tokenizer.bin`, in id order."""
    pieces: list[bytes] = []
    i = 0
    while i < len(data):
        end = i + 1 + data[i]
        if end > len(data):
            raise ValueError(f"tokenizer file ends inside entry {len(pieces)}")
        pieces.append(data[i + 1 : end])
        i = end
    return pieces
