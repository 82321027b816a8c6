"""Value types of the public API: :class:`Query`, :class:`VideoClip`, :class:`Hit`, :class:`Entry`,
and the names of the vector channels and modality sets a cache keeps apart.

It also holds the renderings every object's notebook display shares (the bottom of the
package, so the cache, the simulator, the scheduler and the lab use one): :func:`html_table`,
:func:`html_fields` and :func:`html_card` build small HTML tables with every value escaped,
:func:`fmt`, :func:`fmt_bytes`, :func:`fmt_seconds` and :func:`preview` format cells,
:func:`redacted_url` hides a store URL's password, and :func:`safe_display` keeps a
``__repr__`` or ``_repr_html_`` from ever raising. :class:`Limits` is the largest query a
cache accepts.
"""

from __future__ import annotations

import html
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit, urlunsplit

import numpy as np

#: Modalities a query may carry as raw input, each with its own encoder. A video clip
#: (:class:`VideoClip`) is keyframes (image encoder) plus its audio track (audio encoder).
MODALITIES: tuple[str, ...] = ("text", "image", "audio")
#: The vector channel of a clip's keyframes (their mean in the image encoder's space).
VIDEO = "video"
#: Every vector channel an entry may carry: the modalities, and a clip's keyframes (its track
#: is the ``audio`` channel). A clip's set (``video`` + ``audio``) is indexed apart from a
#: still image + audio, so neither ever matches the other.
CHANNELS: tuple[str, ...] = MODALITIES + (VIDEO,)

#: Sample rate every audio array must have unless the query declares another one.
AUDIO_SAMPLE_RATE = 16_000


@dataclass
class Limits:
    """The largest query parts and values a cache accepts (config section ``limits``): a
    larger one is an InvalidInputError before anything is decoded, encoded or stored."""

    text_chars: int = 100_000
    image_pixels: int = 40_000_000
    audio_seconds: float = 600.0
    audio_rate: int = 384_000
    video_frames: int = 256
    context_chars: int = 100_000
    value_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class VideoClip:
    """A video clip: its keyframes in order (``frames``: a list or tuple of images as
    :attr:`Query.image` takes them, or an ``N×H×W×C`` uint8 array) and its audio track
    (``audio``: as :attr:`Query.audio` takes it, at the query's ``audio_rate``)."""

    frames: Sequence[bytes | np.ndarray] | np.ndarray
    audio: np.ndarray | bytes


@dataclass(frozen=True)
class Query:
    """One cache request.

    ``text`` is a string; ``image`` is encoded image bytes (PNG/JPEG/...) or an
    ``H×W[×C]`` uint8 array; ``audio`` is a 1-D float32 array at
    ``audio_rate`` Hz (16 kHz by default). ``video`` is a :class:`VideoClip` (keyframes and
    track); a clip query may carry text, but no still ``image`` or ``audio`` (its track is
    the clip's). ``embeddings`` maps a channel (:data:`CHANNELS`) to a precomputed 1-D
    float32 vector, which the cache uses instead of its encoders: for a clip, ``"video"``
    is its keyframes' vector and ``"audio"`` its track's.
    ``scope`` is the isolation namespace (tenant, model, system-prompt hash, ...):
    required, and entries never match across scopes. ``context`` is the conversation
    before ``text`` (the last user message): ``[{"role": ..., "content": ...}, ...]``,
    oldest first; its latest turns are part of the hit decision (:mod:`mmcache.context`).
    """

    text: str | None = None
    image: bytes | np.ndarray | None = None
    audio: np.ndarray | None = None
    video: VideoClip | None = None
    embeddings: Mapping[str, np.ndarray] = field(default_factory=dict)
    scope: str | None = None
    audio_rate: int = AUDIO_SAMPLE_RATE
    ground_truth: Any = None  # optional label (e.g. intent id) used only for false-hit metrics
    context: Sequence[Mapping[str, str]] = ()

    def modalities(self) -> tuple[str, ...]:
        """The channels present in this query, as raw input or as embedding (a clip: ``video``
        and ``audio``, its track)."""
        present = {"text": self.text is not None, "image": self.image is not None,
                   "audio": self.audio is not None or self.video is not None,
                   VIDEO: self.video is not None}
        for name in self.embeddings:
            present[name] = True
        return tuple(m for m in CHANNELS if present.get(m)) + tuple(
            sorted(m for m in present if m not in CHANNELS and present[m]))


def modality_set_name(channels: Iterable[str]) -> str:
    """The name of a set of channels: its modalities joined by ``+`` (``"text+image"``), a
    clip's keyframes and track as ``video`` (``"video"``, ``"text+video"``)."""
    present = set(channels)
    if VIDEO in present:
        present.discard("audio")
    return "+".join(m for m in CHANNELS if m in present)


def modality_set_channels(name: str) -> frozenset[str]:
    """The channels of a modality set named as :func:`modality_set_name` names it (any order
    of its ``+`` parts; ``video`` brings its track); ValueError for a name of no set."""
    parts = [p.strip() for p in name.split("+")] if isinstance(name, str) else [name]
    channels = set(parts) | ({"audio"} if VIDEO in parts else set())
    if not all(p in CHANNELS for p in parts) or len(set(parts)) != len(parts) or \
            {"image", VIDEO} <= channels:
        raise ValueError(f"{name!r} names no modality set: join some of {list(MODALITIES)} with "
                         "'+', or write 'video' (a clip: keyframes and track) with or without "
                         "'text'")
    return frozenset(channels)


#: Every modality set a query can have, by name: each non-empty set of :data:`MODALITIES`,
#: and a clip with or without text.
SET_NAMES: tuple[str, ...] = tuple(
    modality_set_name(ms) for r in range(1, len(MODALITIES) + 1)
    for ms in itertools.combinations(MODALITIES, r)) + (VIDEO, f"text+{VIDEO}")


def is_clip_set(name: str) -> bool:
    """Whether the modality set called ``name`` is a video clip's (with or without text)."""
    return VIDEO in name.split("+")


def is_multimodal(name: str) -> bool:
    """Whether the modality set called ``name`` has two or more modalities (a clip has two:
    keyframes and track)."""
    return "+" in name or is_clip_set(name)


@dataclass(frozen=True)
class Hit:
    """A cache answer: the stored value, where it came from and how close it was.

    ``similarity`` is the smallest per-modality cosine similarity between the
    query and the entry (1.0 for an exact hit). ``freshness`` is ``"fresh"``,
    ``"stale-while-revalidate"`` or ``"stale-if-error"``. ``explored`` marks a miss: the
    threshold rule chose to explore this candidate (the ``vcache`` rule does); answer the
    query from the model, compare with ``value``, and label the candidate with
    ``TieredCache.feedback(hit, same)``. No other rule ever returns one.
    """

    value: Any
    tier: str
    similarity: float
    entry_id: str
    freshness: str = "fresh"
    similarities: Mapping[str, float] = field(default_factory=dict)
    #: The serial of the lookup that served it, in the cache that served it (for feedback).
    lookup: int | None = None
    #: The verifier's score (probability that the entry answers the query) when the verifier
    #: judged this hit; a served hit passed ``thresholds.verifier_min``. None: not judged.
    verdict: float | None = None
    #: The rule explored this candidate instead of serving it: a miss to label (see above).
    explored: bool = False

    def __repr__(self) -> str:
        return safe_display(self._plain, self)

    def _repr_html_(self) -> str:
        return safe_display(self._html, self, as_html=True)

    def _plain(self) -> str:
        sims = ", ".join(f"{m}={fmt(s)}" for m, s in self.similarities.items())
        notes = ("" if self.verdict is None else f", verdict={fmt(self.verdict)}") + \
            (", explored (a miss to label)" if self.explored else "")
        return (f"Hit(tier={self.tier!r}, similarity={fmt(self.similarity)}"
                f"{f' [{sims}]' if sims else ''}{notes}, freshness={self.freshness!r}, "
                f"value={preview(self.value, 40)}, entry_id={_short_id(self.entry_id)})")

    def _html(self) -> str:
        return html_card("Hit", html_fields([
            ("value", preview(self.value)),
            ("tier", self.tier),
            ("similarity (smallest over modalities)", self.similarity),
            *((f"similarity: {m}", s) for m, s in self.similarities.items()),
            ("verifier verdict", "not judged" if self.verdict is None else self.verdict),
            ("explored (a miss to label, not served)", self.explored),
            ("freshness", self.freshness),
            ("entry id", _short_id(self.entry_id)),
            ("lookup", self.lookup)]))


#: Per-entry signals a put may give the tiers' eviction policies (``TieredCache.put(hints=)``):
#: ``cost``, the miss cost the entry saves (e.g. seconds of inference; finite, > 0), and
#: ``entropy``, the attention entropy of its answer (finite, >= 0).
HINT_NAMES: tuple[str, ...] = ("cost", "entropy")


@dataclass
class Entry:
    """A stored entry as the tiers keep it; ``hints``: its policy signals (:data:`HINT_NAMES`)."""

    entry_id: str
    scope: str
    exact_key: str
    value: Any
    embeddings: dict[str, np.ndarray]
    size: int
    created_at: float
    expires_at: float | None = None
    ground_truth: Any = None
    hints: dict[str, float] = field(default_factory=dict)
    #: The shared store's sequence number of the write that stored this entry (None: not
    #: stored there); a private copy of another version is stale.
    version: int | None = None
    #: What the entry was asked: the query's text and its relevant conversation turns
    #: (``((role, content), ...)``, :mod:`mmcache.context`), for verifiers.
    question: str | None = None
    context: tuple[tuple[str, str], ...] = ()
    #: The unit context vector of those turns (None: no context, or no text encoder).
    context_vector: np.ndarray | None = None
    #: What the entry keeps of the query's image for verifiers
    #: (:func:`mmcache.verify.image_check.image_fingerprint`; None: no image).
    image_fingerprint: bytes | None = None


# -- display: what every object's notebook display shares -------------------------------------
#: Characters of a value that a preview shows before it is cut with "…".
PREVIEW_CHARS = 80
#: Rows an HTML table shows before it says how many more there are.
MAX_ROWS = 50


def fmt(value: Any, digits: int = 4) -> str:
    """A cell as text: ``—`` for None and nan, ``∞`` for infinity, ints with thousands
    separators, other reals to ``digits`` significant digits (an exponent only below 0.001 or
    from 10⁷), anything else ``str``."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return "—"
        if math.isinf(v):
            return "∞" if v > 0 else "-∞"
        if v == 0 or not 1e-3 <= abs(v) < 1e7:
            text = f"{v:.{digits}g}"
        else:  # no exponent in the everyday range: 1,040 ms, not 1.04e+03
            decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
            text = f"{v:,.{decimals}f}"
            text = text.rstrip("0").rstrip(".") if "." in text else text
        return text + ".0" if v.is_integer() and not any(c in text for c in ".e") else text
    return str(value)


def fmt_bytes(n: Any) -> str:
    """A byte count for people: ``512 B``, ``1.5 kB``, ``12 MB`` (None: unlimited, ``∞``)."""
    if n is None:
        return "∞"
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"  # pragma: no cover - the loop returns


def fmt_seconds(s: Any) -> str:
    """A duration for people: ``250 µs``, ``3.1 ms``, ``2.5 s`` (``—`` for nan or None)."""
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "—"
    s = float(s)
    if math.isinf(s):
        return "∞"
    for scale, unit in ((1e-6, "µs"), (1e-3, "ms")):
        if abs(s) < scale * 1000:
            return f"{s / scale:.3g} {unit}"
    return f"{s:.3g} s"


def preview(value: Any, limit: int = PREVIEW_CHARS) -> str:
    """One line showing a stored value: a string quoted, bytes by their length and first
    bytes, anything else by its ``repr``; cut at ``limit`` characters with ``…``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        text = f"<{len(data):,} bytes> {data[:16]!r}"
    else:
        text = repr(value)
    text = " ".join(text.split())  # one line
    return text if len(text) <= limit else text[:max(1, limit - 1)] + "…"


def _short_id(entry_id: str, keep: int = 12) -> str:
    """An entry id (a content hash) cut to its first ``keep`` characters."""
    entry_id = str(entry_id)
    return entry_id if len(entry_id) <= keep else entry_id[:keep] + "…"


def _cell(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else fmt(value), quote=True)


def html_table(header: Sequence[str], rows: Iterable[Sequence[Any]], *,
               caption: str | None = None, max_rows: int = MAX_ROWS) -> str:
    """An HTML table of ``rows`` under ``header`` (every cell escaped; a string as it is, any
    other value through :func:`fmt`), at most ``max_rows`` rows and a last one saying how
    many more there are."""
    rows = list(rows)
    shown = rows[:max_rows]
    head = "".join(f"<th style='text-align:left'>{_cell(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td style='text-align:left'>{_cell(v)}</td>" for v in row)
                   + "</tr>" for row in shown)
    if len(rows) > len(shown):
        body += (f"<tr><td colspan='{max(1, len(header))}'>… {len(rows) - len(shown):,} more"
                 "</td></tr>")
    cap = "" if caption is None else \
        f"<caption style='text-align:left;font-weight:bold;white-space:nowrap'>{_cell(caption)}" \
        "</caption>"
    return f"<table class='mmcache-table'>{cap}<thead><tr>{head}</tr></thead>" \
        f"<tbody>{body}</tbody></table>"


def html_fields(pairs: Iterable[tuple[str, Any]], *, caption: str | None = None) -> str:
    """A two-column HTML table of ``(name, value)`` pairs (escaped as :func:`html_table`)."""
    return html_table(("field", "value"), pairs, caption=caption, max_rows=10 * MAX_ROWS)


def html_card(title: str, *sections: str, note: str | None = None) -> str:
    """One object's display: its ``title`` (escaped), an optional ``note`` (escaped) and its
    ``sections`` (HTML that :func:`html_table` or :func:`html_fields` built)."""
    parts = [f"<div style='font-weight:bold;font-size:1.15em'>{html.escape(title)}</div>"]
    if note:
        parts.append(f"<div><em>{html.escape(note)}</em></div>")
    parts += [s for s in sections if s]
    return "<div class='mmcache-display'>" + "".join(parts) + "</div>"


def safe_display(render: Callable[[], str], obj: Any, *, as_html: bool = False) -> str:
    """``render()``, or, if it raises, a one-line stand-in naming the object's type and the
    error's type: a display never raises (a notebook must show the object whatever its state)."""
    try:
        return render()
    except Exception as exc:  # noqa: BLE001 - a repr must never raise
        text = f"{type(obj).__name__}(<display failed: {type(exc).__name__}>)"
        return f"<pre>{html.escape(text)}</pre>" if as_html else text


def redacted_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for displays and logs)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        host = f"[{host}]" if ":" in host else host
        port = f":{parts.port}" if parts.port is not None else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:  # not a URL that urlsplit reads: show nothing of it
        return "<url>"
