"""Checks an uploaded tokenizer file in a process of its own, under limits: the web process never parses one.

A registration request used to parse the file in the web process: ``json.loads`` of the whole text and then the
Hugging Face library's own parse (a 58 MB tokenizer.json took 226 s and grew the web process by 1.4 GB). Now the
portal runs ``python -m workers.fidelity.tokenizer_check FILE OUT`` (``check_in_child``), which sets its own limits
before it reads anything (address space ``TOKENIZER_CHECK_MEMORY_BYTES``, default 3 GiB; CPU time
``TOKENIZER_CHECK_SECONDS``, default 300 s, also the wall-clock limit of the caller) and answers one JSON object on
stdout: ``{"ok": true, "kind", "sha256", "vocab_size"}`` (a toy vocabulary's canonical JSON, what is stored, is
written to OUT) or ``{"ok": false, "code", "message"}`` with the message a person reads. Past a limit the answer is
``tokenizer_too_complex``. No Django import.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def limits() -> tuple[int, int]:
    """(address-space bytes, CPU seconds) of the checking process, from the environment at the time of the check."""
    return (
        int(os.environ.get("TOKENIZER_CHECK_MEMORY_BYTES", 3 << 30)),
        int(os.environ.get("TOKENIZER_CHECK_SECONDS", 300)),
    )


class TokenizerProblem(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _is_toy_vocab(obj) -> bool:
    return (
        isinstance(obj, dict)
        and bool(obj)
        and all(isinstance(k, str) and k.isdigit() for k in obj)
        and all(isinstance(v, str) for v in obj.values())
    )


def check(data: bytes) -> dict:
    """What the tokenizer is: ``{kind, sha256, vocab_size, canonical}`` (``canonical``: a toy vocabulary's canonical
    JSON bytes, None for a Hugging Face file, which is stored as sent); raises :class:`TokenizerProblem`."""
    from workers.fidelity.tokenizer import FidelityTokenizer, canonical_vocab_json

    if not data.strip():
        raise TokenizerProblem("invalid_tokenizer_json", "The tokenizer file is empty.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TokenizerProblem(
            "invalid_tokenizer_json", f"The tokenizer file is not UTF-8 text (byte {exc.start})."
        ) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenizerProblem(
            "invalid_tokenizer_json",
            f"The tokenizer file is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}.",
        ) from None
    except RecursionError:
        raise TokenizerProblem(
            "invalid_tokenizer_json", "The tokenizer file is nested too deeply to be a tokenizer."
        ) from None
    if isinstance(obj, dict) and "model" in obj:
        sha = hashlib.sha256(data).hexdigest()
        try:
            tok = FidelityTokenizer.from_json(text, sha256=sha)
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - the tokenizers library raises plain Exceptions with a parse message
            raise TokenizerProblem("invalid_tokenizer", f"Not a usable Hugging Face tokenizer.json: {exc}.") from None
        return {"kind": "hf", "sha256": sha, "vocab_size": tok.vocab_size, "canonical": None}
    if _is_toy_vocab(obj):
        canonical = canonical_vocab_json(obj).encode("utf-8")
        try:
            tok = FidelityTokenizer.toy(obj)
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure to build it means the vocabulary is unusable: a 400
            raise TokenizerProblem(
                "invalid_tokenizer", f"The vocabulary cannot be built into a tokenizer: {exc}."
            ) from None
        return {"kind": "toy_vocab", "sha256": tok.sha256, "vocab_size": tok.vocab_size, "canonical": canonical}
    raise TokenizerProblem(
        "invalid_tokenizer",
        "Expected a Hugging Face tokenizer.json (a JSON object with a 'model' "
        "section) or a toy vocabulary (a JSON object mapping token ids to "
        "strings; docs/fcr.md#toy-tokenizer).",
    )


TOO_COMPLEX = (
    "tokenizer_too_complex",
    "Checking the tokenizer file went past the checker's limits ({what}); it is not registered.",
)


def check_in_child(path: Path, out: Path) -> dict:
    """Run :func:`main` on ``path`` in a fresh interpreter and return its answer (``canonical`` read back from
    ``out`` for a toy vocabulary). Never raises for the file's content: a crash or a limit is an answer too."""
    memory, seconds = limits()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workers.fidelity.tokenizer_check", str(path), str(out)],
            cwd=ROOT,
            capture_output=True,
            timeout=seconds + 30,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "code": TOO_COMPLEX[0], "message": TOO_COMPLEX[1].format(what=f"{seconds} s")}
    try:
        answer = json.loads(done.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):  # killed by a limit (SIGKILL past the CPU time, an allocation that aborted)
        return {
            "ok": False,
            "code": TOO_COMPLEX[0],
            "message": TOO_COMPLEX[1].format(
                what=f"memory {memory >> 20} MiB or {seconds} s of CPU; exit {done.returncode}"
            ),
        }
    if answer.get("ok") and answer.get("kind") == "toy_vocab":
        answer["canonical"] = Path(out).read_bytes()
    return answer


def main(argv: list[str]) -> int:
    import resource

    memory, seconds = limits()
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))
    path, out = argv
    try:
        found = check(Path(path).read_bytes())
    except TokenizerProblem as exc:
        answer = {"ok": False, "code": exc.code, "message": exc.message}
    except MemoryError:
        answer = {
            "ok": False,
            "code": TOO_COMPLEX[0],
            "message": TOO_COMPLEX[1].format(what=f"memory {memory >> 20} MiB"),
        }
    else:
        canonical = found.pop("canonical")
        if canonical is not None:
            Path(out).write_bytes(canonical)
        answer = {"ok": True, **found}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
