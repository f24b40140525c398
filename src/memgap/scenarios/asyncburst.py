"""Seed 001: bursty single-threaded asyncio decoding leaves the heap fragmented.

Each burst starts ``concurrency`` coroutines that each JSON-decode ``events``
event payloads (about ``payload_kib`` KiB of JSON each) into a list kept until
the burst ends, yielding to the loop between events so their allocations
interleave. Afterwards Python holds almost nothing, but glibc's main heap
stays resident: something is nearly always allocated near its top, so the
automatic trim never fires; only ``malloc_trim(0)`` gives it back.

    python -m memgap.scenarios.asyncburst --bursts 3 --concurrency 6 --events 400
"""
from __future__ import annotations

import asyncio
import collections
import gc
import json
import random
import sys
from collections.abc import Sequence
from typing import Any, TypedDict

from memgap.scenarios import _common

NAME = "asyncburst"
#: distinct payload texts; events cycle through them
N_TEXTS = 32

_WORDS = (
    "the a document paragraph sentence clause whose which however therefore "
    "moreover proofreading grammar spelling style tone concise passive voice "
    "reviewer suggested replacement original offset length confidence model "
    "consistent terminology heading caption figure table reference citation"
).split()
_KINDS = ("grammar", "spelling", "style", "clarity", "punctuation", "terminology")

#: Long-lived service state touched by every event: the head of the last event
#: each subscriber slot saw (a /debug endpoint's view), about 1 KiB, so the C
#: allocator's. A little of it is allocated during every burst and outlives it;
#: that is all it takes to keep glibc's heap from shrinking (the report's
#: mechanism: Python itself held 0.5 MB).
LAST_SEEN: dict[int, bytes] = {}
#: With ``--keep-small 1``, also each stream's cursor and a ring of recent event
#: ids, kept as the small objects json.loads made: they pin the pymalloc arenas
#: they sit in (field report 002's mechanism), which no trim gives back.
CURSORS: dict[str, str] = {}  # stream -> the id of the last event it decoded
RECENT: collections.deque[str] = collections.deque(maxlen=256)


class _Document(TypedDict):
    id: int
    title: str
    version: int


class _Suggestion(TypedDict):
    offset: int
    length: int
    kind: str
    original: str
    replacement: str
    score: float
    explanation: str


class ProgressEvent(TypedDict):
    """One progress event of the stream, as build_event writes it."""

    id: str
    event: str
    seq: int
    document: _Document
    paragraphs: list[str]
    suggestions: list[_Suggestion]


def _sentence(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n_words)).capitalize() + "."


def build_event(rng: random.Random, seq: int, payload_kib: int, text_share: float = 0.75) -> bytes:
    """One progress event as it comes off the stream: JSON bytes, about
    ``payload_kib`` KiB.

    Mixed object sizes, as in a real event: most bytes are paragraphs of
    document text (strings over 512 bytes, so the C allocator's), the rest
    small dicts, short strings and floats (pymalloc's).
    """
    target = payload_kib * 1024
    event: ProgressEvent = {
        "id": f"{seq:08d}-{rng.getrandbits(32):08x}",
        "event": "progress",
        "seq": seq,
        "document": {"id": rng.getrandbits(48), "title": _sentence(rng, 6), "version": seq % 7},
        "paragraphs": [],
        "suggestions": [],
    }
    text_bytes = 0
    while text_bytes < target * text_share:
        para = " ".join(_sentence(rng, rng.randint(6, 18)) for _ in range(rng.randint(5, 14)))
        event["paragraphs"].append(para)
        text_bytes += len(para) + 4
    text = json.dumps(event)
    while len(text) < target:
        event["suggestions"].append(
            {
                "offset": rng.randrange(1_000_000),
                "length": rng.randint(1, 40),
                "kind": rng.choice(_KINDS),
                "original": rng.choice(_WORDS),
                "replacement": rng.choice(_WORDS),
                "score": round(rng.random(), 4),
                "explanation": _sentence(rng, rng.randint(5, 14)),
            }
        )
        text = json.dumps(event)
    return text.encode()


async def subscriber(
    stream: str, slot: int, texts: list[bytes], events: int, start: int, held: list[list[Any]],
    keep_small: bool = False,
) -> int:
    """Decode ``events`` payloads into a list that the burst holds until it ends."""
    kept: list[Any] = []
    held.append(kept)
    for i in range(events):
        raw = texts[(start + i) % len(texts)]
        event = json.loads(raw)
        kept.append(event)
        LAST_SEEN[slot] = raw[:1024]  # a new 1 KiB bytes object: glibc's, not pymalloc's
        if keep_small:
            CURSORS[stream] = event["id"]
            RECENT.append(event["id"])
        await asyncio.sleep(0)  # let the other subscribers interleave
    return len(kept)


async def run_bursts(args: Any, texts: list[bytes]) -> int:
    decoded = 0
    for k in range(1, args.bursts + 1):
        held: list[list[Any]] = []
        counts = await asyncio.gather(
            *(
                subscriber(f"stream-{k}-{c}", c, texts, args.events, c * 7, held, bool(args.keep_small))
                for c in range(args.concurrency)
            )
        )
        decoded += sum(counts)
        # The burst ends: drop everything it decoded. (The lists travel in
        # `held`, not as the tasks' results: returned through gather(), they
        # were seen to stay alive, with their tasks, until the loop closed.)
        held.clear()
        del held
        gc.collect()
        _common.mark(f"post-burst-{k}")
    return decoded


def main(argv: Sequence[str] | None = None) -> int:
    args = _common.parse_knobs(NAME, argv, bounds={"rest": (0, None), "keep_small": (0, 1)})
    _common.mark("post-import")

    rng = random.Random(1)
    texts = [build_event(rng, seq, args.payload_kib) for seq in range(N_TEXTS)]
    decoded = asyncio.run(run_bursts(args, texts))

    gc.collect()
    _common.idle(args.rest, rest_first=True)
    _common.result(
        NAME,
        decoded=decoded,
        coroutines=args.bursts * args.concurrency,
        payload_bytes=sum(len(t) for t in texts) // len(texts),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
