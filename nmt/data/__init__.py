"""The data layer: `prepare` (cleaning, shared BPE, binarized splits), `download` (corpora with
checksums) and `batching` (the one length batcher, for training and translation)."""
