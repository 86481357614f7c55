"""Generator for any OpenAI-compatible ``/v1/chat/completions`` endpoint, over stdlib HTTP.

Works with the OpenAI API and with local servers that speak the same protocol (llama.cpp
server, vLLM, Ollama, LM Studio). Settings left as ``None`` are read from the environment at
call time: ``MEMLAB_LLM_BASE_URL`` (else ``OPENAI_BASE_URL``, else
``https://api.openai.com/v1``), ``MEMLAB_LLM_MODEL`` and ``MEMLAB_LLM_API_KEY`` (else
``OPENAI_API_KEY``; no key sends no ``Authorization`` header). The API key never appears in
``repr()`` or in error messages.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from memlab.generate.base import GeneratorError, generation_params, register_generator
from memlab.io import loads_json

__all__ = ["OpenAIHTTPGenerator", "chat_completions_url"]

_DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


def chat_completions_url(base_url: str) -> str:
    """Return the chat-completions endpoint for ``base_url``.

    ``http://host:8000/v1`` and ``http://host:8000`` both give
    ``http://host:8000/v1/chat/completions``; a URL already ending in ``/chat/completions`` is
    used as is.

    Args:
        base_url: Server base URL.

    Returns:
        The endpoint URL.

    Raises:
        ValueError: If the URL is not http(s) or has no host.
    """
    parsed = urllib.parse.urlsplit(base_url.strip())
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"LLM base URL must be http(s)://host[:port][/v1], got {base_url!r}")
    url = base_url.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return f"{url}/chat/completions"
    return f"{url}/v1/chat/completions"


class _AttemptError(Exception):
    """One failed request; ``retryable`` tells whether another attempt may succeed."""

    def __init__(self, retryable: bool, message: str) -> None:
        super().__init__(message)
        self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.retryable, self.args[0]))


def _redact(url: str) -> str:
    """Drop any user:password part of a URL."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    netloc = f"{host}:{parsed.port}" if parsed.port else host
    return urllib.parse.urlunsplit((parsed.scheme, netloc, parsed.path, parsed.query, ""))


@register_generator("openai")
class OpenAIHTTPGenerator:
    """OpenAI-compatible chat-completions client using ``urllib`` only.

    Args:
        base_url: Server base URL; ``None`` reads ``MEMLAB_LLM_BASE_URL`` / ``OPENAI_BASE_URL``.
        model: Model name sent in the request and used as ``model_id``; ``None`` reads
            ``MEMLAB_LLM_MODEL``.
        api_key: Bearer token; ``None`` reads ``MEMLAB_LLM_API_KEY`` / ``OPENAI_API_KEY``.
        timeout: Seconds allowed for connecting and for each read of one attempt.
        max_retries: Extra attempts after a connection error, a timeout or an HTTP status of
            408, 409, 429 or 5xx.
        backoff: Seconds to wait before the first retry; doubled for each further retry.
    """

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff

    def __repr__(self) -> str:
        key = "None" if self.api_key is None else "'***'"
        return (
            f"OpenAIHTTPGenerator(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key={key}, timeout={self.timeout!r}, max_retries={self.max_retries!r}, "
            f"backoff={self.backoff!r})"
        )

    def resolved_base_url(self) -> str:
        """Base URL from the argument, else the environment, else the OpenAI API."""
        if self.base_url is not None:
            return self.base_url
        return (
            os.environ.get("MEMLAB_LLM_BASE_URL")
            or os.environ.get("OPENAI_BASE_URL")
            or _DEFAULT_BASE_URL
        )

    def resolved_model(self) -> str:
        """Model name from the argument, else ``MEMLAB_LLM_MODEL``.

        Raises:
            GeneratorError: If neither is set.
        """
        model = self.model if self.model is not None else os.environ.get("MEMLAB_LLM_MODEL")
        if not model:
            raise GeneratorError("no LLM model configured: pass model=... or set MEMLAB_LLM_MODEL")
        return model

    def _resolved_api_key(self) -> str | None:
        if self.api_key is not None:
            return self.api_key
        return os.environ.get("MEMLAB_LLM_API_KEY") or os.environ.get("OPENAI_API_KEY") or None

    @property
    def model_id(self) -> str:
        """The resolved model name."""
        return self.resolved_model()

    def _validate(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"OpenAIHTTPGenerator.timeout must be > 0, got {self.timeout}")
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise TypeError(
                f"OpenAIHTTPGenerator.max_retries must be an int, got {self.max_retries!r}"
            )
        if self.max_retries < 0:
            raise ValueError(
                f"OpenAIHTTPGenerator.max_retries must be >= 0, got {self.max_retries}"
            )
        if self.backoff < 0:
            raise ValueError(f"OpenAIHTTPGenerator.backoff must be >= 0, got {self.backoff}")

    def _attempt(self, url: str, body: bytes, headers: dict[str, str]) -> str:
        """Send one request and return the reply text.

        Raises:
            _AttemptError: Carrying whether the failure is worth retrying.
        """
        shown = _redact(url)
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode("utf-8", "replace").strip()
            exc.close()
            raise _AttemptError(
                exc.code in _RETRY_STATUS, f"{shown} answered HTTP {exc.code}: {detail}"
            ) from None
        except TimeoutError:
            raise _AttemptError(True, f"{shown} did not answer within {self.timeout} s") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                message = f"{shown} did not answer within {self.timeout} s"
            else:
                message = f"cannot reach {shown}: {exc.reason}"
            raise _AttemptError(True, message) from None
        except OSError as exc:
            raise _AttemptError(True, f"connection to {shown} failed: {exc}") from None
        try:
            # Any undecodable answer (not UTF-8 or JSON, nested too deeply, a huge integer)
            # is one ValueError from loads_json.
            payload = loads_json(raw, shown)
            text = payload["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _AttemptError(
                False, f"{shown} returned a response without choices[0].message.content"
            ) from None
        if not isinstance(text, str):
            raise _AttemptError(False, f"{shown} returned non-text content: {type(text).__name__}")
        return text

    def generate(
        self,
        prompt: str,
        *,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> str:
        """Send ``prompt`` as a single user message and return the reply.

        Args:
            prompt: The user message.
            max_new_tokens: Sent as ``max_tokens``.
            temperature: Sent as ``temperature``.
            seed: Sent as ``seed`` (servers that support it use it for sampling).

        Returns:
            ``choices[0].message.content`` of the response.

        Raises:
            TypeError: If ``prompt`` is not a string.
            GeneratorError: If no model is configured, the server is unreachable or slow after
                all retries, answers with an error status, or answers malformed JSON. The
                message names the endpoint URL.
        """
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
        self._validate()
        params = generation_params(
            max_new_tokens=max_new_tokens, temperature=temperature, seed=seed
        )
        try:
            url = chat_completions_url(self.resolved_base_url())
        except ValueError as exc:
            raise GeneratorError(str(exc)) from None
        body = json.dumps(
            {
                "model": self.resolved_model(),
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": params["max_new_tokens"],
                "temperature": params["temperature"],
                "seed": params["seed"],
                "stream": False,
            }
        ).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        api_key = self._resolved_api_key()
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            try:
                return self._attempt(url, body, headers)
            except _AttemptError as exc:
                if not exc.retryable or attempt == attempts - 1:
                    message = str(exc)
                    if api_key:
                        message = message.replace(api_key, "***")
                    raise GeneratorError(
                        f"LLM request failed after {attempt + 1} attempt(s): {message}"
                    ) from None
            time.sleep(self.backoff * (2**attempt))
        raise GeneratorError(f"LLM request to {_redact(url)} was not attempted")
