"""The recipe scripts' plumbing (recipes/*.sh), with a fake `nmt` that records its calls."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ensemble_test_tunes_alpha_on_valid_then_translates_test_once(tmp_path):
    fake, log = fake_trainer(tmp_path, 50.0)
    out = subprocess.run(
        [
            "sh",
            str(ROOT / "recipes/lib/ensemble-test.sh"),
            str(tmp_path),
            "/D",
            "two seeds",
            "runs/a",
            "runs/b",
        ],
        env={**os.environ, "NMT": str(fake)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    calls = log.read_text().splitlines()
    assert calls == [
        f"tune-alpha runs/a runs/b --src /D/valid.en.txt --ref /D/valid.de.txt --out {tmp_path}/alpha.json",
        f"translate runs/a runs/b -i /D/test.en.txt -o {tmp_path}/test.hyp.de --beam 4 --alpha 1.2",
        f"score --ref /D/test.de.txt {tmp_path}/test.hyp.de",
    ]
    assert "== test2016, two seeds, beam 4, alpha 1.2 (chosen on valid)" in out
    assert (tmp_path / "test.score.txt").read_text() == "BLEU = 40.00\n"


@pytest.mark.parametrize("env", [{"PARALLEL": "0"}, {"CORES": "2"}])
def test_bidirectional_recipe_chooses_on_valid_then_translates_test_once(tmp_path, env):
    """Two runs (the second right-to-left; one after the other, or side by side on a core each for
    60 minutes), a tune-alpha --rerank grid per beam, the valid-best (beam, alpha, weight) used once
    on test2016."""
    log = tmp_path / "calls.txt"
    fake = tmp_path / "nmt"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {log}\n'
        'if [ "$1" = tune-alpha ]; then\n'
        '  case "$*" in\n'
        '    *"--beam 4 "*) printf "| 1 | 0.5 | 40.10 | 1 |\\nbest rerank weight: 0.5\\nbest alpha: '
        '1\\n" ;;\n'
        '    *) printf "| 0.6 | 0.4 | 40.50 | 1 |\\n| 1.4 | 0.3 | 39.00 | 1 |\\n'
        'best rerank weight: 0.4\\nbest alpha: 0.6\\n" ;;\n'
        "  esac\n"
        "fi\n"
        '[ "$1" = score ] && echo "BLEU = 40.00"\nexit 0\n'
    )
    fake.chmod(0o755)
    out = subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de-bidirectional.sh"), str(tmp_path / "o")],
        env={
            **{
                k: v
                for k, v in os.environ.items()
                if k not in ("PARALLEL", "CORES", "MAX_TIME", "DROPOUT", "TRAIN_ARGS")
            },
            "NMT": str(fake),
            **env,
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    calls = log.read_text().splitlines()
    o = tmp_path / "o"
    trains = sorted(c for c in calls if c.startswith("train ") and "/probe " not in c)  # l2r, then r2l
    assert len(trains) == 2 and "--train.seed=1" in trains[0] and "right_to_left" not in trains[0]
    assert "--train.seed=2 --model.right_to_left=true" in trains[1] and f"--out {o}/r2l/run" in trains[1]
    side_by_side = "CORES" in env
    assert all(("--train.num_threads=1" in t and "--train.max_time=60" in t) == side_by_side for t in trains)
    tunes = [c for c in calls if c.startswith("tune-alpha")]
    assert tunes == [
        f"tune-alpha {o}/l2r/average --src {o}/l2r/data/valid.en.txt --ref {o}/l2r/data/valid.de.txt "
        f"--beam {b} --alphas 0.6,1.0,1.4 --rerank {o}/r2l/average --rerank-weights 0.3,0.4,0.5,0.6,0.7 "
        f"--out {o}/tune.beam{b}.json"
        for b in (4, 8)
    ]
    assert calls[-2:] == [
        f"translate {o}/l2r/average -i {o}/l2r/data/test.en.txt -o {o}/test.hyp.de --beam 8 --alpha 0.6 "
        f"--rerank {o}/r2l/average --rerank-weight 0.4",
        f"score --ref {o}/l2r/data/test.de.txt {o}/test.hyp.de",
    ]
    assert sum(c.startswith("translate") and "test.en.txt" in c and "--rerank" in c for c in calls) == 1
    assert "chosen on valid: beam 8, alpha 0.6, rerank weight 0.4 (valid BLEU 40.5)" in out


def fake_trainer(
    tmp_path, probe_seconds: float, seed2_probe_seconds: float | None = None
) -> tuple[Path, Path]:
    """A fake `nmt` that records its calls; a probe run (--train.max_steps=150) logs updates 25 and
    150, the latter ``probe_seconds`` (``seed2_probe_seconds`` for --train.seed=2, when given) after
    the start (the former at 10 s); another run writes a config.json holding its --model.dropout."""
    log = tmp_path / "calls.txt"
    fake = tmp_path / "nmt"
    seconds = (
        f"{probe_seconds}"
        if seed2_probe_seconds is None
        else f'$(case "$*" in *--train.seed=2*) echo {seed2_probe_seconds} ;; '
        f"*) echo {probe_seconds} ;; esac)"
    )
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> {log}\n'
        # FAKE_BARRIER=DIR: a run with --train.num_threads (side by side) waits up to 10 s
        # for a second one of its stage (probe or run), else fails: proof that they overlap.
        # FAKE_SLEEP=S: then such a run (not a probe) sleeps S seconds.
        'if [ "$1" = train ] && [ -n "${FAKE_BARRIER:-}" ]; then\n'
        '  case "$*" in *--train.num_threads=*)\n'
        '    stage=run; case "$*" in *--train.max_steps=150*) stage=probe ;; esac\n'
        '    mkdir -p "$FAKE_BARRIER/$stage"; : > "$FAKE_BARRIER/$stage/$$"\n'
        '    i=0; while [ "$(ls "$FAKE_BARRIER/$stage" | wc -l)" -lt 2 ]; do\n'
        "      i=$((i + 1)); [ $i -gt 100 ] && exit 7; sleep 0.1; done\n"
        '    [ $stage = run ] && [ -n "${FAKE_SLEEP:-}" ] && sleep "$FAKE_SLEEP" ;;\n'
        "  esac\n"
        "fi\n"
        'if [ "$1" = train ]; then\n'
        '  prev=; for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done\n'
        '  case "$*" in *--train.max_steps=150*) mkdir -p "$out"; printf '
        '\'{"split": "train", "update": 25, "elapsed": 10.0}\\n{"split": "valid", "update": 100, '
        '"elapsed": 11.0}\\n{"split": "train", "update": 150, "elapsed": %s}\\n\' '
        f'{seconds} > "$out/metrics.jsonl" ;;\n'
        '  *) d=0.2; for a in "$@"; do case $a in --model.dropout=*) d=${a#--model.dropout=} ;; esac; done\n'
        '     mkdir -p "$out"; printf '
        '\'{\\n  "model": {\\n    "dropout": %s,\\n\' "$d" > "$out/config.json" ;;\n'
        "  esac\n"
        "fi\n"
        'if [ "$1" = translate ]; then\n'
        '  prev=; for a in "$@"; do [ "$prev" = -o ] && : > "$a"; prev=$a; done\n'
        "fi\n"
        '[ "$1" = tune-alpha ] && [ -z "${FAKE_NO_ALPHA:-}" ] && echo "best alpha: 1.2"\n'
        '[ "$1" = score ] && echo "BLEU = 40.00"\nexit 0\n'
    )
    fake.chmod(0o755)
    return fake, log


@pytest.mark.parametrize(
    "probe_seconds,env,dropout",
    [
        (50.0, {}, "0.1"),  # 125 updates in 40 s, x 0.9: ~5,100 updates in 30 minutes
        (20.0, {}, "0.2"),  # 12.5 updates/s: ~20,000
        (50.0, {"MAX_TIME": "60"}, "0.2"),  # ~10,100 in 60 minutes
        (50.0, {"DROPOUT": "0.25"}, "0.25"),  # given: no probe
        (50.0, {"TRAIN_ARGS": "--train.seed=2 --model.dropout=0.3"}, None),  # given in TRAIN_ARGS: no probe
        (
            50.0,
            {"TRAIN_ARGS": "--train.max_time=0 --train.max_steps=8000"},
            None,
        ),  # another budget: the YAML's
        (50.0, {"MAX_TIME": "0"}, None),  # no time limit: the YAML's
        (50.0, {"TRAIN_ARGS": "--train.seed=2 --train.lr_scale=0.4"}, "0.1"),  # probed; TRAIN_ARGS override
        (50.0, {"SCHEDULE": ""}, "0.1"),  # probed, the YAML's warm-up
        (50.0, {"SCHEDULE": "--train.warmup_steps=800"}, "0.1"),  # probed, a warm-up of one's own
    ],
)
def test_recipe_chooses_dropout_from_a_probe_of_the_update_rate(
    tmp_path, tiny_data, probe_seconds, env, dropout
):
    from nmt.config import parse_overrides
    from nmt.train.command import build_configs

    fake, log = fake_trainer(tmp_path, probe_seconds)
    out = tmp_path / "o"
    env = {
        k: v for k, v in os.environ.items() if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS", "SCHEDULE")
    } | env
    stdout = subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de.sh"), str(out)],
        env={**env, "NMT": str(fake), "NMT_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    trains = [c for c in log.read_text().splitlines() if c.startswith("train ")]
    given = ("--model.dropout", "--train.max_time", "--train.max_steps")  # in TRAIN_ARGS: no probe
    probed = (
        "DROPOUT" not in env
        and not any(g in env.get("TRAIN_ARGS", "") for g in given)
        and env.get("MAX_TIME") != "0"
    )
    assert len(trains) == (2 if probed else 1)
    if probed:
        assert trains[0].startswith(f"train {out}/data --out {out}/probe --config ")
        assert trains[0].endswith(
            "--train.max_steps=150 --train.log_every_steps=25 --train.valid_every_steps=0 "
            "--train.valid_bleu=false --train.best_metric=loss --train.save_every_steps=0"
        )
        assert f"dropout {dropout} for this budget" in stdout
        assert not (out / "probe").exists()
    for call in trains:  # each configuration is one `nmt train` accepts (the probe's too)
        _, _, _, _, _, config, *overrides = call.split()
        _, train_cfg, _ = build_configs(
            tiny_data, preset_name=None, config_file=config, overrides=parse_overrides(overrides)
        )
    final = trains[-1]
    auto = probed and dropout == "0.1" and env.get("SCHEDULE", "auto") == "auto"  # the short budget's
    own = {"--train.warmup_steps=800": (800, 0.35)}.get(env.get("SCHEDULE"))
    lr_scale = 0.4 if "--train.lr_scale=0.4" in env.get("TRAIN_ARGS", "") else None  # TRAIN_ARGS win
    assert (train_cfg.warmup_steps, train_cfg.lr_scale) == (
        own or ((1000, lr_scale or 0.5) if auto else (500, lr_scale or 0.35))
    ), final
    assert final.startswith(f"train {out}/data --out {out}/run --config ")
    if dropout is None:  # the YAML's, or TRAIN_ARGS's
        assert final.count("--model.dropout") == ("--model.dropout" in env.get("TRAIN_ARGS", ""))
        assert final.endswith(env.get("TRAIN_ARGS", ""))
    else:
        assert final.count("--model.dropout=") == 1 and f"--model.dropout={dropout}" in final
    # a budget of fewer than 9,000 updates (the probe's 0.1) also warms up longer at lr_scale 0.5;
    # TRAIN_ARGS still come last, so that they override it
    schedule = "--train.warmup_steps=1000 --train.lr_scale=0.5"
    assert (schedule in final) == auto, final
    assert ("warm-up 1000, lr_scale 0.5 for this budget" in stdout) == auto
    if schedule in final and env.get("TRAIN_ARGS"):
        assert final.index(schedule) < final.index(env["TRAIN_ARGS"])
    assert ("--train.max_time=" in final) == (
        "MAX_TIME" in env or "--train.max_time" in env.get("TRAIN_ARGS", "")
    )
    if "MAX_TIME" in env:
        assert f"--train.max_time={env['MAX_TIME']} " in final + " "


@pytest.mark.parametrize("alpha", [None, "0.9"])
def test_recipe_chooses_the_length_penalty_on_valid_then_translates_test_once(tmp_path, alpha):
    """As the paper chose its alpha on its development set (6.1): `nmt tune-alpha` on valid for the
    averaged model, whose choice (the fake's 1.2) both valid translations and the one of test
    use; ALPHA=A fixes it and tunes nothing."""
    fake, log = fake_trainer(tmp_path, 50.0)
    out = tmp_path / "o"
    env = {k: v for k, v in os.environ.items() if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS", "ALPHA")}
    stdout = subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de.sh"), str(out)],
        env={
            **env,
            "NMT": str(fake),
            "NMT_DATA_DIR": str(tmp_path),
            "DROPOUT": "0.1",
            **({"ALPHA": alpha} if alpha else {}),
        },
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    calls = log.read_text().splitlines()
    tunes = [c for c in calls if c.startswith("tune-alpha")]
    chosen = alpha or "1.2"
    if alpha is None:
        assert tunes == [
            f"tune-alpha {out}/average --src {out}/data/valid.en.txt --ref {out}/data/valid.de.txt "
            f"--out {out}/alpha.json"
        ]
        assert calls.index(tunes[0]) > calls.index(f"average {out}/run --last 5 --out {out}/average --force")
        assert (out / "alpha.txt").read_text() == "best alpha: 1.2\n"
    else:
        assert tunes == []
    translations = [c for c in calls if c.startswith("translate ")]
    assert [c.split()[1:6:4] for c in translations] == [
        [f"{out}/average", f"{out}/valid.average.de"],
        [f"{out}/run/checkpoints/best", f"{out}/valid.best.de"],
        [f"{out}/average", f"{out}/test.hyp.de"],
    ]
    assert all(c.endswith(f"--beam 4 --alpha {chosen}") for c in translations)
    assert (
        "== test2016, averaged checkpoint, beam 4, alpha "
        f"{chosen} ({'given' if alpha else 'chosen on valid'})"
    ) in stdout


def test_recipe_stops_when_the_length_penalty_search_chooses_nothing(tmp_path):
    fake, log = fake_trainer(tmp_path, 50.0)
    out = tmp_path / "o"
    env = {k: v for k, v in os.environ.items() if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS", "ALPHA")}
    proc = subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de.sh"), str(out)],
        env={**env, "NMT": str(fake), "NMT_DATA_DIR": str(tmp_path), "DROPOUT": "0.1", "FAKE_NO_ALPHA": "1"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and f"no 'best alpha' in {out}/alpha.txt" in proc.stderr
    assert not any(c.startswith("translate ") for c in log.read_text().splitlines())


@pytest.mark.parametrize("schedule", [None, "", "--train.warmup_steps=800"])
def test_ensemble_recipe_probes_once_and_trains_every_seed_at_that_dropout(tmp_path, tiny_data, schedule):
    """One setting for all runs: the first probe's dropout, and one warm-up (SCHEDULE: the
    ensemble's default 1,000 at lr_scale 0.5, the YAML's when empty, or one's own), also for the
    first run, whose own probe would otherwise choose its own."""
    fake, log = fake_trainer(tmp_path, 50.0)  # the probe: ~5,100 updates, dropout 0.1
    out = tmp_path / "e"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS", "SEEDS", "SCHEDULE")
    }
    subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de-ensemble.sh"), str(out)],
        env={
            **env,
            "NMT": str(fake),
            "SEEDS": "1 2 3",
            "PARALLEL": "0",
            "DROPOUT": "",
            **({"SCHEDULE": schedule} if schedule is not None else {}),
        },
        capture_output=True,
        text=True,
        check=True,
    )  # DROPOUT empty: the first probe chooses
    trains = [c for c in log.read_text().splitlines() if c.startswith("train ")]
    assert [t.split()[3] for t in trains] == [
        f"{out}/seed1/probe",
        f"{out}/seed1/run",
        f"{out}/seed2/run",
        f"{out}/seed3/run",
    ]
    tunes = [c for c in log.read_text().splitlines() if c.startswith("tune-alpha")]
    assert [c.split()[1:4] for c in tunes] == [
        [f"{out}/seed1/average", f"{out}/seed2/average", f"{out}/seed3/average"]
    ]
    expected = "--train.warmup_steps=1000 --train.lr_scale=0.5" if schedule is None else schedule
    for seed, call in zip((1, 2, 3), trains[1:]):
        assert call.endswith(f"--model.dropout=0.1 {expected + ' ' if expected else ''}--train.seed={seed}")
        assert call.count("--train.warmup_steps") == (1 if expected else 0)
        assert (
            "--train.num_threads" not in call and "--train.max_time" not in call
        )  # all cores, the YAML's 30
    assert (
        subprocess.run(
            ["sh", str(ROOT / "recipes/lib/dropout-of.sh"), str(out / "seed2/run")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        == "0.1\n"
    )


@pytest.mark.parametrize("cores,parallel", [("2", True), ("4", True), ("1", False)])
def test_ensemble_recipe_trains_seeds_side_by_side_on_a_core_each(tmp_path, tiny_data, cores, parallel):
    """With a core per seed the runs (and before them their probes) train at once, each on its
    share of the cores for the whole budget; the first seed's probe chooses every run's dropout
    even where another seed's probe would choose otherwise; then one ensemble on valid and test."""
    fake, log = fake_trainer(tmp_path, 60.0, seed2_probe_seconds=20.0)  # seed 1: ~8,100 updates in 60 min
    out = tmp_path / "e"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS", "SEEDS", "PARALLEL")
    }
    stdout = subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de-ensemble.sh"), str(out)],
        env={
            **env,
            "NMT": str(fake),
            "CORES": cores,
            "NMT_DATA_DIR": str(tmp_path),
            "DROPOUT": "",  # the first probe chooses
            "FAKE_BARRIER": str(tmp_path / "barrier"),
        },  # the runs must overlap
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    calls = log.read_text().splitlines()
    trains = sorted(c for c in calls if c.startswith("train "))
    threads = int(cores) // 2
    if parallel:
        assert calls[:2] == [
            f"prepare multi30k --src en --tgt de --out {out}/seed{s}/data" for s in (1, 2)
        ]  # in turn
        assert f"training seed1 seed2 side by side: {threads} thread(s) each, 60 minutes each" in stdout
        assert [t.split()[3] for t in trains] == [
            f"{out}/seed1/probe",
            f"{out}/seed1/run",
            f"{out}/seed2/probe",
            f"{out}/seed2/run",
        ]
        for seed, probe, run in ((1, trains[0], trains[1]), (2, trains[2], trains[3])):
            assert f"--train.seed={seed} --train.num_threads={threads} --train.max_steps=150" in probe
            assert run.endswith(
                f"--train.max_time=60 --model.dropout=0.1 --train.warmup_steps=1000 "
                f"--train.lr_scale=0.5 --train.seed={seed} --train.num_threads={threads}"
            )
        assert "dropout 0.1 for every run (seed1's probe)" in stdout
        assert "dropout 0.2 for this budget" in (out / "seed2.log").read_text()  # its own probe, overruled
        assert "== seed2 alone, test2016" in stdout and (out / "seed2" / "test.score.txt").exists()
    else:  # one core: one after the other, as PARALLEL=0
        assert [t.split()[3] for t in trains] == [
            f"{out}/seed1/probe",
            f"{out}/seed1/run",
            f"{out}/seed2/run",
        ]
        assert all("--train.num_threads" not in t for t in trains)
    ensemble = [
        c
        for c in calls
        if c.startswith(("tune-alpha", "translate")) and f"{out}/seed1/average {out}/seed2/average" in c
    ]
    assert [c.split()[0] for c in ensemble] == ["tune-alpha", "translate"]
    assert "-i " + str(out / "seed1" / "data" / "test.en.txt") in ensemble[1]


@pytest.mark.parametrize("parallel", ["0", "1"])
def test_ensemble_members_train_at_dropout_0_1_without_a_probe_by_default(tmp_path, tiny_data, parallel):
    fake, log = fake_trainer(tmp_path, 20.0)  # a probe would choose 0.2
    out = tmp_path / "e"
    env = {k: v for k, v in os.environ.items() if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS", "SEEDS")}
    stdout = subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de-ensemble.sh"), str(out)],
        env={**env, "NMT": str(fake), "PARALLEL": parallel, "CORES": "2", "NMT_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    trains = sorted(c for c in log.read_text().splitlines() if c.startswith("train "))
    assert [t.split()[3] for t in trains] == [f"{out}/seed1/run", f"{out}/seed2/run"]  # no probe
    assert parallel == "0" or "dropout 0.1 for every run (given)" in stdout
    assert all(t.count("--model.dropout=") == 1 and "--model.dropout=0.1 " in t for t in trains)
    assert all("--model.dropout=0.1 --train.warmup_steps=1000 --train.lr_scale=0.5 " in t for t in trains)


def test_ensemble_recipe_side_by_side_fails_when_a_run_fails(tmp_path, tiny_data):
    """The first of the runs fails: the other finishes, then the recipe fails before the ensemble."""
    fake, log = fake_trainer(tmp_path, 60.0)
    fake.write_text(
        fake.read_text().replace(
            "exit 0\n", 'case "$*" in *--train.max_time=60*--train.seed=1*) exit 3 ;; esac\nexit 0\n'
        )
    )
    out = tmp_path / "e"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS", "SEEDS", "PARALLEL")
    }
    proc = subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de-ensemble.sh"), str(out)],
        env={**env, "NMT": str(fake), "CORES": "2", "NMT_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and f"a run failed: see {out}/*.log" in proc.stderr
    assert (out / "seed2" / "test.score.txt").exists() and not (out / "seed1" / "test.score.txt").exists()
    assert not any(c.startswith("tune-alpha") for c in log.read_text().splitlines())


def test_ensemble_recipe_side_by_side_stops_every_run_on_ctrl_c(tmp_path, tiny_data):
    """Background jobs of a script ignore SIGINT: Ctrl-C on the recipe must still stop both runs."""
    import signal
    import time

    fake, log = fake_trainer(tmp_path, 60.0)
    out, barrier = tmp_path / "e", tmp_path / "barrier"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS", "SEEDS", "PARALLEL")
    }
    # started as a terminal starts it: SIGINT deliverable and not ignored, whatever this process holds
    # (a script cannot trap a signal ignored on entry), SIGPIPE and SIGXFSZ default as Popen leaves
    # them (Python ignores both); a wrapper that execs sh, not preexec_fn (unsafe with threads)
    as_a_terminal = (
        "import os, signal, sys; "
        "[signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ)]; "
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGCHLD}); "
        "os.execvp('sh', ['sh', *sys.argv[1:]])"
    )

    def processes() -> str:  # for a failure: what is left of the recipe, and how it treats signals
        lines = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.getpgid(int(pid)) != proc.pid:
                    continue
                status = dict(
                    line.split(":\t", 1)
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if ":\t" in line
                )
                cmd = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:120]
            except OSError:  # gone meanwhile (ProcessLookupError is one)
                continue
            lines.append(
                f"{pid} {status.get('State')} blk={status.get('SigBlk')} ign={status.get('SigIgn')} "
                f"cgt={status.get('SigCgt')} {cmd}"
            )
        return "\n".join(lines)

    proc = subprocess.Popen(
        [sys.executable, "-c", as_a_terminal, str(ROOT / "recipes/multi30k-en-de-ensemble.sh"), str(out)],
        env={
            **env,
            "NMT": str(fake),
            "CORES": "2",
            "NMT_DATA_DIR": str(tmp_path),
            "FAKE_BARRIER": str(barrier),
            "FAKE_SLEEP": "60",
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 30
        while len(list((barrier / "run").glob("*"))) < 2:  # glob of a missing folder: nothing
            assert time.time() < deadline and proc.poll() is None, "the runs did not start side by side"
            time.sleep(0.1)
        runs = [int(p.name) for p in (barrier / "run").iterdir()]
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to the foreground process group
        try:
            assert proc.wait(timeout=10) != 0
        except subprocess.TimeoutExpired:
            pytest.fail(
                "the recipe outlived Ctrl-C by 10 s; its processes (this test's mask: "
                f"{signal.pthread_sigmask(signal.SIG_BLOCK, set())}):\n{processes()}"
            )

        def alive(pid: int) -> bool:  # a zombie is dead; a process reaped meanwhile too
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False

        deadline = time.time() + 10
        while any(alive(pid) for pid in runs):
            assert time.time() < deadline, f"a run outlived the recipe:\n{processes()}"
            time.sleep(0.1)
    finally:  # whatever is left of the group (a run that outlived the recipe, too)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_distillation_student_trains_at_the_teachers_dropout(tmp_path):
    import gzip

    fake, log = fake_trainer(tmp_path, 50.0)
    (tmp_path / "data" / "multi30k").mkdir(parents=True)
    for lang in ("en", "de"):
        with gzip.open(tmp_path / "data" / "multi30k" / f"train.{lang}.gz", "wt") as f:
            f.write("a b\n")
    teacher = tmp_path / "teacher"
    (teacher / "average").mkdir(parents=True)
    (teacher / "average" / "config.json").write_text(
        '{\n  "model": {\n    "attention_dropout": 0.0,\n    "dropout": 0.1,\n    "d_model": 256\n  }\n}\n'
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MAX_TIME", "DROPOUT", "TRAIN_ARGS")}
    subprocess.run(
        ["sh", str(ROOT / "recipes/multi30k-en-de-distill.sh"), str(tmp_path / "o"), str(teacher)],
        env={**env, "NMT": str(fake), "NMT_DATA_DIR": str(tmp_path / "data")},
        capture_output=True,
        text=True,
        check=True,
    )
    trains = [c for c in log.read_text().splitlines() if c.startswith("train ")]
    assert len(trains) == 1 and trains[0].split()[3] == f"{tmp_path}/o/student"
    assert trains[0].endswith("--model.dropout=0.1")


@pytest.mark.parametrize("cuda", [False, True])
def test_demo_says_the_device_it_trains_on(tmp_path, cuda):
    """`make demo` names the device torch gives `nmt train` (a GPU faked through sitecustomize)."""
    site = tmp_path / "site"
    site.mkdir()
    if cuda:
        (site / "sitecustomize.py").write_text(
            "import torch\ntorch.cuda.is_available = lambda: True\n"
            "torch.cuda.get_device_name = lambda index=0: 'NVIDIA H100 80GB HBM3'\n"
        )
    fake = tmp_path / "nmt"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {**os.environ, "NMT": str(fake), "PY": sys.executable, "NMT_DATA_DIR": str(tmp_path)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    out = subprocess.run(
        ["sh", str(ROOT / "recipes/demo.sh"), str(tmp_path / "demo")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    device = "the GPU (NVIDIA H100 80GB HBM3)" if cuda else "the CPU"
    assert (
        out.splitlines()[0]
        == f"nmt demo: Multi30k en->de, ~13 minutes of training on {device}, then beam-search translation."
    )


# ------------------------------------------------------------------------------- the WMT14 recipes
# Each recipe end to end at a tiny size, on a WMT14-shaped mirror served on 127.0.0.1 (the archives and
# members of nmt.data.download's tasks, a few dozen lines each): download, prepare, torchrun with 2
# processes (gloo) for a few updates of a 1-layer model, average, translate newstest2014, both BLEUs.
WMT14_TINY = (
    "--device cpu --model.n_layers=1 --model.d_model=32 --model.d_ff=64 --model.n_heads=2 --model.d_k=16 "
    "--model.d_v=16 --train.precision=fp32 --train.max_tokens=256 --train.update_tokens=600 "
    "--train.warmup_steps=10 --train.save_every_minutes=0 --train.save_every_steps=1 "
    "--train.valid_every_steps=0 --train.log_every_steps=1 --train.num_threads=1"
)
WORDS = {
    "en": "the small dog runs in the park with a red ball and the old man reads a long book",
    "de": "der kleine hund läuft im park mit einem roten ball und der alte mann liest ein langes buch",
    "fr": "le petit chien court dans le parc avec une balle rouge et le vieil homme lit un long livre",
}


def wmt_lines(lang: str, n: int, seed: int) -> bytes:
    """n sentences of 4-12 words of WORDS[lang] (the same positions in every language: aligned)."""
    words = WORDS[lang].split()
    out = []
    for i in range(n):
        k = 4 + (i * 7 + seed) % 9
        out.append(" ".join(words[(i + seed + j * 3) % len(words)] for j in range(k)))
    return ("\n".join(out) + "\n").encode()


def wmt14_archives(tasks) -> dict[str, dict[str, bytes]]:
    """{archive path: {member: bytes}} of nmt.data.download's WmtTasks, laid out as on statmt.org (one
    archive holds the members of several tasks: europarl-v7.tgz has de-en and fr-en)."""
    import gzip

    def sgm(body: bytes) -> bytes:
        segs = "".join(f'<seg id="{i}">{s}</seg>\n' for i, s in enumerate(body.decode().splitlines(), 1))
        return f'<srcset>\n<doc docid="x">\n{segs}</doc>\n</srcset>\n'.encode()

    archives: dict[str, dict[str, bytes]] = {}
    for task in tasks:
        for n, (rel, member) in enumerate(task.train):
            for lang in task.langs:
                body = wmt_lines(lang, 60, n)
                archives.setdefault(rel, {})[member.format(lang=lang)] = (
                    gzip.compress(body) if member.endswith(".gz") else body
                )
        rel, member = task.valid
        for lang in task.langs:
            archives.setdefault(rel, {})[member.format(lang=lang)] = wmt_lines(lang, 10, 7)
        rel, members = task.test
        for lang in task.langs:
            archives.setdefault(rel, {})[members[lang]] = sgm(wmt_lines(lang, 12, 11))
    return archives


def write_archives(root: Path, archives: dict[str, dict[str, bytes]]) -> None:
    import io
    import tarfile

    for rel, members in archives.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(path, "w" if rel.endswith(".tar") else "w:gz") as tar:
            for name, body in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))


@pytest.fixture
def wmt14_mirror(tmp_path):
    """(root folder served, base URL): a local statmt.org holding tiny WMT14 en-de and en-fr."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from nmt.data import download as dl

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    root = tmp_path / "www"
    write_archives(root, wmt14_archives((dl.WMT14_EN_DE, dl.WMT14_EN_FR)))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def run_wmt14_recipe(name: str, out: Path, url: str, tmp_path: Path, steps: int, **extra: str) -> str:
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if k not in ("GPUS", "MAX_TOKENS", "TORCHRUN", "TORCHRUN_ARGS")
        },
        "NMT": f"{sys.executable} -m nmt",
        "PY": sys.executable,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "GPUS": "2",
        "NMT_DATA_DIR": str(tmp_path / "cache"),
        "NMT_BASE_URL": url,
        "VOCAB_SIZE": "60",
        "PREPARE_ARGS": "--threads 1",
        "TRAIN_ARGS": f"{WMT14_TINY} --train.max_steps={steps}",
        **extra,
    }
    proc = subprocess.run(
        ["sh", str(ROOT / f"recipes/{name}.sh"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.slow
def test_wmt14_en_de_base_recipe_end_to_end_on_2_processes_and_resumed_by_a_rerun(wmt14_mirror, tmp_path):
    """recipes/wmt14-en-de-base.sh at a tiny size: download, prepare (newstest2013 valid, newstest2014
    test), 2 processes x 5 updates, the last 5 checkpoints averaged, newstest2014 translated, both
    BLEUs. The same command again resumes: the finished run is kept, averaged and scored again. (The
    big recipes run this script with other arguments: test_wmt14_recipes_pass_the_papers_settings.)"""
    import json

    out = tmp_path / "out"
    log = run_wmt14_recipe("wmt14-en-de-base", out, wmt14_mirror, tmp_path, steps=5)
    meta = json.loads((out / "data" / "meta.json").read_text())
    assert (meta["src_lang"], meta["tgt_lang"]) == ("en", "de")
    assert {k: v["pairs"] for k, v in meta["splits"].items() if k != "train"} == {"valid": 10, "test": 12}
    assert "== training on 2 process(es)" in log and "world size 2 (gloo)" in log
    assert "averaged 5 checkpoints (step_00000001 .. step_00000005)" in log
    assert len((out / "newstest2014.hyp.de").read_text().splitlines()) == 12
    score = (out / "newstest2014.score.txt").read_text()
    assert "BLEU = " in score and "signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp" in score
    assert "tokenized BLEU (paper-era, compound-split; not comparable to sacreBLEU) = " in score
    again = run_wmt14_recipe("wmt14-en-de-base", out, wmt14_mirror, tmp_path, steps=5)
    assert "the run already finished at update 5" in again
    assert (out / "newstest2014.score.txt").read_text() == score


@pytest.mark.slow
def test_wmt14_en_fr_recipe_downloads_and_prepares_en_fr(wmt14_mirror, tmp_path):
    """recipes/wmt14-en-fr-big.sh's data (five corpora, Gigaword a .tar of .gz members) through the
    recipe, up to the prepared folder (UNTIL=prepare)."""
    import json

    out = tmp_path / "out"
    run_wmt14_recipe("wmt14-en-fr-big", out, wmt14_mirror, tmp_path, steps=1, UNTIL="prepare")
    meta = json.loads((out / "data" / "meta.json").read_text())
    assert (meta["tgt_lang"], meta["splits"]["train"]["pairs"], meta["splits"]["test"]["pairs"]) == (
        "fr",
        300,
        12,
    )
    assert not (out / "run").exists()


@pytest.mark.parametrize(
    "name,tgt,last,preset,dropout,steps,keep",
    [
        ("wmt14-en-de-base", "de", 5, "base", 0.1, 100_000, 5),
        ("wmt14-en-de-big", "de", 20, "big", 0.3, 300_000, 20),
        ("wmt14-en-fr-big", "fr", 20, "big", 0.1, 300_000, 20),
    ],
)
def test_wmt14_recipes_pass_the_papers_settings(
    tmp_path, tiny_data, name, tgt, last, preset, dropout, steps, keep
):
    """Each recipe's calls (a fake nmt, torchrun and Python record them; 4 GPUs visible) and its YAML as
    nmt reads it: the paper's model, dropout (0.1 for big en-fr), updates, ~25k target tokens per update,
    a checkpoint every 10 minutes, the last 5 / 20 averaged, beam 4, alpha 0.6, |x| + 50, both BLEUs."""
    from nmt.config import preset as model_preset
    from nmt.train.command import build_configs

    log = tmp_path / "calls.txt"
    for tool, body in (
        ("nmt", 'echo "nmt $@" >> LOG'),
        ("torchrun", 'echo "torchrun $@" >> LOG'),
        ("py", "echo 4"),
    ):
        (tmp_path / tool).write_text("#!/bin/sh\n" + body.replace("LOG", str(log)) + "\n")
        (tmp_path / tool).chmod(0o755)
    env = {
        k: v for k, v in os.environ.items() if k not in ("GPUS", "MAX_TOKENS", "TRAIN_ARGS", "TORCHRUN_ARGS")
    }
    env.update(NMT=str(tmp_path / "nmt"), TORCHRUN=str(tmp_path / "torchrun"), PY=str(tmp_path / "py"))
    subprocess.run(
        ["sh", str(ROOT / f"recipes/{name}.sh"), "O"], env=env, cwd=tmp_path, check=True, capture_output=True
    )
    config = f"{ROOT}/recipes/{name}.yaml"
    assert log.read_text().splitlines() == [
        f"nmt prepare wmt14 --src en --tgt {tgt} --out O/data",
        f"torchrun --standalone --nproc-per-node=4 -m nmt train O/data --out O/run --config {config} "
        "--resume auto",
        f"nmt average O/run --last {last} --out O/average --force",
        f"nmt translate O/average -i O/data/test.en.txt -o O/newstest2014.hyp.{tgt} --beam 4 --alpha 0.6 "
        "--max-len-a 1 --max-len-b 50",
        f"nmt score --ref O/data/test.{tgt}.txt O/newstest2014.hyp.{tgt} --paper-bleu",
    ]
    model, train, _ = build_configs(tiny_data, preset_name=None, config_file=config, overrides={})
    assert vars(model) == {**vars(model_preset(preset, model.src_vocab_size)), "dropout": dropout}
    assert (train.max_steps, train.update_tokens, train.keep_last) == (steps, 25000, keep)
    assert (train.save_every_minutes, train.save_every_steps, train.warmup_steps) == (10, 0, 4000)
    assert (train.label_smoothing, train.lr_scale, train.adam_beta2) == (0.1, 1.0, 0.98)


def test_wmt14_recipe_without_a_gpu_says_so(tmp_path):
    """No GPU visible and no GPUS: exit 2 with what to do, after preparing and before training."""
    (tmp_path / "nmt").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "py").write_text("#!/bin/sh\necho 0\n")
    for tool in ("nmt", "py"):
        (tmp_path / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "GPUS"}
    env.update(NMT=str(tmp_path / "nmt"), PY=str(tmp_path / "py"))
    proc = subprocess.run(
        ["sh", str(ROOT / "recipes/wmt14-en-de-base.sh"), str(tmp_path / "o")],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "no GPU visible to torch" in proc.stderr and "GPUS=K" in proc.stderr


@pytest.mark.parametrize("written, averaged", [(7, 5), (3, 3)])
def test_demo_averages_the_last_5_checkpoints_or_all_a_slow_cpu_wrote(tmp_path, written, averaged):
    """A CPU too slow or too busy for 5 checkpoints in 13 minutes still gets a model: the demo
    averages the ones written and says so (nmt average --last 5 refuses fewer than 5)."""
    log = tmp_path / "calls.log"
    fake = tmp_path / "nmt"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'if [ "$1" = train ]; then\n'
        f'  for i in $(seq 1 {written}); do mkdir -p "$4/checkpoints/step_$i"; done\n'
        "fi\n"
    )
    fake.chmod(0o755)
    env = {**os.environ, "NMT": str(fake), "PY": sys.executable, "NMT_DATA_DIR": str(tmp_path)}
    out = subprocess.run(
        ["sh", str(ROOT / "recipes/demo.sh"), str(tmp_path / "demo")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [average] = [c for c in log.read_text().splitlines() if c.startswith("average ")]
    assert average.split()[2:4] == ["--last", str(averaged)]
    assert (f"only {written} checkpoints" in out) == (written < 5)


FAKE_BLEU = {  # what the fake `nmt score` gives each test set and model of the fine-tuning recipe
    "libreoffice.start": 1.0,
    "libreoffice.adapted": 11.0,
    "libreoffice.guarded": 10.5,
    "libreoffice.scratch": 2.0,
    "multi30k.start": 38.0,
    "multi30k.adapted": 2.0,
    "multi30k.guarded": 37.5,
}


@pytest.mark.parametrize("roundtrip", ["0", "1"])
def test_finetune_recipe_adapts_plainly_and_with_replay_and_guard_and_writes_the_scores(tmp_path, roundtrip):
    import gzip
    import json

    folder = tmp_path / "libreoffice_help" / "en-de"
    folder.mkdir(parents=True)
    for lang, line in (
        ("en", 'Click <span class="emph">Save</span>.'),
        ("de", 'Klicken Sie <span class="emph">Speichern</span>.'),
    ):
        (folder / f"train.tagged.{lang}.gz").write_bytes(gzip.compress(f"{line}\n{line}\n".encode()))
    log = tmp_path / "calls.log"
    fake = tmp_path / "nmt"
    cases = "".join(f"    *{k}.hyp*) b={v} ;;\n" for k, v in FAKE_BLEU.items())
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'if [ "$1" = translate ]; then\n'
        '  prev=; for a in "$@"; do [ "$prev" = -o ] && : > "$a"; prev=$a; done\nfi\n'
        'if [ "$1" = score ]; then\n  case "$*" in\n' + cases + "  esac\n"
        '  echo "{\\"bleu\\": $b, \\"chrf\\": 50.0}"\nfi\nexit 0\n'
    )
    fake.chmod(0o755)
    out = tmp_path / "o"
    env = {k: v for k, v in os.environ.items() if k not in ("MINUTES", "TRAIN_ARGS", "SCRATCH", "TAGGED")}
    env.update(NMT=str(fake), PY=sys.executable, NMT_DATA_DIR=str(tmp_path), ROUNDTRIP=roundtrip)
    subprocess.run(
        ["sh", str(ROOT / "recipes/finetune-libreoffice-en-de.sh"), "base", str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    calls = log.read_text().splitlines()
    start = f"{out}/start" if roundtrip == "1" else "base"
    if roundtrip == "1":
        assert calls[:2] == [f"export huggingface base {out}/hf", f"import huggingface {out}/hf {out}/start"]
    prepare = [c for c in calls if c.startswith("prepare files")][0]
    assert f"--spm-model {start} " in prepare and f"--train {out}/train.tagged.tmx " in prepare
    assert (out / "train.tagged.tmx").read_text().count("<tu>") == 2
    trains = [c for c in calls if c.startswith("train ")]
    guarded = [c for c in trains if "/guarded/" in c][0]
    assert f"--init {start} " in guarded
    assert f"--replay {out}/m30k --replay-share 0.2 --guard-valid {out}/m30k --guard-bleu-drop 1.0" in guarded
    assert not any("--replay" in c for c in trains if "/guarded/" not in c)
    result = json.loads((out / "scores.json").read_text())
    assert result["scores"]["guarded"] == {
        "libreoffice": {"bleu": 10.5, "chrf": 50.0},
        "multi30k": {"bleu": 37.5, "chrf": 50.0},
    }
    assert result["goal"]["libreoffice_gain_kept"] == 0.95 and result["goal"]["multi30k_bleu_lost"] == 0.5
    assert result["goal"]["met"] and result["settings"]["START"] == start
    translated = [c.split()[1] for c in calls if c.startswith("translate ")]
    assert f"{out}/guarded/run/checkpoints/best" in translated and "multi30k.scratch" not in " ".join(calls)
