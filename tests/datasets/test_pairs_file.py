"""mmcache.datasets.pairs_file: a JSONL file of your own labelled pairs, read into Pairs (texts,
images, WAV clips, contexts) or refused line by line with a typed error."""

from __future__ import annotations

import io
import json
import wave

import numpy as np
import pytest
from PIL import Image

from mmcache.datasets.pairs_file import read_pairs, write_pairs
from mmcache.errors import InvalidInputError, PairsFileError


def _jsonl(path, *rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _png(path, value):
    Image.fromarray(np.full((16, 16, 3), value, np.uint8)).save(path)
    return path.name


def _wav(path, seconds=0.5):
    samples = (np.sin(np.linspace(0, 800, int(16000 * seconds))) * 8000).astype("<i2")
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1), out.setsampwidth(2), out.setframerate(16000)
        out.writeframes(samples.tobytes())
    return path.name


def test_reads_text_pairs_with_defaults_and_contexts(tmp_path):
    turns = [{"role": "user", "content": "I have the pro plan"}]
    path = _jsonl(tmp_path / "p.jsonl",
                  {"cached": "How do I reset my password?", "query": "How can I reset it?",
                   "same": True},
                  "",
                  {"cached": "Can I cancel?", "query": "Can I cancel?", "same": False,
                   "kind": "context-other", "source": "billing", "split": "train",
                   "cached_context": turns})
    first, second = read_pairs(path)
    assert (first.cached.text, first.query.text, first.same) == \
        ("How do I reset my password?", "How can I reset it?", True)
    assert (first.kind, first.source, first.split, first.modality) == \
        ("same", "line-1", "test", "text")
    assert (second.kind, second.source, second.split) == ("context-other", "billing", "train")
    assert second.cached_context == tuple(turns) and second.query_context == ()


def test_reads_images_and_wav_clips_beside_the_file(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl",
                  {"cached": "what is this?", "query": "what is this?", "same": True,
                   "cached_image": _png(tmp_path / "a.png", 10),
                   "query_image": _png(tmp_path / "b.png", 12)},
                  {"cached": None, "query": None, "same": True,
                   "cached_audio": _wav(tmp_path / "a.wav"),
                   "query_audio": _wav(tmp_path / "b.wav")})
    image, speech = read_pairs(path)
    assert image.modality == "image" and image.query.image.shape == (16, 16, 3)
    assert speech.modality == "audio" and speech.query.text is None
    assert speech.query.audio.dtype == np.float32 and speech.query.audio.size == 8000


def test_written_text_pairs_read_back_the_same(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl",
                  {"cached": "a b", "query": "b a", "same": False, "kind": "order-swap",
                   "query_context": [{"role": "user", "content": "hi"}], "note": "swapped"})
    pairs = read_pairs(path)
    write_pairs(pairs, tmp_path / "again.jsonl")
    again = read_pairs(tmp_path / "again.jsonl")
    fields = ("same", "kind", "source", "split", "note", "query_context", "cached_context")
    assert [(p.query.text, p.cached.text, *(getattr(p, f) for f in fields)) for p in again] == \
        [(p.query.text, p.cached.text, *(getattr(p, f) for f in fields)) for p in pairs]


@pytest.mark.parametrize("row, says", [
    ("{not json", "line 2"),
    ('["a list"]', "JSON object"),
    ({"cached": "a", "query": "b"}, "missing keys \\['same'\\]"),
    ({"cached": "a", "query": "b", "same": True, "lable": 1}, "unknown keys \\['lable'\\]"),
    ({"cached": "a", "query": "b", "same": "yes"}, "true or false"),
    ({"cached": 3, "query": "b", "same": True}, "string or null"),
    ({"cached": None, "query": "b", "same": True}, "no text, image or audio"),
    ({"cached": "a", "query": "b", "same": True, "query_image": "absent.png"}, "absent.png"),
    ({"cached": "a", "query": "b", "same": True, "query_image": "bad.png"}, "image"),
    ({"cached": "a", "query": "b", "same": True, "query_audio": "bad.png"}, "WAV"),
    ({"cached": "a", "query": "b", "same": True, "query_context": "hi"}, "turns"),
    ({"cached": "a", "query": "b", "same": True, "query_context": [{"role": "user"}]}, "content"),
    ({"cached": "a", "query": "b", "same": True, "kind": 1}, "'kind' must be a string"),
])
def test_a_bad_line_is_refused_with_its_number(tmp_path, row, says):
    (tmp_path / "bad.png").write_bytes(b"\x89PNG not really")
    path = _jsonl(tmp_path / "p.jsonl", {"cached": "a", "query": "b", "same": True}, row)
    with pytest.raises(PairsFileError, match=says) as caught:
        read_pairs(path)
    assert isinstance(caught.value, InvalidInputError) and "line 2" in str(caught.value)


def test_missing_empty_and_oversized_files_are_refused(tmp_path):
    with pytest.raises(PairsFileError, match="cannot read"):
        read_pairs(tmp_path / "absent.jsonl")
    with pytest.raises(PairsFileError, match="no pairs"):
        read_pairs(_jsonl(tmp_path / "empty.jsonl", ""))
    big = _jsonl(tmp_path / "big.jsonl", {"cached": "a" * 200, "query": "b", "same": True})
    with pytest.raises(PairsFileError, match="max_bytes"):
        read_pairs(big, max_bytes=100)


def test_media_pairs_are_not_written(tmp_path):
    path = _jsonl(tmp_path / "p.jsonl", {"cached": "x", "query": "x", "same": True,
                                         "query_image": _png(tmp_path / "a.png", 1)})
    with pytest.raises(PairsFileError, match="text pairs only"):
        write_pairs(read_pairs(path), tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
