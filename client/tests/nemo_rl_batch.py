"""A NeMo RL GRPO ``train_data`` batch, built the way NeMo RL builds it (written from reading
nemo_rl/algorithms/grpo.py, nemo_rl/experience/rollouts.py and nemo_rl/models/generation/vllm/utils.py
``pad_and_align_routed_expert_indices``), not captured from a run:

* one conversation per row, right padded; ``token_mask`` 1 on assistant tokens, tool turns 0;
* ``routed_experts`` [B, S, layers, top_k]: row j = what vLLM chose processing token j, for j < input_length − 1;
  a route vLLM did not return is −1; the last real row and the padding hold the placeholder 0..top_k−1.

Shared by the client's tests (test_nemo_rl.py) and the repository's routing audit test
(tests/routing/test_nemo_rl_routes.py)."""

import numpy as np

S, L, K, E = 12, 3, 2, 8


def train_batch(seed=0):
    rng = np.random.default_rng(seed)
    B = 3
    lengths = np.array([8, 11, 6])
    ids = rng.integers(5, 100, (B, S))
    mask = np.zeros((B, S), np.int8)
    mask[0, 3:8] = 1  # prompt 3 tokens, one 5-token answer
    mask[1, 2:5] = 1  # multi-turn: answer, tool output (5..7, masked), answer
    mask[1, 8:11] = 1
    mask[2, 2:6] = 1  # a sample dropped from the loss (sample_mask 0)
    gen = np.where(mask, -rng.uniform(0.01, 3, (B, S)), 0.0)
    prev = np.where(mask, gen + rng.normal(0, 0.01, (B, S)).clip(-0.005, 0.005), rng.normal(size=(B, S)))
    engine_rows = np.stack([[[rng.permutation(E)[:K] for _ in range(L)] for _ in range(S)] for _ in range(B)])
    routes = np.broadcast_to(np.arange(K), (B, S, L, K)).copy()  # the placeholder route
    for b in range(B):
        n = lengths[b] - 1  # rows vLLM returns: one per token it processed
        routes[b, :n] = engine_rows[b, :n]
    routes[1, 6] = -1  # a route vLLM did not return (NeMo RL's missing-route sentinel)
    return {
        "input_ids": ids,
        "input_lengths": lengths,
        "generation_logprobs": gen,
        "prev_logprobs": prev,
        "token_mask": mask,
        "sample_mask": np.array([1.0, 1.0, 0.0]),
        "routed_experts": routes.astype(np.int16),
    }
