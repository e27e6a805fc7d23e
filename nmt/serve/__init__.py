"""`nmt serve`: HTTP API (app), dynamic batching (batcher), the web page (page, static/), the
command line (options). Needs the optional extra: pip install "nmt[serve]"."""
