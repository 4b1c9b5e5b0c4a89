"""Fingerprints (copydetect's winnowing) of a stage's source or of its kernel's SASS tokens, and the score
and shared fragments of a pair.

copydetect (https://github.com/blingenf/copydetect) tokenises the source with Pygments' CUDA lexer,
drops comments and whitespace, replaces every name by one letter (V, F, O) and strings by S, and
winnows the hashes of its k-grams (Schleimer, Wilkerson and Aiken, SIGMOD 2003). The starter's
fingerprints are given as boilerplate, so code handed out to everyone never counts. The SASS side
hashes k-grams of abstracted instructions (sass_tokens.py) instead of k-grams of characters.

copydetect hashes k-grams with Python's ``hash``, which differs from one process to the next; the
k-grams are hashed here with BLAKE2b instead (and winnowed by copydetect's ``winnow``), so a report is
the same every time it is made.

A pair's score is the mean of two shares: the part of each file's fingerprinted text that lies in a
k-gram the other file also has (each share is copydetect's "similarity" of that file).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from copydetect.utils import filter_code, find_fingerprint_overlap, get_copied_slices, get_token_coverage, winnow

# Source: copydetect's defaults (noise threshold 25, guarantee 30 characters of the filtered text).
SOURCE_K, SOURCE_WINDOW = 25, 6
# SASS: a run of 6 abstracted instructions (a run of equal ones counts once), every run of 8 found.
SASS_K, SASS_WINDOW = 6, 3
FRAGMENTS = 3  # the longest shared fragments a pair shows
FRAGMENT_CHARS = 1500  # of each side's text in a fragment


@dataclass(frozen=True)
class Fragment:
    a: str
    b: str
    length: int  # in filtered characters (source) or instructions (SASS)


@dataclass(frozen=True)
class PairScore:
    score: float  # mean of share_a and share_b
    share_a: float  # of a's fingerprinted text, the part found in b
    share_b: float
    fragments: tuple[Fragment, ...] = ()


@dataclass
class Fingerprint:
    """copydetect's CodeFingerprint, with stable hashes: the winnowed hashes and where each one is."""
    k: int
    raw_code: str
    offsets: np.ndarray  # copydetect's table from filtered positions to the original text's
    hashes: set
    hash_idx: dict
    token_coverage: float


def _gram(units: str | list[str], i: int, k: int) -> bytes:
    part = units[i:i + k]
    return (part if isinstance(part, str) else "\x1f".join(part)).encode("utf-8", "surrogatepass")


def fingerprint(raw: str, filtered: str | list[str], offsets: np.ndarray, k: int, window: int,
                boilerplate: set | None = None) -> Fingerprint:
    """copydetect's get_document_fingerprints with BLAKE2b hashes of k units: characters of the filtered
    source, or instructions (so a score never depends on which other files share the run)."""
    grams = [_gram(filtered, i, k) for i in range(len(filtered) - k + 1)]
    all_hashes = np.array([int.from_bytes(hashlib.blake2b(g, digest_size=8).digest(), "little", signed=True)
                           for g in grams], dtype=np.int64)
    if len(all_hashes) == 0:
        return Fingerprint(k, raw, offsets, set(), {}, 0.0)
    hashes, idx = winnow(all_hashes, window_size=window, remove_duplicates=False)
    hash_idx: dict[int, list[int]] = {}
    for h, i in zip(hashes.tolist(), idx.tolist()):
        if h not in (boilerplate or ()):
            hash_idx.setdefault(h, []).append(i)
    return Fingerprint(k, raw, offsets, set(hash_idx), hash_idx,
                       float(get_token_coverage(hash_idx, k, len(filtered))))


@dataclass
class Print:
    """One document's fingerprint and how to show a stretch of it."""
    fp: Fingerprint
    show: Callable[[int, int], str]  # (start, end) in the filtered text -> the original text
    empty: bool = False  # nothing left to compare (all of it was boilerplate)


def _raw_span(fp: Fingerprint, start: int, end: int) -> str:
    """The original source of filtered positions [start, end) (copydetect's offset table)."""
    bounds = np.array([start, end])
    offsets = fp.offsets
    if len(offsets) > 0:
        bounds = bounds + offsets[:, 1][np.clip(np.searchsorted(offsets[:, 0], bounds), 0, offsets.shape[0] - 1)]
    return str(fp.raw_code[int(bounds[0]):int(bounds[1])])


def source_print(text: str, name: str = "kernel.cu", boilerplate: set | None = None) -> Print:
    filtered, offsets = filter_code(text, name, language="cuda")
    fp = fingerprint(text, filtered, offsets, SOURCE_K, SOURCE_WINDOW, boilerplate)
    return Print(fp, lambda s, e: _raw_span(fp, s, e), empty=not fp.hashes)


def sass_print(tokens: list[str], boilerplate: set | None = None) -> Print:
    fp = fingerprint("\n".join(tokens), tokens, np.array([]), SASS_K, SASS_WINDOW, boilerplate)
    return Print(fp, lambda s, e: "\n".join(tokens[s:e]), empty=not fp.hashes)


def _share(slices: np.ndarray, fp: Fingerprint) -> float:
    if not fp.token_coverage:
        return 0.0
    return min(1.0, float(np.sum(slices[1] - slices[0])) / float(fp.token_coverage))


def _paired(a: Print, b: Print, shared: set, sa: np.ndarray, sb: np.ndarray, k: int) -> tuple[Fragment, ...]:
    """The longest shared stretches of ``a``, each beside the stretch of ``b`` holding most of its hashes."""
    order = sorted(range(sa.shape[1]), key=lambda i: int(sa[0][i] - sa[1][i]))[:FRAGMENTS]
    out = []
    for i in order:
        s, e = int(sa[0][i]), int(sa[1][i])
        mine = [h for h in shared if any(s <= p < e for p in a.fp.hash_idx[h])]
        where = [p for h in mine for p in b.fp.hash_idx[h]]
        votes = [sum(1 for p in where if sb[0][j] <= p < sb[1][j]) for j in range(sb.shape[1])]
        j = int(np.argmax(votes)) if votes else 0
        out.append(Fragment(a.show(s, e)[:FRAGMENT_CHARS], b.show(int(sb[0][j]), int(sb[1][j]))[:FRAGMENT_CHARS],
                            e - s))
    return tuple(out)


def compare(a: Print, b: Print, fragments: bool = True) -> PairScore:
    """The pair's score (copydetect's overlap of the two winnowed prints), with its shared fragments."""
    if a.empty or b.empty:
        return PairScore(0.0, 0.0, 0.0)
    idx_a, idx_b = find_fingerprint_overlap(a.fp.hashes, b.fp.hashes, a.fp.hash_idx, b.fp.hash_idx)
    if len(idx_a) == 0:
        return PairScore(0.0, 0.0, 0.0)
    sa, sb = get_copied_slices(idx_a, a.fp.k), get_copied_slices(idx_b, b.fp.k)
    share_a, share_b = _share(sa, a.fp), _share(sb, b.fp)
    frags = _paired(a, b, a.fp.hashes & b.fp.hashes, sa, sb, a.fp.k) if fragments else ()
    return PairScore(round((share_a + share_b) / 2, 4), round(share_a, 4), round(share_b, 4), frags)


def boilerplate_of(prints: list[Print]) -> set:
    """The hashes of the starter's prints: excluded from every other print."""
    return set().union(*(p.fp.hashes for p in prints)) if prints else set()
