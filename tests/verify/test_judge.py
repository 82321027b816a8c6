"""The LLM-judge verifier against a stub OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, Iterator

import numpy as np
import pytest

import mmcache
from mmcache import Query
from mmcache.errors import ConfigError, VerifierError
from mmcache.verify import make_verifier
from mmcache.verify.judge import (ENV_API_KEY, ENV_MODEL, ENV_URL, NO_PROBABILITY,
                                  YES_PROBABILITY, JudgeVerifier, judge_from_env)

from cache_helpers import snapshot, unit


class Stub:
    """What the stub server answers next (``status``, ``body``, after ``delay`` s) and the
    requests it got (``(path, headers, parsed body)``)."""

    def __init__(self) -> None:
        self.status, self.body, self.delay = 200, b"", 0.0
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.released = threading.Event()

    def answer(self, text: str, top: list[tuple[str, float]] | None = None) -> None:
        """Answer a chat completion whose message is ``text``; ``top``: (token, probability)
        alternatives sent as logprobs."""
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length",
                                  "message": {"role": "assistant", "content": text}}
        if top is not None:
            choice["logprobs"] = {"content": [{
                "token": text, "logprob": math.log(top[0][1]),
                "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in top]}]}
        self.status, self.body = 200, json.dumps({"object": "chat.completion",
                                                  "choices": [choice]}).encode()


@pytest.fixture
def stub(monkeypatch) -> Iterator[Stub]:
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    state = Stub()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            state.requests.append((self.path, dict(self.headers), json.loads(raw)))
            if state.delay:
                state.released.wait(state.delay)
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            self.wfile.write(state.body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                              daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    yield state
    state.released.set()
    server.shutdown()
    server.server_close()


def judge(stub: Stub, **kw: Any) -> JudgeVerifier:
    return JudgeVerifier(stub.url, "stub-model", **kw)


def ask(verifier: JudgeVerifier, query: str | None = "How do I reset my password?",
        cached: str | None = "How can I reset my password?") -> float:
    return verifier(SimpleNamespace(text=query), SimpleNamespace(question=cached))


def test_logprobs_give_p_yes_and_the_request_carries_model_questions_and_key(stub):
    stub.answer("Yes", top=[("Yes", 0.6), ("No", 0.2), (" yes", 0.1), ("Maybe", 0.05)])
    assert ask(judge(stub, api_key="sk-test")) == pytest.approx(0.7 / 0.9)
    [(path, headers, body)] = stub.requests
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body["model"] == "stub-model"
    prompt = " ".join(m["content"] for m in body["messages"])
    assert "How do I reset my password?" in prompt and "How can I reset my password?" in prompt
    assert body["logprobs"] is True and body["top_logprobs"] > 1


@pytest.mark.parametrize("text, expected", [
    ("Yes", YES_PROBABILITY), (" yes.", YES_PROBABILITY), ("No", NO_PROBABILITY),
    ("no, it is not", NO_PROBABILITY)])
def test_without_logprobs_the_word_decides(stub, text, expected):
    stub.answer(text)
    assert ask(judge(stub)) == expected
    assert "Authorization" not in stub.requests[0][1]


def test_logprobs_naming_neither_word_fall_back_to_the_text(stub):
    stub.answer("No", top=[("Maybe", 0.5), ("Perhaps", 0.3)])
    assert ask(judge(stub)) == NO_PROBABILITY


def test_logprobs_can_be_left_out_of_the_request(stub):
    stub.answer("yes")
    assert ask(judge(stub, logprobs=False)) == YES_PROBABILITY
    assert "logprobs" not in stub.requests[0][2] and "top_logprobs" not in stub.requests[0][2]


@pytest.mark.parametrize("body, match", [
    (b"<html>gateway says hi</html>", "not JSON"),
    (b"\xff\xfe\x00garbage", "not JSON"),
    (json.dumps({"error": "no choices"}).encode(), "choices"),
    (json.dumps({"choices": [{"message": {"content": "Maybe"}}]}).encode(), "not yes or no"),
    (json.dumps({"choices": [{"message": {"content": None}}]}).encode(), "not yes or no"),
])
def test_an_unparseable_answer_is_a_verifier_error(stub, body, match):
    stub.body = body
    with pytest.raises(VerifierError, match=match):
        ask(judge(stub))


def test_an_http_error_is_a_verifier_error_saying_what_to_check(stub):
    stub.status, stub.body = 500, b'{"error": "model crashed"}'
    with pytest.raises(VerifierError, match="HTTP 500") as err:
        ask(judge(stub))
    assert "model crashed" in str(err.value) and ENV_URL in str(err.value)


def test_a_slow_server_is_a_verifier_error_after_timeout_s(stub):
    stub.answer("yes")
    stub.delay = 5.0
    with pytest.raises(VerifierError, match="timeout_s=0.05"):
        ask(judge(stub, timeout_s=0.05))


def test_a_refused_connection_is_a_verifier_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(VerifierError, match="cannot reach .*is running"):
        ask(JudgeVerifier(f"http://127.0.0.1:{port}/v1", "m", timeout_s=2.0))


def test_no_text_on_either_side_is_no_evidence_against_and_asks_nothing(stub):
    verifier = judge(stub)
    assert ask(verifier, query=None) == 1.0 and ask(verifier, cached=None) == 1.0
    assert stub.requests == []


def test_verdicts_are_kept_per_pair_in_a_bounded_lru_and_failures_are_not(stub):
    verifier = judge(stub, cache_size=2)
    stub.status, stub.body = 500, b"down"
    with pytest.raises(VerifierError):
        ask(verifier, "a", "b")
    stub.answer("yes")
    assert ask(verifier, "a", "b") == YES_PROBABILITY           # asked again after the failure
    stub.answer("no")
    assert ask(verifier, "a", "b") == YES_PROBABILITY           # kept
    assert ask(verifier, "c", "b") == NO_PROBABILITY            # another pair: asked
    assert len(stub.requests) == 3
    ask(verifier, "a", "b")                                     # "a" used last: "c" is oldest
    ask(verifier, "d", "b")                                     # evicts ("c", "b")
    ask(verifier, "a", "b")
    assert len(stub.requests) == 4
    ask(verifier, "c", "b")
    assert len(stub.requests) == 5


@pytest.mark.parametrize("kw, match", [
    ({"base_url": "localhost:8000/v1"}, "http"), ({"model": ""}, "model"),
    ({"timeout_s": 0}, "timeout_s"), ({"cache_size": 0}, "cache_size")])
def test_bad_settings_are_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        JudgeVerifier(**{"base_url": "http://localhost:8000/v1", "model": "m", **kw})


def test_the_registry_name_judge_needs_its_environment_variables(monkeypatch):
    for var in (ENV_URL, ENV_MODEL, ENV_API_KEY):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match=f"{ENV_URL} and {ENV_MODEL}"):
        make_verifier("judge")
    with pytest.raises(ConfigError, match=ENV_MODEL) as err:
        judge_from_env({ENV_URL: "http://localhost:8000/v1"})
    assert f"{ENV_URL} and" not in str(err.value)
    monkeypatch.setenv(ENV_URL, "http://localhost:8000/v1/")
    monkeypatch.setenv(ENV_MODEL, "judge-model")
    verifier = make_verifier("judge")
    assert isinstance(verifier, JudgeVerifier)
    assert verifier.url == "http://localhost:8000/v1/chat/completions"
    assert verifier.model == "judge-model"


# -- inside a TieredCache -------------------------------------------------------------------------
DIM = 16
RNG = np.random.default_rng(11)


BASE = unit(RNG.normal(size=DIM))
NEAR = unit(BASE + 0.25 * unit(RNG.normal(size=DIM)))   # cos ≈ 0.97: a semantic hit
BAND = {"rule": "static", "delta": {"text": 0.1}, "verifier_band": 0.5, "verifier_min": 0.5}


def cache_with(**kw: Any) -> mmcache.TieredCache:
    cache = mmcache.TieredCache({"thresholds": {**BAND, **kw.pop("thresholds", {})}}, **kw)
    cache.put(Query(text="stored question", embeddings={"text": BASE}, scope="s"), "answer")
    return cache


NEAR_QUERY = Query(text="near question", embeddings={"text": NEAR}, scope="s")


def test_a_judge_saying_no_vetoes_a_semantic_hit_and_yes_lets_it_through(stub):
    stub.answer("no")
    assert cache_with(verifier=judge(stub)).get(NEAR_QUERY) is None
    prompt = " ".join(m["content"] for m in stub.requests[0][2]["messages"])
    assert "near question" in prompt and "stored question" in prompt
    stub.answer("yes")
    hit = cache_with(verifier=judge(stub)).get(NEAR_QUERY)
    assert hit is not None and hit.value == "answer" and hit.verdict == YES_PROBABILITY


def test_a_cache_config_naming_judge_uses_the_server_and_its_logprobs(stub, monkeypatch):
    monkeypatch.setenv(ENV_URL, stub.url)
    monkeypatch.setenv(ENV_MODEL, "stub-model")
    stub.answer("Yes", top=[("Yes", 0.3), ("No", 0.7)])        # P(yes) 0.3 < verifier_min
    cache = cache_with(thresholds={"verifier": "judge"})
    assert isinstance(cache.verifier, JudgeVerifier)
    assert cache.get(NEAR_QUERY) is None
    stub.answer("No", top=[("No", 0.2), ("Yes", 0.8)])
    hit = cache_with(thresholds={"verifier": "judge"}).get(NEAR_QUERY)
    assert hit is not None and hit.verdict == pytest.approx(0.8)


def test_a_failing_judge_raises_from_get_and_changes_nothing(stub):
    stub.status, stub.body = 503, b"overloaded"
    cache = cache_with(verifier=judge(stub))
    before = snapshot(cache)
    with pytest.raises(VerifierError, match="HTTP 503"):
        cache.get(NEAR_QUERY)
    assert snapshot(cache) == before
