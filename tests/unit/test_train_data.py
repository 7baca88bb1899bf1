"""Data: files and folders, the three tokenizers, the token cache, batches, errors."""

import json

import numpy as np
import pytest

from fourcast.errors import TrainError
from fourcast.train.config import DataConfig
from fourcast.train.data import load_data


@pytest.fixture
def alice(shared_data, tmp_path):
    """200 KB of the held-out Gutenberg text, as a user's file."""
    text = (shared_data / "corpus" / "val" / "gutenberg.txt").read_bytes()[:200_000]
    path = tmp_path / "alice.txt"
    path.write_bytes(text)
    return path


def test_bytes_file_with_val_split(alice, tmp_path):
    data = load_data(DataConfig(path=str(alice), val_fraction=0.1, cache_dir=str(tmp_path / "c")), seq=64)
    raw = np.frombuffer(alice.read_bytes(), np.uint8)
    assert data.vocab_size == 256
    assert np.array_equal(np.concatenate([data.train, data.val]), raw)
    assert len(data.val) == len(raw) - int(len(raw) * 0.9)
    assert isinstance(data.train.base, np.memmap) or isinstance(data.train, np.memmap)
    assert data.tokenizer.decode(data.train[:20]) == alice.read_text()[:20]


def test_folder_is_read_recursively_in_sorted_order(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "b.txt").write_text("second " * 50)
    (tmp_path / "d" / "sub" / "c.txt").write_text("third " * 50)
    (tmp_path / "d" / "a.txt").write_text("first " * 50)
    (tmp_path / "d" / "notes.md").write_text("ignored")
    data = load_data(DataConfig(path=str(tmp_path / "d"), val_fraction=0.01, cache_dir=str(tmp_path / "c")), seq=8)
    text = data.tokenizer.decode(np.concatenate([data.train, data.val]))
    assert text == "first " * 50 + "\n\n" + "second " * 50 + "\n\n" + "third " * 50


def test_token_cache_is_reused_and_invalidated(alice, tmp_path):
    cache = tmp_path / "c"
    cfg = DataConfig(path=str(alice), cache_dir=str(cache))
    load_data(cfg, seq=16)
    metas = list((cache / "tokens").glob("*.json"))
    assert len(metas) == 1
    load_data(cfg, seq=16)
    assert list((cache / "tokens").glob("*.json")) == metas
    alice.write_text(alice.read_text() + " more text")
    load_data(cfg, seq=16)
    assert len(list((cache / "tokens").glob("*.json"))) == 2


def test_gpt2_tokenizer_from_vocab_files(shared_data, alice, tmp_path):
    val = tmp_path / "val.txt"
    val.write_text("Alice was beginning to get very tired of sitting by her sister on the bank.")
    cfg = DataConfig(path=str(alice), val_path=str(val), tokenizer=f"gpt2:{shared_data / 'tokenizer'}", cache_dir=str(tmp_path / "c"))
    data = load_data(cfg, seq=8)
    assert data.vocab_size == 50257
    assert data.train.dtype == np.uint16
    assert data.tokenizer.decode(data.val) == val.read_text()
    encoder = json.loads((shared_data / "tokenizer" / "encoder.json").read_text())
    assert data.val[0] == encoder["Alice"] and data.val[1] == encoder["\u0120was"]


def test_bpe_trained_on_the_data_and_cached(alice, tmp_path):
    cfg = DataConfig(path=str(alice), tokenizer="bpe:512", cache_dir=str(tmp_path / "c"))
    data = load_data(cfg, seq=16)
    assert data.vocab_size == 512
    saved = list((tmp_path / "c" / "tokenizers").glob("bpe512-*.json"))
    assert len(saved) == 1
    assert len(data.train) + len(data.val) < len(alice.read_bytes()) / 2  # it compresses
    assert data.tokenizer.decode(data.train[:200]) == alice.read_text()[: len(data.tokenizer.decode(data.train[:200]))]
    again = load_data(cfg, seq=16)
    assert np.array_equal(again.train, data.train)


def test_batches_depend_on_seed_step_rank_only(alice, tmp_path):
    data = load_data(DataConfig(path=str(alice), cache_dir=str(tmp_path / "c")), seq=32)
    x, y = data.batch(5, 4, 32, seed=1)
    x2, _ = data.batch(5, 4, 32, seed=1)
    assert x.shape == (4, 32) and x.dtype == np.int64
    assert np.array_equal(x, x2)
    assert np.array_equal(x[:, 1:], y[:, :-1])
    assert not np.array_equal(x, data.batch(6, 4, 32, seed=1)[0])
    assert not np.array_equal(x, data.batch(5, 4, 32, seed=1, rank=1)[0])
    v1, v2 = data.val_batches(2, 4, 32), data.val_batches(2, 4, 32)
    assert len(v1) == 2 and all(np.array_equal(a[0], b[0]) for a, b in zip(v1, v2))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda d: str(d / "missing.txt"), "data path not found"),
        (lambda d: str(d), "has no .txt files"),
        (lambda d: (d / "e.txt").write_text("") and None or str(d / "e.txt"), "only empty files"),
        (lambda d: "", "no data path given"),
    ],
)
def test_bad_data_paths(tmp_path, make, match):
    (tmp_path / "x.md").write_text("not text")
    with pytest.raises(TrainError, match=match):
        load_data(DataConfig(path=make(tmp_path), cache_dir=str(tmp_path / "c")), seq=8)


def test_bad_tokenizers_and_short_text(alice, tmp_path):
    for spec, match in (("wordpiece", "unknown tokenizer"), ("bpe:lots", "bpe:N"), (f"gpt2:{tmp_path}", "encoder.json")):
        with pytest.raises(TrainError, match=match):
            load_data(DataConfig(path=str(alice), tokenizer=spec, cache_dir=str(tmp_path / "c")), seq=8)
    short = tmp_path / "short.txt"
    short.write_text("tiny")
    with pytest.raises(TrainError, match="fewer than one sequence"):
        load_data(DataConfig(path=str(short), cache_dir=str(tmp_path / "c")), seq=64)
