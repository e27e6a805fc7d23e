"""The training layer: `trainer` (the loop), `command` (`nmt train`: configuration and resume checks),
`state` (RNG and optimizer state for exact resume), `average` (`nmt average`), `loss` (label
smoothing), `optim` (Adam and the eq. 3 schedule), `validation`, `distributed`."""
