"""The published figures are the result files': scripts/figures.py writes the tables of README.md,
docs/results.md, docs/performance.md and results/speed/README.md from results/, and its check fails
when a page says something else."""

from __future__ import annotations

import gzip
import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import figures  # noqa: E402
import figures_speed  # noqa: E402
from result_files import FigureError, cell, score, speed_table, stopped  # noqa: E402

sys.path.pop(0)


def pages() -> dict[str, str]:
    return {page: (ROOT / page).read_text(encoding="utf-8") for page in figures.PAGES}


def test_every_page_agrees_with_its_result_files():
    assert figures.main(["--check"]) == 0


def test_every_block_is_on_a_page():
    on_pages = {b.group(1) for text in pages().values() for b in figures.BLOCK.finditer(text)}
    assert on_pages == set(figures.BLOCKS)


def test_a_figure_edited_by_hand_in_the_readme_fails_the_check():
    texts = pages()
    readme = texts["README.md"]
    assert readme.count("**36.87**") == 1
    texts["README.md"] = readme.replace("**36.87**", "**36.97**")
    assert figures.stale(texts) == ["README.md: block glance"]


def test_a_speed_ratio_edited_in_the_performance_page_fails_the_check():
    texts = pages()
    page = texts["docs/performance.md"]
    start = page.index("<!-- figures:translate-ct2-today -->")
    ratio = re.compile(r"\*\*(\d+\.\d+)x\*\*").search(page, start)  # the block's first ratio
    edited = f"**{float(ratio.group(1)) + 0.01:.2f}x**"
    texts["docs/performance.md"] = page[: ratio.start()] + edited + page[ratio.end() :]
    assert figures.stale(texts) == ["docs/performance.md: block translate-ct2-today"]


def test_the_training_rate_is_the_real_runs_median_not_the_synthetic_batch():
    path = ROOT / "results/multi30k-30min/zen5/metrics.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    median = statistics.median(r["tgt_tokens_per_s"] for r in rows if r.get("split") == "train")
    glance = figures.glance()
    assert f"**{median:,.0f}** target tok/s, median of the 30-minute run" in glance
    assert "synthetic 2,025-token batch" in glance


def test_the_decoding_row_gives_each_engine_at_its_faster_thread_count_then_equal_threads():
    row = next(line for line in figures.glance().splitlines() if "decoding speed against CTranslate2" in line)
    two, one = (speed_table(name) for name in figures_speed.DEMO_SPEED)
    equal = [
        cell(t, "vs CT2", decoder="nmt", precision="fp32", beam="4", stopping="exact") for t in (two, one)
    ]
    assert row.index("each at its faster thread count") < row.index(f"{equal[0]}x at 2, {equal[1]}x at 1")
    assert re.search(r"fp32 beam 4 \*\*\d+\.\d+x\*\* \(nmt [12], CTranslate2 [12] threads?\)", row)
    assert "--src-file" in row


def speed_rows(threads: int, rates: dict[tuple[str, str, str], float]) -> dict:
    """A translate_speed table of ``threads`` with the sent/s of (decoder, precision, beam)."""
    rows = []
    for (decoder, precision, beam), rate in rates.items():
        stopping = "exact" if decoder == "nmt" and beam == "4" else ""
        rows.append([decoder, precision, beam, stopping, f"{rate:.1f}"])
    return {
        "threads": threads,
        "columns": ["decoder", "precision", "beam", "stopping", "sent/s"],
        "rows": rows,
    }


def test_each_engine_is_compared_at_its_own_faster_thread_count():
    """best_of_threads: nmt fastest at 2 threads, CTranslate2 at 1 (seen on a 2-core Xeon): the ratio
    is nmt's best over CTranslate2's best, not either table's own ratio."""
    rates = {}
    for precision in ("fp32", "int8"):
        for beam in ("4", "1"):
            rates[2] = {
                **rates.get(2, {}),
                ("nmt", precision, beam): 200.0,
                ("CTranslate2 4.8.5", precision, beam): 100.0,
            }
            rates[1] = {
                **rates.get(1, {}),
                ("nmt", precision, beam): 120.0,
                ("CTranslate2 4.8.5", precision, beam): 160.0,
            }
    text = figures_speed.best_of_threads([speed_rows(2, rates[2]), speed_rows(1, rates[1])])
    assert text.startswith("fp32 beam 4 **1.25x** (nmt 2, CTranslate2 1 thread)")
    assert text.count("**1.25x**") == 4


def test_a_table_run_on_a_forced_cpu_path_says_so_under_it():
    """A table whose run was held to another ISA (benchmarks/machine.py cpu_path) names the variables
    and the kernels torch ran in its footnote; one run on the CPU's own path names none."""
    t = {"cpu_detail": "Xeon", "torch": "2.13.0+cpu", "threads": 2, "command": "x", "source": "y"}
    forced = {**t, "cpu_path": {"forced": {"ATEN_CPU_CAPABILITY": "avx2"}, "torch_kernels": "AVX2"}}
    assert "forced path: ATEN_CPU_CAPABILITY=avx2 (torch kernels AVX2)" in figures_speed.footnote(forced)
    own = {**t, "cpu_path": {"forced": {}, "torch_kernels": "AVX512"}}
    assert "forced" not in figures_speed.footnote(own) and "forced" not in figures_speed.footnote(t)
    assert "forced path: ATEN_CPU_CAPABILITY=avx2" in figures_speed.ct2_forced()


def test_a_marker_without_its_partner_names_the_page_and_line():
    with pytest.raises(FigureError, match=r"page.md:3: <!-- figures:glance --> has no matching"):
        figures.fill("page.md", "a\nb\n<!-- figures:glance -->\nc\n", {})


def test_an_unknown_block_names_the_page_and_line():
    with pytest.raises(FigureError, match=r"page.md:1: unknown block 'nonsense'"):
        figures.fill("page.md", "<!-- figures:nonsense -->\n<!-- /figures:nonsense -->\n", {})


def test_a_score_file_without_a_bleu_line_is_an_error_naming_it(tmp_path):
    path = tmp_path / "test.score.txt"
    path.write_text("chrF2 = 61.08\n", encoding="utf-8")
    with pytest.raises(FigureError, match="no 'BLEU = ' line"):
        score(path)


def test_a_runs_last_stop_line_is_read_in_either_wording(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "2026-11-20 10:00:00 stopped (max_time) at step 100, epoch 1, 2.0 min\n"  # a log of before
        "2026-11-27 10:00:00 valid update 300: loss 3.2 (best)\n"
        "2026-11-27 10:00:01 stopped (max_steps) at update 300, epoch 2, 6.5 min\n"
    )
    assert stopped(log) == (300, 6.5)
    log.write_text("stopped (max_time) at step 100, epoch 1, 2.0 min\n")
    assert stopped(log) == (100, 2.0)
    log.write_text("valid update 300: loss 3.2\n")
    with pytest.raises(FigureError, match="no 'stopped"):
        stopped(log)


def test_the_distilled_students_ratios_compare_equal_settings_or_say_what_differs():
    pairs = figures.speed_quality_pairs(figures.speed_table("speed-quality"))
    assert {(p.what, p.differs.split(" (")[0]) for p in pairs} == {
        ("student / teacher", "the model"),
        ("student with its shortlist / teacher", "the model, and the student's shortlist"),
        ("nmt / CTranslate2", "the engine"),
        ("nmt on the student / CTranslate2 on the teacher", "the engine and the model"),
    }
    t = figures.speed_table("speed-quality")

    def rate(model, engine, precision, listed, beam):
        return float(
            cell(t, "sent/s", model=model, engine=engine, precision=precision, shortlist=listed, beam=beam)
        )

    teacher = rate("teacher", "nmt", "fp32", "no", "4")

    def engines(beam):  # nmt / CTranslate2 on the student, int8
        return rate("student", "nmt", "int8", "no", beam) / rate("student", "CTranslate2", "int8", "no", beam)

    expected = (
        f"**{rate('student', 'nmt', 'fp32', 'no', '4') / teacher:.2f}x**",
        f"over each batch's union {rate('student', 'nmt', 'fp32', 'yes', '4') / teacher:.2f}x",
        f"int8 greedy {engines('greedy'):.2f}x",
        f"int8 beam 4 {engines('4'):.2f}x",
    )
    row = " | ".join(figures.distilled_row())
    for ratio in expected:
        assert ratio in row
    # no ratio of two searches: the student greedy against the teacher at beam 4 (nmt fp32, and
    # against CTranslate2 int8)
    greedy = rate("student", "nmt", "fp32", "no", "greedy")
    for other in (teacher, rate("teacher", "CTranslate2", "int8", "no", "4")):
        assert f"{greedy / other:.2f}x" not in row
    assert "1,791-update" in row and "2,000 updates more than its teacher" in row
    assert "(3 + 1 layers, d_ff 256)" in row and "--model.d_ff=256" in row


def test_the_shortlist_scope_rows_compare_the_student_with_its_list_to_the_teacher_without():
    """docs/performance.md's scope table and the README's glance row: the student with its shortlist
    against the teacher without, nmt fp32 beam 4, computed from the runs' rows at each scope."""
    block = figures.shortlist_scope()
    for split, sentence_run, batch_run, old_name in figures.SCOPE_RUNS:
        for scope, run, name in (("sentence", sentence_run, "student"), ("batch", batch_run, old_name)):
            t = figures.speed_table(run)
            same = {"engine": "nmt", "precision": "fp32", "beam": "4"}
            ratio = float(cell(t, "sent/s", model=name, shortlist="yes", **same)) / float(
                cell(t, "sent/s", model="teacher", shortlist="no", **same)
            )
            assert f"| {split} | {scope} | {ratio:.2f}x |" in block
            if split == "test2016" and scope == "sentence":
                assert f"each sentence over its own list: **{ratio:.2f}x**" in " | ".join(
                    figures.distilled_row()
                )


def test_the_serving_shortlist_table_reads_each_servers_rate_from_its_run():
    block = figures.serve_shortlist()
    for name, server, label in (
        ("serve-load-2threads", "dynamic batching", "| no shortlist, dynamic batching |"),
        ("serve-load-shortlist", "dynamic batching", "| shortlist, dynamic batching |"),
        ("serve-load-shortlist", "batching off", "| shortlist, one request at a time (`--no-batching`) |"),
    ):
        t = figures.speed_table(name)
        rates = [r[t["columns"].index("sent/s")] for r in t["rows"] if r[0] == server]
        line = next(x for x in block.splitlines() if x.startswith(label))
        assert line.split(" | ")[1:4] == rates
