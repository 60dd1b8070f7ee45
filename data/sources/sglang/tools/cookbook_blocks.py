"""Copies the benchmark commands and printed `bench_serving` result blocks of SGLang cookbook pages
(github.com/sgl-project/sgl-cookbook, docs/autoregressive/...) into raw/cookbook_<page>.txt, verbatim,
with the page's path, commit and blob, and its "Test Environment" lines. build_public_runs.py reads them.

    python cookbook_blocks.py /path/to/sgl-cookbook/git-dir

Only the fenced blocks are copied (a server launch, a bench_serving command, a result block; the Llama page writes both commands as `sglang serve`),
in the order the page prints them; the page's prose is not.
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RAW = os.path.join(os.path.dirname(HERE), "raw")
PAGES = {  # raw file name -> page
    "cookbook_deepseek_r1_b200": "docs/autoregressive/DeepSeek/DeepSeek-R1.md",
    "cookbook_deepseek_v3_1_mi300x": "docs/autoregressive/DeepSeek/DeepSeek-V3_1.md",
    "cookbook_qwen3_235b_b200": "docs/autoregressive/Qwen/Qwen3.md",
    "cookbook_llama3_1_70b_a100": "docs/autoregressive/Llama/Llama3.1.md",
    "cookbook_gpt_oss_120b_b200": "docs/autoregressive/OpenAI/GPT-OSS.md",
}


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True).stdout


def blocks(page: str) -> list[str]:
    """The fenced blocks of the page's benchmark section that launch a server, run bench_serving or
    print its result."""
    section = page[re.search(r"## 5\. ?Benchmark", page).start() :]  # type: ignore[union-attr]
    out = []
    for body in re.findall(r"```[a-z]*\n(.*?)```", section, flags=re.S):
        if any(k in body for k in ("sglang.launch_server", "sglang serve", "sglang.bench_serving", "Serving Benchmark Result")):
            out.append(body.rstrip("\n"))
    return out


def main() -> int:
    repo = sys.argv[1]
    commit = git(repo, "rev-parse", "HEAD").strip()
    for name, path in PAGES.items():
        page = git(repo, "show", f"HEAD:{path}")
        blob = git(repo, "rev-parse", f"HEAD:{path}").strip()
        env = re.search(r"\*\*Test Environment:\*\*\n\n((?:- .*\n)+)", page) or re.search(
            r"### 5\.1 Speed Benchmark\n\n((?:- .*\n)+)", page
        )
        head = [
            f"# {path} of github.com/sgl-project/sgl-cookbook at commit {commit} (blob {blob})",
            "# Test environment, as the page states it:",
            *(f"#   {line}" for line in (env.group(1).splitlines() if env else ["(not stated)"])),
            "# The page's fenced benchmark blocks follow verbatim, each after a line '=== block N'.",
        ]
        body = [f"=== block {i}\n{b}" for i, b in enumerate(blocks(page))]
        with open(os.path.join(RAW, name + ".txt"), "w") as f:
            f.write("\n".join(head + body) + "\n")
        print(f"{name}: {len(body)} blocks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
