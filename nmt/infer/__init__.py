"""The inference layer (the search and its engines; real text above it is nmt.realtext):

results             Translation, TranslateError, ConstraintsError (a leaf)
options             SearchOptions: how to search, one frozen value every layer takes
constraints         lexical constraints (Post & Vilar 2018)
topk, beam_rows     beam search's selection of the best extensions; its rows and their copies
search              beam / greedy search (section 6.1), sampling, ensembles, over the model's
                    encode / decode_step
packed, quantize    fast float32 (oneDNN) and int8 linear layers for CPU inference
shortlist, vocab_restriction   vocabulary shortlists and the model searched over part of the vocabulary
attention_maps      attention weights and alignments
mbr, rerank, tune   choosing among the beam's n-best; choosing the length penalty's alpha
text                TextTranslator: sentences to ids and back, what every engine shares
engine_ctranslate2  the CTranslate2 engine (over nmt.export.ctranslate2's export)
translate           Translator: the torch engine; Translator.load picks the engine
plot_attention      heatmaps of the attention weights
command, tune_command, shortlist_command, plot_attention_command   `nmt translate / tune-alpha /
                    shortlist / plot-attention`
"""
