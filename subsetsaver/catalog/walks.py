"""Walks over graphs given as a successor function: what is reachable, and whether a target is.

Both are iterative (a 10^5-op graph is deeper than Python's recursion limit) and linear in
the edges they walk; :func:`reaches` shares a memo between calls, so asking it about every
node of a graph walks the graph once.

Example::

    >>> sorted(closure(['a'], {'a': ['b'], 'b': ['c'], 'c': []}.get))
    ['a', 'b', 'c']
"""

from __future__ import annotations


def closure(starts, successors) -> set:
    """``starts`` and every node reachable from them over ``successors``."""
    seen = set(starts)
    stack = list(seen)
    while stack:
        for following in successors(stack.pop()):
            if following not in seen:
                seen.add(following)
                stack.append(following)
    return seen


def reaches(start, successors, is_target, memo) -> bool:
    """Whether a path over ``successors`` leads from ``start`` to a node where ``is_target``
    holds; ``memo`` (node -> bool) is shared between calls, so a graph is walked once.

    >>> reaches('a', {'a': ['b'], 'b': []}.get, lambda n: n == 'b', {})
    True
    """
    if start in memo:
        return memo[start]
    path, branches, visited = [start], [iter(successors(start))], {start}
    found = is_target(start)
    while branches and not found:
        for following in branches[-1]:
            if memo.get(following) or (following not in visited and is_target(following)):
                found = True
                break
            if following in visited or following in memo:
                continue
            visited.add(following)
            path.append(following)
            branches.append(iter(successors(following)))
            break
        else:
            path.pop()
            branches.pop()
    if found:
        memo.update(dict.fromkeys(path, True))
    else:  # nothing reached from start reaches a target
        memo.update(dict.fromkeys(visited, False))
    return found
