"""Training engine (no Django): losses in one gradient form, a small causal transformer, the training-step audit,
the exact bound-tightness study (docs/masks.md, docs/bounds.md, docs/training.md). Masks come from
:mod:`workers.certify`.

* :mod:`.losses`     PPO/GRPO clip, TIS, Seq-TIS/MIS, IcePop, CISPO, DPPO, TRM, C-DPPO as M·w·Â·∇log π
* :mod:`.model`      a seeded tiny causal transformer (no downloads) and sampling under rollout numerics
* :mod:`.audit`      training-step audit: rollout vs trainer numerics, exact TV/KL, exact vs top-K certificates
* :mod:`.tightness`  exact enumeration of J(π_θ) − J(π_roll) − L against every TRM bound
* ``python -m workers.training audit|tightness``
"""
