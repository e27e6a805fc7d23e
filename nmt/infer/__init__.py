"""The inference layer: `search` (beam / greedy search outside the model) and `translate`
(the `Translator` API and `nmt translate`)."""
