"""Scenario validation: one-line errors naming the field, the rule and the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.errors import ConfigError
from simulator.run import build
from simulator.scenario.config import field_reference, load_scenario, scenario_from_dict


def err(data: dict) -> str:
    with pytest.raises(ConfigError) as e:
        build(scenario_from_dict(data))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_bound_error_names_field_rule_and_value():
    """A bad bound says which field, which rule and what it got."""
    assert err({"engine": {"max_num_seqs": 0}}) == "engine.max_num_seqs must be >= 1 (got 0)"
    assert err({"engine": {"gpu_memory_utilization": 1.5}}) == "engine.gpu_memory_utilization must be <= 1.0 (got 1.5)"


def test_unknown_key_suggests_the_closest():
    """Typos get a did-you-mean."""
    assert err({"engine": {"max_num_seq": 4}}) == "engine.max_num_seq: unknown key; did you mean 'max_num_seqs'?"


def test_choice_error_lists_choices():
    """A bad choice lists the valid ones."""
    msg = err({"engine": {"preemption_mode": "swapp"}})
    assert msg.startswith("engine.preemption_mode must be one of 'recompute', 'swap' (got 'swapp')")


def test_unknown_model_and_gpu_list_the_known_ones():
    """Unknown names list what is built in."""
    assert "llama-3.1-8b" in err({"model": "llama-9"})
    assert "h100-sxm" in err({"hardware": {"gpu": "h101"}})


def test_model_that_does_not_fit_says_by_how_much():
    """70B in bf16 on one 80 GB GPU: the message gives weights, reserve, capacity and the shortfall."""
    msg = err({"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm"}})
    assert "does not fit" in msg and "short by" in msg and "GiB" in msg


def test_type_errors():
    """Wrong types are named."""
    assert err({"run": {"seed": "abc"}}) == "run.seed must be an integer (got 'abc')"
    assert (
        err({"engine": {"enable_prefix_caching": "yes"}})
        == "engine.enable_prefix_caching must be true or false (got 'yes')"
    )


def test_malformed_yaml_gives_line_and_column(tmp_path):
    """Broken YAML points at the line and column."""
    p = tmp_path / "bad.yaml"
    p.write_text("engine:\n  max_num_seqs: [1, 2\nrun: {}\n")
    with pytest.raises(ConfigError, match=r"malformed YAML at line \d+, column \d+"):
        load_scenario(str(p))


def test_overrides_apply_and_are_checked():
    """--set values parse as YAML and go through the same checks."""
    sc, _ = load_scenario(None, ["engine.max_num_seqs=512", "workload.arrival.concurrency=7"])
    assert sc.engine.max_num_seqs == 512 and sc.workload.arrival.concurrency == 7
    with pytest.raises(ConfigError, match=r"engine\.block_size must be >= 1"):
        load_scenario(None, ["engine.block_size=0"])


def test_switching_a_distribution_by_override_drops_the_files_fields_of_the_old_one(tmp_path):
    """The default scenario's output lengths are lognormal (mean, sigma): ``--set
    workload.output_tokens.dist=fixed`` with a value gives fixed lengths, where it used to fail on the
    file's mean; a field the user also sets for the wrong distribution still fails, with the rule;
    and a file's own inconsistent fields still fail."""
    sc, _ = load_scenario(None, ["workload.output_tokens.dist=fixed", "workload.output_tokens.value=300"])
    assert sc.workload.output_tokens.dist == "fixed" and sc.workload.output_tokens.value == 300
    with pytest.raises(ConfigError, match=r"workload.output_tokens.mean: only for dist 'lognormal' or 'normal'"):
        load_scenario(None, ["workload.output_tokens.dist=fixed", "workload.output_tokens.mean=300"])
    p = tmp_path / "s.yaml"
    p.write_text("workload: {output_tokens: {dist: fixed, mean: 300}}\n")
    with pytest.raises(ConfigError, match=r"only for dist 'lognormal' or 'normal' \(got dist 'fixed'\)"):
        load_scenario(str(p))
    # An arrival switched to Poisson drops the closed loop's clients; the engine's knobs are not
    # dropped when the framework changes (they have counterparts, which the error names).
    sc, _ = load_scenario(None, ["workload.arrival.type=poisson", "workload.arrival.rate=5"])
    assert sc.workload.arrival.type == "poisson" and sc.workload.arrival.rate == 5
    p.write_text("engine: {max_num_seqs: 64}\n")
    with pytest.raises(
        ConfigError, match=r"--set engine\.max_num_seqs=null, and give sglang.s engine\.max_running_requests"
    ):
        load_scenario(str(p), ["engine.framework=sglang"])


def test_a_set_that_shortens_the_run_below_the_scenarios_warmup_says_whose_warmup_it_is():
    """The built-in scenario's 60-s warm-up is the scenario's, not the user's: a --set of a 30-s run
    says so and what to set beside it; with the warm-up given too, the plain rule."""
    with pytest.raises(ConfigError) as e:
        load_scenario(None, ["run.duration_s=30"])
    assert str(e.value) == (
        "run.warmup_s must be < run.duration_s (30 s) (got 60, the scenario's); "
        "--set run.warmup_s too (0: measure from the start)"
    )
    with pytest.raises(ConfigError) as e:
        load_scenario(None, ["run.duration_s=30", "run.warmup_s=40"])
    assert str(e.value) == "run.warmup_s must be < run.duration_s (30 s) (got 40)"
    sc, _ = load_scenario(None, ["run.duration_s=30", "run.warmup_s=0"])
    assert sc.run.duration_s == 30


def test_a_hugging_face_repository_id_names_its_built_in_model(tmp_path, monkeypatch):
    """A model given as the Hugging Face repository a built-in config.json was copied from, or a
    tuned or dated version of it, runs as that built-in (a note says so); another repository id gets
    one line saying where its config.json is; a folder of that name on disk stays a path."""
    from simulator.outputs.notes import scenario_notes
    from simulator.scenario.models import builtin_for_repo, load_model

    assert builtin_for_repo("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert builtin_for_repo("openai/gpt-oss-120b") == "gpt-oss-120b"
    assert builtin_for_repo("deepseek-ai/DeepSeek-R1-0528") == "deepseek-r1"
    assert builtin_for_repo("Qwen/Qwen3-235B-A22B-FP8") == "qwen3-235b-a22b-fp8"
    assert builtin_for_repo("Qwen/Qwen3-32B-FP8") is None and builtin_for_repo("llama-3.1-8b") is None
    assert load_model("meta-llama/Llama-3.1-8B-Instruct").num_layers == 32
    sc, _ = load_scenario(None, ["model=openai/gpt-oss-20b"])
    assert any("model 'openai/gpt-oss-20b' runs as the built-in gpt-oss-20b" in n for n in scenario_notes(sc))
    with pytest.raises(ConfigError, match=r"model: 'mistralai/Mistral-7B-v0\.1' is not a built-in model and no folder here; "
                       r"save its config\.json \(https://huggingface\.co/mistralai/Mistral-7B-v0\.1/blob/main/config\.json\)"):  # fmt: skip
        load_model("mistralai/Mistral-7B-v0.1")
    f = tmp_path / "s.yaml"  # in a scenario file too, where a name with a folder is read beside the file
    f.write_text("model: openai/gpt-oss-120b\nhardware: {gpu: h200}\n")
    sc, _ = load_scenario(str(f))
    assert sc.model == "openai/gpt-oss-120b" and load_model(sc.model).name == "gpt-oss-120b"
    monkeypatch.chdir(tmp_path)  # a folder named like a repository is read from disk
    (tmp_path / "meta-llama" / "Llama-3.1-8B-Instruct").mkdir(parents=True)
    assert builtin_for_repo("meta-llama/Llama-3.1-8B-Instruct") is None


def test_file_names_in_a_scenario_are_read_from_its_folder(tmp_path, monkeypatch):
    """A relative trace path in a scenario file is found beside the file whatever the current
    directory; one given with --set is read from the current directory."""
    d = tmp_path / "exp"
    d.mkdir()
    (d / "t.csv").write_text("arrival_time_s,prompt_tokens,output_tokens\n0.5,10,5\n")
    (d / "s.yaml").write_text("workload: {trace: t.csv}\n")
    monkeypatch.chdir(tmp_path)
    sc, raw = load_scenario("exp/s.yaml")
    assert Path(sc.workload.trace) == Path("exp/t.csv") and raw["workload"]["trace"] == sc.workload.trace
    sc, _ = load_scenario("exp/s.yaml", ["workload.trace=exp/t.csv"])
    assert sc.workload.trace == "exp/t.csv"
    with pytest.raises(ConfigError, match=r"workload.trace: file not found \(got 'exp/x.csv'\)"):
        load_scenario("exp/s.yaml", ["workload.trace=exp/x.csv"])


def test_a_folder_given_as_scenario_is_named_as_such():
    with pytest.raises(
        ConfigError, match=r"^scenario: scenarios is a folder; give a scenario YAML file such as scenarios/"
    ):
        load_scenario("scenarios")


def test_scientific_notation_is_a_number_in_files_and_overrides(tmp_path):
    """YAML 1.1 reads 1e5 as a string; scenarios read it as the number everyone means."""
    (tmp_path / "s.yaml").write_text("run: {duration_s: 1e3, warmup_s: 2E1}\nengine: {max_num_batched_tokens: 1e4}\n")
    sc, _ = load_scenario(str(tmp_path / "s.yaml"))
    assert (sc.run.duration_s, sc.run.warmup_s, sc.engine.max_num_batched_tokens) == (1000.0, 20.0, 10000)
    sc, _ = load_scenario(None, ["run.duration_s=1.5e3", "engine.max_num_seqs=2e3"])
    assert sc.run.duration_s == 1500.0 and sc.engine.max_num_seqs == 2000


def test_partial_length_mappings_keep_the_documented_defaults():
    """`output_tokens: {dist: fixed}` is the documented 256 tokens (the field's default), and
    `servesim fields` shows what runs use for nested defaults."""
    sc, _ = load_scenario(None, ["workload.output_tokens={dist: fixed}", "workload.session={turns: {dist: fixed}}"])
    assert sc.workload.output_tokens.value == 256 and sc.workload.session.turns.value == 4
    rows = {r[0]: r[2] for r in field_reference()}
    assert rows["workload.output_tokens.value"] == "256" and rows["workload.session.turns.value"] == "4"
    assert rows["workload.prompt_tokens.value"] == "512"


def test_every_command_reads_a_scenario_file_the_same_way(tmp_path, monkeypatch, capsys):
    """check, run and sweep read a scenario through one loader: a relative trace path beside the file
    works in each (sweep once failed on it), and a folder given as the scenario gets the same error
    in sweep and plan as in run."""
    from simulator.cli import main

    d = tmp_path / "exp"
    d.mkdir()
    rows = "".join(f"{0.1 * i:.1f},20,4\n" for i in range(8))
    (d / "t.csv").write_text("arrival_time_s,prompt_tokens,output_tokens\n" + rows)
    (d / "s.yaml").write_text("workload: {trace: t.csv}\nrun: {duration_s: null, warmup_s: 0}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "exp/s.yaml"]) == 0
    assert main(["run", "exp/s.yaml", "--out", "r"]) == 0
    assert main(["sweep", "exp/s.yaml", "--param", "engine.max_num_seqs=4,8", "--out", "sw", "--jobs", "1"]) == 0
    assert len(list((tmp_path / "sw" / "points").iterdir())) == 2
    capsys.readouterr()
    for cmd in (["sweep", "exp", "--param", "engine.max_num_seqs=4,8"], ["plan", "exp", "--rate", "1"]):
        assert main(cmd) == 2
        assert capsys.readouterr().err.startswith("error: scenario: exp is a folder; give a scenario YAML file")


def test_the_json_schema_accepts_every_shipped_scenario_and_catches_field_mistakes(capsys):
    """`servesim fields --json-schema` (for editors) describes what ``build`` accepts: every scenario in
    the repository validates, and a misspelt key, a value out of bounds or not among the choices, or
    a wrong type is flagged, as the loader flags it."""
    import glob
    import json

    import jsonschema

    from simulator.cli import main
    from simulator.scenario import yamlio

    assert main(["fields", "--json-schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    validator = jsonschema.Draft202012Validator(schema)
    validator.check_schema(schema)
    root = Path(__file__).resolve().parents[1]
    files = [
        *glob.glob(f"{root}/scenarios/*.yaml"),
        *glob.glob(f"{root}/benchmarks/scenarios/*.yaml"),
        f"{root}/simulator/data/default_scenario.yaml",
    ]
    assert len(files) > 15
    for f in files:
        errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(yamlio.load(Path(f).read_text()))]
        assert not errors, f"{f}: {errors}"
    for name, where in (
        ("unknown_top_key", []),
        ("preemption_typo", ["engine", "preemption_mode"]),
        ("budget_negative", ["engine", "max_num_batched_tokens"]),
        ("seed_string", ["run", "seed"]),
        ("rate_negative", ["workload", "arrival", "rate"]),
    ):
        data = yamlio.load((root / "tests" / "bad_inputs" / f"{name}.yaml").read_text())
        assert [list(e.path) for e in validator.iter_errors(data)] == [where], name
        with pytest.raises(ConfigError):
            scenario_from_dict(data)
