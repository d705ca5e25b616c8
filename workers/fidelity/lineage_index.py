"""The index the fidelity audit builds while it reads (docs/fidelity-rules.md#rules-r0r9): what R5 (lineage), R9
(the merge chain) and the TITO diagnostic (docs/fidelity-rules.md#the-prefix-invariant-tito) need to know about the
other calls of a run — per call its first line, per trajectory its root policy call, per policy call and merged
sample member one small tuple with prefix digests — so that no record has to be kept or read twice (only the records
of an out-of-order file whose root or predecessor changed after they were read are re-read: :meth:`LineageIndex.
resolve` / :meth:`~LineageIndex.apply_fixes`). Digests are 16-byte BLAKE2b of the ids as int64 bytes, so a prefix of
the ids is a prefix of the bytes.
"""

from __future__ import annotations

import hashlib
from array import array
from bisect import bisect_left

import numpy as np

from workers.fidelity.rules import Lineage

UNAUDITABLE = (OverflowError, ValueError, TypeError, KeyError, IndexError)  # a record the index cannot digest


def ids_bytes(ids) -> bytes:
    """A flat integer id list as int64 bytes (the digest input); ValueError for anything else."""
    if ids and type(ids[0]) is int:
        try:  # one C pass; anything array('q') refuses (floats, ids ≥ 2**63) takes the numpy path below
            return array("q", ids).tobytes()
        except (TypeError, OverflowError):
            pass
    a = np.asarray(ids) if len(ids) else np.zeros(0, dtype=np.int64)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise ValueError("token ids are not a flat list of integers")
    return a.astype(np.int64, copy=False).tobytes()


def digest_bytes(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def digest_ids(ids) -> bytes:
    """16-byte digest of a flat integer id list (as int64); a prefix of ids ↔ a prefix of :func:`ids_bytes`."""
    return digest_bytes(ids_bytes(ids))


def str_or_none(v):
    return v if isinstance(v, str) else None


def ids_prefix_ok(ids, length, want: bytes) -> bool:
    """The first ``length`` ids digest to ``want``."""
    return len(ids) >= length and digest_ids(ids[:length]) == want


def bytes_prefix_ok(data: bytes, length, want: bytes) -> bool:
    """The same on ids already as int64 bytes."""
    return len(data) >= 8 * length and digest_bytes(data[: 8 * length]) == want


class LineageIndex:
    """What R5, R9 and the TITO diagnostic need to know about the other calls of a run (see the module docstring)."""

    def __init__(self, merged: bool):
        self.merged = merged
        self.first_line: dict = {}
        self.roots: dict = {}  # (run, traj) -> [call_index, line, prompt_len, digest]
        self.policy: dict = {}  # (run, traj) -> sorted [(call_index, line, seq_len, seq_digest)] of policy calls
        self.samples: dict = {}  # (run, sid) -> sorted [(call_index, line, call_id, prompt_len, seq_len, seq_digest)]
        self.spec: dict = {}  # line -> (root line, prefix ok, predecessor line, prefix ok) as known when read
        self.chain_spec: dict = {}  # line -> (predecessor line in its sample, prefix ok) as known when read
        self.final: dict = {}  # line -> [is_root, root_prefix_ok, tito_prefix_ok]
        self.malformed: set[int] = set()  # records the index could not digest (e.g. ids beyond int64)
        self.broken_lines: set[int] = set()
        self.chain_breaks: list = []
        self.merged_samples = 0

    def add(self, line, rec):
        """Index one parsed record (no validation here: the evaluation validates every record once; a record whose
        index fields are unusable is simply left out of the index)."""
        if (
            type(rec.get("call_id")) is not str
            or not isinstance(rec.get("prompt"), dict)
            or not isinstance(rec.get("response"), dict)
            or rec.get("schema") != "fcr/1"
        ):
            return
        try:
            self._add(line, rec)
        except UNAUDITABLE:
            self.malformed.add(line)

    def duplicate_of(self, line, rec) -> int | None:
        first = self.first_line.get((str_or_none(rec.get("run_id")), rec.get("call_id")))
        return first if first is not None and first != line else None

    def _add(self, line, rec):
        run, cid = str_or_none(rec.get("run_id")), rec["call_id"]
        self.first_line.setdefault((run, cid), line)
        prompt, resp = rec["prompt"]["token_ids"], rec["response"].get("token_ids")
        if type(prompt) is not list or type(resp) is not list:
            return
        traj, ci = str_or_none(rec.get("trajectory_id")), rec.get("call_index")
        if type(ci) is not int or traj is None:
            return
        policy = rec.get("role") == "policy"
        trainer = rec.get("trainer")
        sid = str_or_none(trainer.get("sample_id")) if self.merged and isinstance(trainer, dict) else None
        if not policy and sid is None:
            return
        # the prompt is converted once; every digest below is of a prefix of these bytes (or of prompt+response)
        p_bytes = ids_bytes(prompt)
        seq_len = len(prompt) + len(resp)
        seq_d = hashlib.blake2b(p_bytes, digest_size=16)
        seq_d.update(ids_bytes(resp))
        seq_d = seq_d.digest()
        if policy:
            key = (run, traj)
            root = self.roots.get(key)
            if root is None or ci < root[0]:
                root = self.roots[key] = [ci, line, len(prompt), digest_bytes(p_bytes)]
            members = self.policy.setdefault(key, [])
            item = (ci, line, seq_len, seq_d)
            k = bisect_left(members, item)
            members.insert(k, item)
            prev = members[k - 1] if k else None
            self.spec[line] = (
                root[1],
                None if root[1] == line else bytes_prefix_ok(p_bytes, root[2], root[3]),
                prev and prev[1],
                prev and bytes_prefix_ok(p_bytes, prev[2], prev[3]),
            )
        if sid is not None:
            members = self.samples.setdefault((run, sid), [])
            item = (ci, line, rec["call_id"], len(prompt), seq_len, seq_d)
            k = bisect_left(members, item)
            members.insert(k, item)
            if k:
                prev = members[k - 1]
                self.chain_spec[line] = (prev[1], bytes_prefix_ok(p_bytes, prev[4], prev[5]))

    def resolve(self) -> dict:
        """After the evaluation pass: the final root and predecessors. Returns ``line → {check: (prefix length,
        digest)}`` for the calls whose root or predecessor changed after they were read (out-of-order files)."""
        fix: dict = {}
        for key, members in self.policy.items():
            root = self.roots[key]
            for k, m in enumerate(members):
                line = m[1]
                s_root, s_ok, s_prev, s_tito = self.spec[line]
                is_root = root[1] == line
                root_ok = None if is_root else (s_ok if s_root == root[1] else None)
                if not is_root and s_root != root[1]:
                    fix.setdefault(line, {})["root"] = (root[2], root[3])
                prev = members[k - 1] if k else None
                tito = None if prev is None else (s_tito if prev[1] == s_prev else None)
                if prev is not None and prev[1] != s_prev:
                    fix.setdefault(line, {})["tito"] = (prev[2], prev[3])
                self.final[line] = [is_root, root_ok, tito]
        self.spec, self.policy = {}, {}
        self.chain_ok = {}
        for members in self.samples.values():
            for prev, cur in zip(members, members[1:]):
                spec = self.chain_spec.get(cur[1])
                if spec is not None and spec[0] == prev[1]:
                    self.chain_ok[cur[1]] = spec[1]
                else:
                    fix.setdefault(cur[1], {})["chain"] = (prev[4], prev[5])
        self.chain_spec = {}
        return fix

    def apply_fixes(self, line, rec, checks: dict):
        """Recompute the prefix checks of one re-read record against its final root / predecessors."""
        prompt = rec["prompt"]["token_ids"] if rec is not None and line not in self.malformed else None
        for check, (length, want) in checks.items():
            ok = prompt is not None and ids_prefix_ok(prompt, length, want)
            if check == "chain":
                self.chain_ok[line] = ok
            else:
                self.final[line][1 if check == "root" else 2] = ok

    def finish(self):
        """Mark the first break of every merged sample and every later call of that sample (R9,
        docs/fidelity-rules.md#rules-r0r9)."""
        for key, members in self.samples.items():
            broken = False
            for m in members[1:]:
                if not broken and not self.chain_ok.get(m[1], False):
                    broken = True
                    self.chain_breaks.append(
                        {"run_id": key[0], "sample_id": key[1], "call_id": m[2], "call_index": m[0], "line": m[1]}
                    )
                if broken:
                    self.broken_lines.add(m[1])
        self.merged_samples = len(self.samples)
        self.samples, self.chain_ok = {}, {}

    def lineage(self, line, run, li: dict) -> Lineage:
        lin = Lineage()
        final = self.final.get(line)
        if final is not None:
            lin.is_root, lin.root_prefix_ok, lin.tito_prefix_ok = final
        src = li["context_source"]
        lin.context_source_present = src is not None and (run, src) in self.first_line
        lin.chain_broken = line in self.broken_lines
        return lin
