"""Leader election on a lease in memory, with fake time: who leads, when, and never two."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.executors.kubernetes.leader import LeaderElector, MemoryLeaseStore


class Time:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def elector(store: MemoryLeaseStore, name: str, clock: Time, changes: list[str]) -> LeaderElector:
    return LeaderElector(
        store,
        name,
        lease_duration_s=10,
        renew_deadline_s=7,
        retry_period_s=2,
        monotonic=clock,
        on_change=lambda leading: changes.append(f"{name} {'leads' if leading else 'stops'}"),
    )


def test_the_first_takes_a_free_lease_and_the_other_waits() -> None:
    clock, store, changes = Time(), MemoryLeaseStore(), []
    a, b = elector(store, "a", clock, changes), elector(store, "b", clock, changes)
    assert a.step() and not b.step()
    assert store.record is not None and store.record.holder == "a"
    for _ in range(20):  # a renews every 2 s; b never gets it
        clock.now += 2
        assert a.step() and not b.step()
    assert changes == ["a leads"]


def test_a_candidate_waits_a_full_lease_after_the_last_change_it_saw() -> None:
    clock, store, changes = Time(), MemoryLeaseStore(), []
    a, b = elector(store, "a", clock, changes), elector(store, "b", clock, changes)
    a.step()
    clock.now = 1
    b.step()  # b sees a's record at t=1
    # a dies (no more renewals). b may take over 10 s after it saw the last change, not before.
    clock.now = 10.5
    assert not b.step()
    clock.now = 11.5
    assert b.step()
    assert store.record is not None and (store.record.holder, store.record.transitions) == ("b", 1)


def test_a_leader_that_cannot_renew_stops_before_anyone_may_take_over() -> None:
    clock, store, changes = Time(), MemoryLeaseStore(), []
    a = elector(store, "a", clock, changes)
    a.step()
    store.fail = True
    clock.now = 6.9
    assert (not a.step() and a.is_leader() is False) or clock.now < 7
    clock.now = 7.0
    assert not a.step() and not a.is_leader()
    assert changes == ["a leads", "a stops"]
    store.fail = False
    clock.now = 8
    assert a.step()  # nobody took it meanwhile: a leads again


def test_release_lets_a_successor_take_over_at_once() -> None:
    clock, store, changes = Time(), MemoryLeaseStore(), []
    a, b = elector(store, "a", clock, changes), elector(store, "b", clock, changes)
    a.step()
    b.step()
    a.release()
    clock.now = 2
    assert b.step()
    assert changes == ["a leads", "a stops", "b leads"]


def test_a_leader_that_sees_another_holder_steps_down_at_once() -> None:
    clock, store, changes = Time(), MemoryLeaseStore(), []
    a, b = elector(store, "a", clock, changes), elector(store, "b", clock, changes)
    a.step()
    b.step()
    clock.now = 11  # a paused (a long GC, a frozen VM); b takes over
    assert b.step()
    assert not a.step() and not a.is_leader()


def test_conflicting_writes_lose() -> None:
    store = MemoryLeaseStore()
    clock = Time()
    a = elector(store, "a", clock, [])
    a.step()
    stale = store.record
    assert stale is not None
    a.step()
    assert not store.update(stale)  # written at an old version: refused


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c", "tick", "outage", "back", "release-a", "release-b"]),
            st.floats(min_value=0.1, max_value=6.0),
        ),
        max_size=60,
    )
)
def test_never_two_leaders_at_once(events: list[tuple[str, float]]) -> None:
    """Whatever the interleaving of tries, outages and releases, at no instant do two
    replicas believe they lead."""
    clock, store = Time(), MemoryLeaseStore()
    electors = {name: elector(store, name, clock, []) for name in "abc"}
    for event, advance in events:
        clock.now += advance
        if event in electors:
            electors[event].step()
        elif event == "outage":
            store.fail = True
        elif event == "back":
            store.fail = False
        elif event.startswith("release-") and not store.fail:
            electors[event[-1]].release()
        leaders = [name for name, e in electors.items() if e.is_leader()]
        assert len(leaders) <= 1, (leaders, clock.now)
