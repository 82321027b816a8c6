"""An opt-in LLM judge: asks an OpenAI-compatible chat server whether a cached answer fits.

:class:`JudgeVerifier` sends the cached question and the new one, with the fixed
:data:`SYSTEM_PROMPT` / :data:`USER_PROMPT`, to ``POST {base_url}/chat/completions`` and reads
a one-word answer, yes or no. When the server returns ``logprobs`` for that word, the
probability is P(yes) / (P(yes) + P(no)) over the word's ``top_logprobs``; otherwise it is
:data:`YES_PROBABILITY` or :data:`NO_PROBABILITY`. It compares the two questions only: neither
the conversation history nor images nor the cached answer itself are sent. Verdicts are kept
per (query text, cached question) in a bounded LRU; failures are not kept.

A server that answers an HTTP error, does not answer within ``timeout_s``, cannot be reached
or answers something that is not yes or no raises :class:`~mmcache.errors.VerifierError`
whose message says what to check. :func:`judge_from_env` builds one from the
``MMCACHE_JUDGE_*`` environment variables; it is the ``"judge"`` entry of
:data:`mmcache.verify.VERIFIERS`. Standard library only: nothing to install.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import threading
import urllib.error
import urllib.request
from collections import OrderedDict
from typing import Any, Mapping

from mmcache.errors import ConfigError, VerifierError
from mmcache.types import Entry, Query

#: The environment variables :func:`judge_from_env` reads (the API key is optional).
ENV_URL = "MMCACHE_JUDGE_URL"
ENV_MODEL = "MMCACHE_JUDGE_MODEL"
ENV_API_KEY = "MMCACHE_JUDGE_API_KEY"

#: P(answer fits) for a plain "yes" / "no" when the server returns no logprobs (round
#: numbers, not fitted: a judge is not taken as certain either way).
YES_PROBABILITY = 0.95
NO_PROBABILITY = 0.05
#: Verdicts a verifier keeps by default, least recently used dropped first.
CACHE_SIZE = 1024
#: Alternatives to the answer's word the server is asked to list with their logprobs.
TOP_LOGPROBS = 5

SYSTEM_PROMPT = ("You check a cache of answers. Reply with exactly one word: yes or no.")
USER_PROMPT = ("An answer was written for this question:\n{cached}\n\n"
               "Is that answer also correct for this question?\n{query}\n\n"
               "Reply yes or no.")

_WORD = re.compile(r"[a-z]+")


class JudgeVerifier:
    """A verifier (:class:`mmcache.verify.Verifier`) that asks the chat model ``model`` served
    at ``base_url`` (e.g. ``http://localhost:8000/v1``) whether the entry's answer is right for
    the query; ``api_key`` is sent as a bearer token. ``logprobs=False`` stops asking for
    logprobs, for servers that refuse them. ``timeout_s`` bounds each wait on the server
    (connecting, then each read), not the whole call. ``cache_size`` verdicts are kept. With no
    text on either side there is nothing to ask: 1.0. See the module doc."""

    name = "judge"

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 timeout_s: float = 10.0, *, logprobs: bool = True,
                 cache_size: int = CACHE_SIZE) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"judge base_url must be an http:// or https:// URL (the server's "
                              f"OpenAI-compatible root, e.g. http://localhost:8000/v1); got "
                              f"{base_url!r}")
        if not isinstance(model, str) or not model:
            raise ConfigError(f"judge model must name the model the server serves; got {model!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or \
                not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ConfigError(f"judge timeout_s must be a positive number of seconds; got "
                              f"{timeout_s!r}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
            raise ConfigError(f"judge cache_size must be a positive integer; got {cache_size!r}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.timeout_s = float(timeout_s)
        self.logprobs = logprobs
        self._api_key = api_key
        self._cache_size = cache_size
        self._verdicts: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"JudgeVerifier({self.url!r}, model={self.model!r})"

    def __call__(self, query: Query, entry: Entry) -> float:
        """P(``entry``'s answer is right for ``query``): the judge's verdict on ``query.text``
        against ``entry.question``, from the LRU when it was asked before."""
        if query.text is None or entry.question is None:
            return 1.0
        key = (query.text, entry.question)
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
        probability = self.judge(query.text, entry.question)   # outside the lock: slow
        with self._lock:
            self._verdicts[key] = probability
            self._verdicts.move_to_end(key)
            while len(self._verdicts) > self._cache_size:
                self._verdicts.popitem(last=False)
        return probability

    def judge(self, query_text: str, cached_text: str) -> float:
        """P(an answer written for ``cached_text`` is right for ``query_text``), asked of the
        server now (no LRU); VerifierError when it fails or answers neither yes nor no."""
        return _probability(self._post(self._request_body(query_text, cached_text)),
                            self._where())

    def _request_body(self, query_text: str, cached_text: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": USER_PROMPT.format(cached=cached_text,
                                                               query=query_text)}],
            "max_tokens": 1, "temperature": 0}
        if self.logprobs:
            body.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
        return body

    def _where(self) -> str:
        return f"judge {self.model!r} at {self.url}"

    def _post(self, body: Mapping[str, Any]) -> Any:
        """The server's JSON answer to ``body``; VerifierError saying what to check otherwise."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(),
                                         headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode("utf-8", "replace")
            raise VerifierError(
                f"{self._where()} answered HTTP {exc.code} {exc.reason}: {detail!r}; check the "
                f"base URL ({ENV_URL}: the root that serves /chat/completions, e.g. "
                f"http://localhost:8000/v1), the model name ({ENV_MODEL}), the API key "
                f"({ENV_API_KEY}) and the server's log") from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise VerifierError(
                    f"{self._where()} did not answer within timeout_s={self.timeout_s:g} s; "
                    "check that the server is not overloaded, or raise timeout_s") from exc
            raise VerifierError(
                f"cannot reach {self._where()}: {reason}; check that the server is running and "
                f"that the base URL ({ENV_URL}) names its host and port") from exc
        try:
            return json.loads(raw)
        except ValueError as exc:   # not UTF-8, or not JSON
            raise VerifierError(
                f"{self._where()} answered something that is not JSON: {raw[:200]!r}; check "
                f"that the base URL ({ENV_URL}) is an OpenAI-compatible API root") from exc


def judge_from_env(environ: Mapping[str, str] | None = None) -> JudgeVerifier:
    """The judge configured by ``MMCACHE_JUDGE_URL``, ``MMCACHE_JUDGE_MODEL`` and (optional)
    ``MMCACHE_JUDGE_API_KEY`` in ``environ`` (default: the process environment); ConfigError
    naming the variables that are not set."""
    env = os.environ if environ is None else environ
    missing = [name for name in (ENV_URL, ENV_MODEL) if not env.get(name)]
    if missing:
        raise ConfigError(
            f"the 'judge' verifier needs {' and '.join(missing)} set: {ENV_URL} is the "
            f"OpenAI-compatible server's root (e.g. http://localhost:8000/v1), {ENV_MODEL} the "
            f"model it serves; {ENV_API_KEY} is optional")
    return JudgeVerifier(env[ENV_URL], env[ENV_MODEL], api_key=env.get(ENV_API_KEY) or None)


def _probability(payload: Any, where: str) -> float:
    """P(yes) from a chat-completions answer: from the logprobs of its first token when they
    name yes or no, else from its text's first word; VerifierError when neither decides."""
    try:
        choice = payload["choices"][0]
        text = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise VerifierError(f"{where} answered JSON without choices[0].message.content: "
                            f"{json.dumps(payload)[:200]}; check that it is an OpenAI-compatible "
                            "chat-completions server") from None
    from_logprobs = _logprob_yes(choice.get("logprobs"))
    if from_logprobs is not None:
        return from_logprobs
    word = _word(text)
    if word == "yes":
        return YES_PROBABILITY
    if word == "no":
        return NO_PROBABILITY
    raise VerifierError(f"{where} answered {text!r}, not yes or no; use an instruction-following "
                        "chat model")


def _logprob_yes(logprobs: Any) -> float | None:
    """P(yes) / (P(yes) + P(no)) over the first token's alternatives; None when the server sent
    no usable logprobs or none of the alternatives is yes or no."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        return None
    first = content[0]
    mass = {"yes": 0.0, "no": 0.0}
    for alternative in first.get("top_logprobs") or [first]:
        if not isinstance(alternative, dict):
            continue
        word, logprob = _word(alternative.get("token")), alternative.get("logprob")
        if word in mass and isinstance(logprob, (int, float)) and not isinstance(logprob, bool) \
                and logprob <= 0:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


def _word(text: Any) -> str:
    """The first word of ``text``, lower-cased ("" when there is none or it is not a string)."""
    match = _WORD.search(text.lower()) if isinstance(text, str) else None
    return match.group() if match else ""
