"""The benchmarks' own logic, on the CPU: benchmarks/gpu.py (its FLOP count and its table, in tiny
mode), benchmarks/stopping_rules.py (its row counts) and benchmarks/decode_timing.py (how decoding
speed is timed)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import CPU_PATH_VARIABLES
from test_trainer import train
from torch.utils.flop_counter import FlopCounterMode

from nmt.config import ModelConfig
from nmt.data.batching import collate
from nmt.model import Transformer
from nmt.precision import resolve_precision

# the table test is numerics (conftest.NUMERICS_TESTS): its decode rows follow the precision `auto` picks

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("gpu_bench", REPO / "benchmarks" / "gpu.py")
gpu = sys.modules["gpu_bench"] = importlib.util.module_from_spec(SPEC)  # dataclasses look the module up
SPEC.loader.exec_module(gpu)

# one layer each side, d_model 8, d_ff 16, 2 heads of d_k = d_v = 4 (hk = hv = 8), 10 target pieces
SMALL = ModelConfig(
    src_vocab_size=10, tgt_vocab_size=10, n_layers=1, d_model=8, d_ff=16, n_heads=2, d_k=4, d_v=4
)


def test_forward_flops_is_the_hand_count_of_a_small_model():
    # s = 3 source positions, t = 2 target positions; 2 FLOPs per multiply-add
    proj = 2 * 8 * (8 + 8 + 8) + 2 * 8 * 8  # q, k, v (8 -> 8 each), out (8 -> 8): 512 per position
    ffn = 2 * 8 * 16 * 2  # fc1 8 -> 16, fc2 16 -> 8: 512 per position
    encoder = 3 * (proj + ffn) + 2 * 3 * 3 * 8 * 2  # + Q K^T and A V over 3 x 3: 3072 + 288
    decoder = (
        2 * (proj + ffn)
        + 2 * 2 * 2 * 8 * 2  # self-attention, the 2 x 2 square whole: 2048 + 128
        + 2 * (2 * 8 * 8 * 2)  # cross-attention q and out of 2 positions: 512
        + 3 * (2 * 8 * 8 * 2)  # cross-attention k and v of 3 memory positions: 768
        + 2 * 2 * 3 * 8 * 2
    )  # cross-attention scores and sum over 2 x 3: 192
    output = 2 * 2 * 8 * 10  # 320
    assert encoder + decoder + output == 7328
    assert gpu.forward_flops(SMALL, 3, 2) == 7328


def test_update_flops_equal_the_matrix_products_torch_counts_in_a_training_step():
    """bf16 autocast on the CPU computes attention with explicit matrix products (nmt.model's
    explicit_attention), so FlopCounterMode sees every product the formula counts: forward and
    backward of two pairs of equal lengths (no padding) are update_flops."""
    torch.manual_seed(0)
    model = Transformer(SMALL).train()
    batch = collate(
        [
            (torch.tensor([5, 6, 7, 8]).numpy(), torch.tensor([4, 9, 5]).numpy()),
            (torch.tensor([9, 8, 7, 6]).numpy(), torch.tensor([6, 6, 4]).numpy()),
        ]
    )
    keep = batch.tgt_out.ne(0)  # (2, 4) all True
    with FlopCounterMode(display=False) as counter:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(batch.src, batch.tgt_in, keep)  # (8, 10)
        logits.float().logsumexp(-1).sum().backward()
    assert (
        counter.get_total_flops()
        == gpu.update_flops(SMALL, [batch])
        == 3 * 2 * gpu.forward_flops(SMALL, 5, 4)
    )


def table(stdout: str) -> list[dict]:
    """The rows of the one markdown table in ``stdout`` as dicts keyed by its header."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert lines[1] == "|" + "---|" * len(header)
    assert sum(line.startswith("| task |") for line in lines) == 1  # one table
    return [dict(zip(header, (c.strip() for c in line[1:-1].split("|")))) for line in lines[2:]]


def clean_env(**extra: str) -> dict[str, str]:
    """A bare environment for a benchmark process, keeping the CPU path this run takes (conftest:
    ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, CT2_FORCE_CPU_ISA, NMT_PRECISION), so that the process
    picks the precision and kernels the test expects of it."""
    kept = {k: os.environ[k] for k in CPU_PATH_VARIABLES if k in os.environ}
    return {**kept, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", **extra}


def bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu.py"), "--tiny", "--device", "cpu", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_tiny_run_on_the_cpu_prints_one_table_of_every_kind_of_row(tiny_data, tmp_path):
    train(tiny_data, tmp_path / "run", "--train.max_steps=4", "--train.save_every_steps=4")
    # one model, one precision, one batch size: every kind of row once (the default plan of both
    # models, both precisions and both modes: test_rows_that_do_not_fit_the_budget_are_printed_as_skipped)
    proc = bench(
        "--budget",
        "600",
        "--models",
        "base",
        "--precisions",
        "bf16",
        "--decode-batches",
        "4",
        "--checkpoint",
        str(tmp_path / "run"),
        "--test-src",
        str(tiny_data / "test.en.txt"),
        "--test-ref",
        str(tiny_data / "test.de.txt"),
    )
    rows = table(proc.stdout)
    assert list(rows[0]) == list(gpu.COLUMNS)
    # the run is decoded as `nmt translate` decodes it: at the precision `auto` picks on this CPU
    # (bf16 with avx512_bf16 or AMX, else fp32); the random `base` rows run in float32 on a CPU
    auto = "bf16" if resolve_precision("auto", "cpu")[0] == torch.bfloat16 else "fp32"
    kinds = [(r["task"], r["model"], r["precision"], r["mode"]) for r in rows]
    assert kinds == [
        ("peak", "matmul 1024^3", "bf16", ""),
        ("train", "base", "bf16", "eager"),
        ("decode", "base (random)", "fp32", "beam 4"),
        ("decode", "base (random)", "fp32", "greedy"),
        ("train", "base", "bf16", "compile (eager)"),
        ("decode", "run", auto, "beam 4"),
        ("decode", "run", auto, "greedy"),
    ]
    for r in rows[1:]:
        assert float(r["target tok/s"].replace(",", "")) > 0 and float(r["step ms"]) > 0, r
        assert r["peak GiB"] == "-"  # CPU
    for r in (rows[1], rows[4]):  # train rows: MFU against the measured bf16 peak
        assert r["MFU"].endswith("%") and float(r["TFLOP/s"]) > 0, r
        assert r["batch"].endswith("x 600")  # micro-batches of 600 tokens, accumulated to ~1,200
    assert all(0 <= float(r["BLEU"]) <= 100 for r in rows[5:])
    assert "GFLOP per target token" in proc.stdout and "plan: 7 rows" in proc.stdout


def test_rows_that_do_not_fit_the_budget_are_printed_as_skipped():
    rows = table(bench("--budget", "0").stdout)
    assert (
        len(rows) == 2 + 8 + 4
    )  # peaks, train (2 models x 2 precisions x 2 modes), decode (2 beams x 2 sizes)
    assert all(r["note"].startswith("skipped: ~") and r["target tok/s"] == "" for r in rows)


def test_out_of_memory_halves_the_micro_batch_and_the_trainer_accumulates_more(tmp_path, monkeypatch):
    sizes = gpu.tiny_sizes()
    meta = gpu.write_synthetic_data(tmp_path / "data", vocab=1000, pairs=400)
    real, budgets = gpu.one_update, []

    def first_runs_out_of_memory(trainer, stream):
        budgets.append(trainer.cfg.max_tokens)
        if len(budgets) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(trainer, stream)

    monkeypatch.setattr(gpu, "one_update", first_runs_out_of_memory)
    row = gpu.train_row(
        "base",
        sizes.models["base"],
        "tf32",
        "eager",
        sizes=sizes,
        data=tmp_path / "data",
        meta=meta,
        work=tmp_path,
        device=torch.device("cpu"),
        peaks={},
        sheet=None,
    )
    assert budgets[:2] == [600, 300] and set(budgets[1:]) == {300}
    accum, budget = row["batch"].split(" = ")[1].split(" x ")  # "1,313 tok = 5 x 300"
    assert budget == "300" and int(accum) > 2  # ~1,200 target tokens per update: 2 x 600 before


def test_stopping_rules_counts_rows_without_changing_the_search_and_exact_decodes_more(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """benchmarks/stopping_rules.py: its counting still_searching returns the search's own
    decisions (same translations), counts k rows per sentence per step, and its table shows the
    exact rule decoding at least the fast rule's beam-rows x steps."""
    spec = importlib.util.spec_from_file_location("stopping_rules", REPO / "benchmarks" / "stopping_rules.py")
    rules = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rules)
    from nmt.infer import search
    from nmt.infer.translate import Translator

    lines = ["a b c", "d e", "f g h i", "a"]
    t = Translator.load(tiny_checkpoint, device="cpu")
    plain = t.translate_sentences(lines, beam=4)
    counts = {"steps": 0, "rows": 0, "losing": 0}
    monkeypatch.setattr(search, "still_searching", rules.counting(counts))
    assert t.translate_sentences(lines, beam=4) == plain
    assert counts["steps"] > 0 and counts["rows"] % 4 == 0 and counts["rows"] >= 4 * counts["steps"]
    assert 0 <= counts["losing"] <= counts["rows"]

    src = tmp_path / "src.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "stopping_rules.py"), "--checkpoint", str(tiny_checkpoint)]
        + ["--src-file", str(src)],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [
        line.split("|")[1:-1]
        for line in proc.stdout.splitlines()
        if line.startswith("| fast") or line.startswith("| exact")
    ]
    (fast, exact) = [[c.strip() for c in r] for r in rows]
    assert fast[0] == "fast" and fast[3] == "1.00" and exact[0] == "exact"
    assert int(exact[2].replace(",", "")) >= int(fast[2].replace(",", "")) > 0


def test_speed_quality_measures_every_axis_and_writes_its_table_and_json(tiny_data, tmp_path):
    """benchmarks/speed_quality.py on a tiny run (as teacher, as student and as a two-model ensemble):
    one row per model, engine, precision, shortlist and beam, CTranslate2 rows of the ensemble named
    as skipped, ratios to the teacher's rows, the CPU and the commit in its JSON, its markdown file =
    the table it prints."""
    import json

    from nmt.cli import main

    train(tiny_data, tmp_path / "run", "--train.max_steps=4", "--train.save_every_steps=4")
    assert main(["shortlist", str(tiny_data), "--out", str(tmp_path / "shortlist.txt")]) == 0
    run = str(tmp_path / "run")
    engines = "torch,ctranslate2" if importlib.util.find_spec("ctranslate2") else "torch"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "speed_quality.py"), "--model", f"teacher={run}"]
        + ["--model", f"student={run}", "--model", f"ensemble={run},{run}", "--engines", engines]
        + ["--src-file", str(tiny_data / "test.en.txt"), "--ref-file", str(tiny_data / "test.de.txt")]
        + ["--shortlist", str(tmp_path / "shortlist.txt"), "--precisions", "fp32,int8", "--beams", "4,1"]
        + ["--limit", "6", "--warmup", "2", "--threads", "1", "--max-len-b", "3"]
        + ["--json", str(tmp_path / "r.json")]
        + ["--markdown", str(tmp_path / "r.md")],
        capture_output=True,
        text=True,
        timeout=240,
        env=clean_env(NMT_CACHE_DIR=str(tmp_path / "cache"), NMT_BENCH_SETTLE_SECONDS="0"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "r.json").read_text())
    n_engines = len(engines.split(","))
    assert len(result["measurements"]) == len(result["rows"]) == 3 * n_engines * 2 * 2 * 2
    combos = {
        (r["model"], r["engine"], r["precision"], r["shortlist"], r["beam"]) for r in result["measurements"]
    }
    assert len(combos) == len(result["measurements"])
    assert result["columns"][0] == "model" and all(len(r) == len(result["columns"]) for r in result["rows"])
    assert {"what", "command", "cpu_detail", "torch", "date", "timing", "source"} <= set(result)
    for r in result["measurements"]:
        if r["model"] == "ensemble" and r["engine"] == "ctranslate2":
            assert r["skipped"] and r["bleu"] is None
        else:
            assert not r["skipped"] and 0 <= r["bleu"] <= 100 and r["seconds"] > 0 and r["sentences"] == 6
    assert result["cpu"]["Model name"] and result["commit"] and result["sentences"] == 6
    assert str(tmp_path) not in result["command"] and "--markdown OUT.md" in result["command"]
    assert (tmp_path / "r.md").read_text() in proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("| teacher")]
    assert len(lines) == n_engines * 8 and all(line.split("|")[10].strip() == "1.00" for line in lines)
    assert "student against teacher without, nmt int8 beam 4: BLEU +0.00" in proc.stdout
    if "ctranslate2" in engines:  # equal settings only: the same model, precision and search
        assert "nmt against CTranslate2 on student, int8 greedy: " in proc.stdout
    assert "fastest" not in proc.stdout  # no row picked by its test BLEU


def test_real_text_benchmark_scores_loops_well_formedness_and_tag_placement():
    """benchmarks/real_text.py's measures on hand-written outputs (seen failing with each broken)."""
    bench = real_text_bench()
    assert bench.looping("VAAAAAAEEEE") and bench.looping("sie sie sie machen")
    assert bench.looping("a b a b a b")
    assert not bench.looping("Zwei Hunde spielen im Schnee. Zwei Hunde.")
    src = '<b>Two dogs</b> play in the <a href="x">snow</a>.'
    assert bench.well_formed('<b>Zwei Hunde</b> spielen im <a href="x">Schnee</a>.', src)
    assert not bench.well_formed("<b>Zwei Hunde</b> spielen im Schnee.", src)  # a tag lost
    assert not bench.well_formed('<b>Zwei <a href="x">Hunde</b> spielen</a>.', src)  # crossed
    ref = '<b>Zwei Hunde</b> spielen im <a href="x">Schnee</a>.'
    assert bench.placement(ref, ref) == [1.0, 1.0]
    assert bench.placement('Zwei <b>Hunde</b> spielen im Schnee <a href="x"></a>.', ref) == [2 / 3, 0.0]
    zh = "单击<b>保存</b>以保留<i>文件</i>。"  # no spaces: each CJK character a token
    assert bench.placement(zh, zh) == [1.0, 1.0]
    assert bench.placement("单击<b>保</b>存以保留文<i>件</i>。", zh) == [2 / 3, 2 / 3]
    assert bench.tag_contents("<b>Save 文件 now</b>") == [("<b>", ["save", "文", "件", "now"])]


def real_text_bench():
    """benchmarks/real_text.py as a module."""
    spec = importlib.util.spec_from_file_location("real_text_bench", REPO / "benchmarks" / "real_text.py")
    bench = sys.modules["real_text_bench"] = importlib.util.module_from_spec(spec)  # for its dataclasses
    spec.loader.exec_module(bench)
    return bench


# tagged sources and references: two one-sentence lines (the second a single wrapper) and a line
# of two sentences (two units: skipped)
FORCED_SRC = ["Click <b>Save</b> to keep the <i>file</i>.", "<b>Save all.</b>", "One <b>line</b>. Two lines."]
FORCED_REF = [
    "Klicken Sie auf <b>Speichern</b>, um die <i>Datei</i> zu behalten.",
    "<b>Alle speichern.</b>",
    "Eine <b>Zeile</b>. Zwei Zeilen.",
]
LEXICON = {
    "click": "klicken",
    "save": "speichern",
    "keep": "behalten",
    "the": "die",
    "file": "datei",
    "all": "alle",
}


def lexicon_output(moved: int):
    """A stand-in aligner: each source word of the plan's unit paired with its LEXICON translation in
    the output, ``moved`` output tokens on (0: the right alignment)."""
    from nmt.realtext.job import UnitOutput
    from nmt.realtext.spans import TOKEN

    def output(plan, text: str) -> UnitOutput:
        tgt = list(TOKEN.finditer(text))
        words = [t.group(0).lower() for t in tgt]
        pairs = []
        for m in TOKEN.finditer(plan.job.units[0]):
            if LEXICON.get(m.group(0).lower()) in words:
                t = tgt[min(len(tgt) - 1, words.index(LEXICON[m.group(0).lower()]) + moved)]
                pairs.append((*m.span(), *t.span()))
        return UnitOutput(text, pairs)

    return output


def test_tag_placement_on_the_reference_is_perfect_with_the_right_alignment_and_lower_with_a_moved_one():
    """Part 3o (seen failing with the forced output's pairs dropped: the monotone guess then)."""
    from nmt.realtext.job import TextJob, TextOptions, UnitOutput

    bench = real_text_bench()
    tagged = bench.Tagged(FORCED_SRC, FORCED_REF, [False, True, False], ["a", "a", "b"])
    plan_of = lambda line: SimpleNamespace(job=TextJob([line], TextOptions(format="html")))  # noqa: E731
    right = bench.forced_placement(tagged, range(3), plan_of=plan_of, output=lexicon_output(0))
    assert right.scores == {0: [1.0, 1.0], 1: [1.0]}
    assert right.skipped == {"several sentences": 1} and right.unaligned == right.rewritten == 0
    assert right.outputs[0] == "Klicken Sie auf <b>Speichern</b>, um die <i>Datei</i> zu behalten."
    moved = bench.forced_placement(tagged, range(3), plan_of=plan_of, output=lexicon_output(1))
    assert moved.scores == {0: [0.0, 0.0], 1: [2 / 3]}  # <b> around ",", <i> around "zu"
    monotone = bench.forced_placement(
        tagged, range(3), plan_of=plan_of, output=lambda plan, text: UnitOutput(text)
    )
    assert monotone.scores == {0: [0.0, 0.0], 1: [1.0]} and monotone.unaligned == 2
    only_second = bench.forced_placement(tagged, range(1, 3), plan_of=plan_of, output=lexicon_output(0))
    assert only_second.scores == {1: [1.0]}  # the lines asked for, no other


def test_forced_reference_is_planned_and_aligned_as_nmt_translate_does(tiny_checkpoint, monkeypatch):
    """The reference's pieces forced through a (random-weight) model: the line planned by the
    pipeline's Plan, its text back as it is, with character pairs from the model's attention under
    the prior nmt translate uses (job.PROJECTION_DIAGONAL; another width only where asked); a
    reference longer than the model's positions is skipped."""
    from nmt.infer.translate import Translator
    from nmt.realtext import pipeline
    from nmt.realtext.job import PROJECTION_DIAGONAL

    bench = real_text_bench()
    widths = []
    align = pipeline.align_results
    monkeypatch.setattr(
        bench,
        "align_results",
        lambda *a, diagonal, **k: widths.append(diagonal) or align(*a, diagonal=diagonal, **k),
    )
    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    plan = bench.plan_of(t)("<b>der hund</b> springt auf den baum.")
    assert plan.units == ["der hund springt auf den baum."] and plan.alignment_diagonal == PROJECTION_DIAGONAL
    out = bench.forced_outputs(t, aligned=True)(plan, "die katze laeuft.")
    assert out.text == "die katze laeuft." and out.pairs
    assert all(0 <= a < b <= 30 and 0 <= c < d <= len(out.text) for a, b, c, d in out.pairs)
    bench.forced_outputs(t, aligned=True, diagonal=0.05)(plan, "die katze laeuft.")
    bench.forced_outputs(t, aligned=True, diagonal=0.0)(plan, "die katze laeuft.")
    assert widths == [PROJECTION_DIAGONAL, 0.05, None]
    assert bench.forced_outputs(t, aligned=False)(plan, "die katze laeuft.").pairs is None
    src = ["<b>der hund</b> springt auf den baum.", "<b>die katze</b> laeuft."]
    ref = ["<b>die katze</b> laeuft.", "<b>die katze</b> " + "laeuft " * 300 + "."]
    tagged = bench.Tagged(src, ref, [False, False], ["a", "b"])
    output = bench.forced_outputs(t, aligned=True)
    forced = bench.forced_placement(tagged, range(2), plan_of=bench.plan_of(t), output=output)
    assert list(forced.scores) == [0] and forced.unaligned == 0
    assert forced.skipped == {"reference longer than the model's positions": 1}
    assert bench.well_formed(forced.outputs[0], src[0])


def test_the_prior_is_chosen_on_one_half_and_reported_on_other_lines_and_pages():
    """page_halves: the width is chosen on lines that never report (seen failing with the cut
    left at the middle line, inside a page, and with the halves overlapping by one line)."""
    bench = real_text_bench()
    pages = ["a", "a", "b", "b", "b", "c", "d", "d"]
    choose, report = bench.page_halves(pages)
    assert (choose, report) == (range(5), range(5, 8))  # the middle (4) is inside page b
    assert not set(choose) & set(report) and set(choose) | set(report) == set(range(8))
    assert not {pages[i] for i in choose} & {pages[i] for i in report}
    assert bench.page_halves(["a", "b", "c", "d"]) == (range(2), range(2, 4))
    assert bench.page_halves(["a"] * 4) == (range(4), range(4, 4))  # one page: nothing held out
    assert bench.best_width({0.0: 0.7, 0.05: 0.8, 0.1: 0.8, 0.2: 0.75}) == 0.1  # a tie: the wider
    other = 0.2 if bench.PROJECTION_DIAGONAL != 0.2 else 0.3  # a choice that is not the shipped width
    rows = bench.reported_projections(other)
    assert [(aligned, diagonal) for _, aligned, diagonal in rows] == [
        (True, other),
        (True, None),
        (True, 0.0),
        (False, None),
    ]
    rows = bench.reported_projections(bench.PROJECTION_DIAGONAL)  # the shipped width: one row for both
    assert [(aligned, diagonal) for _, aligned, diagonal in rows] == [
        (True, None),
        (True, 0.0),
        (False, None),
    ]


# valid.tagged's lines that choose the prior's width (results/real-text/tags-heldout.json): 59 pages
CHOOSE_LINES = 749


def test_valid_tagged_halves_share_no_line_page_or_text(shared_data_dir):
    """The split of LibreOffice help en-de valid.tagged the published figures use: pinned."""
    folder = shared_data_dir / "libreoffice_help" / "en-de"
    if not (folder / "valid.tagged.src.tsv.gz").exists():
        pytest.skip(f"no {folder}/valid.tagged.*")
    bench = real_text_bench()
    tagged = bench.read_tagged(folder, None)
    choose, report = bench.page_halves(tagged.page)
    assert (len(choose), len(report)) == (CHOOSE_LINES, len(tagged.src) - CHOOSE_LINES)
    assert not {tagged.page[i] for i in choose} & {tagged.page[i] for i in report}
    assert not {tagged.src[i] for i in choose} & {tagged.src[i] for i in report}


def test_a_recorded_command_names_only_paths_a_reader_has():
    """The command a benchmark's JSON records (and a page prints): the corpora as $NMT_DATA_DIR/...,
    this checkout's files relative, any other file of the machine as a placeholder."""
    spec = importlib.util.spec_from_file_location("machine", REPO / "benchmarks" / "machine.py")
    machine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(machine)
    command = (
        f"python benchmarks/x.py {REPO}/runs/demo/average --src-file /srv/corpora/multi30k/test.en.gz "
        "--ref-file=../shared/data/multi30k/test.de.gz --glossary /work/shared/data/g.tsv "
        "--json results/speed/x.json --markdown /tmp/sq/x.md --before /tmp/before --note 'a (b: c/d)'"
    )
    assert machine.public_command(command, ("/srv/corpora",)) == (
        "python benchmarks/x.py runs/demo/average --src-file $NMT_DATA_DIR/multi30k/test.en.gz "
        "--ref-file=$NMT_DATA_DIR/multi30k/test.de.gz --glossary $NMT_DATA_DIR/g.tsv "
        "--json results/speed/x.json --markdown OUT.md --before BEFORE --note 'a (b: c/d)'"
    )
    assert machine.public_command("python benchmarks/x.py /home/u/run -o /home/u/out.txt") == (
        "python benchmarks/x.py PATH -o OUT.txt"
    )


def test_a_benchmarks_json_records_the_cpu_path_variables_set_and_the_kernels_torch_runs(monkeypatch):
    spec = importlib.util.spec_from_file_location("machine", REPO / "benchmarks" / "machine.py")
    machine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(machine)
    for name in machine.CPU_PATH_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CT2_FORCE_CPU_ISA", "AVX2")
    path = machine.cpu_path()
    assert path == {
        "forced": {"CT2_FORCE_CPU_ISA": "AVX2"},
        "torch_kernels": torch.backends.cpu.get_cpu_capability(),
    }
    assert set(machine.CPU_PATH_VARIABLES) >= set(CPU_PATH_VARIABLES)  # every path the suite forces


def test_each_engine_is_timed_in_a_fresh_process_where_the_other_never_ran(
    tiny_checkpoint, tmp_path, monkeypatch
):
    """decode_timing.measure (behind translate_speed.py and speed_quality.py): nmt's searches run in a
    process where CTranslate2 was never imported, CTranslate2's in another, neither in the caller's
    (once CTranslate2 has searched beside torch, torch's OpenMP threads stop spinning between the
    small operators of a step, and nmt is timed as no user runs it); both engines search the same
    sources with the same options, and nmt searches the model Translator.load gives `nmt
    translate` (float32: packed linear layers), with its outputs."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    monkeypatch.setenv("NMT_BENCH_SETTLE_SECONDS", "0")  # read by the workers (spawned: they import it anew)
    import decode_timing as dt

    from nmt.infer.translate import BatchedSearch, Translator

    t = Translator.load(tiny_checkpoint, device="cpu", precision="fp32")
    sources = t.encode(["a b c", "", "d e f g h", "b a"])[0]
    searches = (dt.Search(2, "exact"), dt.Search(2, "fast"), dt.Search(1))
    groups = {"nmt": [dt.Rows("nmt", "fp32", (str(tiny_checkpoint),), sources, searches)]}
    ctranslate2 = importlib.util.find_spec("ctranslate2") is not None
    if ctranslate2:
        from nmt.export.ctranslate2 import export_model, vocabulary

        ct2_dir = export_model(t.model, vocabulary(t.sp), tmp_path / "ct2")
        groups["ct2"] = [dt.Rows("ct2", "fp32", (str(ct2_dir),), sources, searches[:1])]
    work = dt.Work(alpha=0.6, max_len_b=5, threads=1, warmup=2)
    timed = dt.measure(groups, work, repeat=1)
    nmt = [timed[("nmt", 0, j)] for j in range(3)]
    assert all(r.seconds > 0 and len(r.rounds) == 1 for r in nmt)
    (process,) = {tuple(sorted(p.items())) for r in nmt for p in r.processes}  # one process for nmt's rows
    assert dict(process)["ctranslate2"] is False and dict(process)["pid"] != os.getpid()
    for search, r in zip(searches, nmt):
        options = work.options(search, "nmt")
        direct = BatchedSearch(options).sources(t.model, sources, batch_tokens=work.batch_tokens)
        assert r.ids == [h[0].tokens for h in direct]
    assert r.ids[1] == [] and work.options(searches[2], "nmt").penalty == 0  # greedy: no length penalty
    if ctranslate2:
        ct2 = timed[("ct2", 0, 0)]
        assert ct2.processes[0]["pid"] not in (dict(process)["pid"], os.getpid())
        assert len(ct2.ids) == len(sources) and ct2.ids[1] == []


def bulk_translate_benchmark():
    sys.path.insert(0, str(REPO / "benchmarks"))  # its `from machine import write_table`
    path = REPO / "benchmarks" / "bulk_translate.py"
    spec = importlib.util.spec_from_file_location("bulk_translate_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bulk_batching_counts_the_decoder_row_steps_shards_add_to_a_repeated_input():
    bench = bulk_translate_benchmark()
    # 4 sentences (source length, output length) repeated 4 times: one process sorts the copies
    # together, so each batch's outputs end together; a shard of 4 lines batches all four lengths
    pairs = [(10, 3), (9, 9), (8, 5), (7, 7)] * 4
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    whole, small, one = bench.batching_rows(src, tgt, [4, 16], batch_tokens=20)  # 2 sentences a batch
    assert whole[:4] == ["one process", "1", "8", f"{4 * (3 + 9 + 5 + 7)}"]
    assert small[:4] == ["shards of 4", "4", "8", f"{4 * (2 * 9 + 2 * 7)}"]  # (10, 9) and (8, 7)
    assert small[4] == "+33.3%"
    assert one == ["shards of 16", "1", "8", whole[3], "+0.0%"]


def figures_speed():
    """scripts/figures_speed.py (what renders the speed tables), imported from its folder."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import figures_speed
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return figures_speed


def test_train_speed_json_is_the_row_the_training_speed_table_shows(tmp_path):
    """benchmarks/train_speed.py --json writes the measured rows and the machine; the table of
    docs/performance.md reads its recipe-model rate and `auto`'s pick from that file."""
    out = tmp_path / "train-speed.json"
    args = "--models small --precisions fp32 --paths fused --steps 1 --json".split() + [str(out)]
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/train_speed.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    t = json.loads(out.read_text())
    [printed] = [line for line in run.stdout.splitlines() if line.startswith("| small | 8000 | fp32 | fused")]
    rate = printed.split(" | ")[5]
    assert t["rows"][0][:6] == ["small", "8000", "fp32", "fused", "81 x 25", rate]  # as printed
    assert t["auto"] == ("bf16" if resolve_precision("auto", "cpu")[0] == torch.bfloat16 else "fp32")
    row = figures_speed().train_speed_row(t)
    assert row[1] == rate and row[2] == "- (emulated)" and row[3] == t["auto"]
    assert "--json OUT.json" in row[4] and t["commit"] in row[5]


def test_train_processes_json_gives_the_gain_of_two_processes_over_one():
    """The table's row of a benchmarks/train_processes.py --json file: each round's all-together
    rate of each layout, and the gain of their means (two processes of one thread over one of two)."""
    t = {
        "columns": ["round", "processes x threads", "target tok/s per process", "all together"],
        "rows": [
            ["1", "1x2", "4,000", "4,000"],
            ["1", "2x1", "2,100 / 2,100", "4,200"],
            ["2", "1x2", "3,000", "3,000"],
            ["2", "2x1", "2,200 / 2,200", "4,400"],
        ],
        "cpu_detail": "AMD EPYC Zen 4 (cpu family 25)",
        "command": "python benchmarks/train_processes.py",
        "commit": "abc1234",
        "date": "2026-11-29",
    }
    row = figures_speed().train_processes_row(t)
    assert row[:4] == ["Zen 4", "4,000 / 3,000", "4,200 / 4,400", "**1.23x**"]  # 4,300 / 3,500
