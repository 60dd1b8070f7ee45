"""``servesim fields``: every scenario field with its default, unit and vLLM knob (text, Markdown or
a JSON Schema)."""

from __future__ import annotations

import argparse
import json


def add_parser(sub) -> None:
    p = sub.add_parser("fields", help="print every scenario field with its default, unit and vLLM knob")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="as a Markdown table (docs/scenario-reference.md)")
    fmt.add_argument(
        "--json-schema",
        action="store_true",
        help="as a JSON Schema for editors (e.g. `servesim fields --json-schema > servesim.schema.json`, "
        "then `# yaml-language-server: $schema=servesim.schema.json` atop a scenario)",
    )
    p.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.scenario.config import Scenario, field_reference
    from simulator.scenario.fields import json_schema

    if args.json_schema:
        print(json.dumps(json_schema(Scenario, "servesim scenario"), indent=1))
        return 0
    rows = field_reference()
    if args.markdown:
        print("| field | type | default | unit | vLLM knob | meaning |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(c.replace("|", "\\|") for c in (f"`{r[0]}`",) + r[1:]) + " |")
        return 0
    print(
        "Every field of a scenario file, with the default a file that leaves it out gets. (With no file at "
        "all, `servesim run` runs the built-in collapse case, simulator/data/default_scenario.yaml.)\n"
    )
    for path, tp, default, unit, vllm, doc in rows:
        extra = f" [{unit}]" if unit else ""
        knob = f" (vLLM: {vllm})" if vllm else ""
        print(f"{path}: {tp} = {default}{extra}{knob}\n    {doc}")
    return 0
