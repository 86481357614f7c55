"""Record generations to a JSONL file for later replay by :class:`RecordedGenerator`.

Recording is resumable: prompts whose ``(model, prompt_hash)`` is already in the file are
skipped.

The output follows memlab's rule for single files (:func:`memlab.io.check_output_file`): a
missing path is created, an empty file or a recording memlab wrote is extended; anything else
(a file whose lines are not all recorded generations, a symbolic link, a directory, the
prompts file itself) is refused before any prompt is generated. Every write is atomic: the
recording with its new lines goes to a hidden sibling ``.FILE.tmp-*`` that is renamed over
``FILE`` (:func:`memlab.io.publish_file`), so the file is at every instant the old recording
or the complete new one. New lines are published at least once a second while generating and
whenever recording stops (an error, Ctrl-C), so a hard kill loses at most the last second of
generations. Runs recording into one directory take turns to publish (an ``flock`` of the
directory, :class:`memlab.io.DirectoryGate`; no file is created) and each re-reads the file
first, so neither loses the other's lines. An unterminated fragment of a line left by an older
memlab is dropped when the file is next written.

Command line::

    python -m memlab.generate.record --generator smollm2 --out hyde.jsonl PROMPTS.jsonl

where each line of ``PROMPTS.jsonl`` is a JSON string or an object with a ``"prompt"`` field.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from memlab.generate.base import (
    Generator,
    GeneratorError,
    generation_params,
    make_generator,
    prompt_hash,
)
from memlab.generate.recorded import parse_records
from memlab.io import (
    DirectoryGate,
    OutputFileError,
    check_output_file,
    decode_utf8,
    loads_json,
    publish_file,
    read_bytes,
)
from memlab.memory.scrub import scrub_text

__all__ = ["check_recording_out", "is_recording", "main", "read_prompts", "record_generations"]

RECORDING_KIND = "a recording of generations memlab wrote"
"""How a refused ``--out`` is described (:func:`memlab.io.check_output_file`)."""

PUBLISH_SECONDS = 1.0
"""New lines are published at least this often while generating (see the module docstring)."""

# How every line memlab writes begins (``json.dumps`` with sorted keys): an unterminated last
# line is the fragment of an interrupted write only if it is a prefix of such a line.
_LINE_START = b'{"model": "'


def _recording_problem(path: Path) -> str | None:
    """Why the existing file ``path`` is not a recording memlab may extend (``None``: it is)."""
    try:
        data = read_bytes(path)
        records, valid = parse_records(data, str(path))
    except ValueError as exc:
        return str(exc)
    fragment = data[valid:]
    if fragment and not (fragment.startswith(_LINE_START) or _LINE_START.startswith(fragment)):
        return f"{path}: ends with an unterminated line that is not a recorded generation"
    if not records and not fragment:
        return f"{path}: holds no recorded generation"
    return None


def is_recording(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a recording memlab may extend: every complete line a recorded
    generation whose ``prompt_hash`` matches its content, then at most the fragment of a line
    an interrupted write left (the beginning of a line as memlab writes it), and at least one
    of the two."""
    return _recording_problem(Path(path)) is None


def check_recording_out(path: str | os.PathLike[str], *, what: str = "--out") -> Path:
    """Refuse ``path`` before any work unless a recording may be written there (a new path,
    an empty file or a recording memlab wrote; see the module docstring).

    Args:
        path: The recording.
        what: How messages name it.

    Returns:
        The absolute path.

    Raises:
        memlab.io.OutputFileError: Naming ``path`` and what is wrong (for a file that is not
            a recording, the line at fault).
    """
    target = check_output_file(path, what=what, owned=lambda p: True, kind=RECORDING_KIND)
    if target.is_file() and target.stat().st_size > 0:
        problem = _recording_problem(target)
        if problem is not None:
            raise OutputFileError(
                f"{what} {path}: exists and is not {RECORDING_KIND} ({problem}); memlab "
                "extends only a recording it wrote: give a new file name, or move it away first"
            )
    return target


def _publish(
    target: Path,
    lines: list[tuple[tuple[str, str], bytes]],
    what: str,
    lock_timeout: float = 60.0,
) -> None:
    """Write the recording at ``target`` plus those of ``lines`` it lacks, atomically.

    Runs writing recordings in one directory take turns (an ``flock`` of the directory, held
    while the file is read again and replaced), so lines another run added are kept.

    Raises:
        OutputFileError: Another run held its turn for ``lock_timeout`` seconds.
    """
    gate = DirectoryGate(target.parent)
    try:
        deadline = time.monotonic() + lock_timeout
        while not gate.try_take():
            if time.monotonic() >= deadline:
                raise OutputFileError(
                    f"{what} {target}: another run is writing a recording in {target.parent} "
                    f"(waited {lock_timeout:g} s for its turn); {len(lines)} new generation(s) "
                    "of this run were not written"
                )
            time.sleep(0.01)
        _merge_and_publish(target, lines, what)
    finally:
        gate.release()


def _merge_and_publish(
    target: Path, lines: list[tuple[tuple[str, str], bytes]], what: str
) -> None:
    data = b""
    recorded: set[tuple[str, str]] = set()
    if target.is_file() and target.stat().st_size > 0:
        check_recording_out(target, what=what)
        data = read_bytes(target)
        records, valid = parse_records(data, str(target))
        data = data[:valid]
        if data and not data.endswith(b"\n"):
            data += b"\n"
        recorded = {(rec["model"], rec["prompt_hash"]) for rec in records}
    new = [line for key, line in lines if key not in recorded]
    publish_file(target, data + b"".join(new), what=what, owned=is_recording, kind=RECORDING_KIND)


def _checked_prompts(prompts: Iterable[str]) -> list[str]:
    """The prompts as they are recorded (scrubbed), all checked before any is generated."""
    checked: list[str] = []
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise TypeError(f"prompts[{i}] must be a string, got {type(prompt).__name__}")
        # Query texts are written to the recording: credentials never reach the file (nor
        # the generator). Replays scrub the prompt the same way before hashing it.
        prompt = scrub_text(prompt)[0]
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"prompts[{i}] holds U+{ord(prompt[exc.start]):04X}, a lone surrogate, which "
                "is not text"
            ) from None
        checked.append(prompt)
    return checked


def record_generations(
    prompts: Iterable[str],
    generator: Generator,
    path: str | os.PathLike[str],
    *,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    seed: int = 0,
    progress: bool = True,
    what: str = "--out",
    lock_timeout: float = 60.0,
) -> int:
    """Generate and record one JSONL line per prompt not yet recorded in ``path``.

    Args:
        prompts: Prompts to record; duplicates are generated once.
        generator: The generator to record; its ``model_id`` goes into every line.
        path: The JSONL recording: created if missing, extended if it is a recording memlab
            wrote (see the module docstring).
        max_new_tokens: Decoding parameter passed to the generator and recorded.
        temperature: Decoding parameter passed to the generator and recorded.
        seed: Decoding parameter passed to the generator and recorded.
        progress: Show a tqdm progress bar (always hidden when the environment has
            ``CI=true``).
        what: How messages name ``path``.
        lock_timeout: Seconds to wait for another run publishing a recording in the same
            directory (runs take turns; each keeps the other's lines).

    Returns:
        The number of prompts generated in this call.

    Raises:
        memlab.io.OutputFileError: If ``path`` may not be written (before any generation).
        TypeError: If a prompt or a generated text is not a string (a prompt: before any
            generation).
        ValueError: If a prompt or a generated text is not valid Unicode.
        GeneratorError: If the generator fails; the lines generated before are published.
    """
    params = generation_params(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)):
        raise TypeError(f"field 'lock_timeout' must be a number, got {lock_timeout!r}")
    if not lock_timeout >= 0:
        raise ValueError(f"field 'lock_timeout' must be >= 0, got {lock_timeout!r}")
    model = generator.model_id
    target = check_recording_out(path, what=what)
    checked = _checked_prompts(prompts)
    done: set[tuple[str, str]] = set()
    if target.is_file() and target.stat().st_size > 0:
        records, _ = parse_records(read_bytes(target), str(target))
        done = {(rec["model"], rec["prompt_hash"]) for rec in records}
    hide = not progress or os.environ.get("CI", "").strip().lower() == "true"
    pending: list[tuple[tuple[str, str], bytes]] = []
    count = 0
    last = time.monotonic()
    every = PUBLISH_SECONDS
    bar = tqdm(checked, disable=hide, desc=f"recording {model}", unit="prompt")
    try:
        for i, prompt in enumerate(bar):
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
            try:
                raw = (json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n").encode()
            except UnicodeEncodeError:
                raise ValueError(
                    f"generator {model!r} returned text holding a lone surrogate for prompt "
                    f"{i}, which is not text"
                ) from None
            pending.append(((model, key), raw))
            done.add((model, key))
            count += 1
            if time.monotonic() - last >= every:
                start = time.monotonic()
                _publish(target, pending, what, lock_timeout)
                pending.clear()
                last = time.monotonic()
                # Rewriting a long recording costs time: never more than a tenth of it.
                every = max(PUBLISH_SECONDS, 10 * (last - start))
    finally:
        bar.close()
        if pending or not target.exists():
            _publish(target, pending, what, lock_timeout)
    return count


def read_prompts(path: str | os.PathLike[str]) -> list[str]:
    """Read prompts from JSONL: each non-blank line a JSON string or ``{"prompt": ...}``.

    Args:
        path: The prompts file.

    Returns:
        The prompts in file order.

    Raises:
        ValueError: If the file cannot be read or is not UTF-8, or a line is not valid JSON
            (nested too deeply to read included) or has no string prompt (names
            ``file:line``).
    """
    text = decode_utf8(read_bytes(path), str(path))
    prompts: list[str] = []
    for lineno, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        obj: Any = loads_json(raw, where)
        if isinstance(obj, dict):
            if "prompt" not in obj:
                raise ValueError(f"{where}: missing field 'prompt'")
            obj = obj["prompt"]
        if not isinstance(obj, str):
            raise ValueError(f"{where}: field 'prompt' must be a string")
        prompts.append(obj)
    return prompts


def _same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether ``a`` and ``b`` are one existing file (a link or another spelling included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; see the module docstring.

    Bad input (an ``--out`` memlab may not write, an unreadable prompts file) ends with one
    line ``error: ...`` on stderr and exit status 2; a failing generator or file system with
    such a line and exit status 1; Ctrl-C with ``interrupted`` and exit status 130.

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
    try:
        if _same_file(args.out, args.prompts):
            raise OutputFileError(
                f"--out {args.out}: is the prompts file {args.prompts}; give another file name"
            )
        check_recording_out(args.out)
        generation_params(
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed
        )
        prompts = read_prompts(args.prompts)
        options = {} if args.model is None else {"model": args.model}
        generator = make_generator(args.generator, **options)
        count = record_generations(
            prompts,
            generator,
            args.out,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            seed=args.seed,
            progress=not args.no_progress,
        )
    except (ValueError, TypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (GeneratorError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # what was recorded is published (see the module docstring)
        print("interrupted", file=sys.stderr)
        return 130
    print(f"{count} new generation(s) written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
