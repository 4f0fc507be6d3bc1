import pytest


@pytest.fixture(autouse=True)
def _rank_zero(monkeypatch):
    """``set_finish_with_abort`` logs on TP rank 0 and asks the live process group, which a unit
    test does not have."""
    from types import SimpleNamespace

    import sglang.srt.managers.schedule_batch as schedule_batch

    monkeypatch.setattr(schedule_batch, "get_parallel", lambda: SimpleNamespace(tp_rank=0))
