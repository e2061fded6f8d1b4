"""Graph algorithms shared by job graph validation and the pipelined-region computation."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def strongly_connected_components(successors: Sequence[Sequence[int]]) -> Iterator[list[int]]:
    """Every strongly connected component of the graph ``node -> successors[node]``.

    Tarjan's algorithm without recursion, so a 10,000-vertex chain cannot overflow the stack;
    O(nodes + edges). Components of one node are included (a self-loop makes one a cycle).
    """
    unvisited = -1
    index = [unvisited] * len(successors)
    lowlink = [0] * len(successors)
    on_stack = [False] * len(successors)
    stack: list[int] = []
    counter = 0
    for root in range(len(successors)):
        if index[root] != unvisited:
            continue
        index[root] = lowlink[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, 0)]  # (node, position of the next successor to look at)
        while work:
            node, next_child = work[-1]
            children = successors[node]
            if next_child < len(children):
                work[-1] = (node, next_child + 1)
                child = children[next_child]
                if index[child] == unvisited:
                    index[child] = lowlink[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack[child] = True
                    work.append((child, 0))
                elif on_stack[child]:
                    lowlink[node] = min(lowlink[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                lowlink[parent] = min(lowlink[parent], lowlink[node])
            if lowlink[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component.append(member)
                    if member == node:
                        break
                yield component
