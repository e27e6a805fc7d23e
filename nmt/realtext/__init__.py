"""Real text in, real text out, above the search, and the one pipeline every door runs:

spans       which output characters came from which source characters (piece alignment, or a guess)
scan        markup read in one pass, in time linear in its length
markup      inline HTML/XML: the tags taken out and projected back
segment     sentences of a paragraph (sentencex, a window at a time); long sentences cut at clauses
casing      ALL-CAPS / Title-Case sentences translated in normal case and recased
job         TextOptions and TextJob: the units a text gives the model, the text from their outputs
pipeline    TranslationRequest, Plan, search_units, translate_request: what `nmt translate`,
            Translator.translate, POST /translate and LibreTranslate's /translate run
glossary    terms (TSV) matched in each sentence, their targets its constraints
document    .txt, .md, .html, .xml, .docx read and written in their format
command     `nmt translate`'s real-text options and its run of a request (progress, warnings)

It sits above nmt.infer's search: it calls a translator's ``translate_nbest`` and its model's
alignment, and nmt.infer.text's Translator.translate calls the pipeline.
"""
