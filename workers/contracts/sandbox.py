"""Run an implementation under test inside the kernel sandbox and bring its raw results back (docs/contracts.md,
"Isolation").

A :class:`SandboxSession` is one sandbox (bubblewrap, ``isolation.py``) holding a zygote that imported torch once
(``sandbox_child.py``); every contract run forks a fresh child from it, so a suite pays for one torch import, not
twelve, and each contract still starts from a process no candidate code has touched. A session serves one
implementation file; :class:`SessionPool` keeps the sessions of one job and closes them at the end.

Trust: parent -> sandbox is trusted (cases the parent built). Sandbox -> parent is untrusted: only primitives,
read by an unpickler that refuses every global, each message size-capped. The child computes no hash and no
verdict: it ships every launch's output bytes and every input's bytes after the calls; the parent hashes, compares
and measures (``harness.decode_results``). The environment is measured in the child *before* the candidate is
loaded; the implementation's hash is taken here from the bytes that are staged into the sandbox.

Failures of the harness itself — the sandbox cannot be created, the zygote does not start, the child dies before
the candidate is loaded — raise :class:`HarnessFailure`; they are never a verdict about the candidate.
"""

from __future__ import annotations

import os
import pickle
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from . import isolation
from .isolation import SandboxUnavailable
from .redact import clean, log_lines
from .sandbox_child import DTYPES, U64, decode_tensor, encode_tensor, frame
from .staging import StagedImpl, describe_impl, load_impl, split_ref
from .wire import encode_case, loads_untrusted, tensor_hash

__all__ = [
    "DTYPES",
    "HarnessFailure",
    "SandboxOutcome",
    "SandboxSession",
    "SandboxUnavailable",
    "SessionPool",
    "decode_tensor",
    "describe_impl",
    "encode_case",
    "encode_tensor",
    "load_impl",
    "run_in_sandbox",
    "split_ref",
    "tensor_hash",
]

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")
STARTUP_LIMIT_S = 180.0
MAX_MESSAGE_BYTES = 512 * 2**20
STDERR_FORWARD_BYTES = 256 * 1024


class HarnessFailure(RuntimeError):
    """The harness, not the candidate, failed: no verdict may be drawn from this run."""


class SandboxOutcome(dict):
    """kind: result | load_error | child_error | timeout | crash; plus results, environment, isolation, ..."""


# ------------------------------------------------------------------------------------------------ session
class _StderrTail(threading.Thread):
    """Forwards the sandbox's stderr (the candidate's prints) to ours, escaped and prefixed line by line
    (:func:`~workers.contracts.redact.log_lines`), up to a cap, and keeps the tail for reasons."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.tail, self.forwarded, self._partial = stream, b"", 0, ""

    def run(self):
        for chunk in iter(lambda: self.stream.read1(65536), b""):
            self.tail = (self.tail + chunk)[-4096:]
            if self.forwarded >= STDERR_FORWARD_BYTES:
                continue
            part = chunk[: STDERR_FORWARD_BYTES - self.forwarded]
            self.forwarded += len(part)
            lines, self._partial = log_lines(part.decode(errors="replace"), self._partial)
            if self.forwarded >= STDERR_FORWARD_BYTES:
                lines += (
                    log_lines("", self._partial + "\n")[0]
                    + f"[kernel] (output capped at {STDERR_FORWARD_BYTES} bytes; the rest is not logged)\n"
                )
                self._partial = ""
            elif len(self._partial) > 4096:  # no newline for a long time: log it as a line of its own
                lines += log_lines("\n", self._partial)[0]
                self._partial = ""
            self._write(lines)
        if self._partial and self.forwarded < STDERR_FORWARD_BYTES:
            self._write(log_lines("\n", self._partial)[0])

    @staticmethod
    def _write(lines):
        try:
            sys.stderr.write(lines)
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def text(self, limit: int = 400) -> str:
        """The tail, fit for a reason: escaped, without host paths."""
        return clean(self.tail.decode(errors="replace").strip()[-limit:], limit + 100)


class SandboxSession:
    """One sandbox for the given implementations (the candidate and, where a protocol needs it, the trusted
    reference): started on first use, one fresh child per :meth:`run`, restarted if a run had to kill it."""

    def __init__(self, impls: list[StagedImpl], device: str = "cpu"):
        self.device, self.impls, self._lock = device, impls, threading.Lock()
        self.mode = isolation.policy()
        self.proc = None
        # staged copies, world-readable whatever the checkout's or the artifact store's permissions: the sandbox's
        # uid must read them, and the bytes hashed are the bytes run
        self._root = tempfile.mkdtemp(prefix="kc-stage-")
        self._stage = os.path.join(self._root, "lib")
        self._program = os.path.join(self._root, "run.py")
        os.mkdir(self._stage)
        shutil.copyfile(PROGRAM, self._program)
        for path, mode in ((self._root, 0o755), (self._stage, 0o755), (self._program, 0o644)):
            os.chmod(path, mode)
        self._names = {}  # source key -> module name of the staged file (None: imported by name)
        for impl in impls:
            if impl.source_key in self._names:
                continue
            if impl.data is None:
                self._names[impl.source_key] = None
                continue
            name, used = impl.module, set(self._names.values())
            while name in used:  # two files with one stem (a candidate called reference.py): never confused
                name = f"{impl.module}_{len(used)}"
            self._names[impl.source_key] = name
            path = os.path.join(self._stage, name + ".py")
            with open(path, "wb") as fh:
                fh.write(impl.data)
            os.chmod(path, 0o644)
        self.lib_dir = isolation.LIB_DIR if self.mode == "bubblewrap" else self._stage
        self.isolation = isolation.describe(self.mode, device)

    # -- lifecycle
    def start(self):
        if self.mode == "bubblewrap":
            problem = isolation.probe(self.device)
            if problem:
                raise SandboxUnavailable(
                    f"{problem}. Submitted kernels are not run unisolated unless the operator "
                    f"sets {isolation.POLICY_ENV}=none (docs/contracts.md, 'Isolation')."
                )
            etc = isolation.write_etc(os.path.join(self._root, "etc"))
            argv, env = isolation.bubblewrap_argv(self._program, self._stage, self.device, etc_dir=etc), {}
        else:
            self._scratch = tempfile.mkdtemp(prefix="kc-scratch-")
            argv, env = isolation.unisolated_argv(self._program), isolation.unisolated_env(self._scratch)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
        self._err = _StderrTail(self.proc.stderr)
        self._err.start()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)
        self._buf = bytearray()
        kind, msg = self._next_frame(t0 + STARTUP_LIMIT_S)
        if kind != "Z" or not isinstance(msg, dict) or msg.get("kind") != "ready":
            detail = msg.get("message") if isinstance(msg, dict) else msg
            self.kill()
            raise HarnessFailure(
                f"the kernel sandbox did not start ({detail or 'no answer'}); stderr: {self._err.text(500)}"
            )
        self.isolation = dict(self.isolation, sandbox_uid=msg.get("uid"), startup_s=round(time.monotonic() - t0, 3))

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        self.proc = None

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(frame(b"P", pickle.dumps({"kind": "quit"})))
                self.proc.stdin.flush()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        shutil.rmtree(self._root, ignore_errors=True)
        if getattr(self, "_scratch", None):
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _wire(self, impl: StagedImpl) -> dict:
        """How the sandbox loads ``impl``: by the name this session staged its bytes under, or by module name."""
        if impl.source_key not in self._names:
            raise HarnessFailure(f"{impl.ref} was not staged into this sandbox")
        name = self._names[impl.source_key]
        if name is None:
            return {"module": impl.module, "file": None, "attr": impl.attr}
        return {"module": name, "file": f"{self.lib_dir}/{name}.py", "attr": impl.attr}

    # -- framing
    def _next_frame(self, deadline):
        """The next (tag, message) from the zygote: ("Z", dict) or ("C", bytes); ("EOF", None) when it is gone,
        ("TIMEOUT", None) past the deadline."""
        while True:
            if len(self._buf) >= 9:
                tag, size = bytes(self._buf[:1]), U64.unpack(self._buf[1:9])[0]
                if size > MAX_MESSAGE_BYTES + 64:
                    return "EOF", f"oversized frame ({size} bytes)"
                if len(self._buf) >= 9 + size:
                    body = bytes(self._buf[9 : 9 + size])
                    del self._buf[: 9 + size]
                    if tag == b"Z":
                        return "Z", pickle.loads(body)  # the zygote is trusted code that no candidate ran in
                    return "C", body
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "TIMEOUT", None
            if self._sel.select(min(remaining, 0.5)):
                data = os.read(self.proc.stdout.fileno(), 1 << 20)
                if not data:
                    return "EOF", None
                self._buf += data

    # -- one contract run
    def run(
        self,
        impl: StagedImpl,
        cases: list,
        *,
        flags=None,
        time_limit_s=60.0,
        memory_limit_mb=4096,
        reference: StagedImpl | None = None,
        progress=None,
    ) -> SandboxOutcome:
        with self._lock:  # one run at a time: the zygote serves one child
            return self._run(
                impl,
                cases,
                flags=flags,
                time_limit_s=time_limit_s,
                memory_limit_mb=memory_limit_mb,
                reference=reference,
                progress=progress,
            )

    def _run(self, impl, cases, *, flags, time_limit_s, memory_limit_mb, reference, progress) -> SandboxOutcome:
        table, index = [], {}
        encoded = [encode_case(c, table, index) for c in cases]
        rounds = [launch_round(encoded, j) for j in range(max([_children(c["repeat"]) for c in encoded] or [1]))]
        total, done_before = sum(len(r) for r in rounds), [0]

        def step(done, _total):
            if progress:
                progress(min(done_before[0] + done, total), total)

        t0, outcomes = time.monotonic(), []
        modes = grad_modes(len(rounds))
        for j, round_cases in enumerate(rounds):
            out = self._child(
                impl,
                round_cases,
                table,
                grad_mode=modes[j],
                flags=flags,
                time_limit_s=time_limit_s,
                memory_limit_mb=memory_limit_mb,
                reference=reference if j == 0 else None,
                progress=step,
            )
            outcomes.append(out)
            done_before[0] += len(round_cases)
            if out.get("kind") != "result":
                break
        outcome = merge_rounds(encoded, rounds, outcomes)
        outcome["grad_modes"] = modes[: len(outcomes)]
        outcome["wall_s"] = time.monotonic() - t0
        outcome["isolation"] = self.isolation
        outcome["impl_hash"] = impl.sha256
        outcome["encoded_cases"] = encoded
        outcome["tensor_table"] = table
        return outcome

    def _child(
        self,
        impl,
        round_cases,
        table,
        *,
        flags,
        time_limit_s,
        memory_limit_mb,
        reference,
        progress,
        grad_mode="enabled",
    ) -> SandboxOutcome:
        """One fresh child of the zygote runs ``round_cases`` under ``grad_mode`` (:func:`grad_modes`)."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        payload = {
            "kind": "run",
            "impl": self._wire(impl),
            "device": self.device,
            "flags": flags or {},
            "grad_mode": grad_mode,
            "memory_limit_mb": memory_limit_mb,
            "cases": round_cases,
            "tensors": table,
            "reference": self._wire(reference) if reference is not None else None,
            "max_files": 256,
            "max_processes": 256,
            "max_file_bytes": 64 * 2**20,
            "cpu_seconds": int(4 * float(time_limit_s) * (os.cpu_count() or 1)) + 30,
            "cuda_memory_fraction": float(os.environ.get("KC_CUDA_MEMORY_FRACTION", "0") or 0) or None,
        }
        try:
            self.proc.stdin.write(frame(b"P", pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)))
            self.proc.stdin.flush()
        except OSError as exc:
            self.kill()
            raise HarnessFailure(f"could not hand the cases to the kernel sandbox: {exc}") from exc
        return self._collect(round_cases, time_limit_s, progress)

    def _collect(self, encoded, time_limit_s, progress) -> SandboxOutcome:
        """Read the child's stream until the zygote reports the child's exit. Before the child's ``environment``
        message no candidate code exists, so a failure there is the harness's; after it, everything the stream
        says is the candidate's word and is checked as such."""
        run = _RunReader(self, len(encoded), time_limit_s, progress)
        while True:
            tag, msg = self._next_frame(run.deadline)
            if tag == "TIMEOUT":
                return run.timed_out()
            if tag == "EOF":
                return run.torn_down(msg)
            if tag == "Z":
                if msg.get("kind") == "exit":
                    return run.exited(msg)
                continue
            outcome = run.feed(msg)
            if outcome is not None:
                return outcome


class _RunReader:
    """What one run's stream has said so far (liveness, the environment, the case results, the final word), and
    what each kind of event makes of it: an outcome, nothing yet, or a :class:`HarnessFailure`."""

    def __init__(self, session, total: int, time_limit_s, progress):
        self.session, self.total, self.time_limit_s, self.progress = session, total, time_limit_s, progress
        self.stream = bytearray()
        self.alive, self.environment, self.results, self.final = False, None, [], None
        self.deadline = time.monotonic() + STARTUP_LIMIT_S

    def crash(self, kind, message, error_type="ProcessDied") -> SandboxOutcome:
        return SandboxOutcome(
            kind=kind,
            error={"type": error_type, "message": message},
            results=self.results,
            environment=self.environment,
        )

    def _kill_and_crash(self, message, error_type="ProtocolViolation") -> SandboxOutcome:
        self.session.kill()
        return self.crash("crash", message, error_type)

    def timed_out(self) -> SandboxOutcome:
        self.session.kill()
        if not self.alive:
            raise HarnessFailure(f"the sandbox child did not start within {STARTUP_LIMIT_S:g} s")
        return self.crash("timeout", f"no result within the time limit of {self.time_limit_s:g} s", "Timeout")

    def torn_down(self, detail) -> SandboxOutcome:
        self.session.kill()
        if self.environment is None:
            raise HarnessFailure(
                f"the kernel sandbox exited before the implementation was loaded"
                f"{' (' + detail + ')' if detail else ''}; stderr: {self.session._err.text(400)}"
            )
        return self.crash("crash", "the sandbox was torn down from inside while the implementation ran")

    def exited(self, msg: dict) -> SandboxOutcome:
        """The zygote's report of the child's exit: the run's outcome, from what the child said before it."""
        if self.environment is None:
            raise HarnessFailure(
                f"the sandbox child died before the implementation was loaded "
                f"(exit {msg.get('exit_code')}, signal {msg.get('signal')}); "
                f"stderr: {self.session._err.text(400)}"
            )
        resources = {"maxrss_kb": msg.get("maxrss_kb"), "cpu_s": msg.get("cpu_s")}
        final = self.final
        if final is None:
            sig = msg.get("signal")
            reason = (
                f"implementation process killed by signal {_signal_name(sig)}"
                if sig
                else f"implementation process exited with code {msg.get('exit_code')} before reporting"
            )
            return SandboxOutcome(self.crash("crash", reason), resources=resources)
        out = SandboxOutcome(
            kind=final["kind"], results=self.results, environment=self.environment, resources=resources
        )
        if final["kind"] == "result":
            out["flags_after"] = final.get("flags_after")
        else:
            out["error"] = _error_dict(final.get("error"))
        return out

    def feed(self, chunk: bytes) -> SandboxOutcome | None:
        """Bytes of the result channel: each complete length-prefixed message is read and acted on."""
        self.stream += chunk
        while len(self.stream) >= 8:
            size = U64.unpack(self.stream[:8])[0]
            if size > MAX_MESSAGE_BYTES:
                return self._kill_and_crash(
                    f"a message of {size} bytes from the sandbox exceeds the {MAX_MESSAGE_BYTES} byte cap"
                )
            if len(self.stream) < 8 + size:
                return None
            body = bytes(self.stream[8 : 8 + size])
            del self.stream[: 8 + size]
            try:
                m = loads_untrusted(body)
                if not isinstance(m, dict) or not isinstance(m.get("kind"), str):
                    raise ValueError("not a message")
            except Exception as exc:  # noqa: BLE001 - whatever the candidate wrote into the channel
                return self._kill_and_crash(f"malformed message from the sandbox: {exc}")
            outcome = self.on_message(m)
            if outcome is not None:
                return outcome
        return None

    def on_message(self, m: dict) -> SandboxOutcome | None:
        kind = m["kind"]
        if kind == "alive" and not self.alive:
            self.alive = True
            self.deadline = time.monotonic() + float(self.time_limit_s)
        elif kind in ("environment", "harness_error") and self.environment is None:
            if kind == "harness_error":
                self.session.kill()
                raise HarnessFailure(
                    f"the sandbox child could not prepare the run: {_error_dict(m.get('error'))['message']}"
                )
            self.environment = {"flags": m.get("flags"), "memory_cap_bytes": m.get("memory_cap_bytes")}
        elif self.environment is None:
            return self._kill_and_crash(f"unexpected {kind!r} message before the run started")
        elif kind == "case" and isinstance(m.get("result"), dict):
            self.results.append(m["result"])
        elif kind == "progress":
            if self.progress and isinstance(m.get("done"), int) and isinstance(m.get("total"), int):
                self.progress(min(m["done"], self.total), self.total)
        elif kind == "done" and self.final is None:
            self.final = {"kind": "result", "flags_after": m.get("flags_after")}
        elif kind in ("load_error", "child_error") and self.final is None:
            self.final = {"kind": kind, "error": m.get("error")}
        return None


# ------------------------------------------------------------------------------------- fresh launches
FRESH_PROCESSES = 3  # the most children the launches of one case are spread over


def grad_modes(children: int) -> list[str]:
    """The autograd mode each child runs its launches in. A kernel can read the mode (an inference engine calls
    it under ``torch.inference_mode()``, a trainer with grad enabled), so a kernel honest only in the mode a
    harness happens to use would pass: the first two children get grad enabled and inference mode, in a random
    order, the third ``no_grad``. One mode a process, as in any caller: a kernel that keeps tensors between calls
    never meets an inference tensor outside inference mode. Launches whose bits differ from launch 0 are judged
    too, so a kernel keyed by the mode meets its own dishonest mode in a judged launch."""
    pair = ["enabled", "inference"] if secrets.randbelow(2) == 0 else ["inference", "enabled"]
    return (pair + ["no_grad"] * max(0, children - 2))[: max(children, 1)]


def _children(repeat: int) -> int:
    return 1 if repeat <= 2 else 1 + min(FRESH_PROCESSES - 1, repeat - 2)


def _launches(repeat: int, j: int) -> list:
    """Child 0 runs launches 0 and 1 back to back (a first call against a warm one); launch k >= 2 runs in child
    1 + (k - 2) mod (children - 1), each a fresh process."""
    if j == 0:
        return list(range(min(repeat, 2)))
    n = _children(repeat)
    return [k for k in range(2, repeat) if n > 1 and 1 + (k - 2) % (n - 1) == j]


def launch_round(encoded: list, j: int) -> list:
    """The cases child ``j`` runs (:func:`_launches`): two launches that must agree also ran in different
    processes, on inputs at other addresses and alignments (``pad``). A case is named by its position only
    (``c<i>``): nothing in a child's payload says which check a launch serves."""
    out = []
    for i, c in enumerate(encoded):
        R = c["repeat"]
        launches = _launches(R, j)
        if not launches:
            continue
        n_fill, configs = len(c["fills"]), 9 if c["all_configs"] else 1
        fills = [c["fills"][(cfg * R + k) % n_fill] for cfg in range(configs) for k in launches]
        out.append(
            dict(
                c,
                key=f"c{i}",
                repeat=len(launches),
                fills=fills,
                launches=launches,
                order=c["order"] if j == 0 else "candidate_first",
                pad=0 if j == 0 else 1 + secrets.randbelow(15),
            )
        )
    return out


def _fresh_inputs(m: dict, more) -> list:
    """A child's launches after its first ran on fresh inputs (another allocation and offset): their record of the
    inputs after the call joins the immutability check and their addresses the aliasing check, and each counts as
    a fresh launch. A malformed record counts as a mutated input (``[]`` never matches the inputs the parent
    built). Returns the fresh allocations' input spans (for :func:`harness.reused_outputs`)."""
    spans = []
    for entry in more if isinstance(more, (list, tuple)) else [more]:
        if not isinstance(entry, (list, tuple)) or len(entry) != 3:
            m["inputs_after_rounds"].append([])
            continue
        m["inputs_after_rounds"].append(entry[2] or [])
        m["spans"].append((entry[0], [entry[1]] if entry[1] else []))
        m["fresh_launches"] += 1
        spans += list(entry[0]) if isinstance(entry[0], (list, tuple)) else []
    return spans


def merge_rounds(encoded: list, rounds: list, outcomes: list) -> SandboxOutcome:
    """One outcome from the children's: per case, every launch's output in launch order, every child's record of
    the inputs after its calls. The channel is the candidate's: a child must report exactly the cases it was given,
    once each and in order; anything else is recorded as ``channel_tampered`` (a failure, never ignored)."""
    last = outcomes[-1]
    first = outcomes[0]
    merged = {}
    tampered = []
    for j, (round_cases, out) in enumerate(zip(rounds, outcomes)):
        got = [r.get("key") for r in out.get("results") or [] if isinstance(r, dict)]
        want = [c["key"] for c in round_cases]
        if out.get("kind") == "result" and got != want or out.get("kind") != "result" and got != want[: len(got)]:
            tampered.append(
                f"child {j} reported {len(got)} result(s) for {len(want)} case(s)"
                + (" (duplicated, unknown or out of order)" if len(got) == len(want) else "")
            )
        for c, r in zip(round_cases, out.get("results") or []):
            if not isinstance(r, dict) or r.get("key") != c["key"]:
                break
            i = int(c["key"][1:])
            R = encoded[i]["repeat"]
            m = merged.setdefault(
                i,
                {
                    "key": encoded[i]["key"],
                    "series": [],
                    "exception": None,
                    "bad_output": None,
                    "times": [],
                    "inputs_after": None,
                    "inputs_after_rounds": [],
                    "spans": [],
                    "launch_spans": [],
                    "fresh_launches": 0,
                },
            )
            m["exception"] = m["exception"] or r.get("exception")
            m["bad_output"] = m["bad_output"] or r.get("bad_output")
            m["times"] += list(r.get("times") or [])
            m["inputs_after_rounds"].append(r.get("inputs_after") or [])
            m["spans"].append((r.get("input_spans"), r.get("output_spans")))  # aliasing, decided by the parent
            fresh = _fresh_inputs(m, r.get("more_inputs"))
            # outputs reused between launches of a child, beside the storages of every input it was given
            own = r.get("input_spans") if isinstance(r.get("input_spans"), (list, tuple)) else []
            m["launch_spans"].append((list(own) + fresh, r.get("output_spans") or []))
            if m["inputs_after"] is None:
                m["inputs_after"] = r.get("inputs_after") or []
            for cfg, s in enumerate(r.get("series") or []):
                while len(m["series"]) <= cfg:
                    m["series"].append({"config": None, "slots": [None] * R})
                if j == 0 or m["series"][cfg]["config"] is None:
                    m["series"][cfg]["config"] = s.get("config") if isinstance(s, dict) else None
                for k, o in zip(c["launches"], (s.get("outputs") or []) if isinstance(s, dict) else []):
                    m["series"][cfg]["slots"][k] = o
    results = []
    for i in sorted(merged):
        m = merged[i]
        m["series"] = [
            {"config": s["config"], "outputs": [o for o in s["slots"] if o is not None]} for s in m["series"]
        ]
        results.append(m)
    out = SandboxOutcome(last)
    out["results"] = results
    out["environment"] = first.get("environment")
    out["children"] = len(outcomes)
    out["resources"] = {
        "maxrss_kb": max([(o.get("resources") or {}).get("maxrss_kb") or 0 for o in outcomes]),
        "cpu_s": round(sum([(o.get("resources") or {}).get("cpu_s") or 0 for o in outcomes]), 3),
    }
    if tampered:
        out["channel_tampered"] = "; ".join(tampered)
    return out


def _error_dict(err) -> dict:
    err = err if isinstance(err, dict) else {}
    return {
        "type": str(err.get("type", "Error"))[:100],
        "message": str(err.get("message", ""))[:500],
        "where": str(err.get("where", ""))[:200],
    }


def _signal_name(sig) -> str:
    try:
        return signal.Signals(int(sig)).name
    except (ValueError, TypeError):
        return str(sig)


class SessionPool:
    """The sandboxes of one job, one per implementation file (and trusted reference), closed together. With
    ``max_sessions``, the least recently used sandbox is closed when another is needed."""

    def __init__(self, max_sessions: int | None = None):
        self._sessions, self._max, self._lock = {}, max_sessions, threading.Lock()

    def session(self, impl: StagedImpl, reference: StagedImpl | None, device: str) -> SandboxSession:
        key = (impl.source_key, reference.source_key if reference is not None else None, device, isolation.policy())
        with self._lock:
            session = self._sessions.pop(key, None)
            if session is None:
                session = SandboxSession([impl] + ([reference] if reference is not None else []), device)
            self._sessions[key] = session  # most recently used last
            while self._max and len(self._sessions) > self._max:
                self._sessions.pop(next(iter(self._sessions))).close()
            return session

    def close(self):
        with self._lock:
            for s in self._sessions.values():
                s.close()
            self._sessions.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_DEFAULT_POOL: SessionPool | None = None


def default_pool() -> SessionPool:
    """For calls without a pool (the CLI, notebooks, tests): the last two implementations' sandboxes stay warm in
    this process, so repeated runs of one implementation pay for torch's import once. Closed at exit."""
    global _DEFAULT_POOL
    if _DEFAULT_POOL is None:
        import atexit

        _DEFAULT_POOL = SessionPool(max_sessions=2)
        atexit.register(_DEFAULT_POOL.close)
    return _DEFAULT_POOL


def run_in_sandbox(
    impl,
    cases: list,
    *,
    device="cpu",
    flags=None,
    time_limit_s=60.0,
    memory_limit_mb=4096,
    reference=None,
    progress=None,
    pool: SessionPool | None = None,
) -> SandboxOutcome:
    """Run every case of one contract run in one fresh child of a sandbox. Never raises for candidate
    misbehaviour (that is a timeout/crash/load_error outcome); raises :class:`HarnessFailure` (or
    :class:`SandboxUnavailable`) when the harness itself cannot run."""
    if callable(impl) and "<" in (getattr(impl, "__qualname__", "") or "<"):
        raise TypeError(
            f"implementation {describe_impl(impl)} cannot be sent to the sandbox (not importable by "
            "name); pass a module-level function or a 'package.module:function' string"
        )
    try:
        staged = impl if isinstance(impl, StagedImpl) else StagedImpl(impl)
    except (OSError, ImportError, ValueError) as exc:
        return SandboxOutcome(
            kind="load_error",
            error={"type": type(exc).__name__, "message": str(exc)[:500], "where": ""},
            results=[],
            environment=None,
        )
    ref = None if reference is None else (reference if isinstance(reference, StagedImpl) else StagedImpl(reference))
    session = (pool or default_pool()).session(staged, ref, device)
    return session.run(
        staged,
        cases,
        flags=flags,
        time_limit_s=time_limit_s,
        memory_limit_mb=memory_limit_mb,
        reference=ref,
        progress=progress,
    )
