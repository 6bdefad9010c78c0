"""--isolate: the VK under test on a core of its own, everything else the bench started on the rest.

A virtual kubelet has its own CPU request in a real cluster; on the 2-core testbed the two control planes,
the emulator, the fake workers and the bench itself compete with it for the same cores. Affinity is set by
pid on every thread (/proc/<pid>/task/*), only on this bench process and its descendants (the processes it
started), never on anything else on the machine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


def split_cores(available: set[int]) -> tuple[set[int], set[int]]:
    """(the VK's cores, everyone else's): the highest-numbered core for the VK; needs at least two."""
    if len(available) < 2:
        raise ValueError(f"--isolate needs at least 2 usable cores, this process may use {sorted(available)}")
    vk = {max(available)}
    return vk, set(available) - vk


def children(pid: int) -> list[int]:
    """Direct children of a process (every thread's children file; empty when it is gone)."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


def tree(pid: int, skip: frozenset[int] = frozenset()) -> list[int]:
    """A process and its descendants, minus the subtrees rooted at `skip`."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in skip or p in out:
            continue
        out.append(p)
        todo += children(p)
    return out


def pin_tree(pid: int, cores: set[int], skip: frozenset[int] = frozenset()) -> int:
    """Set the affinity of every thread of a process tree; returns the number of threads set.

    Twice over: a thread created while the first pass runs inherits its creator's old mask.
    """
    count = 0
    for _ in range(2):
        count = 0
        for p in tree(pid, skip):
            with contextlib.suppress(OSError):
                for task in Path(f"/proc/{p}/task").iterdir():
                    with contextlib.suppress(OSError, ValueError):
                        os.sched_setaffinity(int(task.name), cores)
                        count += 1
    return count


def affinity(pid: int) -> list[int] | None:
    """The cores a process's main thread may run on (None when it is gone)."""
    try:
        return sorted(os.sched_getaffinity(pid))
    except OSError:
        return None


@contextlib.contextmanager
def thread_pinned(cores: set[int] | None) -> Iterator[None]:
    """Run the block with the calling thread on `cores` (a child forked meanwhile inherits them)."""
    if cores is None:
        yield
        return
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved)
