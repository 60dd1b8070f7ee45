"""Pack vLLM and the Python packages the device image lacks into xz pieces that travel with `device`
calls (64 MiB each, the working tree included), under .e2e/ (ignored by git).

    python tools/e2e/pack.py [--pieces 3]

The device machine reaches no package registry and runs Python 3.12 with torch 2.11 (CUDA 13); vLLM
0.26.0 is the newest release that pins that torch. Its wheel is 304 MB; FlashAttention-2 (Hopper runs
FlashAttention-3), the bundled DeepGEMM and SM100 FMHA sources and the optional Rust front-end are left out.
The dependencies are the exact versions in requirements-device.txt (those `pip install vllm==0.26.0`
resolves, less torch, CUDA libraries, kernels vLLM does not import to serve a dense or MoE model on
Hopper, and packages the image has: transformers, tokenizers, safetensors, huggingface_hub,
sentencepiece, tiktoken, pillow).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import lzma
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VLLM = "vllm==0.26.0"
PLATFORMS = [
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_35_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
]
DROP = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/third_party/deep_gemm/",
    "vllm/third_party/fmha_sm100/",
    "vllm/vllm-rs",
)


def download(reqs: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "-d",
        str(dest),
        "-q",
    ]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    subprocess.run(cmd + reqs, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pieces", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / ".e2e"))
    a = ap.parse_args()
    out = Path(a.out)
    cache = out / "cache"
    reqs = [r.strip() for r in (HERE / "requirements-device.txt").read_text().splitlines() if r.strip()]
    download([VLLM], cache / "vllm")
    download(reqs, cache / "wheels")
    buf = io.BytesIO()
    with lzma.open(buf, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w|") as tar:
        wheel = next((cache / "vllm").glob("vllm-0.26.0-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for info in z.infolist():
                if info.is_dir() or info.filename.startswith(DROP):
                    continue
                data = z.read(info)
                ti = tarfile.TarInfo("site/" + info.filename)
                ti.size, ti.mode = len(data), 0o755 if info.filename.endswith((".so", "vllm-rs")) else 0o644
                tar.addfile(ti, io.BytesIO(data))
        wanted = {r.split("==")[0].lower().replace("-", "_").replace(".", "_") for r in reqs}
        for w in sorted((cache / "wheels").glob("*.whl")):
            if w.name.split("-")[0].lower().replace(".", "_") in wanted:
                tar.add(w, arcname="wheels/" + w.name)
    blob = buf.getvalue()
    n = a.pieces
    size = -(-len(blob) // n)
    manifest = []
    for k in range(n):
        part = out / f"part{k + 1}"
        part.mkdir(parents=True, exist_ok=True)
        for old in part.glob("bundle.*"):
            old.unlink()
        piece = blob[k * size : (k + 1) * size]
        name = f"bundle.tar.xz.{k:02d}"
        (part / name).write_bytes(piece)
        manifest.append(f"{hashlib.sha256(piece).hexdigest()}  {name}")
    for k in range(n):
        (out / f"part{k + 1}" / "bundle.sha256").write_text("\n".join(manifest) + "\n")
    print(f"{len(blob) / 2**20:.1f} MiB in {n} pieces of {size / 2**20:.1f} MiB under {out}/part1..{n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
