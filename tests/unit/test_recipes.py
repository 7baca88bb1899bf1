import pytest

import fourcast as fc
from fourcast.recipes import names


@pytest.mark.parametrize("name", names())
def test_presets_load(name):
    r = fc.recipe(name)
    assert r.name == name
    assert fc.recipe(r.to_json() and name) == r


def test_overrides_and_errors(tmp_path):
    r = fc.recipe("nvfp4", **{"rht": "none", "keep_bf16_last": 0})
    assert r.rht["size"] == 0 and r.keep_bf16_last == 0
    assert r.operand("wgrad.x")["element"] == "e2m1"
    with pytest.raises(fc.RecipeError, match="valid: bf16"):
        fc.recipe("fp3")
    with pytest.raises(fc.RecipeError, match="no recipe field"):
        r.set("bogus", 1)
    f = tmp_path / "mine.toml"
    f.write_text('base = "ue5m3"\ntensor_scale_refresh = = 2\n')
    with pytest.raises(fc.ConfigError, match="mine.toml:2"):
        fc.recipe(f)
    f.write_text('base = "ue5m3"\ntensor_scale_refresh = 2\n')
    assert fc.recipe(f).tensor_scale_refresh == 2
