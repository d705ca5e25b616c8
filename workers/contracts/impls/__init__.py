"""Calibration fixtures (spec §7.2 ``calibration``): conforming references, violating implementations and
functional-check baselines, addressable as ``workers.contracts.impls.<module>:<function>``. Every function
follows the spec §11 signature of its class."""
