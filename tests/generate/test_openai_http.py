"""Tests for memlab.generate.openai_http against a local stand-in server."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memlab.generate import GeneratorError, OpenAIHTTPGenerator, chat_completions_url

ENV_VARS = (
    "MEMLAB_LLM_BASE_URL",
    "MEMLAB_LLM_MODEL",
    "MEMLAB_LLM_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
)


class FakeAPI:
    """Answers chat-completion requests; ``script`` lists one behaviour per request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: list[str] = []
        self.reply = "a hypothetical answer"

    def behaviour(self) -> str:
        return self.script.pop(0) if self.script else "ok"


@pytest.fixture()
def api() -> Iterator[tuple[FakeAPI, str]]:
    state = FakeAPI()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            state.requests.append(
                {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
            )
            action = state.behaviour()
            if action == "sleep":
                time.sleep(2.0)
                return
            if action == "500":
                self._send(500, {"error": "overloaded"})
            elif action == "401":
                self._send(401, {"error": f"bad key {self.headers.get('Authorization')}"})
            elif action == "garbage":
                self._send(200, {"unexpected": True})
            else:
                reply = {"choices": [{"message": {"role": "assistant", "content": state.reply}}]}
                self._send(200, reply)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_returns_text_and_sends_expected_request(api: tuple[FakeAPI, str]) -> None:
    state, url = api
    gen = OpenAIHTTPGenerator(base_url=f"{url}/v1", model="test-model", api_key="sk-test")
    text = gen.generate("hello", max_new_tokens=16, temperature=0, seed=3)
    assert text == "a hypothetical answer"
    assert state.requests == [
        {
            "path": "/v1/chat/completions",
            "auth": "Bearer sk-test",
            "body": {
                "model": "test-model",
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 16,
                "temperature": 0.0,
                "seed": 3,
                "stream": False,
            },
        }
    ]


def test_settings_come_from_env_at_call_time(
    api: tuple[FakeAPI, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    state, url = api
    gen = OpenAIHTTPGenerator()
    monkeypatch.setenv("MEMLAB_LLM_BASE_URL", url)
    monkeypatch.setenv("MEMLAB_LLM_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fallback")
    assert gen.model_id == "env-model"
    assert gen.generate("hi") == "a hypothetical answer"
    monkeypatch.setenv("MEMLAB_LLM_API_KEY", "sk-memlab")
    gen.generate("hi")
    assert [r["path"] for r in state.requests] == ["/v1/chat/completions"] * 2
    assert [r["auth"] for r in state.requests] == ["Bearer sk-fallback", "Bearer sk-memlab"]
    assert state.requests[0]["body"]["model"] == "env-model"


def test_no_api_key_sends_no_authorization(api: tuple[FakeAPI, str]) -> None:
    state, url = api
    OpenAIHTTPGenerator(base_url=url, model="m").generate("hi")
    assert state.requests[0]["auth"] is None


def test_openai_base_url_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://fallback:1/v1")
    assert OpenAIHTTPGenerator().resolved_base_url() == "http://fallback:1/v1"
    monkeypatch.setenv("MEMLAB_LLM_BASE_URL", "http://first:2")
    assert OpenAIHTTPGenerator().resolved_base_url() == "http://first:2"
    assert OpenAIHTTPGenerator(base_url="http://arg:3").resolved_base_url() == "http://arg:3"


def test_default_base_url_is_openai() -> None:
    assert OpenAIHTTPGenerator().resolved_base_url() == "https://api.openai.com/v1"


def test_connection_refused_names_url() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    gen = OpenAIHTTPGenerator(base_url=url, model="m", max_retries=2, backoff=0.0)
    with pytest.raises(GeneratorError, match=r"after 3 attempt\(s\): cannot reach") as info:
        gen.generate("hi")
    assert f"{url}/v1/chat/completions" in str(info.value)


def test_slow_server_times_out(api: tuple[FakeAPI, str]) -> None:
    state, url = api
    state.script = ["sleep"]
    gen = OpenAIHTTPGenerator(base_url=url, model="m", timeout=0.5, max_retries=0)
    with pytest.raises(GeneratorError, match=r"did not answer within 0\.5 s") as info:
        gen.generate("hi")
    assert f"{url}/v1/chat/completions" in str(info.value)
    assert len(state.requests) == 1


def test_server_error_is_retried(api: tuple[FakeAPI, str]) -> None:
    state, url = api
    state.script = ["500"]
    gen = OpenAIHTTPGenerator(base_url=url, model="m", max_retries=1, backoff=0.0)
    assert gen.generate("hi") == "a hypothetical answer"
    assert len(state.requests) == 2


def test_client_error_is_not_retried_and_key_is_masked(api: tuple[FakeAPI, str]) -> None:
    state, url = api
    state.script = ["401"]
    gen = OpenAIHTTPGenerator(base_url=url, model="m", api_key="sk-secret", backoff=0.0)
    with pytest.raises(GeneratorError, match="HTTP 401") as info:
        gen.generate("hi")
    assert "sk-secret" not in str(info.value)
    assert "Bearer ***" in str(info.value)
    assert len(state.requests) == 1


def test_malformed_response(api: tuple[FakeAPI, str]) -> None:
    state, url = api
    state.script = ["garbage"]
    with pytest.raises(GeneratorError, match=r"without choices\[0\]\.message\.content"):
        OpenAIHTTPGenerator(base_url=url, model="m").generate("hi")


def test_missing_model_is_reported() -> None:
    gen = OpenAIHTTPGenerator(base_url="http://127.0.0.1:9")
    with pytest.raises(GeneratorError, match="MEMLAB_LLM_MODEL"):
        gen.generate("hi")


def test_bad_base_url() -> None:
    with pytest.raises(GeneratorError, match="must be http"):
        OpenAIHTTPGenerator(base_url="ftp://x", model="m").generate("hi")


def test_repr_hides_api_key() -> None:
    text = repr(OpenAIHTTPGenerator(model="m", api_key="sk-secret"))
    assert "sk-secret" not in text
    assert "api_key='***'" in text


@pytest.mark.parametrize(
    ("base", "endpoint"),
    [
        ("http://h:8000/v1", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1/", "http://h:8000/v1/chat/completions"),
        ("http://h:8000", "http://h:8000/v1/chat/completions"),
        ("https://h/v1/chat/completions", "https://h/v1/chat/completions"),
    ],
)
def test_chat_completions_url(base: str, endpoint: str) -> None:
    assert chat_completions_url(base) == endpoint


def test_an_attempt_error_survives_pickling() -> None:
    import pickle

    from memlab.generate.openai_http import _AttemptError

    back = pickle.loads(pickle.dumps(_AttemptError(True, "HTTP 503")))
    assert (type(back), str(back), back.retryable) == (_AttemptError, "HTTP 503", True)
