"""Prompt handling for every preset: text -> class id, and an offline T5 tokenizer.

Everything here is deterministic and needs no download:

* digits: "a handwritten digit seven", "seven", "7", "digit 7" -> 7; "" -> the null
  (unconditional) class.
* ImageNet: class names from torchvision's built-in category list (the list ships in
  the torchvision wheel; no weights are fetched), e.g. "golden retriever" -> 207.
* HashTokenizer: a stand-in for the T5 SentencePiece tokenizer. Words and punctuation
  are hashed (BLAKE2b, stable across processes and machines) into T5's vocabulary,
  followed by the end-of-sequence token and padding. It has the shapes and padding
  behaviour of the real tokenizer, not its vocabulary: with random-weight encoders
  the ids only need to be stable and prompt-dependent.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import re

import torch

DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_DIGIT_TOKEN = re.compile(r"\b(" + "|".join(DIGIT_WORDS) + r"|[0-9])\b")


def digit_prompt(label: int) -> str:
    """The canonical prompt for a digit class, e.g. 7 -> 'a handwritten digit seven'."""
    return f"a handwritten digit {DIGIT_WORDS[int(label)]}"


def parse_digit(prompt: str) -> int | None:
    """Map a digit prompt to its class (0-9); None for an empty prompt (unconditional).

    Accepts number words and single digit characters anywhere in the text. A prompt
    naming no digit, or two different digits, raises ValueError.
    """
    text = prompt.strip().lower()
    if not text:
        return None
    found = {m if len(m) == 1 else str(DIGIT_WORDS.index(m)) for m in _DIGIT_TOKEN.findall(text)}
    if len(found) != 1:
        what = "no digit" if not found else f"several digits ({', '.join(sorted(found))})"
        raise ValueError(
            f"digit prompt {prompt!r} names {what}; use e.g. 'a handwritten digit seven', 'seven' or '7'"
        )
    return int(found.pop())


@functools.lru_cache(maxsize=1)
def imagenet_categories() -> tuple[str, ...]:
    """The 1,000 ImageNet-1k class names in class-id order (torchvision's offline list)."""
    from torchvision.models import ResNet50_Weights

    return tuple(ResNet50_Weights.IMAGENET1K_V1.meta["categories"])


@functools.lru_cache(maxsize=1)
def _imagenet_index() -> dict[str, int]:
    index: dict[str, int] = {}
    for i, name in enumerate(imagenet_categories()):
        index.setdefault(name.lower(), i)  # first id wins for the two duplicated names
    return index


def parse_imagenet_class(prompt: str) -> int | None:
    """Map an ImageNet class name (case-insensitive) or a numeric id to the class id.

    "" -> None (unconditional). Unknown names raise ValueError with close matches.
    """
    text = " ".join(prompt.strip().lower().split())
    if not text:
        return None
    if text.isdigit() and int(text) < 1000:
        return int(text)
    for candidate in (text, re.sub(r"^(a|an|the) ", "", text), re.sub(r"^(a|an) photo of (a |an )?", "", text)):
        if candidate in _imagenet_index():
            return _imagenet_index()[candidate]
    close = difflib.get_close_matches(text, list(_imagenet_index()), n=3)
    hint = f"; close matches: {close}" if close else ""
    raise ValueError(f"{prompt!r} is not an ImageNet-1k class name (torchvision's category list){hint}")


class HashTokenizer:
    """Deterministic offline tokenizer with T5's conventions (pad=0, eos=1, unk=2).

    ``__call__(prompts)`` returns ``input_ids`` and ``attention_mask`` (LongTensor
    [B, max_length]), each sequence ending in EOS and padded to ``max_length`` exactly
    like ``T5Tokenizer(..., padding="max_length", truncation=True)``.
    """

    pad_token_id = 0
    eos_token_id = 1
    unk_token_id = 2
    _SPECIAL = 3
    _WORD = re.compile(r"\w+|[^\w\s]")

    def __init__(self, vocab_size: int = 32128, max_length: int = 300):
        if vocab_size <= self._SPECIAL:
            raise ValueError("vocab_size too small")
        self.vocab_size = int(vocab_size)
        self.max_length = int(max_length)

    def token_id(self, word: str) -> int:
        digest = hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest()
        return self._SPECIAL + int.from_bytes(digest, "little") % (self.vocab_size - self._SPECIAL)

    def encode(self, prompt: str) -> list[int]:
        ids = [self.token_id(w) for w in self._WORD.findall(prompt.lower())]
        return ids[: self.max_length - 1] + [self.eos_token_id]

    def __call__(self, prompts: list[str]) -> dict[str, torch.Tensor]:
        ids = torch.full((len(prompts), self.max_length), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), self.max_length), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            enc = self.encode(prompt)
            ids[row, : len(enc)] = torch.tensor(enc, dtype=torch.long)
            mask[row, : len(enc)] = 1
        return {"input_ids": ids, "attention_mask": mask}
