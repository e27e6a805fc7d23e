"""`nmt serve [NAME=]CHECKPOINT ...`: arguments, model loading and the uvicorn server.

Imports FastAPI/uvicorn only when run, so `nmt` works without the `serve` extra."""

from __future__ import annotations

import argparse
import inspect
import ipaddress
import signal
import sys
from pathlib import Path


class ServeError(Exception):
    """A user-facing error of `nmt serve`."""


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("models", nargs="+", metavar="[NAME=]CHECKPOINT",
                        help="checkpoint or run directories, optionally named (en-de=runs/a de-en=runs/b); "
                             "the default name is the directory's")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--engine", choices=("torch", "ctranslate2"), default="torch")
    parser.add_argument("--max-batch-tokens", type=int, default=4096,
                        help="source tokens a worker takes at once (and padded tokens per search batch)")
    parser.add_argument("--max-wait-ms", type=float, default=50.0,
                        help="the longest a worker waits for the requests it expects (as many as its previous "
                             "batch answered) before translating; a lone client never waits")
    parser.add_argument("--no-batching", action="store_true", help="translate each request alone")
    parser.add_argument("--max-queue", type=int, default=1024, help="sentences waiting per model before 503")
    parser.add_argument("--max-sentences", type=int, default=256, help="sentences per request before 413")
    parser.add_argument("--max-chars", type=int, default=20000, help="characters per request before 413")
    parser.add_argument("--api-key-file", help="file whose first line is the API key clients must send")
    parser.add_argument("--device", default="cpu")


def parse_model_args(specs: list[str]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            name, path = Path(spec).resolve().name, spec
        if not name or not path:
            raise ServeError(f"{spec!r}: expected NAME=CHECKPOINT or CHECKPOINT")
        if name in out:
            raise ServeError(f"{spec!r}: model name {name!r} given twice")
        if not Path(path).exists():
            raise ServeError(f"{path}: no such checkpoint or run directory")
        out[name] = Path(path)
    return out


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_api_key(path: str) -> str:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ServeError(f"{path}: cannot read the API key ({e})") from None
    key = lines[0].strip() if lines else ""
    if not key:
        raise ServeError(f"{path}: line 1: empty API key")
    return key


def load_translator(path: Path, *, engine: str, device: str):
    from ..checkpoint import CheckpointError
    from ..infer.translate import Translator

    kwargs = {"device": device, "precision": "fp32"}
    if engine != "torch":
        if "engine" not in inspect.signature(Translator.load).parameters:
            raise ServeError(f"--engine {engine}: this nmt has no {engine} engine "
                             f"(Translator.load takes no engine argument); use --engine torch")
        kwargs["engine"] = engine
    try:
        return Translator.load(path, **kwargs)
    except CheckpointError as e:
        raise ServeError(str(e)) from None


def model_info(name: str, path: Path, translator) -> dict:
    from ..checkpoint import read_config, resolve

    config = read_config(resolve(path))
    data = config.get("data") or {}
    info = {"name": name, "checkpoint": str(path), "src_lang": data.get("src_lang"),
            "tgt_lang": data.get("tgt_lang"), "config": {"model": config.get("model", {})}}
    model = getattr(translator, "model", None)
    if model is not None and hasattr(model, "parameters"):
        from ..model import parameter_counts

        info["parameters"] = parameter_counts(model)["total"]
    sp = getattr(translator, "sp", None)
    info["vocabulary_size"] = sp.get_piece_size() if sp is not None else config.get("model", {}).get("src_vocab_size")
    return info


def build_models(paths: dict[str, Path], args: argparse.Namespace) -> dict:
    from .app import ServedModel
    from .batcher import Batcher

    models = {}
    for name, path in paths.items():
        translator = load_translator(path, engine=args.engine, device=args.device)
        batcher = Batcher(translator, max_batch_tokens=args.max_batch_tokens, max_wait_ms=args.max_wait_ms,
                          max_queue=args.max_queue, batching=not args.no_batching)
        models[name] = ServedModel(name, batcher, model_info(name, path, translator))
    return models


def run_serve(args: argparse.Namespace, overrides: dict) -> int:
    try:
        import uvicorn

        from .app import Limits, create_app
    except ImportError as e:
        raise ServeError(f"{e.name} is not installed: pip install \"nmt[serve]\"") from None
    for flag in ("max_batch_tokens", "max_queue", "max_sentences", "max_chars"):
        if getattr(args, flag) < 1:
            raise ServeError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be positive")
    if args.max_wait_ms < 0:
        raise ServeError(f"--max-wait-ms {args.max_wait_ms}: must be >= 0")
    paths = parse_model_args(args.models)
    api_key = read_api_key(args.api_key_file) if args.api_key_file else None
    if not is_loopback(args.host) and api_key is None:
        print(f"nmt serve: warning: listening on {args.host}, reachable from other machines, with NO "
              f"authentication: anyone who can connect can use it (set --api-key-file)", file=sys.stderr)
    models = build_models(paths, args)
    app = create_app(models, api_key=api_key,
                     limits=Limits(max_chars=args.max_chars, max_sentences=args.max_sentences))
    names = ", ".join(f"{n}={p}" for n, p in paths.items())
    print(f"nmt serve: {names} on http://{args.host}:{args.port}/ (API docs at /docs)", file=sys.stderr)
    # uvicorn answers SIGTERM/SIGINT by refusing new connections and finishing in-flight
    # requests; the app's lifespan then drains the batchers. uvicorn re-raises the signal to the
    # handler installed before it: a no-op here, so a drained server exits with status 0.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=60)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("nmt serve: stopped (in-flight requests answered)", file=sys.stderr)
    return 0
