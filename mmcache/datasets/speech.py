"""Speech with transcripts, all at 16 kHz float32: synthetic and real.

* :func:`synthesize` / :func:`speak` — espeak-ng renderings of any text in
  several voices and rates. **Synthetic**: every clip says so
  (``SpeechClip.synthetic``), and results on them are reported apart from real speech.
* :func:`load_asterisk_prompts` — Allison Smith's recorded Asterisk telephony
  prompts (Debian ``asterisk-core-sounds-en-wav``, CC-BY-SA-3.0; 8 kHz,
  resampled to 16 kHz) with the transcripts of ``core-sounds-en.txt``; tone and
  silence lines are dropped, and so are later prompts whose transcript repeats
  an earlier one (41 of them), so each transcript names exactly one clip.
* :func:`load_librivox` — five read LibriVox sentences (*Sense and Sensibility*,
  public domain) from Debian ``pocketsphinx-testdata``.

Corrupt or empty audio raises :class:`~mmcache.errors.InvalidMediaError`.
"""

from __future__ import annotations

import gzip
import io
import re
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from math import gcd
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly

from mmcache.errors import InvalidInputError, InvalidMediaError
from mmcache.offline import missing_asset
from mmcache.types import AUDIO_SAMPLE_RATE

ASTERISK_DIR = Path("/usr/share/asterisk/sounds/en")
ASTERISK_TRANSCRIPTS = Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz")
LIBRIVOX_DIR = Path("/usr/share/pocketsphinx/test/data/librivox")
#: espeak-ng voices (language + variant) used for synthetic speech.
VOICES: tuple[str, ...] = ("en-us+f3", "en-us+m3", "en-gb+f2", "en-gb-x-rp+m1",
                           "en-us+f4", "en-gb-scotland+m2")
#: Speaking rates in words per minute.
RATES: tuple[int, ...] = (130, 150, 175)


@dataclass(frozen=True)
class SpeechClip:
    """One utterance: 16 kHz mono float32 ``audio`` and its ``text``.

    ``synthetic`` is True for machine-rendered speech; ``speaker`` is a person
    or an espeak-ng voice; ``source`` and ``licence`` say where it came from.
    """

    clip_id: str
    audio: np.ndarray
    text: str
    speaker: str
    synthetic: bool
    source: str
    licence: str
    meta: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Duration in seconds."""
        return len(self.audio) / AUDIO_SAMPLE_RATE


def to_16k(audio: np.ndarray, rate: int) -> np.ndarray:
    """Mono float32 audio in [-1, 1] at 16 kHz from integer or float samples at ``rate``."""
    audio = np.asarray(audio)
    if audio.size == 0 or rate <= 0:
        raise InvalidMediaError(f"empty audio or bad sample rate ({audio.size} samples, {rate} Hz)")
    if audio.ndim == 2:
        audio = audio.mean(axis=1) if np.issubdtype(audio.dtype, np.floating) \
            else audio.astype(np.float64).mean(axis=1).astype(audio.dtype)
    if audio.ndim != 1:
        raise InvalidMediaError(f"audio must be 1-D or (samples, channels), got {audio.shape}")
    if np.issubdtype(audio.dtype, np.integer):
        audio = audio.astype(np.float32) / np.float32(np.iinfo(audio.dtype).max + 1)
    audio = audio.astype(np.float32)
    if not np.isfinite(audio).all():
        raise InvalidMediaError("audio holds NaN or infinite samples")
    if rate != AUDIO_SAMPLE_RATE:
        g = gcd(rate, AUDIO_SAMPLE_RATE)
        audio = resample_poly(audio, AUDIO_SAMPLE_RATE // g, rate // g).astype(np.float32)
    return audio


def read_wav(source: str | Path | bytes) -> np.ndarray:
    """Decode a WAV file (path or bytes) to 16 kHz mono float32."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", wavfile.WavFileWarning)
            rate, audio = wavfile.read(io.BytesIO(source) if isinstance(source, bytes) else source)
    except Exception as err:  # scipy raises assorted types (even UnboundLocalError) on garbage
        raise InvalidMediaError(f"cannot decode WAV {_describe(source)}: {err}") from err
    if audio.size == 0:
        raise InvalidMediaError(f"WAV {_describe(source)} holds no samples")
    return to_16k(audio, rate)


def synthesize(text: str, voice: str = VOICES[0], rate: int = 150,
               pad_s: float = 0.5) -> SpeechClip:
    """Render ``text`` with espeak-ng (``voice``, ``rate`` words/min) as a synthetic clip.

    ``pad_s`` seconds of silence are added on both sides (Whisper transcribes
    padded espeak speech better).
    """
    if not text or not text.strip():
        raise InvalidInputError("cannot synthesize empty text")
    wav = _espeak(text.strip(), voice, int(rate))
    pad = np.zeros(int(pad_s * AUDIO_SAMPLE_RATE), np.float32)
    return SpeechClip(
        clip_id=f"espeak/{voice}/{rate}/{text.strip()}",
        audio=np.concatenate([pad, read_wav(wav), pad]), text=text.strip(), speaker=voice,
        synthetic=True, source="espeak-ng (synthetic speech)", licence="generated",
        meta={"voice": voice, "rate": int(rate), "pad_s": pad_s})


def speak(texts: Iterable[str], voices: Sequence[str] = VOICES, rates: Sequence[int] = RATES,
          pad_s: float = 0.5) -> list[SpeechClip]:
    """Every text in every voice; the rate cycles through ``rates`` (seed-free, fixed)."""
    clips = []
    for i, text in enumerate(texts):
        for j, voice in enumerate(voices):
            clips.append(synthesize(text, voice, rates[(i + j) % len(rates)], pad_s))
    return clips


def load_asterisk_prompts(limit: int | None = None,
                          max_seconds: float | None = None) -> list[SpeechClip]:
    """The recorded Asterisk prompts with unique transcripts, in name order (real speech).

    ``limit`` keeps the first prompts; ``max_seconds`` drops longer ones (a few
    menus run past Whisper's 30 s window).
    """
    if not ASTERISK_TRANSCRIPTS.exists() or not ASTERISK_DIR.exists():
        raise missing_asset("Asterisk prompts",
                            "`apt-get install asterisk-core-sounds-en asterisk-core-sounds-en-wav`")
    entries = asterisk_transcripts()
    if limit is not None:
        entries = entries[:limit]
    clips = [SpeechClip(clip_id=f"asterisk/{name}", audio=read_wav(ASTERISK_DIR / f"{name}.wav"),
                        text=text, speaker="Allison Smith", synthetic=False,
                        source="Asterisk core sounds (en), Debian asterisk-core-sounds-en-wav",
                        licence="CC-BY-SA-3.0", meta={"original_rate": 8000})
             for name, text in entries]
    return [c for c in clips if max_seconds is None or c.seconds <= max_seconds]


@lru_cache(maxsize=1)
def asterisk_transcripts() -> list[tuple[str, str]]:
    """``(prompt name, transcript)`` pairs that have a WAV, speech only, unique transcripts."""
    seen: set[str] = set()
    pairs = []
    with gzip.open(ASTERISK_TRANSCRIPTS, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    for line in sorted(lines):
        name, sep, text = line.partition(":")
        name, text = name.strip(), re.sub(r"\s*\[[^\]]*\]", "", text).strip()
        if not sep or line.startswith(";") or not text or re.fullmatch(r"\(.*\)", text):
            continue  # comments, tones ("[beep tone]"), silence ("(1 second of silence)")
        key = normalise_transcript(text)
        if key in seen or not (ASTERISK_DIR / f"{name}.wav").exists():
            continue
        seen.add(key)
        pairs.append((name, text))
    return pairs


def load_librivox() -> list[SpeechClip]:
    """Five read sentences from LibriVox (real speech, one male reader)."""
    transcript_file = LIBRIVOX_DIR / "transcription"
    if not transcript_file.exists():
        raise missing_asset("LibriVox test clips", "`apt-get install pocketsphinx-testdata`")
    clips = []
    for line in transcript_file.read_text().splitlines():
        match = re.fullmatch(r"<s>\s*(.*?)\s*</s>\s*\((.+)\)\s*", line.strip())
        if match:
            text, name = match.groups()
            clips.append(SpeechClip(
                clip_id=f"librivox/{name}", audio=read_wav(LIBRIVOX_DIR / f"{name}.wav"),
                text=text, speaker="LibriVox reader", synthetic=False,
                source="LibriVox Sense and Sensibility via Debian pocketsphinx-testdata",
                licence="public domain"))
    return clips


def normalise_transcript(text: str) -> str:
    """Lower case, punctuation removed, single spaces: the form used to compare transcripts."""
    return re.sub(r"\s+", " ", re.sub(r"[^a-z0-9' ]", " ", text.lower())).strip()


def _espeak(text: str, voice: str, rate: int) -> bytes:
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise missing_asset("espeak-ng", "`apt-get install espeak-ng`")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speech.wav"
        result = subprocess.run([exe, "-v", voice, "-s", str(rate), "-w", str(out), "--", text],
                                capture_output=True, check=False, timeout=60)
        wav = out.read_bytes() if out.exists() else b""
    if result.returncode != 0 or len(wav) <= 44:
        raise InvalidInputError(f"espeak-ng failed for voice {voice!r}: "
                                f"{result.stderr.decode(errors='replace').strip()}")
    return wav


def _describe(source: str | Path | bytes) -> str:
    return f"({len(source)} bytes)" if isinstance(source, bytes) else str(source)
