"""workers.lazy.lazy_exports: a package's names load their submodule on first use, and only then."""

import sys

import pytest


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "lazypkg"
    root.mkdir()
    (root / "__init__.py").write_text(
        "from workers.lazy import lazy_exports\n"
        "LIGHT = 1\n"
        "__getattr__, __dir__ = lazy_exports(__name__, {'heavy': 'heavymod'})\n"
    )
    (root / "heavymod.py").write_text("def heavy():\n    return 'loaded'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("lazypkg", "lazypkg.heavymod"):
        sys.modules.pop(name, None)


def test_a_name_loads_its_module_on_first_use_only(package):
    import lazypkg

    assert lazypkg.LIGHT == 1 and "lazypkg.heavymod" not in sys.modules
    assert "heavy" in dir(lazypkg) and "lazypkg.heavymod" not in sys.modules
    assert lazypkg.heavy() == "loaded" and "lazypkg.heavymod" in sys.modules
    assert vars(lazypkg)["heavy"] is sys.modules["lazypkg.heavymod"].heavy  # kept: later lookups are plain


def test_an_unknown_name_is_an_attribute_error_naming_the_package(package):
    import lazypkg

    with pytest.raises(AttributeError, match="'lazypkg' has no attribute 'missing'"):
        lazypkg.missing
    assert not hasattr(lazypkg, "missing")
