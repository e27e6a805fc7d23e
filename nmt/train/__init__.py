"""The training layer: `trainer` (the loop, `nmt train`, `nmt average`), `loss` (label smoothing),
`optim` (Adam and the eq. 3 schedule)."""
