"""Record generations to a JSONL file for later replay by :class:`RecordedGenerator`.

Recording is resumable: prompts whose ``(model, prompt_hash)`` is already in the file are
skipped. Each line is flushed and fsynced as soon as it is written, so an interrupted run leaves
a valid prefix; an unterminated fragment left by a crash is cut off before appending.

Command line::

    python -m memlab.generate.record --generator smollm2 --out hyde.jsonl PROMPTS.jsonl

where each line of ``PROMPTS.jsonl`` is a JSON string or an object with a ``"prompt"`` field.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memlab.generate.base import Generator, generation_params, make_generator, prompt_hash
from memlab.generate.recorded import scan_records
from memlab.memory.scrub import scrub_text

__all__ = ["main", "read_prompts", "record_generations"]


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _prepare(path: Path) -> set[tuple[str, str]]:
    """Return the recorded keys and cut off an interrupted last line, if any."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        return set()
    records, valid = scan_records(path)
    size = path.stat().st_size
    if valid < size:
        with open(path, "r+b") as fh:
            fh.truncate(valid)
            fh.flush()
            os.fsync(fh.fileno())
    if valid > 0:
        with open(path, "rb") as fh:
            fh.seek(valid - 1)
            last = fh.read(1)
        if last != b"\n":
            with open(path, "ab") as fh:
                fh.write(b"\n")
                fh.flush()
                os.fsync(fh.fileno())
    return {(rec["model"], rec["prompt_hash"]) for rec in records}


def record_generations(
    prompts: Iterable[str],
    generator: Generator,
    path: str | os.PathLike[str],
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    seed: int = 0,
    progress: bool = True,
) -> int:
    """Generate and append one JSONL line per prompt not yet recorded in ``path``.

    Args:
        prompts: Prompts to record; duplicates are generated once.
        generator: The generator to record; its ``model_id`` goes into every line.
        path: The JSONL recording (created if missing, appended to otherwise).
        max_new_tokens: Decoding parameter passed to the generator and recorded.
        temperature: Decoding parameter passed to the generator and recorded.
        seed: Decoding parameter passed to the generator and recorded.
        progress: Show a tqdm progress bar (always hidden when the environment has
            ``CI=true``).

    Returns:
        The number of prompts generated in this call.

    Raises:
        TypeError: If a prompt or a generated text is not a string.
        ValueError: If the existing file is malformed.
        GeneratorError: If the generator fails; lines written before stay in the file.
    """
    target = Path(path)
    params = generation_params(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    model = generator.model_id
    created = not target.exists()
    done = _prepare(target)
    hide = not progress or os.environ.get("CI", "").strip().lower() == "true"
    count = 0
    with open(target, "ab") as fh:
        if created:
            _fsync_dir(target.parent)
        bar = tqdm(prompts, disable=hide, desc=f"recording {model}", unit="prompt")
        for i, prompt in enumerate(bar):
            if not isinstance(prompt, str):
                raise TypeError(f"prompts[{i}] must be a string, got {type(prompt).__name__}")
            # Query texts are written to the recording: credentials never reach the file (nor
            # the generator). Replays scrub the prompt the same way before hashing it.
            prompt = scrub_text(prompt)[0]
            key = prompt_hash(model, prompt, params)
            if (model, key) in done:
                continue
            text = generator.generate(
                prompt,
                max_new_tokens=params["max_new_tokens"],
                temperature=params["temperature"],
                seed=params["seed"],
            )
            if not isinstance(text, str):
                raise TypeError(
                    f"generator {model!r} returned {type(text).__name__} for prompt {i}, "
                    "expected str"
                )
            line = {
                "model": model,
                "params": params,
                "prompt": prompt,
                "prompt_hash": key,
                "text": scrub_text(text)[0],
            }
            fh.write((json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n").encode())
            fh.flush()
            os.fsync(fh.fileno())
            done.add((model, key))
            count += 1
        bar.close()
    return count


def read_prompts(path: str | os.PathLike[str]) -> list[str]:
    """Read prompts from JSONL: each non-blank line a JSON string or ``{"prompt": ...}``.

    Args:
        path: The prompts file.

    Returns:
        The prompts in file order.

    Raises:
        ValueError: If a line is not valid JSON or has no string prompt (names ``file:line``).
    """
    prompts: list[str] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj: Any = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc})") from None
            if isinstance(obj, dict):
                if "prompt" not in obj:
                    raise ValueError(f"{where}: missing field 'prompt'")
                obj = obj["prompt"]
            if not isinstance(obj, str):
                raise ValueError(f"{where}: field 'prompt' must be a string")
            prompts.append(obj)
    return prompts


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; see the module docstring.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        Process exit status.
    """
    parser = argparse.ArgumentParser(
        prog="python -m memlab.generate.record",
        description="Record generations for replay by the 'recorded' generator.",
    )
    parser.add_argument("prompts", help="JSONL file of prompts (strings or {'prompt': ...})")
    parser.add_argument("--out", required=True, help="JSONL recording to create or extend")
    parser.add_argument("--generator", default="smollm2", help="registered generator name")
    parser.add_argument("--model", default=None, help="model name for the 'openai' generator")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    options = {} if args.model is None else {"model": args.model}
    generator = make_generator(args.generator, **options)
    count = record_generations(
        read_prompts(args.prompts),
        generator,
        args.out,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        seed=args.seed,
        progress=not args.no_progress,
    )
    print(f"{count} new generation(s) written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
