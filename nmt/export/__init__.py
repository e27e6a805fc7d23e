"""Exports of an nmt checkpoint for other runtimes (each an optional extra), and `nmt export`:

ctranslate2   CTranslate2's model directory (model.bin, the shared vocabulary, the SentencePiece
              model), read back by the ctranslate2 engine (nmt.infer.engine_ctranslate2)
huggingface   a Hugging Face Marian directory (config.json, safetensors weights, vocabulary)
argos         an Argos Translate package (.argosmodel: metadata, the CTranslate2 export)
onnx          ONNX graphs of the encoder and the cached decoder step, greedy with ONNX Runtime
command       `nmt export ctranslate2 / huggingface / argos / onnx`
"""
