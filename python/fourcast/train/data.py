"""Text to token batches: a .txt file or a folder of them, a tokenizer, a memory-mapped
token cache, and deterministic batches (a batch depends only on seed, step and rank,
so a resumed run draws exactly what the uninterrupted run drew).

Tokenizers: "bytes" (the 256 byte values), "gpt2:DIR" (GPT-2 BPE from DIR/encoder.json
and DIR/vocab.bpe), "bpe:N" (a byte-level BPE of N tokens trained with the `tokenizers`
library on the training text, cached). Tokens are cached as raw uint16/uint32 under
the cache folder ($FOURCAST_CACHE, else ~/.cache/fourcast), keyed by the files' paths,
sizes and modification times and by the tokenizer. Files of a folder are read in
sorted order and joined with a blank line.

    >>> import pathlib, tempfile
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "a.txt").write_text("hello world " * 200)
    >>> data = load_data(DataConfig(path=str(d), cache_dir=str(d / "cache")), seq=16)
    >>> data.vocab_size, data.train.dtype.name, len(data.val) > 0
    (256, 'uint16', True)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
from typing import Iterable

import numpy as np

from fourcast.errors import TrainError
from fourcast.train.config import DataConfig

SEPARATOR = "\n\n"
CHUNK_CHARS = 1 << 20  # text per encode_batch item (split at line ends)


# ---------------------------------------------------------------- files


def text_files(path: str | os.PathLike, what: str = "data") -> list[pathlib.Path]:
    """The .txt files of a path (a file, or a folder searched recursively)."""
    p = pathlib.Path(path).expanduser()
    if not str(path):
        raise TrainError(f"no {what} path given; pass --data PATH (a .txt file or a folder of them)")
    if not p.exists():
        raise TrainError(f"{what} path not found: {p} (pass a .txt file or a folder of .txt files)")
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*.txt") if f.is_file())
    if not files:
        raise TrainError(f"{what} folder {p} has no .txt files (fourcast reads plain-text .txt files)")
    if sum(f.stat().st_size for f in files) == 0:
        raise TrainError(f"{what} path {p} holds only empty files; give it some text")
    return files


def _fingerprint(files: Iterable[pathlib.Path]) -> list[list]:
    return [[str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns] for f in files]


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def cache_root(cfg: DataConfig) -> pathlib.Path:
    root = cfg.cache_dir or os.environ.get("FOURCAST_CACHE") or pathlib.Path.home() / ".cache" / "fourcast"
    return pathlib.Path(root).expanduser()


def _read_text(files: list[pathlib.Path]) -> str:
    return SEPARATOR.join(f.read_bytes().decode("utf-8", errors="replace") for f in files)


# ---------------------------------------------------------------- tokenizers


@dataclasses.dataclass
class Tokenizer:
    spec: str
    vocab_size: int
    identity: str  # what the token cache key depends on
    _tok: object = None  # a tokenizers.Tokenizer, None for bytes

    def encode_files(self, files: list[pathlib.Path]) -> np.ndarray:
        if self._tok is None:
            sep = SEPARATOR.encode()
            return np.frombuffer(sep.join(f.read_bytes() for f in files), dtype=np.uint8).astype(np.uint16)
        chunks = _chunks(_read_text(files))
        ids = [np.asarray(e.ids, dtype=np.uint32) for e in self._tok.encode_batch(chunks)]
        return np.concatenate(ids) if ids else np.zeros(0, np.uint32)

    def decode(self, ids: Iterable[int]) -> str:
        ids = list(ids)
        if self._tok is None:
            return bytes(ids).decode("utf-8", errors="replace")
        return self._tok.decode(ids)


def _chunks(text: str) -> list[str]:
    out, start = [], 0
    while start < len(text):
        end = min(len(text), start + CHUNK_CHARS)
        if end < len(text):
            nl = text.rfind("\n", start, end)
            end = nl + 1 if nl > start else end
        out.append(text[start:end])
        start = end
    return out


def make_tokenizer(cfg: DataConfig, train_files: list[pathlib.Path]) -> Tokenizer:
    spec = cfg.tokenizer
    if spec == "bytes":
        return Tokenizer("bytes", 256, "bytes")
    kind, _, arg = spec.partition(":")
    if kind == "gpt2":
        folder = pathlib.Path(arg or ".").expanduser()
        enc, merges = folder / "encoder.json", folder / "vocab.bpe"
        if not enc.is_file() or not merges.is_file():
            raise TrainError(f"tokenizer gpt2:{folder} needs {enc.name} and {merges.name} in that folder")
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers

        tok = HFTokenizer(models.BPE.from_file(str(enc), str(merges)))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        ident = _key("gpt2", hashlib.sha256(enc.read_bytes() + merges.read_bytes()).hexdigest())
        return Tokenizer(spec, tok.get_vocab_size(), ident, tok)
    if kind == "bpe":
        try:
            size = int(arg)
        except ValueError:
            raise TrainError(f"tokenizer '{spec}': write bpe:N with N the vocabulary size, e.g. bpe:8192") from None
        if not 257 <= size <= 1 << 20:
            raise TrainError(f"tokenizer '{spec}': vocabulary size must be between 257 and 1048576")
        return _trained_bpe(cfg, size, train_files)
    raise TrainError(f"unknown tokenizer '{spec}'; use bytes, gpt2:DIR (encoder.json + vocab.bpe) or bpe:N")


def _trained_bpe(cfg: DataConfig, size: int, files: list[pathlib.Path]) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    ident = _key("bpe", size, _fingerprint(files))
    path = cache_root(cfg) / "tokenizers" / f"bpe{size}-{ident}.json"
    if path.is_file():
        tok = HFTokenizer.from_file(str(path))
    else:
        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
        tok.train([str(f) for f in files], trainer)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tok.save(str(tmp))
        os.replace(tmp, path)
    # The identity is the trained file's content: a retrained (possibly different)
    # tokenizer never reuses tokens cached with another one.
    return Tokenizer(f"bpe:{size}", tok.get_vocab_size(), _key("bpe", hashlib.sha256(path.read_bytes()).hexdigest()), tok)


# ---------------------------------------------------------------- token cache


def cached_tokens(cfg: DataConfig, tok: Tokenizer, files: list[pathlib.Path]) -> np.ndarray:
    """The token stream of `files`, read through a memory map (built once)."""
    key = _key("tokens", tok.identity, _fingerprint(files), SEPARATOR)
    dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32
    folder = cache_root(cfg) / "tokens"
    path, meta_path = folder / f"{key}.bin", folder / f"{key}.json"
    if not meta_path.is_file():
        ids = tok.encode_files(files).astype(dtype)
        if ids.size == 0:
            raise TrainError(f"tokenizing {files[0].parent} gave no tokens; is the text empty?")
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        ids.tofile(tmp)
        os.replace(tmp, path)
        meta = {"dtype": np.dtype(dtype).name, "count": int(ids.size), "tokenizer": tok.spec, "files": _fingerprint(files)}
        tmp = meta_path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, meta_path)
    meta = json.loads(meta_path.read_text())
    return np.memmap(path, dtype=np.dtype(meta["dtype"]), mode="r", shape=(meta["count"],))


# ---------------------------------------------------------------- datasets and batches


@dataclasses.dataclass
class Data:
    train: np.ndarray
    val: np.ndarray
    tokenizer: Tokenizer

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def batch(self, step: int, batch: int, seq: int, *, seed: int, rank: int = 0):
        """Random windows of the training stream for (seed, step, rank): inputs and
        next-token targets as int64 numpy arrays of shape (batch, seq)."""
        rng = np.random.default_rng([seed, step, rank, 1])
        starts = rng.integers(0, len(self.train) - seq - 1, size=batch)
        return _windows(self.train, starts, seq)

    def val_batches(self, n_batches: int, batch: int, seq: int):
        """Fixed, evenly spaced windows of the validation stream (the same every eval)."""
        total = n_batches * batch
        last = len(self.val) - seq - 1
        starts = np.linspace(0, last, num=total).astype(np.int64) if last > 0 else np.zeros(total, np.int64)
        return [_windows(self.val, starts[i * batch : (i + 1) * batch], seq) for i in range(n_batches)]


def _windows(stream: np.ndarray, starts: np.ndarray, seq: int):
    idx = starts[:, None] + np.arange(seq + 1)[None, :]
    w = np.asarray(stream[idx], dtype=np.int64)
    return w[:, :-1], w[:, 1:]


def load_data(cfg: DataConfig, seq: int) -> Data:
    """Tokenize (or load the cached tokens of) the training and validation text."""
    files = text_files(cfg.path, "data")
    tok = make_tokenizer(cfg, files)
    stream = cached_tokens(cfg, tok, files)
    if cfg.val_path:
        val = cached_tokens(cfg, tok, text_files(cfg.val_path, "validation"))
        train = stream
    else:
        if not 0 < cfg.val_fraction < 1:
            raise TrainError(f"val_fraction must be between 0 and 1 without --val, got {cfg.val_fraction}")
        cut = int(len(stream) * (1 - cfg.val_fraction))
        train, val = stream[:cut], stream[cut:]
    for name, part in (("training", train), ("validation", val)):
        if len(part) < seq + 2:
            raise TrainError(
                f"{name} text has {len(part)} tokens, fewer than one sequence of {seq} + 1; "
                "give more text or a smaller --seq"
            )
    return Data(train=train, val=val, tokenizer=tok)
