"""Seed 002: pruning a trie frees little memory.

Builds a trie of random words out of small node objects, then deletes a share
of the words (dropping the branches only they used) and path-compresses the
single-child chains left behind. Most nodes are gone afterwards, but RSS
barely moves: pymalloc returns an arena to the system only once every object
in it is dead, and the survivors are spread over nearly all of them.

    python -m memgap.scenarios.trie --words 200000 --prune-pct 60
"""
from __future__ import annotations

import gc
import random
import string
import sys
from collections.abc import Sequence

from memgap.scenarios import _common

NAME = "trie"


class Node:
    """A trie node: an edge label (one letter until compression) and children."""

    __slots__ = ("label", "children", "terminal")

    def __init__(self, label: str) -> None:
        self.label = label
        self.children: dict[str, Node] = {}
        self.terminal = False


def random_words(count: int, seed: int = 2) -> list[str]:
    rng = random.Random(seed)
    letters = string.ascii_lowercase
    # word lengths 3..12, skewed short like a dictionary
    lengths = [3, 4, 5, 5, 6, 6, 7, 7, 8, 9, 10, 11, 12]
    return ["".join(rng.choices(letters, k=rng.choice(lengths))) for _ in range(count)]


def insert(root: Node, word: str) -> None:
    node = root
    for ch in word:
        child = node.children.get(ch)
        if child is None:
            child = node.children[ch] = Node(ch)
        node = child
    node.terminal = True


def delete(root: Node, word: str) -> None:
    """Unmark ``word`` and drop the nodes no other word needs (uncompressed trie)."""
    path = [root]
    node = root
    for ch in word:
        child = node.children.get(ch)
        if child is None:
            return
        node = child
        path.append(node)
    if not node.terminal:
        return
    node.terminal = False
    for depth in range(len(word), 0, -1):
        child = path[depth]
        if child.terminal or child.children:
            break
        del path[depth - 1].children[word[depth - 1]]


def compress(node: Node) -> None:
    """Merge every non-terminal single-child chain into one node (a radix tree)."""
    stack = [node]
    while stack:
        current = stack.pop()
        for key, child in list(current.children.items()):
            if not child.terminal and len(child.children) == 1:
                parts = [child.label]
                tail = child
                while not tail.terminal and len(tail.children) == 1:
                    (tail,) = tail.children.values()
                    parts.append(tail.label)
                merged = Node("".join(parts))
                merged.children = tail.children
                merged.terminal = tail.terminal
                current.children[key] = merged
                child = merged
            stack.append(child)


def count_nodes(root: Node) -> int:
    total = 0
    stack = [root]
    while stack:
        node = stack.pop()
        total += 1
        stack.extend(node.children.values())
    return total


def pymalloc_arenas() -> int | None:
    """Arenas pymalloc holds now ("arenas allocated current"), or None."""
    import io
    import os
    import tempfile

    # sys._debugmallocstats() writes to the C stderr: capture fd 2.
    if not hasattr(sys, "_debugmallocstats"):
        return None
    try:
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                sys._debugmallocstats()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            tmp.seek(0)
            text = io.TextIOWrapper(tmp, encoding="ascii", errors="replace").read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("# arenas allocated current"):
            return int(line.rsplit("=", 1)[1])
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = _common.parse_knobs(
        NAME, argv, bounds={"prune_pct": (0, 100), "compress": (0, 1), "rest": (0, None)}
    )
    _common.mark("post-import")

    words = random_words(args.words)
    root = Node("")
    for word in words:
        insert(root, word)
    nodes_built = count_nodes(root)
    arenas_built = pymalloc_arenas()
    _common.mark("post-build")

    rng = random.Random(3)
    doomed = rng.sample(words, k=len(words) * args.prune_pct // 100)
    for word in doomed:
        delete(root, word)
    del doomed, words
    if args.compress:
        compress(root)
    gc.collect()
    nodes_left = count_nodes(root)
    arenas_pruned = pymalloc_arenas()
    _common.mark("post-prune")

    _common.idle(args.rest)
    removed_pct = 100.0 * (nodes_built - nodes_left) / max(nodes_built, 1)
    _common.result(
        NAME,
        nodes_built=nodes_built,
        nodes_left=nodes_left,
        removed_pct=f"{removed_pct:.1f}",
        arenas_built=arenas_built,
        arenas_pruned=arenas_pruned,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
