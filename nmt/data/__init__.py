"""The data layer: `prepare` (the `nmt prepare` pipeline), `lines` (reading and cleaning text),
`bpe` (the shared SentencePiece vocabulary), `binarize` (ids on disk), `dataset` (a prepared
directory read back), `download` (corpora with checksums) and `batching` (the one length batcher,
for training and translation)."""
