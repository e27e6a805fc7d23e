"""`nmt serve`: the HTTP API with dynamic batching and a web page. Needs the optional extra:
pip install "nmt[serve]".

- app: builds the FastAPI app from the parts below (and documents the API)
- routes: the endpoints (/translate, /attention, /health, /models, /metrics)
- schemas: the request and answer bodies (pydantic)
- validation: reading and checking a request (API key, model, body, text, limits, constraints)
- state: what the routes share (models, limits, API key, metrics)
- errors: ``ApiError`` and the JSON body of every error
- guard: the middleware (Host, body size, JSON 500s, counting each answer)
- prometheus: the metrics at /metrics
- batcher: the queue, fair scheduling and one worker thread per model
- page (+ static/): the web page at /
- command: `nmt serve`'s arguments, model loading and run
- server: uvicorn with a graceful shutdown on signals
"""
