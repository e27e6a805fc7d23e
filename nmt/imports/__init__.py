"""`nmt import`: models trained elsewhere as nmt checkpoints (the reverse of nmt.export).

``from_marian`` reads a transformers MarianMTModel directory (OPUS-MT), ``from_ctranslate2`` a CTranslate2
model directory (its model.bin read directly), ``from_argos`` an Argos Translate package; ``vocabulary``
turns their vocabularies and SentencePiece models into nmt's one ``spm.model`` (nmt.vocab's ids),
``imported`` writes the checkpoint. See docs/importing.md.
"""
