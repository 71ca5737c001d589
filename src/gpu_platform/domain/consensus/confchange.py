"""Membership changes: one voter at a time, or several at once through joint consensus.

Theory of operation (as etcd-raft's confchange package). A `Changer` takes the current
`TrackerConfig` and progress map and returns new ones, never mutating its inputs:

* `simple(changes)`: applies changes that alter the voter set by at most one member (adding
  or removing learners is free). Safe without joint consensus because any majority of the old
  set intersects any majority of the new one.
* `enter_joint(auto_leave, changes)`: copies the incoming voters into `outgoing` and applies the
  changes to `incoming`; decisions now need both majorities. A voter demoted to learner sits in
  `learners_next` until the joint config is left, so it keeps voting in the outgoing half.
* `leave_joint()`: drops `outgoing`, turns `learners_next` into learners, forgets removed peers.

New peers get a progress with `next = last_index` (probing backwards finds the real end).
Errors are `ConfChangeError`s with etcd's wording (the datadriven vectors compare the text).
`restore(conf_state)` rebuilds a configuration from a snapshot's `ConfState`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu_platform.domain.consensus.quorum import JointConfig
from gpu_platform.domain.consensus.tracker import Progress, TrackerConfig
from gpu_platform.domain.consensus.types import (
    ConfChangeSingle,
    ConfChangeType,
    ConfState,
)
from gpu_platform.domain.errors import DomainError

__all__ = ["Changer", "ConfChangeError", "restore"]


class ConfChangeError(DomainError):
    """A configuration change that is not allowed in the current configuration."""


ProgressMap = dict[int, Progress]


@dataclass(slots=True)
class _Work:
    incoming: set[int]
    outgoing: set[int]
    learners: set[int]
    learners_next: set[int]
    auto_leave: bool
    prs: ProgressMap

    def freeze(self) -> TrackerConfig:
        return TrackerConfig(
            voters=JointConfig(frozenset(self.incoming), frozenset(self.outgoing)),
            learners=frozenset(self.learners),
            learners_next=frozenset(self.learners_next),
            auto_leave=self.auto_leave,
        )


@dataclass(frozen=True, slots=True)
class Changer:
    """Computes the configuration that results from applying changes to `config`."""

    config: TrackerConfig
    progress: ProgressMap
    last_index: int
    max_inflight: int = 256

    def enter_joint(
        self, auto_leave: bool, changes: tuple[ConfChangeSingle, ...] | list[ConfChangeSingle]
    ) -> tuple[TrackerConfig, ProgressMap]:
        w = self._check_and_copy()
        if w.outgoing:
            raise ConfChangeError("config is already joint")
        if not w.incoming:
            raise ConfChangeError("can't make a zero-voter config joint")
        w.outgoing = set(w.incoming)
        self._apply(w, changes)
        w.auto_leave = auto_leave
        return _check_and_return(w)

    def leave_joint(self) -> tuple[TrackerConfig, ProgressMap]:
        w = self._check_and_copy()
        if not w.outgoing:
            raise ConfChangeError("can't leave a non-joint config")
        for i in w.learners_next:
            w.learners.add(i)
            w.prs[i].is_learner = True
        w.learners_next = set()
        for i in w.outgoing:
            if i not in w.incoming and i not in w.learners:
                del w.prs[i]
        w.outgoing = set()
        w.auto_leave = False
        return _check_and_return(w)

    def simple(
        self, changes: tuple[ConfChangeSingle, ...] | list[ConfChangeSingle]
    ) -> tuple[TrackerConfig, ProgressMap]:
        w = self._check_and_copy()
        if w.outgoing:
            raise ConfChangeError("can't apply simple config change in joint config")
        self._apply(w, changes)
        if len(set(self.config.voters.incoming) ^ w.incoming) > 1:
            raise ConfChangeError("more than one voter changed without entering joint config")
        return _check_and_return(w)

    def _check_and_copy(self) -> _Work:
        c = self.config
        w = _Work(
            incoming=set(c.voters.incoming),
            outgoing=set(c.voters.outgoing),
            learners=set(c.learners),
            learners_next=set(c.learners_next),
            auto_leave=c.auto_leave,
            prs={i: pr.copy() for i, pr in self.progress.items()},
        )
        _check_invariants(w)
        return w

    def _apply(
        self, w: _Work, changes: tuple[ConfChangeSingle, ...] | list[ConfChangeSingle]
    ) -> None:
        for cc in changes:
            if cc.node_id == 0:
                continue  # etcd ignores node id zero
            if cc.type is ConfChangeType.ADD_NODE:
                self._make_voter(w, cc.node_id)
            elif cc.type is ConfChangeType.ADD_LEARNER_NODE:
                self._make_learner(w, cc.node_id)
            elif cc.type is ConfChangeType.REMOVE_NODE:
                _remove(w, cc.node_id)
            # UPDATE_NODE changes nothing raft tracks
        if not w.incoming:
            raise ConfChangeError("removed all voters")

    def _init_progress(self, w: _Work, node: int, is_learner: bool) -> None:
        if is_learner:
            w.learners.add(node)
        else:
            w.incoming.add(node)
        w.prs[node] = Progress(self.last_index, self.max_inflight, is_learner=is_learner)

    def _make_voter(self, w: _Work, node: int) -> None:
        pr = w.prs.get(node)
        if pr is None:
            self._init_progress(w, node, is_learner=False)
            return
        pr.is_learner = False
        w.learners.discard(node)
        w.learners_next.discard(node)
        w.incoming.add(node)

    def _make_learner(self, w: _Work, node: int) -> None:
        pr = w.prs.get(node)
        if pr is None:
            self._init_progress(w, node, is_learner=True)
            return
        if pr.is_learner:
            return
        _remove(w, node)
        w.prs[node] = pr
        if node in w.outgoing:
            w.learners_next.add(node)
        else:
            pr.is_learner = True
            w.learners.add(node)


def _remove(w: _Work, node: int) -> None:
    if node not in w.prs:
        return
    w.incoming.discard(node)
    w.learners.discard(node)
    w.learners_next.discard(node)
    if node not in w.outgoing:
        del w.prs[node]


def _check_invariants(w: _Work) -> None:
    for i in w.incoming | w.outgoing | w.learners | w.learners_next:
        if i not in w.prs:
            raise ConfChangeError(f"no progress for {i}")
    for i in w.learners_next:
        if i not in w.outgoing:
            raise ConfChangeError(f"{i} is in LearnersNext, but not Voters[1]")
        if w.prs[i].is_learner:
            raise ConfChangeError(f"{i} is in LearnersNext, but is already marked as learner")
    for i in w.learners:
        if i in w.outgoing:
            raise ConfChangeError(f"{i} is in Learners and Voters[1]")
        if i in w.incoming:
            raise ConfChangeError(f"{i} is in Learners and Voters[0]")
        if not w.prs[i].is_learner:
            raise ConfChangeError(f"{i} is in Learners, but is not marked as learner")
    if not w.outgoing and (w.learners_next or w.auto_leave):
        raise ConfChangeError("joint-only fields set outside a joint config")


def _check_and_return(w: _Work) -> tuple[TrackerConfig, ProgressMap]:
    _check_invariants(w)
    return w.freeze(), w.prs


def restore(
    conf_state: ConfState, last_index: int, max_inflight: int
) -> tuple[TrackerConfig, ProgressMap]:
    """The configuration described by `conf_state`, built through ordinary changes.

    As etcd's confchange.Restore: first the outgoing config as a series of simple changes, then
    entering the joint config that yields the incoming one.
    """
    v, ln, rm = ConfChangeType.ADD_NODE, ConfChangeType.ADD_LEARNER_NODE, ConfChangeType.REMOVE_NODE
    outgoing = [ConfChangeSingle(v, i) for i in conf_state.voters_outgoing]
    incoming = [ConfChangeSingle(rm, i) for i in conf_state.voters_outgoing]
    incoming += [ConfChangeSingle(v, i) for i in conf_state.voters]
    incoming += [ConfChangeSingle(ln, i) for i in conf_state.learners]
    incoming += [ConfChangeSingle(ln, i) for i in conf_state.learners_next]
    config = TrackerConfig()
    prs: ProgressMap = {}
    if not outgoing:
        for cc in incoming:
            config, prs = Changer(config, prs, last_index, max_inflight).simple([cc])
        return config, prs
    for cc in outgoing:
        config, prs = Changer(config, prs, last_index, max_inflight).simple([cc])
    config, prs = Changer(config, prs, last_index, max_inflight).enter_joint(
        conf_state.auto_leave, incoming
    )
    return config, prs
