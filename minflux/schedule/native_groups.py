"""Independent products of a native segment run at once, one per core, a product that would run alone
beside the commands that do not need it, a large kernel's rows in shares at once, as its launcher
splits them, and a large product's shares as `minflux.matrix_product` cuts it.

A native segment (`minflux.schedule.native`) is a list of commands run in order. Two products in it
that share no memory one writes can run at the same time, each as the one single-threaded BLAS call
it is anyway: the layer-normalised HM-LSTM's three input products of a layer and time step, the
products of its backward pass that read one output gradient. So their bits do not depend on whether
they ran together, and whether they do is decided on every call from the free cores
(`minflux.runtime.threads.threads_now`). A product with no other to pair with runs beside the
consecutive commands after it that do not wait on it and have no check to stop at (kernels and
copies), one after the other on the other core: each is the same call either way. A kernel large enough for its launcher to split its rows over
threads (each row computed alone) is cut into shares of its rows by the same rule (`row_shares`).

What each command reads and writes is taken at the probe from the arrays of its call: a command that
says what it computes (``redo``: its operands and its ``out``) reads the operands and writes ``out``;
any other command writes the arrays of its results and reads the rest of its call's arrays (the
operations with native commands write nowhere else: `tests/compiled/test_native_accesses.py` runs
each command of the shipped models alone and finds no other byte changed); both write the cells and
scratch arrays they hold. A command runs after every earlier
command of its segment it shares memory with where either writes; within that order, the products
that may run at once do (`plan`, in windows of `WINDOW` commands). Addresses in the arena and in the statements'
constants are compared as they are; all addresses in the replay's inputs are taken as one place (two
inputs may be views of one array), and a command with an address in neither shares memory with every
other.

>>> reads, writes = (0, 100, 200, False), (0, 300, 400, True)
>>> plan([[reads, writes], [(0, 500, 600, False), (0, 700, 800, True)], [(0, 300, 400, False)]].__getitem__,
...      [1 << 30, 1 << 30, 0], 2)
[(0, 1), 2]
>>> plan([[reads, writes], [(0, 300, 400, False), (0, 500, 600, True)], [(0, 500, 600, False)],
...       [(0, 900, 950, True)]].__getitem__, [1 << 30, 0, 1 << 30, 1 << 30], 2)
[(0, 3), 1, 2]
"""
from __future__ import annotations

import numpy as np

from ..runtime.native_runner import COPY, GEMM, GEMM_WORDS, KERNEL
from .recorder import Ref

__all__ = ["GROUP_MIN_MULTIPLY_ADDS", "Beside", "apart", "accesses", "located", "multiply_adds", "plan", "row_shares",
           "share_words", "step_key", "word_steps"]

GROUP_MIN_MULTIPLY_ADDS = 1 << 24
"""Products with fewer multiply-adds than this run alone. Two independent float32 products through
numpy's BLAS, each single-threaded, at once on two idle cores of an AMD EPYC against one after the other
(`native_runner` commands, the pool's threads woken for each pair): 2.1 million multiply-adds each
0.92x the time (the wake-up costs more than half a product), 4.2 million 1.26x faster for 1.24x the
CPU, 16.8 million 1.75x faster for 1.06x the CPU, 34-67 million 1.87-1.98x faster for the same CPU."""

WINDOW = 64
"""Commands of a segment planned together at most (`plan`)."""

_INPUTS = 1
_EVERYWHERE = ((_INPUTS, 0, 0, True), (0, 0, 1 << 64, True))


def accesses(command, arguments: list, results: list) -> list:
    """(low, high, written) for the memory ``command`` reads and writes, taken from the arrays it
    was made of: what it holds (its cells and scratch arrays) and its ``redo``'s ``out`` or else its
    ``results`` and the arguments they lie in (written), and its ``redo``'s operands or else the
    other arrays of its call's ``arguments`` (read); None where one of its addresses lies in none of
    those arrays.

    >>> import numpy as np
    >>> from minflux.runtime.native_runner import Command
    >>> a, out = np.zeros(4), np.zeros(4)
    >>> [w for _, _, w in accesses(Command([], (), (np.negative, (a, out))), [], [])]
    [False, True]
    >>> [w for _, _, w in accesses(Command([], ()), [a, out], [out])]
    [True, False, True]
    >>> accesses(Command([a.ctypes.data + 8, 12345], (0, 1)), [a], []) is None   # 12345: in no array of its call
    True
    """
    if command.redo is not None:
        *operands, out = command.redo[1]
        marked = [(x, False) for x in operands] + [(x, True) for x in (*command.held, out)]
    else:
        marked = [(x, True) for x in (*results, *command.held)] + [   # an argument a result lies in: written
            (x, any(np.may_share_memory(x, r) for r in results)) for x in arguments]
    spans = [(*_bounds(x), written) for x, written in marked if x.__class__ is np.ndarray and x.size]
    for p in command.addresses:   # an address in none of those arrays: memory of unknown extent
        if not any(low <= command.words[p] < high for low, high, _ in spans):
            return None
    return spans


def _bounds(x: np.ndarray) -> tuple[int, int]:
    low = high = x.__array_interface__["data"][0]
    for n, s in zip(x.shape, x.strides):
        if s < 0:
            low += (n - 1) * s
        else:
            high += (n - 1) * s
    return low, high + x.itemsize


def located(spans: list | None, places) -> tuple:
    """``spans`` (from `accesses`) as (place, low, high, written): place 0 for memory that stays put,
    `_INPUTS` for the replay's inputs (compared as one place); every memory where one lies elsewhere.
    ``places``: a `native_places.Places`."""
    if spans is None:
        return _EVERYWHERE
    found = []
    for low, high, written in spans:
        holder = places.holder(low, high)
        if holder is None:
            return _EVERYWHERE
        found.append((0, low, high, written) if holder == "fixed" else (_INPUTS, 0, 0, written))
    return tuple(found)


def _writes_inputs(accesses: tuple) -> bool:
    """Whether a command's accesses (`located`) write the replay's inputs (or memory of unknown extent).

    >>> _writes_inputs(((_INPUTS, 0, 0, False), (0, 10, 20, True))), _writes_inputs(_EVERYWHERE)
    (False, True)
    """
    return any(place == _INPUTS and written for place, _, _, written in accesses)


def _share(x: tuple, y: tuple) -> bool:
    """Whether two commands' accesses meet where one of them writes."""
    for place, low, high, written in x:
        for place2, low2, high2, written2 in y:
            if (written or written2) and place == place2 and (place == _INPUTS or low < high2 and low2 < high):
                return True
    return False


def plan(accesses_of, multiply_adds: list, most: int, beside: list | None = None) -> list:
    """The order to run a segment's commands in: each an index, or a tuple of the indices of up to
    ``most`` products to run at once, or of one product and a list of the consecutive commands that
    run beside it, one after the other on another thread. ``multiply_adds``: each command's, 0 for a
    command that is not one product; ``beside``: whether each command may run beside a product (it
    has no check to stop at and runs whole), or None; ``accesses_of(i)``: command ``i``'s accesses
    (`located`), asked only where a product could run beside other work.

    Every command runs after the earlier commands it shares memory with (`_share`). Where at least
    two products may run, they run together; where one may and another is waiting on commands that
    do not wait on it, those commands run first; where one product would run alone, the commands
    that may run beside it (ready, and the ones after them ready once those have run) do. Otherwise
    the first command that may run does. A command that writes the replay's inputs runs only once
    every earlier command has run (never in a group, beside a product or ahead of an earlier command):
    where an earlier one raises, the eager call never wrote them. A long segment is planned
    in windows of `WINDOW` commands, one after the other (the work grows with the cube of a window's
    length)."""
    n = len(multiply_adds)
    if n > WINDOW:
        windows = range(0, n, WINDOW)
        return [step for start in windows for step in _shifted(
            plan(lambda i, start=start: accesses_of(start + i), multiply_adds[start:start + WINDOW], most,
                 None if beside is None else beside[start:start + WINDOW]), start)]
    large = [m >= GROUP_MIN_MULTIPLY_ADDS for m in multiply_adds]
    if most < 2 or sum(large) < (1 if beside is not None and any(beside) else 2):
        return list(range(n))
    access_lists = [accesses_of(i) for i in range(n)]
    stays = [_writes_inputs(spans) for spans in access_lists]
    large = [m and not s for m, s in zip(large, stays)]
    beside = beside and [b and not s for b, s in zip(beside, stays)]
    after = [{k for k in range(j) if _share(access_lists[k], access_lists[j])} for j in range(n)]
    before_it: list = []            # every command each one waits on, directly or not
    for j in range(n):
        before_it.append(set(after[j]).union(*(before_it[k] for k in after[j])))
    order: list = []
    done: set = set()
    while len(done) < n:
        ready = [j for j in range(n) if j not in done and after[j] <= done]
        products = [j for j in ready if large[j]]
        if len(products) > 1:
            order.append(tuple(products[:most]))
            done.update(products[:most])
            continue
        waiting = [j for j in range(n) if large[j] and j not in done and j not in ready
                   and not before_it[j].intersection(products)]
        step = next((k for k in ready if not large[k] and not (stays[k] and k > ready[0])
                     and any(k in before_it[j] for j in waiting)), None) if products and waiting else None
        step = ready[0] if step is None else step
        run = _beside_run(step, ready, done, after, beside) if large[step] and beside is not None else []
        order.append((step, run) if run else step)
        done.add(step)
        done.update(run)
    return order


def _beside_run(product: int, ready: list, done: set, after: list, beside: list) -> list:
    """The consecutive commands from the first ready one that may run beside ``product``, each ready
    once the ones before it in the run have run (none waits on the product, which is not done)."""
    first = next((k for k in ready if k != product and beside[k]), None)
    run: list = []
    k = first
    while k is not None and k < len(beside) and k != product and k not in done and beside[k] \
            and after[k] <= done.union(run):
        run.append(k)
        k += 1
    return run


def _shifted(order: list, by: int) -> list:
    return [step + by if step.__class__ is int else
            tuple(i + by if i.__class__ is int else [k + by for k in i] for i in step) for step in order]


def apart(step, layouts: dict) -> bool:
    """Whether recorded ``step`` is a product large enough to run beside another: its result's buffer
    is then kept apart from memory the operations before it used (`buffers.plan_buffers`). A product
    says how many multiply-adds it does from its operands' shapes (``multiply_adds`` on the recorded
    function, as `mf.matmul` has)."""
    count = getattr(step.fn, "multiply_adds", None)
    if count is None or len(step.args) < 2:
        return False
    shapes = [layouts[x.slot][0] if x.__class__ is Ref and x.slot in layouts else None for x in step.args[:2]]
    return None not in shapes and count(*shapes) >= GROUP_MIN_MULTIPLY_ADDS


def multiply_adds(words: list) -> int:
    """The multiply-adds of a command that is one product (`native_runner.gemm_words`), else 0.

    >>> from minflux.runtime.native_runner import gemm_words
    >>> multiply_adds(gemm_words(0, 1, 111, 111, 2, 3, 4, 0, 4, 0, 3, 0, 3, 0, None).words)
    24
    """
    return words[4] * words[5] * words[6] if GEMM <= words[0] < COPY and len(words) == GEMM_WORDS else 0


def row_shares(command, most: int) -> list:
    """The words of ``command`` as up to ``most`` commands over consecutive shares of its rows, where
    it may be so cut (``rows``; not a command with cells to write or a check to redo), else its words.

    >>> from minflux.runtime.native_runner import kernel_words
    >>> [w[3:5] for w in row_shares(kernel_words(1, [0, 5, 1, 5, 5], [64])._replace(rows=5), 2)]
    [[0, 2], [2, 5]]
    """
    if not command.rows or command.refresh is not None or command.redo is not None or most < 2:
        return [command.words]
    n = min(most, command.rows)
    shares = []
    for k in range(n):
        words = list(command.words)
        words[3], words[4] = command.rows * k // n, command.rows * (k + 1) // n
        shares.append(words)
    return shares


def share_words(first: int, command, cut: int) -> list:
    """The (first, end) words of the shares of ``command`` written from word ``first``: its ``cut``
    row shares (`row_shares`), or the product shares it is made of (its ``shares``); none for a
    command run whole.

    >>> from minflux.runtime.native_runner import Command
    >>> share_words(10, Command([0] * 4, ()), 2), share_words(10, Command([0] * 8, (), shares=2), 1)
    ([(10, 14), (14, 18)], [(10, 14), (14, 18)])
    >>> share_words(10, Command([0] * 4, ()), 1)
    []
    """
    n = cut if cut > 1 else command.shares
    size = len(command.words) if cut > 1 else len(command.words) // n
    return [(first + size * k, first + size * (k + 1)) for k in range(n)] if n > 1 else []


def step_key(program: np.ndarray, step: tuple) -> tuple:
    """What tells a step of commands run at once (`word_steps`) from others in ``program``: for each of
    its members, the length in words, the tag and routine of its first command, a product's dimensions
    and a kernel's rows, so that the steps of like commands (one per time step) share what is learned
    of them.

    >>> from minflux.runtime.native_runner import gemm_words
    >>> words = gemm_words(0, 1234, 111, 111, 2, 3, 4, 10, 4, 20, 3, 30, 3, 0, None).words
    >>> step_key(np.array([-1, *words]), ((1, 15),)) == ((14, GEMM, 1234, 2, 3, 4),)
    True
    """
    key = []
    for first, end in step:
        tag, routine = int(program[first]), int(program[first + 1])
        dims = program[first + 4:first + 7] if GEMM <= tag < COPY else \
            program[first + 3:first + 5] if tag == KERNEL else ()
        key.append((end - first, tag, routine, *map(int, dims)))
    return tuple(key)


class Beside(tuple):
    """The (first, end) words of consecutive commands that run beside a product, one after the other:
    run once, never again after a product's check stopped the group."""


def word_steps(order: list, words: list, shares: list) -> list:
    """``order`` (from `plan`) over commands at ``words`` ((first, end) each) as what to run: the
    (first, end) of commands run in turn, or a tuple of those of products (and of the commands run
    beside one, a `Beside`), or of a kernel's or product's shares (``shares[i]``, where not empty), run
    at once.

    >>> word_steps([0, 1, (2, 4), 3], [(1, 5), (5, 9), (9, 23), (23, 30), (30, 44)], [[]] * 5)
    [(1, 9), ((9, 23), (30, 44)), (23, 30)]
    >>> word_steps([0, 1], [(1, 5), (5, 13)], [[], [(5, 9), (9, 13)]])
    [(1, 5), ((5, 9), (9, 13))]
    """
    steps: list = []
    for step in order:
        if step.__class__ is tuple:
            steps.append(tuple(words[i] if i.__class__ is int else Beside((words[i[0]][0], words[i[-1]][1]))
                               for i in step))
        elif shares[step]:
            steps.append(tuple(shares[step]))
        elif steps and steps[-1][0].__class__ is int and steps[-1][1] == words[step][0]:
            steps[-1] = (steps[-1][0], words[step][1])
        else:
            steps.append(words[step])
    return steps
