"""The four doors of one request: `nmt translate`, ``Translator.translate_request``, nmt's POST
/translate and LibreTranslate's /translate, each given the same texts in its own syntax, their
outputs read back as (best, alternatives) per text (tests/test_pipeline.py, test_multilingual.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

BEAM = 4  # LibreTranslate searches with beam max(4, alternatives + 1)


def cli_door(run: Path, texts: list[str], tmp: Path, *, fmt: str, target: str | None, nbest: int) -> list:
    from nmt.cli import main

    src, out = tmp / "door.in", tmp / "door.out"
    src.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    args = ["translate", str(run), "-i", str(src), "-o", str(out), "--quiet", "--precision", "fp32"]
    args += ["--beam", str(BEAM), "--nbest", str(nbest), "--format", fmt]
    args += ["--target-lang", target] if target else []
    assert main(args) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    if nbest == 1:
        return [(line, []) for line in lines]
    by_text: dict[int, list[str]] = {}
    for line in lines:
        n, _, text = line.split("\t", 2)
        by_text.setdefault(int(n) - 1, []).append(text)
    return [(by_text[k][0], by_text[k][1:]) for k in range(len(texts))]


def python_door(run: Path, texts: list[str], *, fmt: str, target: str | None, nbest: int) -> list:
    from nmt import Translator
    from nmt.infer.options import SearchOptions
    from nmt.realtext.job import TextOptions
    from nmt.realtext.pipeline import TranslationRequest

    translator = Translator.load(run, device="cpu", precision="fp32")
    request = TranslationRequest(
        texts, text=TextOptions(format=fmt), search=SearchOptions(beam=BEAM, nbest=nbest), target_lang=target
    )
    done = translator.translate_request(request)
    if nbest == 1:  # the plain call gives the same best texts
        assert translator.translate(texts, text=TextOptions(format=fmt), target_lang=target) == [
            t.text for t in done
        ]
    return [(t.text, [a.text for a in t.nbest[1:]]) for t in done]


def http_doors(run: Path, texts: list[str], *, fmt: str, target: str | None, nbest: int) -> tuple[list, list]:
    from fastapi.testclient import TestClient

    from nmt.serve.app import create_app
    from nmt.serve.command import add_serve_args, build_models

    parser = argparse.ArgumentParser()
    add_serve_args(parser)
    models = build_models({"m": run}, parser.parse_args([f"m={run}"]))
    with TestClient(create_app(models)) as c:
        body = {"text": texts, "format": fmt, "beam": BEAM, "nbest": nbest, "target_lang": target}
        r = c.post("/translate", json=body)
        assert r.status_code == 200, r.text
        own = [(t["text"], [a["text"] for a in t["nbest"][1:]]) for t in r.json()["translations"]]
        lt_body = {"q": texts, "source": "en", "target": target or "de", "format": fmt}
        if nbest > 1:
            lt_body["alternatives"] = nbest - 1
        r = c.post("/libretranslate/translate", json=lt_body)
        assert r.status_code == 200, r.text
        alternatives = r.json().get("alternatives") or [[] for _ in texts]
        lt = list(zip(r.json()["translatedText"], alternatives))
    return own, lt


def four_doors(run: Path, texts: list[str], tmp: Path, *, fmt="text", target=None, nbest=1) -> dict:
    """Each door's (best, alternatives) per text."""
    own, lt = http_doors(run, texts, fmt=fmt, target=target, nbest=nbest)
    return {
        "cli": cli_door(run, texts, tmp, fmt=fmt, target=target, nbest=nbest),
        "python": python_door(run, texts, fmt=fmt, target=target, nbest=nbest),
        "http": own,
        "libretranslate": [(best, list(alts)) for best, alts in lt],
    }
