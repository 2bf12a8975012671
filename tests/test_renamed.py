"""Old module names still import, warn, and give the renamed module itself (dtbook._renamed)."""

import importlib
import sys

import pytest

from dtbook import _renamed


@pytest.mark.parametrize("old, new", sorted(_renamed.RENAMED.items()))
def test_old_name_warns_and_is_the_new_module(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_every_new_name_exists_and_no_old_file_is_left():
    import pathlib
    root = pathlib.Path(_renamed.__file__).parent.parent
    for old, new in _renamed.RENAMED.items():
        assert (root / (new.replace(".", "/") + ".py")).exists(), new
        assert not (root / (old.replace(".", "/") + ".py")).exists(), old
