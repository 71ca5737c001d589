"""`Inbox`: items come out in the order they were put; `offer` hands the loop lock to its
caller only when the lock is free, and otherwise queues the item and wakes the loop."""

from __future__ import annotations

import threading

from gpu_platform.application.raft_inbox import Inbox


def drain(inbox: Inbox[int]) -> list[int]:
    out = []
    while (item := inbox.take()) is not None:
        out.append(item)
    return out


def test_items_put_from_any_thread_are_taken_in_the_order_they_were_put() -> None:
    inbox: Inbox[int] = Inbox()
    inbox.put(1)

    def more() -> None:
        for i in range(2, 50):
            inbox.put(i)

    t = threading.Thread(target=more)
    t.start()
    t.join()
    with inbox.lock:
        assert drain(inbox) == list(range(1, 50))
        assert inbox.take() is None


def test_an_offer_while_the_loop_lock_is_free_makes_the_caller_its_holder() -> None:
    inbox: Inbox[int] = Inbox()
    inbox.put(1)  # queued earlier: the holder takes it first
    assert inbox.offer(2) is True
    assert inbox.lock.locked()
    assert drain(inbox) == [1, 2]
    inbox.lock.release()


def test_an_offer_while_the_lock_is_held_queues_the_item_and_wakes_the_loop() -> None:
    inbox: Inbox[int] = Inbox()
    woke = threading.Event()

    def loop() -> None:
        inbox.wait(30.0)  # woken by the offer, long before this timeout
        woke.set()

    with inbox.lock:
        t = threading.Thread(target=loop)
        t.start()
        assert inbox.offer(7) is False
        t.join(timeout=30)
        assert woke.is_set()
        assert drain(inbox) == [7]


def test_a_wake_before_the_wait_is_not_lost() -> None:
    inbox: Inbox[int] = Inbox()
    inbox.wake()
    inbox.wake()  # a second wake while one is pending is harmless
    done = threading.Event()

    def loop() -> None:
        inbox.wait(30.0)
        done.set()

    t = threading.Thread(target=loop)
    t.start()
    t.join(timeout=30)  # returns at once: the signal was set before it waited
    assert done.is_set()
