"""`nmt serve [NAME=]CHECKPOINT ...`: arguments, their checks, model loading; then the server
(nmt/serve/server.py).

Imports FastAPI/uvicorn only when run, so `nmt` works without the `serve` extra."""

from __future__ import annotations

import argparse
import inspect
import ipaddress
import json
import sys
from pathlib import Path

from ..errors import UserError


class ServeError(UserError):
    """A user-facing error of `nmt serve`."""


def add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "models",
        nargs="+",
        metavar="[NAME=]CHECKPOINT",
        help="checkpoint or run directories, optionally named (en-de=runs/a de-en=runs/b); "
        "the default name is the directory's",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--engine", choices=("torch", "ctranslate2"), default="torch")
    parser.add_argument(
        "--max-batch-tokens",
        type=int,
        default=4096,
        help="source tokens a worker takes at once (and padded tokens per search batch)",
    )
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=50.0,
        help="the longest a worker waits for the requests it expects (as many as its previous "
        "batch answered) before translating; a lone client never waits",
    )
    parser.add_argument("--no-batching", action="store_true", help="translate each request alone")
    parser.add_argument("--max-queue", type=int, default=1024, help="sentences waiting per model before 503")
    parser.add_argument(
        "--max-queue-work",
        type=int,
        default=1 << 20,
        help="work (source pieces x beam) waiting per model before 503",
    )
    parser.add_argument(
        "--max-request-work",
        type=int,
        default=65536,
        help="work (source pieces, EOS included, x beam) per request before 413",
    )
    parser.add_argument("--max-sentences", type=int, default=256, help="sentences per request before 413")
    parser.add_argument("--max-chars", type=int, default=20000, help="characters per request before 413")
    parser.add_argument("--max-body-bytes", type=int, default=1 << 20, help="request body size before 413")
    parser.add_argument(
        "--max-attention-cells",
        type=int,
        default=2_000_000,
        help="numbers one /attention answer may hold (layers x heads x target x source) before 413",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds a request may wait and run before 504 (its work is then cancelled); "
        "also how long /health allows a busy worker without progress",
    )
    parser.add_argument(
        "--slice-ms",
        type=float,
        default=50.0,
        help="how long a search runs before it lets smaller waiting requests run (fair scheduling)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=256,
        help="requests answered at once before uvicorn answers 503 (uvicorn's limit_concurrency, "
        "counted over requests being answered: idle connections and those still sending their "
        "request do not count)",
    )
    parser.add_argument(
        "--read-timeout",
        type=float,
        default=10.0,
        help="seconds a connection has, from its opening and from each answer, to send a whole "
        "request (headers and body), else it is closed: idle and slow (slowloris) clients",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        default=20.0,
        help="seconds SIGTERM waits for requests in flight before giving up on them (a second "
        "SIGTERM or SIGINT stops at once)",
    )
    parser.add_argument(
        "--allowed-hosts",
        default=None,
        help="comma-separated Host header names served (default: localhost,127.0.0.1,::1 "
        "when --host is a loopback address, else any)",
    )
    parser.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin (https://example.org) whose pages may POST here besides the server's own "
        "(the host and port of the Host header, in any scheme); repeatable; * = any. A POST whose "
        "Origin header is another is a 403; requests without Origin (curl, API clients) are served",
    )
    parser.add_argument("--api-key-file", help="file whose first line is the API key clients must send")
    parser.add_argument(
        "--glossary",
        default=None,
        metavar="FILE",
        help="terminology for every request (SOURCE<TAB>TARGET per line, as nmt translate --glossary; "
        "a request's own glossary adds to it); torch engine",
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--shortlist",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="a vocabulary shortlist (`nmt shortlist`) the model NAME (without NAME: the only "
        "model) searches with (nmt.infer.shortlist; default: the checkpoint's own "
        "CHECKPOINT/shortlist.txt where it has one); sentences with constraints or glossary terms "
        "search the full vocabulary",
    )
    parser.add_argument(
        "--no-shortlist",
        action="store_true",
        help="every model scores its full vocabulary, also where its checkpoint carries a shortlist",
    )


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


def parse_shortlist_args(specs: list[str], names: list[str]) -> dict[str, Path]:
    """--shortlist [NAME=]FILE options -> {model name: shortlist file}."""
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            if len(names) != 1:
                raise ServeError(f"--shortlist {spec}: {len(names)} models are served: say which (NAME=FILE)")
            name, path = names[0], spec
        if name not in names:
            raise ServeError(f"--shortlist {spec}: no model named {name!r} (served: {', '.join(names)})")
        if name in out:
            raise ServeError(f"--shortlist {spec}: model {name!r} has a shortlist already")
        if not Path(path).is_file():
            raise ServeError(f"--shortlist {spec}: {path}: no such file")
        out[name] = Path(path)
    return out


def load_translator(path: Path, *, engine: str, device: str, shortlist: Path | bool | None = None):
    from ..checkpoint import CheckpointError
    from ..export.ctranslate2 import ExportError
    from ..infer.translate import TranslateError, Translator

    kwargs = {"device": device, "precision": "fp32"}
    if shortlist is not None:
        kwargs["shortlist"] = shortlist
    if engine != "torch":
        if "engine" not in inspect.signature(Translator.load).parameters:
            raise ServeError(
                f"--engine {engine}: this nmt has no {engine} engine "
                f"(Translator.load takes no engine argument); use --engine torch"
            )
        kwargs["engine"] = engine
    try:
        return Translator.load(path, **kwargs)
    except (CheckpointError, ExportError, TranslateError) as e:
        raise ServeError(str(e)) from None


def model_info(name: str, path: Path, translator) -> dict:
    from ..checkpoint import read_config, resolve_checkpoint

    export = Path(path) / "nmt_export.json"
    if export.is_file():  # an `nmt export ctranslate2` directory: its model config, no languages
        config = {"model": json.loads(export.read_text(encoding="utf-8")).get("model", {})}
    else:
        config = read_config(resolve_checkpoint(path))
    data = config.get("data") or {}
    info = {
        "name": name,
        "checkpoint": Path(path).resolve().name,
        "src_lang": data.get("src_lang"),
        "tgt_lang": data.get("tgt_lang"),
        "tgt_langs": data.get("tgt_langs"),  # a multi-target model's (nmt.data.multilingual)
        "config": {"model": config.get("model", {})},
    }
    model = getattr(translator, "model", None)
    if model is not None and hasattr(model, "parameters"):
        from ..parameter_counts import parameter_counts

        info["parameters"] = parameter_counts(model)["total"]
    sp = getattr(translator, "sp", None)
    info["vocabulary_size"] = (
        sp.get_piece_size() if sp is not None else config.get("model", {}).get("src_vocab_size")
    )
    return info


def shortlist_name(translator, given: Path | None, path: Path) -> str | None:
    """The file name of the shortlist a served model searches with: --shortlist's, or its
    checkpoint's own; None: the full vocabulary."""
    from ..infer.shortlist import of_checkpoint

    if getattr(translator, "shortlist", None) is None:
        return None
    own = given or of_checkpoint(path)
    return None if own is None else own.name


def build_models(paths: dict[str, Path], args: argparse.Namespace) -> dict:
    from .batcher import Batcher
    from .state import ServedModel

    models = {}
    if args.no_shortlist and args.shortlist:
        raise ServeError("--shortlist and --no-shortlist: give one")
    shortlists = parse_shortlist_args(args.shortlist, list(paths))
    for name, path in paths.items():
        shortlist = False if args.no_shortlist else shortlists.get(name)
        translator = load_translator(path, engine=args.engine, device=args.device, shortlist=shortlist)
        batcher = Batcher(
            translator,
            max_batch_tokens=args.max_batch_tokens,
            max_wait_ms=args.max_wait_ms,
            max_queue=args.max_queue,
            max_queue_work=args.max_queue_work,
            slice_ms=args.slice_ms,
            batching=not args.no_batching,
        )
        models[name] = ServedModel(name, batcher, model_info(name, path, translator))
        models[name].info["shortlist"] = shortlist_name(translator, shortlists.get(name), path)
    return models


def allowed_hosts(args: argparse.Namespace) -> tuple[str, ...] | None:
    if args.allowed_hosts is not None:
        hosts = tuple(h.strip() for h in args.allowed_hosts.split(",") if h.strip())
        if not hosts:
            raise ServeError(f"--allowed-hosts {args.allowed_hosts!r}: no host name")
        return None if "*" in hosts else hosts
    return ("localhost", "127.0.0.1", "::1") if is_loopback(args.host) else None


def allowed_origins(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The --allow-origin values as nmt/serve/guard.py compares them (None: any origin)."""
    from .guard import normal_origin

    origins = []
    for origin in args.allow_origin:
        if origin.strip() == "*":
            return None
        normal = normal_origin(origin)
        if normal is None:
            raise ServeError(f"--allow-origin {origin!r}: expected SCHEME://HOST[:PORT] (no path), null or *")
        origins.append(normal)
    return tuple(origins)


def limits(args: argparse.Namespace):
    from .state import Limits

    for flag in (
        "max_batch_tokens",
        "max_queue",
        "max_queue_work",
        "max_request_work",
        "max_sentences",
        "max_chars",
        "max_body_bytes",
        "max_attention_cells",
        "max_connections",
    ):
        if getattr(args, flag) < 1:
            raise ServeError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be positive")
    for flag in ("timeout", "shutdown_grace", "slice_ms", "read_timeout"):
        if not getattr(args, flag) > 0:
            raise ServeError(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be > 0")
    if args.max_wait_ms < 0:
        raise ServeError(f"--max-wait-ms {args.max_wait_ms}: must be >= 0")
    return Limits(
        max_chars=args.max_chars,
        max_sentences=args.max_sentences,
        max_request_work=args.max_request_work,
        max_body_bytes=args.max_body_bytes,
        max_attention_cells=args.max_attention_cells,
        timeout=args.timeout,
    )


def warn_if_open(host: str, api_key: str | None) -> None:
    """Warns on stderr when the server is reachable from other machines without an API key."""
    if not is_loopback(host) and api_key is None:
        print(
            f"nmt serve: warning: listening on {host}, reachable from other machines, with NO "
            f"authentication: anyone who can connect can use it (set --api-key-file)",
            file=sys.stderr,
        )


def run_serve(args: argparse.Namespace, overrides: dict) -> int:
    """`nmt serve`: checks the options, loads the models and serves them until a signal (exit
    status 0, or 1 when a second signal stopped it at once)."""
    from ..realtext.glossary import read_glossary

    try:
        import uvicorn  # noqa: F401  (looked for first, so the message names it as it always has)

        from .app import create_app
        from .server import serve
    except ImportError as e:
        raise ServeError(f'{e.name} is not installed: pip install "nmt[serve]"') from None
    bounds = limits(args)
    hosts = allowed_hosts(args)
    origins = allowed_origins(args)
    paths = parse_model_args(args.models)
    api_key = read_api_key(args.api_key_file) if args.api_key_file else None
    warn_if_open(args.host, api_key)
    glossary = read_glossary(args.glossary) if args.glossary else None  # before the models load
    models = build_models(paths, args)
    app = create_app(
        models,
        api_key=api_key,
        limits=bounds,
        allowed_hosts=hosts,
        allowed_origins=origins,
        glossary=glossary,
    )
    names = ", ".join(f"{n}={p}" for n, p in paths.items())
    print(f"nmt serve: {names} on http://{args.host}:{args.port}/ (API docs at /docs)", file=sys.stderr)
    return serve(
        app,
        [m.batcher for m in models.values()],
        host=args.host,
        port=args.port,
        shutdown_grace=args.shutdown_grace,
        max_connections=args.max_connections,
        read_timeout=args.read_timeout,
    )
