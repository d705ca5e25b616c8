"""Routed experts as inference engines return them → the ``[response tokens, layers, top_k]`` array of fcr/1
(docs/routing.md, "From engines"). Shapes written from the engines' code, not guessed:

* **vLLM** (``--enable-return-routed-experts``): offline, ``CompletionOutput.routed_experts`` is a numpy array
  ``[rows, layers, top_k]``; the OpenAI server puts the same array in ``choices[i].routed_experts`` as base64 of an
  ``.npy`` file. One row per token that went through a forward pass — prompt + completion − 1 (the last sampled token
  is never forwarded); row j routes the forward of token j, which predicts token j + 1.
* **SGLang** (``--enable-return-routed-experts``, request ``return_routed_experts``): ``meta_info.routed_experts`` is
  base64 of the raw bytes of an int32 array, flattened in the order (token, layer, slot), again one row per forwarded
  token (slime reshapes it to ``[len(tokens) − 1, num_layers, moe_router_topk]``); the layer count is not in the
  payload, so the importer must be told it (``num_layers``). Older servers returned a nested list instead.

The rows that matter to a response token t are those of the forward that produced its distribution: row P + t − 1
for a prompt of P tokens. Both decoders return exactly those T rows, refuse payloads whose row count fits neither
P + T − 1 nor P + T (some writers keep a row for the last token) nor T (response rows only), and refuse anything
that does not decode, naming what was expected. No Django import.
"""

from __future__ import annotations

import base64
import binascii
import io

import numpy as np

MAX_PAYLOAD_BYTES = 1 << 30  # a payload this large is refused before decoding


class EngineRoutesError(ValueError):
    """A routed-experts payload that cannot be turned into response routes; the message says why."""


def response_rows(arr: np.ndarray, prompt_len: int, n_response: int) -> np.ndarray:
    """The T response rows of an engine's ``[rows, layers, top_k]`` array (see the module docstring)."""
    if arr.ndim != 3:
        raise EngineRoutesError(f"routed experts: expected [tokens, layers, top_k], got shape {list(arr.shape)}")
    rows = arr.shape[0]
    P, T = prompt_len, n_response
    if T == 0:
        return arr[:0]
    if P >= 1 and rows in (P + T - 1, P + T):
        return arr[P - 1 : P - 1 + T]
    if rows == T:
        return arr
    raise EngineRoutesError(
        f"routed experts have {rows} rows; expected prompt + response − 1 = {P + T - 1} "
        f"(one per forwarded token), {P + T} or the response's {T}"
    )


def _b64(payload: str) -> bytes:
    if len(payload) > MAX_PAYLOAD_BYTES * 4 // 3 + 4:
        raise EngineRoutesError(f"routed experts payload of {len(payload)} characters is above the limit")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as e:
        raise EngineRoutesError(f"routed experts: not valid base64 ({e})") from None


def decode_vllm(value) -> np.ndarray:
    """vLLM's ``routed_experts``: a numpy array (offline), a base64 ``.npy`` string (server) or a nested list."""
    if isinstance(value, np.ndarray):
        arr = value
    elif isinstance(value, str):
        try:
            arr = np.load(io.BytesIO(_b64(value)), allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise EngineRoutesError(f"routed experts: base64 payload is not an .npy array ({e})") from None
    elif isinstance(value, list):
        arr = _nested(value)
    else:
        raise EngineRoutesError(
            f"routed experts: expected an array, a base64 .npy string or a list, got {type(value).__name__}"
        )
    if not np.issubdtype(arr.dtype, np.integer):
        raise EngineRoutesError(f"routed experts: expected integer expert ids, got {arr.dtype}")
    return arr


def decode_sglang(value, *, num_layers: int | None, prompt_len: int, n_response: int) -> np.ndarray:
    """SGLang's ``meta_info.routed_experts``: base64 of flat int32 (needs ``num_layers``) or a nested list."""
    if isinstance(value, list):
        return _nested(value)
    if not isinstance(value, str):
        raise EngineRoutesError(
            f"meta_info.routed_experts: expected a base64 string or a list, got {type(value).__name__}"
        )
    raw = _b64(value)
    if len(raw) % 4:
        raise EngineRoutesError(f"meta_info.routed_experts: {len(raw)} bytes is not a whole number of int32 values")
    flat = np.frombuffer(raw, dtype="<i4")
    if not num_layers or num_layers < 1:
        raise EngineRoutesError(
            "meta_info.routed_experts is a flat int32 payload: give the model's number of MoE "
            "layers (--moe-layers) to reshape it"
        )
    rows = prompt_len + n_response - 1
    for r in (rows, rows + 1, n_response):
        if r > 0 and flat.size % (r * num_layers) == 0:
            return flat.reshape(r, num_layers, flat.size // (r * num_layers))
    raise EngineRoutesError(
        f"meta_info.routed_experts: {flat.size} values do not make [{rows}, {num_layers}, "
        f"top_k] (prompt + response − 1 rows, {num_layers} layers)"
    )


def _nested(value: list) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except ValueError as e:
        raise EngineRoutesError(f"routed experts: not a rectangular [tokens, layers, top_k] list ({e})") from None
    if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
        raise EngineRoutesError(f"routed experts: expected integer expert ids, got {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def vllm_response_routes(value, prompt_len: int, n_response: int) -> list:
    """fcr/1 ``rollout.routed_experts`` from vLLM's field (nested lists of ints)."""
    return response_rows(decode_vllm(value), prompt_len, n_response).astype(np.int64).tolist()


SGLANG_DTYPES = frozenset({None, "int32", "<i4", "i4"})  # what the flat payload is documented as


def sglang_response_routes(
    value, prompt_len: int, n_response: int, *, num_layers: int | None = None, start_len=None, dtype=None
) -> list:
    """fcr/1 ``rollout.routed_experts`` from SGLang's ``meta_info.routed_experts``. A declared
    ``routed_experts_start_len`` other than 0 (the rows then start at that token) or a declared dtype other than
    int32 is refused by name: reading such a payload as full-sequence int32 gives expert ids that mean nothing."""
    if start_len not in (None, 0) or type(start_len) is bool:
        raise EngineRoutesError(
            f"routed_experts_start_len {start_len!r}: the payload covers rows from that token on, "
            f"not the whole sequence; such partial routes are not read"
        )
    if not (dtype is None or isinstance(dtype, str)) or dtype not in SGLANG_DTYPES:
        raise EngineRoutesError(f"routed experts dtype {dtype!r} declared; only int32 payloads are read")
    arr = decode_sglang(value, num_layers=num_layers, prompt_len=prompt_len, n_response=n_response)
    return response_rows(arr, prompt_len, n_response).astype(np.int64).tolist()


def attach_rollout_routes(rec: dict, decode) -> None:
    """Set an imported record's ``rollout.routed_experts`` from ``decode(prompt_len, n_response)``. Routes that cannot
    be aligned (prompt ids unknown, response retokenized) or decoded are left out, and why goes to
    ``extra.routed_experts_unusable``: the routing audit then counts those tokens as unverifiable, never as agreeing."""
    p, r = rec.get("prompt") or {}, rec.get("response") or {}
    if p.get("provenance") not in ("engine", "engine_input"):
        reason = "prompt token ids unknown: routes cannot be aligned with the response"
    elif r.get("provenance") != "engine":
        reason = f"response ids are {r.get('provenance')}, not the engine's: routes cannot be aligned"
    else:
        try:
            rec["rollout"]["routed_experts"] = decode(len(p["token_ids"]), len(r["token_ids"]))
            return
        except EngineRoutesError as e:
            reason = str(e)
    if not isinstance(rec.get("extra"), dict):
        rec["extra"] = {}
    rec["extra"]["routed_experts_unusable"] = reason
