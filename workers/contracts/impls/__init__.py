"""Calibration fixtures (docs/contract-language.md#three-state-calibration): conforming references,
violating implementations and functional-check baselines, addressable as
``workers.contracts.impls.<module>:<function>``. Every function follows the
docs/contract-language.md#the-twelve-classes signature of its class."""
