"""The page-ownership model (probes/pages.py): what it observes, and only that."""

from __future__ import annotations

from probes.pages import Clock, PagePool


def pool(size: int = 4) -> PagePool:
    return PagePool(size, Clock())


def test_a_freed_page_goes_to_the_next_request_first_and_a_late_write_lands_in_it():
    p = pool()
    a = p.alloc("A", 4)
    write = p.begin("A", 0, a)
    p.free("A", a, "release_kv_cache")
    b = p.alloc("B", 4)
    assert sorted(b) == sorted(a)  # the whole pool: A's pages, reused at once
    p.land(write)
    assert [w["owner"] for w in p.foreign_writes] == ["B"] * 4
    assert [f["ranks"] for f in p.freed_while_writable] == [[0]] * 4


def test_a_write_that_landed_before_the_free_is_no_hazard():
    p = pool()
    a = p.alloc("A", 4)
    p.land(p.begin("A", 0, a))
    p.free("A", a, "release_kv_cache")
    p.alloc("B", 4)
    assert not p.foreign_writes and not p.freed_while_writable


def test_partial_and_failed_writes_and_what_a_read_then_sees():
    p = pool()
    old = p.alloc("X", 4)
    p.land(p.begin("X", -1, old))
    p.free("X", old, "finished")
    a = p.alloc("A", 4)
    write = p.begin("A", 0, a)
    p.land(write, 2)
    assert write.state == "partial" and len(write.landed) == 2
    p.fail(write)
    assert write.state == "failed" and write not in p.in_flight()
    p.read("A", a)
    assert [(r["index"], r["holds"]) for r in p.unwritten_reads] == [(2, "X"), (3, "X")]


def test_a_page_freed_twice_or_by_another_request_is_a_double_free():
    p = pool()
    a = p.alloc("A", 2)
    p.free("A", a, "release_kv_cache")
    p.free("A", a, "release_kv_cache")
    b = p.alloc("B", 2)
    p.free("A", b, "release_kv_cache")
    assert [(d["page"], d["owner"]) for d in p.double_frees] == [(a[0], None), (a[1], None), (b[0], "B"), (b[1], "B")]


def test_events_are_ordered_by_one_sequence_and_stamped_with_the_logical_clock():
    clock = Clock()
    p = PagePool(2, clock)
    a = p.alloc("A", 2)
    clock.advance(31)
    p.free("A", a, "release_kv_cache")
    assert [(e["event"], e["t"]) for e in p.events] == [("alloc", 0), ("free", 31)]
    assert [e["seq"] for e in p.events] == sorted(e["seq"] for e in p.events)


def test_a_write_carries_its_sources_so_relocated_kv_compares():
    p = pool()
    a = p.alloc("A", 2)
    p.land(p.begin("A", 0, a, sources=[("A", 5), ("A", 6)]))
    assert p.holds(a) == [("A", 5), ("A", 6)] and p.holds([2]) == [None]
