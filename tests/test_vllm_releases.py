"""engine.vllm_version: every vLLM release from 0.10.0 on, each run as the release line whose
modelled behaviour it shares, with the settings it has of its own and a note saying so."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli import main
from simulator.errors import ConfigError
from simulator.outputs.notes import scenario_notes
from simulator.resolve import host_model, load_arch, load_gpu
from simulator.scenario import versions
from simulator.scenario.config import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]


def engine(version) -> str:
    return scenario_from_dict({"engine": {"vllm_version": version}}).engine.vllm_version


def test_a_release_between_lines_runs_with_a_note(tmp_path, capsys):
    """'0.13' runs as line 0.11 with 0.13's capture sizes, and the run says so in one line."""
    out = tmp_path / "r"
    rc = main(
        [
            "run",
            "--set",
            "engine.vllm_version=0.13",
            "--set",
            "run.duration_s=20",
            "--set",
            "run.warmup_s=0",
            "--out",
            str(out),
        ]
    )
    assert rc in (0, None)
    notes = [line for line in capsys.readouterr().out.splitlines() if "vllm_version" in line]
    assert notes == [
        "note: collapse_c1200: engine.vllm_version '0.13' runs as release line 0.11 with CUDA-graph capture "
        "sizes by 16 from 256, gpt-oss's largest capture size 1024 (992 in 0.11.0), the largest capture size "
        "capped at max_num_batched_tokens (as 0.13.0 has them); "
        "no other modelled default differs"
    ]


def test_releases_and_lines_resolve_to_what_they_set():
    v13 = versions.version("0.13")
    line = versions.VERSIONS["0.11"]
    assert (v13.name, v13.capture_by16_from, v13.capture_cap_by_budget) == ("0.11", 256, True)
    assert (v13.async_scheduling, v13.admission, v13.cudagraph_mode) == (False, "first_chunk", "full_and_piecewise")
    assert (line.capture_by16_from, line.capture_cap_by_budget) == (1 << 30, False)  # the line itself unchanged
    v15 = versions.version(engine("0.15.1"))
    assert (v15.name, v15.admission, v15.async_scheduling) == ("0.19", "first_chunk", True)
    assert versions.version("0.21").graphs_in_budget_v1 and not versions.version("0.19").graphs_in_budget_v1
    for name in versions.LINES:  # the lines are the very records they were
        assert versions.version(name) is versions.VERSIONS[name]
        assert versions.release_note(name) is None
    for name, r in versions.RELEASES.items():
        assert r.line in versions.LINES and versions.release_name(name) == name
        assert versions.version(name).name == r.line
    # A release of a line's own series that differs in nothing modelled: no note.
    assert versions.release_note("0.10.2") is None and versions.release_note("0.19.1") is None
    assert "runs as release line 0.26" in versions.release_note("0.25")


def test_async_scheduling_knob_sets_any_release():
    """--async-scheduling (engine.async_scheduling) overrides the release's default either way."""
    on = {"vllm_version": "0.13", "async_scheduling": True}
    off = {"vllm_version": "0.15.1", "async_scheduling": False}

    def overlaps(engine: dict) -> bool:
        sc = scenario_from_dict({"engine": engine})
        return host_model(sc, load_arch(sc), load_gpu(sc.hardware.gpu)).async_scheduling

    assert overlaps({"vllm_version": "0.13"}) is False
    assert overlaps({"vllm_version": "0.14"}) is True
    assert overlaps(on) is True
    assert overlaps(off) is False


def _defaults(gpu: str, **engine) -> tuple[int, int]:
    from simulator.resolve import engine_defaults

    sc = scenario_from_dict({"hardware": {"gpu": gpu}, "engine": engine})
    return engine_defaults(load_gpu(sc.hardware.gpu), sc)


def test_from_0_28_gpus_of_160_gib_default_to_16384_batched_tokens():
    """vLLM 0.28.0's get_batch_defaults: 1024 sequences and 16384 tokens for `vllm serve` on GPUs of
    160 GiB or more; 0.27.1 and the H200 (140 GiB) keep 8192; an A100 keeps 2048; a budget the
    scenario gives wins."""
    for gpu in ("b200", "b300", "gb200", "mi300x", "mi355x"):
        assert _defaults(gpu) == (1024, 16384), gpu  # the default release, 0.32
        assert _defaults(gpu, vllm_version="0.28") == (1024, 16384), gpu
        assert _defaults(gpu, vllm_version="0.27.1") == (1024, 8192), gpu
        assert _defaults(gpu, vllm_version="0.26") == (1024, 8192), gpu
    assert _defaults("h200") == (1024, 8192)
    assert _defaults("a100-80gb") == (256, 2048)
    assert _defaults("b200", max_num_batched_tokens=4096) == (1024, 4096)
    assert versions.release_note("0.28") == (
        "engine.vllm_version '0.28' runs as release line 0.26 with 16384 batched tokens by default on GPUs of "
        "160 GiB or more, the --performance-mode knob (as 0.28.0 has them); no other modelled default differs"
    )
    assert (
        versions.release_note("0.33")
        == "engine.vllm_version '0.33' runs as release line 0.32; no modelled default differs"
    )


def test_performance_mode_throughput_doubles_the_defaults_left_null():
    """--performance-mode throughput doubles max_num_seqs and max_num_batched_tokens where the user
    gives neither (each on its own), as vLLM 0.28-0.33 do."""
    assert _defaults("h200", performance_mode="throughput") == (2048, 16384)
    assert _defaults("b200", performance_mode="throughput") == (2048, 32768)
    assert _defaults("h200", performance_mode="throughput", max_num_seqs=64) == (64, 16384)
    assert _defaults("h200", performance_mode="interactivity") == (1024, 8192)
    assert _defaults("h200", vllm_version="0.28", performance_mode="throughput") == (2048, 16384)


def test_performance_mode_interactivity_runs_small_batches_unpadded():
    """interactivity captures every size from 1 to 32: a decode batch of 9 runs as 9 tokens, not
    padded to 16; past 32 the default sizes (by 8) pad as before."""
    from simulator.engine.cost import padded_tokens
    from simulator.resolve import cost_model, engine_defaults, load_gpu

    def padded(mode: str, n: int) -> int:
        sc = scenario_from_dict({"engine": {"performance_mode": mode}})
        gpu, model = load_gpu(sc.hardware.gpu), load_arch(sc)
        return int(padded_tokens(cost_model(sc, model, gpu, *engine_defaults(gpu, sc)).params, n))

    assert [padded("balanced", n) for n in (3, 9, 17, 32, 33)] == [4, 16, 24, 32, 40]
    assert [padded("interactivity", n) for n in (3, 9, 17, 32, 33)] == [3, 9, 17, 32, 40]


@pytest.mark.parametrize("version", ["0.26", "0.27.1", "0.13"])
def test_performance_mode_before_0_28_is_a_one_line_error(version):
    with pytest.raises(ConfigError) as e:
        scenario_from_dict({"engine": {"vllm_version": version, "performance_mode": "throughput"}})
    assert str(e.value) == (
        f"engine.performance_mode: --performance-mode comes in vLLM 0.28; engine.vllm_version '{version}' has "
        "only balanced (got throughput)"
    )


def test_versions_as_strings_or_numbers(tmp_path):
    """YAML reads 0.13 and 0.10 as numbers: they name 0.13 and 0.10 (a two-digit minor); a patch
    release is a string."""
    assert [engine(v) for v in ("0.13", 0.13, 0.1, 0.32, "0.15.1", "0.10.1.1")] == [
        "0.13",
        "0.13",
        "0.10",
        "0.32",
        "0.15.1",
        "0.10.1.1",
    ]
    f = tmp_path / "s.yaml"
    f.write_text("engine: {vllm_version: 0.10}\n")
    assert load_scenario(str(f))[0].engine.vllm_version == "0.10"
    sc, _ = load_scenario(None, ["engine.vllm_version=0.26"])
    assert sc.engine.vllm_version == "0.26" and scenario_notes(sc) == []


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "0.9",
            "engine.vllm_version must be a vLLM release from 0.10 on (servesim follows the V1 engine of "
            "0.10.0 to 0.33.0) (got '0.9')",
        ),
        (
            "0.99",
            "engine.vllm_version must be a vLLM release from 0.10.0 to 0.33.0, as x.y or x.y.z, e.g. '0.32' "
            "or '0.15.1' (docs/vllm-releases.md lists them) (got '0.99')",
        ),
        ("0.13.5", None),
        ("latest", None),
        (True, "engine.vllm_version must be a vLLM release such as '0.32' or '0.15.1' (got True)"),
    ],
)
def test_releases_before_0_10_or_unknown_are_one_line_errors(value, message):
    with pytest.raises(ConfigError) as e:
        engine(value)
    text = str(e.value)
    assert "\n" not in text and text.startswith("engine.vllm_version must be") and repr(value) in text
    if message:
        assert text == message


def test_the_docs_table_is_the_code_s():
    doc = (ROOT / "docs" / "vllm-releases.md").read_text()
    assert versions.release_table() in doc, "docs/vllm-releases.md: paste versions.release_table() again"
    assert "docs/vllm-releases.md" in (ROOT / "README.md").read_text()


def test_the_json_schema_lists_every_release(capsys):
    import json

    import jsonschema

    assert main(["fields", "--json-schema"]) == 0
    validator = jsonschema.Draft202012Validator(json.loads(capsys.readouterr().out))
    for ok in ("0.32", "0.13", 0.13, 0.1, "0.15.1", "0.10.1.1"):
        assert not list(validator.iter_errors({"engine": {"vllm_version": ok}})), ok
    for bad in ("0.9", "0.99", 0.99, "0.13.5"):
        assert [list(e.path) for e in validator.iter_errors({"engine": {"vllm_version": bad}})] == [
            ["engine", "vllm_version"]
        ], bad


@pytest.mark.parametrize(
    ("model", "release", "given", "largest", "by16"),
    [
        ("gpt-oss-120b", "0.26", None, 1024, 256),  # as every recorded gpt-oss server logged it
        ("gpt-oss-20b", "0.10", None, 1024, 256),  # the model's own sizes: by 16 from 256 on every line
        ("gpt-oss-20b", "0.11", None, 992, 256),  # 0.11.0: FlashAttention-3's full graphs stopped at 992
        ("gpt-oss-20b", "0.13", None, 1024, 256),  # 1024 again from 0.11.1
        ("llama-3.1-8b", "0.26", None, 512, 256),  # min(2 x 256, 512)
        ("llama-3.1-8b", "0.10", None, 512, 1 << 30),
        ("gpt-oss-120b", "0.26", 256, 256, 256),  # the user's size wins
        ("gpt-oss-120b", "0.10", 256, 256, 1 << 30),  # and with it the release's own spacing
    ],
)
def test_a_models_own_largest_capture_size(model, release, given, largest, by16):
    """gpt-oss's model config raises the largest CUDA-graph capture size to 1024 (sizes above 256 by
    16) where the user sets none; a given size wins; other models keep min(2 x max_num_seqs, 512)."""
    from simulator.resolve import execution
    from simulator.scenario.hardware import load_gpu

    engine = {"vllm_version": release, "max_num_seqs": 256}
    if given is not None:
        engine["max_cudagraph_capture_size"] = given
    sc = scenario_from_dict({"model": model, "engine": engine})
    x = execution(sc, load_gpu("h200"), load_arch(sc), 256, 8192)
    assert (x.max_capture_size, x.capture_by16_from) == (largest, by16)
