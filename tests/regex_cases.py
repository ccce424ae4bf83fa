"""Random regular expressions that make a backtracking matcher (Python's ``re``) take exponential time.

Example::

    from regex_cases import loop_patterns

    loop_patterns(seed=7, count=3)   # ['((a|\\w)+b)*x', ...]
"""

import random

INNER_QUANTIFIERS = ("*", "+", "?", "{1,3}", "*?", "+?", "{2,}")
POSSESSIVE = ("*+", "++")


def loop_patterns(seed, count, inner_quantifiers=INNER_QUANTIFIERS):
    """``count`` patterns whose every choice sits inside an unbounded repetition: Python's worst case."""
    rng = random.Random(seed)
    pieces = ["a", "b", "_", "/", r"\w", ".", "[ab]", "[^/]", "a?"]

    def body(depth):
        roll = rng.random()
        if depth > 3 or roll < 0.3:
            return rng.choice(pieces)
        if roll < 0.55:
            return "".join(body(depth + 1) for _ in range(rng.randint(2, 3)))
        if roll < 0.7:
            return "(" + "|".join(body(depth + 1) for _ in range(rng.randint(2, 3))) + ")"
        return "(" + body(depth + 1) + ")" + rng.choice(list(inner_quantifiers))

    return ["(" + body(0) + ")" + rng.choice(["*", "+", "{2,}", "*?"]) + rng.choice(["", "$", "x", "!"])
            for _ in range(count)]
