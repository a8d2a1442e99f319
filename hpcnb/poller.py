"""One poller per process, shared by every job, wait and widget (as submitit's ``InfoWatcher``).

Whatever follows Slurm jobs asks a :class:`Watcher` instead of Slurm. One poll asks about all that
is watched at once (the job API's ``ask``: one ``squeue`` call, and one ``sacct`` call for the jobs
that have left the queue) and caches the answers, which every reader and follower then shares.

- Pacing (:func:`pacing`): on a real Slurm polls are at least 2 s apart (from one's end to the
  next one's start): 2 s after a change, then 1.5 times longer each time nothing changed, up to 10 s. On the embedded local Slurm (the lessons'
  jobs take seconds) from 0.05 s up to 1 s, with no minimum gap.
- A daemon thread polls while something is followed (:meth:`Watcher.follow`) and ends itself when
  nothing is; it starts on first use, never at import. A forked child starts afresh: it inherits
  neither the thread nor a lock that thread held.
- A read (:meth:`Watcher.read`) takes its answer from the cache when it is younger than the gap,
  and otherwise polls (once the gap allows). Every poll also asks about the keys registered
  (:meth:`Watcher.register`: each job the kernel knows of) until their answer is settled (the job
  has ended), so that reading ten jobs' states costs one poll, not ten.
"""
from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

__all__ = ["LOCAL", "REAL", "Answer", "Pacing", "Subscription", "Watcher", "pacing", "shared"]

#: What a poll can be asked about: ``("job", "12")``, ``("queue", "alice")`` ...
Key = tuple[str, str]
#: One poll: an answer (or the exception to raise to its reader) for each key; raising fails them all.
Ask = Callable[[frozenset[Key]], dict[Key, Any]]

THREAD_NAME = "hpcnb-poller"


@dataclass(frozen=True)
class Pacing:
    """How often to poll: ``first`` s after a change, ``growth`` times longer after each poll that
    changed nothing, ``cap`` s at most; never two polls closer than ``gap`` s."""

    first: float
    cap: float
    gap: float
    growth: float = 1.5

    def next_interval(self, previous: float | None, changed: bool) -> float:
        if changed or previous is None:
            return max(self.first, self.gap)
        return min(max(previous * self.growth, self.gap), self.cap)


LOCAL = Pacing(first=0.05, cap=1.0, gap=0.0)
REAL = Pacing(first=2.0, cap=10.0, gap=2.0)


def pacing() -> Pacing:
    """:data:`REAL` on a real Slurm (a shared slurmctld), :data:`LOCAL` on the embedded one."""
    from hpcnb.backend import which_slurm

    return LOCAL if which_slurm() == "local" else REAL


@dataclass(frozen=True)
class Answer:
    """What one poll found for one key: a ``value``, or the ``error`` that a reader gets raised."""

    seq: int  # the poll's number (1, 2, ...)
    taken: float  # time.monotonic() when that poll started
    value: Any = None
    error: Exception | None = None

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class Subscription:
    """Interest in one key: each poll's answer goes to ``listener`` (called in the poller's thread)
    or waits for :meth:`next`. Polling goes on until :meth:`close` (a ``with`` block closes it)."""

    def __init__(self, watcher: Watcher, key: Key, listener: Callable[[Answer], None] | None,
                 poll: float | None) -> None:
        self.key, self.listener, self.poll = key, listener, poll
        self.since = time.monotonic()
        self.seen = 0  # the last poll handed over
        self.closed = False
        self._watcher = watcher

    def next(self, timeout: float | None = None) -> Answer | None:
        """The next poll's answer (None after ``timeout`` s, or once closed)."""
        return self._watcher._next(self, timeout)

    def close(self) -> None:
        self._watcher._drop(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Watcher:
    """The cache of answers, the followers, and the thread that polls for them (see the module)."""

    def __init__(self, ask: Ask, fingerprint: Callable[[Any], Hashable] = repr,
                 pacing_of: Callable[[], Pacing] = pacing,
                 settled: Callable[[Answer], bool] = lambda answer: False) -> None:
        self._ask, self._fingerprint, self._pacing_of, self._settled = ask, fingerprint, pacing_of, settled
        self._state = threading.Condition()  # guards what follows; notified after each poll
        self._polling = threading.Lock()  # held through a poll: one at a time
        self._wake = threading.Event()
        self._subs: list[Subscription] = []
        self._known: set[Key] = set()  # asked about in every poll until settled
        self._answers: dict[Key, Answer] = {}
        self._prints: dict[Key, Hashable] = {}  # what counts as a change, per key
        self._seq = 0
        self._last = float("-inf")  # when the last poll ended (a slow Slurm slows the poller down)
        self._interval: float | None = None  # None: poll soon, back-off starts again
        self._pace: Pacing | None = None
        self._thread: threading.Thread | None = None
        self.polls = 0
        self.pid = os.getpid()

    # -- what readers and followers call --------------------------------------------------------
    def register(self, key: Key) -> None:
        """Ask about ``key`` in every poll from now on, until its answer is settled."""
        with self._state:
            self._known.add(key)

    def read(self, key: Key, max_age: float | None = None) -> Any:
        """The answer for ``key``: from the cache if younger than ``max_age`` (default: the pacing's
        gap), else from a poll (registering ``key``). Raises the error the poll found (e.g. an
        unknown job)."""
        asked = time.monotonic()
        if threading.current_thread() is self._thread:  # a listener: the poll it was called for is news
            with self._state:
                cached = self._answers.get(key)
            if cached is not None:
                return cached.get()
        with self._polling:
            limit = (self._pace or self._pacing_of()).gap if max_age is None else max_age
            with self._state:
                answer = self._answers.get(key)
            if answer is None or answer.taken < asked - limit:
                self.register(key)
                answer = self._poll({key})[key]
        self._wake.set()  # followers of the same keys get this poll too
        return answer.get()

    def follow(self, key: Key, listener: Callable[[Answer], None] | None = None, *,
               poll: float | None = None) -> Subscription:
        """Poll ``key`` from the background thread until the subscription is closed. ``poll`` fixes
        the seconds between polls (never below the pacing's gap); default: the pacing's back-off."""
        sub = Subscription(self, key, listener, poll)
        with self._state:
            self._subs.append(sub)
            self._interval = None
            self._start_thread()
        self._wake.set()
        return sub

    def changed(self) -> None:
        """Something changed (a job submitted): followers are polled soon, the back-off starts again."""
        with self._state:
            self._interval = None
        self._wake.set()

    def forget(self) -> None:
        """Every answer may be wrong now (a job cancelled): the next read or follower polls anew."""
        with self._state:
            self._answers.clear()
        self.changed()

    @property
    def thread_alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    # -- subscriptions ----------------------------------------------------------------------------
    def _fresh(self, sub: Subscription) -> Answer | None:
        answer = self._answers.get(sub.key)
        gap = self._pace.gap if self._pace else 0.0
        if answer is None or answer.seq <= sub.seen or answer.taken < sub.since - gap:
            return None
        return answer

    def _next(self, sub: Subscription, timeout: float | None) -> Answer | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state:
            while True:
                answer = self._fresh(sub)
                if answer is not None:
                    sub.seen = answer.seq
                    return answer
                if sub.closed:
                    return None
                self._start_thread()  # (again, should it ever have died)
                left = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
                if left <= 0:
                    return None
                self._state.wait(left)

    def _drop(self, sub: Subscription) -> None:
        with self._state:
            sub.closed = True
            if sub in self._subs:
                self._subs.remove(sub)
            self._state.notify_all()
        self._wake.set()

    # -- polling ----------------------------------------------------------------------------------
    def _poll(self, extra: set[Key] | frozenset[Key] = frozenset()) -> dict[Key, Answer]:
        """One poll of every followed, registered and ``extra`` key; the caller holds ``self._polling``."""
        pace = self._pace = self._pacing_of()
        with self._state:
            keys = frozenset({sub.key for sub in self._subs} | self._known | set(extra))
            pause = self._last + pace.gap - time.monotonic()
        if not keys:
            return {}
        if pause > 0:
            time.sleep(pause)
        start = time.monotonic()
        try:
            replies = self._ask(keys)
        except Exception as err:  # noqa: BLE001 - handed to every reader and follower, never lost
            replies = dict.fromkeys(keys, err)
        finally:
            with self._state:
                self._last = time.monotonic()
        with self._state:
            self._seq += 1
            self.polls += 1
            changed, answers = False, {}
            followed = {sub.key for sub in self._subs}
            for key in keys:
                reply = replies.get(key, LookupError(f"the poll gave no answer for {key}"))
                answer = answers[key] = (Answer(self._seq, start, error=reply) if isinstance(reply, Exception)
                                         else Answer(self._seq, start, value=reply))
                self._answers[key] = answer
                mark = f"error: {reply}" if answer.error else self._fingerprint(reply)
                changed |= key in followed and self._prints.get(key) != mark
                self._prints[key] = mark
                if self._settled(answer):
                    self._known.discard(key)
            self._interval = pace.next_interval(self._interval, changed)
            self._state.notify_all()
        return answers

    def _delay(self) -> float:
        """Seconds until the next poll is due (under ``self._state``)."""
        pace = self._pace or LOCAL
        now = time.monotonic()
        if any(self._answers.get(s.key) is None or self._answers[s.key].taken < s.since - pace.gap
               for s in self._subs):
            return self._last + pace.gap - now  # a follower without an answer yet: as soon as allowed
        intervals = [max(s.poll, pace.gap) for s in self._subs if s.poll]
        if any(not s.poll for s in self._subs):
            intervals.append(self._interval or pace.first)
        return self._last + min(intervals) - now

    def _start_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                self._deliver()
                with self._state:
                    if not self._subs:
                        self._thread = None
                        return
                    delay = self._delay()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
                with self._polling:
                    with self._state:
                        due = self._subs and self._delay() <= 0  # a read may have polled meanwhile
                    if due:
                        self._poll()
            except Exception:  # noqa: BLE001 - a bug must not end the polling for everyone
                traceback.print_exc()
                time.sleep(1.0)

    def _deliver(self) -> None:
        """Hand each listener the poll it has not seen yet (in this thread, no lock held)."""
        with self._state:
            due = []
            for sub in self._subs:
                answer = self._fresh(sub) if sub.listener else None
                if answer is not None:
                    sub.seen = answer.seq
                    due.append((sub, answer))
        for sub, answer in due:
            if sub.closed:
                continue
            try:
                sub.listener(answer)  # type: ignore[misc]
            except Exception:  # noqa: BLE001 - one broken listener stops only itself
                traceback.print_exc()
                sub.close()


# ------------------------------------------------------------------------- one per process

_shared: Watcher | None = None
_shared_lock = threading.Lock()


def shared(ask: Ask, fingerprint: Callable[[Any], Hashable] = repr,
           settled: Callable[[Answer], bool] = lambda answer: False) -> Watcher:
    """This process's watcher, made with these on first use (a forked child makes its own)."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.pid != os.getpid():
            _shared = Watcher(ask, fingerprint, settled=settled)
        return _shared


def _after_fork_in_child() -> None:
    """The parent's thread does not exist here, and a lock it held would never be released."""
    global _shared, _shared_lock
    _shared, _shared_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
