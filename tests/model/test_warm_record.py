"""A load with a warm cache replays this machine's last warm-up instead of running it again."""

from __future__ import annotations

from pathlib import Path

from forethought.models import LatencyModel, TransformersBackend
from forethought.models._latency import LatencyHistory
from forethought.models._model_load import load_model
from forethought.models._model_source import resolve_model
from forethought.models._warm_record import WarmRecord, machine_key

# A history no real warm-up measures: replayed, it shows in the latency model as it is.
_HISTORY = LatencyHistory(
    prefills=((16, 0.0311), (64, 0.0422), (128, 0.0533)),
    steps=((1, 0.0151), (4, 0.0162), (16, 0.0193)),
    actions=(4, 4),
)


def _key(model_dir: Path) -> str:
    loaded = load_model(resolve_model(str(model_dir)), device="cpu", dtype="float32")
    return machine_key(loaded)


def _backend(model_dir: Path, cache: Path) -> TransformersBackend:
    return TransformersBackend(model=str(model_dir), device="cpu", dtype="float32", cache_dir=cache)


def test_a_record_as_fast_as_now_is_replayed_without_a_warm_up(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # Recorded as slow as a check call can be: this machine is surely as fast as that now.
    WarmRecord.under(tmp_path).write(_key(tiny_model_dir), _HISTORY, check_call_s=60.0)
    backend = _backend(tiny_model_dir, tmp_path)
    backend.load()
    assert backend.latency.history() == _HISTORY  # the record's passes, and nothing else ran
    assert backend.threads is None  # no thread choice either: the check call stood for it
    fitted = LatencyModel()
    fitted.replay(_HISTORY)
    assert backend.latency.call(40, 4) == fitted.call(40, 4)


def test_a_machine_slower_than_its_record_measures_again(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    # Recorded impossibly fast: the check call cannot finish within 1.5x of it.
    WarmRecord.under(tmp_path).write(_key(tiny_model_dir), _HISTORY, check_call_s=1e-7)
    backend = _backend(tiny_model_dir, tmp_path)
    backend.load()
    history = backend.latency.history()
    assert history != _HISTORY
    assert len(history.prefills) == 6
    assert len(history.steps) >= 6
    assert not set(history.prefills) & set(_HISTORY.prefills)
    assert backend.threads is not None  # the thread choice ran again


def test_the_warm_up_is_kept_only_when_it_ran_on_every_thread(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    (tmp_path / "warm").mkdir()
    key = _key(tiny_model_dir)
    backend = _backend(tiny_model_dir, tmp_path)
    backend.load()
    assert backend.threads is not None
    kept = WarmRecord.under(tmp_path).read(key)
    # A warm-up on one thread (a busy machine) is never kept; one on every thread always is.
    assert (kept is not None) == backend.threads.kept_all
    if kept is not None:
        history, check_s = kept
        assert history == backend.latency.history()
        assert check_s > 0


def test_an_unreadable_record_is_ignored_and_the_load_measures(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    record = WarmRecord.under(tmp_path)
    record.write(_key(tiny_model_dir), _HISTORY, check_call_s=60.0)
    (path,) = (tmp_path / "warm").iterdir()
    path.write_text('{"version": 1, "key": ')  # cut short
    backend = _backend(tiny_model_dir, tmp_path)
    backend.load()
    assert len(backend.latency.history().prefills) == 6  # measured: the warm-up ran
    assert record.read("another machine") is None
