"""A replay's native form: its kernel launches and products run as commands of one native function.

Once a schedule runs as one straight-line function (`minflux.schedule.replay`), one more replay is a
probe (`native_probe`): the operations that can say what they do as native commands (a callable with a
``native_command(args, kwargs, errstate)`` method: a bound elementwise kernel, `mf.matmul`) run as
usual and hand over their command words (`minflux.runtime.native_runner`). Each address a command
uses is then placed:

- in the replay's buffer arena, which is allocated once and never moves: the address is kept as is;
- in exactly one of the replay's input arrays: kept as an offset into that input, and written into
  the commands at the start of each replay from that call's inputs, once their shapes, strides and
  dtypes are checked (a call laid out otherwise runs the Python form);
- in an array the command's own call returned new (a launch whose results reach the replay's
  results, which must be arrays of their own on every call): each call makes arrays of the same
  layouts before the replay runs, writes their addresses into the commands as an input's, and the
  statement that bound the call's results binds them (`native_results`);
- anywhere else (an array a Python operation made new on this call): the operation stays a Python
  call, as it does when it has no command or its result lies nowhere above.

A value a command reads without an address of its own (a numpy scalar a kernel reads) is written into
a cell of the command's by a statement in the command's place, from each call's value; a value of
another type than at the probe makes that one call run in Python instead. A command without such
cells holds the numbers it was given as they were at the probe, so a statement whose number is made
on every call (an element of an input, ``x * x[0, 0]``) stays a Python call.

An address is trusted only where it is read from an array that lies where it lay at the probe on
every call: an input, a planned buffer (an operation given ``out=`` returns it), the result of a
command, or a view of one of those by constant indices. An operation whose results' place may depend on the
data (one that hands back its argument unless the data say otherwise) makes the arrays it returns
untrusted, and what reads them stays Python; an operation that says otherwise (``steady_results``
on the recorded function: whether it returns views of its arguments or new arrays is decided by
their layouts and its constants) is trusted where the probe found its results views of its
arguments, as far as those arguments are.

A statement that became commands keeps, where later Python statements read its result, an
assignment of that result (the same arena arrays every call); views (an index, a reshape) that only
commands read are not made at all. Consecutive commands form a segment, run by one call of the
native runner, so a replay alternates segments and the Python calls that remain; within a segment,
independent products large enough to gain from it run at once on the free cores (`native_groups`),
where their first calls measured that faster than in turn and whole replays that way faster than with
every step in turn (`native_steps`).
The commands are the same kernel and the same BLAS routine on the same operands, so the native form
gives the Python form's bits; each product is checked once against its Python call's bits before it is used. A numpy
product checks the floating-point status flags numpy's error state acts on, as numpy does; where one
is raised, that product is done again by ``np.matmul``, which raises or warns as numpy would.
What a statement's text says (its call, its arguments, its buffers) is read by `native_statements`.
"""
from __future__ import annotations

import operator

import numpy as np

from ..runtime import native_runner
from ..runtime.pointers import pointers
from ..runtime.split_choice import SplitChoice
from ..runtime.threads import usable_cores
from . import native_groups
from .native_places import Places
from .native_probe import Probe, _arrays, _leaves, command_of
from .native_results import NewResults, filled, marks, rendered
from .native_steps import NativeSteps, _At
from .native_statements import (_argument_slots, _call, _in_buffers, _reads_numbers_from_slots, _Slot,
                                _symbolic_arguments)
from .traced import _method_caller

_VIEWS = {operator.getitem, np.reshape, np.transpose, np.squeeze, np.expand_dims, np.ravel, np.swapaxes,
          np.moveaxis, np.broadcast_to, *(_method_caller(name) for name in
                                          ("reshape", "view", "transpose", "swapaxes", "squeeze", "ravel"))}
_ATTRIBUTE_VIEWS = {repr(operator.attrgetter(name)) for name in ("T", "mT")}
"""Operations without effects whose results are views: left out where nothing in Python reads them."""


def probed(statements: list, probe: Probe) -> list:
    """``statements`` with each call that may become commands made through ``probe``.

    >>> from minflux.schedule.replay import _Statement
    >>> probed([_Statement("@ = $(@, @)", [2, np.add, 0, 1], [])], Probe())[0].text
    '@ = $($, $, @, @)'
    """
    result = []
    for index, st in enumerate(statements):
        call = _call(st)
        if call is not None:
            start, _, first, _ = call
            fn = st.params[first]
            if command_of(fn) is not None or getattr(fn, "steady_results", False):
                st = st._replace(text=st.text[:start] + "$($, $, " + st.text[start + 2:],
                                 params=[*st.params[:first], probe, index, *st.params[first:]])
        result.append(st)
    return result


class NativeForm(NativeSteps):
    """The commands of a probed replay and the statements that run them (see the module docstring).

    ``statements``: the straight-line statements with segments in place of commands; ``n_commands``
    (``n_kernels`` and ``n_products``) and ``n_python``: statements run as commands and as Python
    calls (setting numpy's error state among them); ``n_segments``.

    >>> from minflux.runtime.native_runner import load_runner
    >>> from minflux.schedule import replay as replays
    >>> from minflux.schedule.recorder import Recording
    >>> rec = Recording("f")
    >>> x = rec.input(np.ones(4))
    >>> y = np.multiply(np.add(x, 1.0), 2.0)     # the sum goes to a buffer, the result is new
    >>> replay, _ = replays.Replay(rec, [y.slot]), load_runner()
    >>> [replay([np.full(4, 3.0)])[0].tolist() for _ in range(replays.COMPILE_AFTER + 3)][-1]
    [8.0, 8.0, 8.0, 8.0]
    >>> replay.native.n_commands, replay.native.n_python     # the sum, the product; np.seterr
    (2, 1)
    >>> replay.native.new_results     # the product's array, made anew on each call
    [(2, 0)]
    """

    def __init__(self, statements: list, planned: set, probe: Probe, arena: np.ndarray, inputs: list,
                 outputs: list):
        self._run = native_runner.load_runner()
        self._held = [h for command, _ in probe.commands.values() for h in command.held]
        new = NewResults(probe.commands, Places(arena, inputs, statements, self._held))
        places = Places(arena, [*inputs, *new.arrays], statements, self._held)   # new results after the inputs
        n = len(inputs)
        words = [-1]
        patches: list = []          # (word, input, offset)
        self._redo: dict = {}       # a checked command's word -> (numpy call, operands, end word, error state)
        natives: dict = {}          # statement -> (first word, end word, its result as a statement or None)
        work: dict = {}             # statement -> (its multiply-adds, the words of its shares, may run beside)
        refreshes: dict = {}        # statement -> the statement writing its command's cells
        templates: list = []        # of the results with arrays made new on every call (`native_results`)
        self._made: list = []       # the arrays made for them on this call
        self._skip = (-1, -1)       # the first and end words of a command whose call ran in Python instead
        steady = set(range(len(inputs)))   # slots whose arrays lie where they lay at the probe, or in an input
        for index, st in enumerate(statements):
            found = probe.commands.get(index)
            if found is not None and index in probe.numbers and _reads_numbers_from_slots(st, *probe.numbers[index]):
                found = None   # its command would keep the probe's value of a number made on every call
            if found is not None and found[0].refresh is not None:   # values written into cells: no places
                args, kwargs = _symbolic_arguments(st)
                reads = set(st.reads).difference(x for x in found[0].refresh[1](args, kwargs) if x.__class__ is _Slot)
            else:
                reads = st.reads
            if found is None or not steady.issuperset(reads):
                holders = probe.views.get(index)
                kept = _in_buffers(st) if index in planned else ()
                if (steady.issuperset(st.reads) and _is_view(st) and len(set(st.reads)) == 1) or (
                        holders is not None and steady.issuperset(_argument_slots(st, holders))):
                    kept = st.writes   # a view of a steady array by constants, ...
                steady.difference_update(st.writes)
                steady.update(kept)
                continue
            command, result = found
            located = [places.locate(command.words[p]) for p in command.addresses]
            redo = None if command.redo is None else _redo_operands(command)
            if redo is False:
                continue   # an array of its redo at none of its addresses
            unread = set(st.writes) <= set(st.dead) or _rebinds_out(st)   # its results need lie nowhere known
            template = new.template(index, result, (lambda r: True) if unread else places.stays)
            if template is None or any(at is None or at != "fixed" and at[0] >= n and new.owner[at[0] - n][0] != index
                                       and new.owner[at[0] - n][0] not in natives for at in located):
                continue   # an address in an array a Python call makes, or a result in memory that moves
            steady.update(st.writes)
            first = len(words)
            shares = native_groups.row_shares(command, usable_cores())
            for share in shares:
                patches.extend((len(words) + p, *at) for p, at in zip(command.addresses, located) if at != "fixed")
                words.extend(share)
            if redo is not None:
                again = (command.redo[0], [x._replace(word=first + x.word) if x.__class__ is _At else x for x in redo],
                         len(words), probe.errstates[index])
                self._redo.update((first + at, again) for at in command.stops)
            if marks(template):
                result = _Moving(len(templates))
                templates.append(template)
            natives[index] = (first, len(words), None if unread else result)
            work[index] = (0 if command.refresh else native_groups.multiply_adds(command.words),
                           native_groups.share_words(first, command, len(shares)),
                           command.redo is command.refresh is None and len(shares) == 1 and command.shares == 1)
            if command.refresh is not None:
                refreshes[index] = self._refresh_statement(st, (first, len(words)), result, command.refresh)
        self.program = np.array(words, np.int64)
        self._address = self.program.ctypes.data
        self._patch_at = np.array([w for w, _, _ in patches], np.intp)
        self._patch_offset = np.array([o for _, _, o in patches], np.int64)
        used = sorted({i for _, i, _ in patches if i < n})
        self._inputs = [(i, inputs[i].shape, inputs[i].strides, inputs[i].dtype, inputs[i].flags.writeable)
                        for i in used]
        made, self._new_layouts, self._templates = new.layouts(templates)
        for index, (first, end, result) in natives.items():
            natives[index] = (first, end, self._stub(statements[index], result))
        self.new_results = [new.owner[k] for k in made]   # (statement, which of its result's arrays)
        used += [n + k for k in made]
        self._patch_which = np.array([used.index(i) for _, i, _ in patches], np.intp)
        self.n_grouped = 0          # products run at once with others
        self.n_beside = 0           # products run beside other commands
        accesses = lambda i: native_groups.located(native_groups.accesses(*probe.made_of[i]), places)  # noqa: E731
        self.statements, self.n_segments = self._segments(statements, natives, refreshes, outputs, work, accesses)
        self._at_once = any(st.params and st.params[0] == self.in_groups for st in self.statements)
        self.n_commands = len(natives)
        tags = []   # of every runner command (a statement's command may be several)
        for index, (first, end, _) in natives.items():
            end = work[index][1][0][1] if work[index][1] else end   # a kernel's or product's shares: one
            while first < end:
                tags.append(int(self.program[first]))
                first += native_runner.command_size(self.program, first)
        self.n_kernels = tags.count(native_runner.KERNEL)
        self.n_products = sum(native_runner.GEMM <= t < native_runner.COPY for t in tags)
        self.n_python = len(statements) - len(natives)

    def _stub(self, st, result):
        """``st`` with its call replaced by ``result`` (for a `_Moving`, its template filled with this
        call's arrays), or None when it binds nothing or nothing reads what it binds (``result`` None)."""
        if not st.writes or result is None:
            return None
        start, end, first, last = _call(st)
        moving = result.__class__ is _Moving
        text, made = rendered(self._templates[result], self._made) if moving else ("$", [result])
        return st._replace(text=st.text[:start] + text + st.text[end:],
                           params=[*st.params[:first], *made, *st.params[last:]], reads=())

    def _refresh_statement(self, st, words: tuple, result, refresh):
        """A statement calling `_refreshed` with the arguments ``st`` calls its callable with."""
        start, end, first, last = _call(st)
        return st._replace(text="$($, $, $, $, " + st.text[start + 2:end],
                           params=[self._refreshed, words, result, refresh, *st.params[first:last]], dead=[],
                           writes=())

    def _refreshed(self, words: tuple, result, refresh, fn, /, *args, **kwargs) -> None:
        """Write the cells of the command at ``words`` (first, end) from this call's arguments. Where they are
        not of the kinds it was made for, make the call in Python instead, its results copied into
        the command's (``result``, which later statements read), and skip the command."""
        if refresh[0](args, kwargs):
            return
        made = _arrays(fn(*args, **kwargs))
        kept = _arrays(filled(self._templates[result], self._made) if result.__class__ is _Moving else result)
        if len(made) != len(kept) or any(m.shape != k.shape or m.dtype != k.dtype for m, k in zip(made, kept)):
            raise RuntimeError(f"minflux: a compiled step's native replay met {getattr(fn, '__name__', fn)!r} "
                               "giving results of other shapes or dtypes than when it was recorded; set "
                               "MINFLUX_NATIVE_REPLAY=0 to replay it in Python")
        for m, k in zip(made, kept):
            if m is not k:
                np.copyto(k, m)
        self._skip = words

    def _segments(self, statements: list, natives: dict, refreshes: dict, outputs: list, work: dict,
                  accesses) -> tuple[list, int]:
        needed = set(outputs)
        keep = [False] * len(statements)
        python_after = False   # a Python call between this statement and the next that sets numpy's error state
        for index in range(len(statements) - 1, -1, -1):
            st = statements[index]
            if index in natives:
                stub = natives[index][2]
                keep[index] = stub is not None and not needed.isdisjoint(st.writes)
                if index in refreshes:
                    needed.update(st.reads)
                    python_after = True
            elif _callee(st) is np.seterr:
                keep[index], python_after = python_after, False   # its state read by commands alone: left out
            else:
                keep[index] = not (_is_view(st) and needed.isdisjoint(st.writes))
                if keep[index]:
                    needed.update(st.reads)
                    python_after = True
        result, segment, stubs, n_segments, members = [], None, [], 0, []
        choices: dict = {}   # steps of like commands share the choice to run them at once or in turn

        def close():
            nonlocal segment, stubs, n_segments, members
            if segment is not None:
                order = native_groups.plan(lambda k: accesses(members[k]), [work[i][0] for i in members],
                                           usable_cores(), [work[i][2] for i in members])
                call = [self.segment, *segment]
                shares = [work[i][1] for i in members]
                if len(order) < len(members) or any(shares):
                    steps = native_groups.word_steps(order, [natives[i][:2] for i in members], shares)
                    keys = [None if step[0].__class__ is int else native_groups.step_key(self.program, step)
                            for step in steps]
                    call = [self.in_groups, steps, [key and choices.setdefault(key, SplitChoice()) for key in keys]]
                    groups = [step for step in order if step.__class__ is tuple]
                    self.n_grouped += sum(len(step) for step in groups if step[-1].__class__ is int)
                    self.n_beside += sum(1 for step in groups if step[-1].__class__ is list)
                result.append(statements[0]._replace(text="$(" + ", ".join("$" * (len(call) - 1)) + ")",
                                                     params=call, dead=[], reads=(), writes=()))
                n_segments += 1
            result.extend(stubs)
            segment, stubs, members = None, [], []

        for index, st in enumerate(statements):
            if index in natives:
                first, end, stub = natives[index]
                if index in refreshes:
                    close()
                    result.append(refreshes[index])
                segment = (first, end) if segment is None else (segment[0], end)
                members.append(index)
                if keep[index]:
                    stubs.append(stub)
            elif keep[index]:
                close()
                result.append(st)
        close()
        return result, n_segments

    def patch(self, inputs: list, made: list | None = None) -> bool:
        """Write this call's input addresses into the commands, and those of the arrays made for the
        results new on every call (``made``, or new ones of their layouts); False where an input is
        laid out otherwise than at the probe, not aligned (numpy's loops are given aligned data only) or
        read-only where it was writeable (a command may write into it; the Python form then runs the
        call, and raises where numpy does)."""
        for i, shape, strides, dtype, writeable in self._inputs:
            a = inputs[i]
            if a.__class__ is not np.ndarray or a.shape != shape or a.strides != strides or a.dtype != dtype:
                return False
            flags = a.flags
            if not flags.aligned or writeable and not flags.writeable:
                return False
        arrays = [inputs[i] for i, *_ in self._inputs]
        if self._templates:
            self._made[:] = made or [np.empty(shape, dtype) for shape, dtype in self._new_layouts]
            arrays += self._made
        if arrays:
            bases = np.array(pointers(arrays), np.int64)
            self.program[self._patch_at] = bases[self._patch_which] + self._patch_offset
        return True


def _redo_operands(command) -> list | bool:
    """The operands of ``command``'s redo, each array as an `_At` the position of its address among
    the command's words, or False where an array lies at none of them."""
    at = {command.words[p]: p for p in command.addresses}
    found = []
    for x in command.redo[1]:
        if x.__class__ is np.ndarray:
            p = at.get(pointers([x])[0])
            if p is None:
                return False
            x = _At(p, x.shape, x.strides, x.dtype)
        found.append(x)
    return found


def _rebinds_out(st) -> bool:
    """Whether statement ``st`` calls a ufunc and binds its result to the slot its ``out=`` reads: to
    the array that slot holds already."""
    if _callee(st).__class__ is not np.ufunc:
        return False
    out = _symbolic_arguments(st)[1].get("out")
    out = out[0] if out.__class__ is tuple and len(out) == 1 else out
    return out.__class__ is _Slot and st.writes == (out,)


def _callee(st):
    """The callable statement ``st`` calls, or None."""
    call = _call(st)
    return None if call is None else st.params[call[2]]


def _is_view(st) -> bool:
    fn = _callee(st)
    try:
        return fn in _VIEWS or repr(fn) in _ATTRIBUTE_VIEWS
    except TypeError:   # an unhashable callable
        return False


class _Moving(int):
    """Stands for the results of a statement whose results are new on every call: `NativeForm`'s
    ``_templates[self]`` filled with this call's arrays."""
