"""Membership changes as a stateful structure: random simple/joint changes keep invariants."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from gpu_platform.domain.consensus.confchange import Changer, ConfChangeError, restore
from gpu_platform.domain.consensus.tracker import Progress, ProgressTracker, TrackerConfig
from gpu_platform.domain.consensus.types import ConfChangeSingle, ConfChangeType

changes = st.lists(
    st.builds(ConfChangeSingle, st.sampled_from(list(ConfChangeType)), st.integers(1, 6)),
    max_size=4,
)


class ConfChangeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config, self.progress = Changer(TrackerConfig(), {}, 0).simple(
            [ConfChangeSingle(ConfChangeType.ADD_NODE, 1)]
        )
        self.index = 1

    def _changer(self) -> Changer:
        self.index += 1
        return Changer(self.config, self.progress, self.index)

    @rule(ccs=changes)
    def simple(self, ccs: list[ConfChangeSingle]) -> None:
        before = self.config.voters.incoming
        try:
            self.config, self.progress = self._changer().simple(ccs)
        except ConfChangeError:
            return
        assert len(before ^ self.config.voters.incoming) <= 1  # one voter at a time

    @rule(ccs=changes, auto_leave=st.booleans())
    def enter_joint(self, ccs: list[ConfChangeSingle], auto_leave: bool) -> None:
        before = self.config.voters.incoming
        try:
            self.config, self.progress = self._changer().enter_joint(auto_leave, ccs)
        except ConfChangeError:
            return
        assert self.config.voters.outgoing == before

    @rule()
    def leave_joint(self) -> None:
        try:
            self.config, self.progress = self._changer().leave_joint()
        except ConfChangeError:
            return
        assert not self.config.voters.is_joint() and not self.config.learners_next

    @invariant()
    def tracker_invariants_hold(self) -> None:
        tracker = ProgressTracker(256)
        tracker.config, tracker.progress = self.config, self.progress
        tracker.check_invariants()
        assert self.config.voters.incoming, "a configuration always keeps a voter"
        members = self.config.voters.ids() | self.config.learners | self.config.learners_next
        assert set(self.progress) == members

    @invariant()
    def the_conf_state_restores_to_the_same_configuration(self) -> None:
        config, progress = restore(self.config.conf_state(), self.index, 256)
        assert config == self.config
        assert {i: p.is_learner for i, p in progress.items()} == {
            i: p.is_learner for i, p in self.progress.items()
        }


TestConfChangeMachine = ConfChangeMachine.TestCase
TestConfChangeMachine.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


def test_progress_of_kept_members_survives_a_change_untouched() -> None:
    config, progress = Changer(TrackerConfig(), {}, 0).simple(
        [ConfChangeSingle(ConfChangeType.ADD_NODE, 1)]
    )
    progress[1] = Progress(7, 256, match=6)
    config, after = Changer(config, progress, 10).simple(
        [ConfChangeSingle(ConfChangeType.ADD_NODE, 2)]
    )
    assert (after[1].match, after[1].next, after[2].next) == (6, 7, 10)
    assert progress[1] is not after[1]  # the input map was not mutated
