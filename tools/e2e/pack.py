"""Pack vLLM and the Python packages the device image lacks into xz pieces that travel with `device`
calls (64 MiB each, the working tree included), under .e2e/ (ignored by git).

    python tools/e2e/pack.py [--pieces 3]
    python tools/e2e/pack.py --sglang [--pieces 12]

`--sglang` packs SGLang 0.5.16 instead (.e2e/sgpart*/sgbundle.*; `device.sh sginstall` unpacks it
into a site of its own, searched before vLLM's): the newest SGLang releases that pin the device's
torch are 0.5.12-0.5.16 (0.5.18 on pin 2.13). Its kernels (sglang-kernel, FlashAttention-3 included:
SGLang's default attention on Hopper) and FlashInfer (imported for sampling) travel unpacked, so
that xz compresses them; the rest as wheels: the versions SGLang pins where the vLLM site's differ
(openai, apache-tvm-ffi), and what neither has; transformers is the image's (SGLang pins 5.12.1, whose
`tokenizers<=0.23.0` the image's 0.23.2 fails at import). `IPython.display`, which
`sglang.utils` imports for notebooks alone, is a stub.

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


# SGLang: the packages unpacked into the site (large, compressible), and the wheels installed beside them
SGLANG_SITE = ["sglang==0.5.16", "sglang-kernel==0.4.5", "flashinfer-python==0.6.14"]
SGLANG_WHEELS = [
    "apache-tvm-ffi==0.1.11",
    "openai==2.6.1",
    "distro==1.9.0",
    "orjson==3.13.0",
    "zstandard==0.25.0",
    "soundfile==0.14.0",
    "gguf==0.19.0",
    "sgl-deep-gemm==0.1.4.post1",
    "torch-memory-saver==0.0.10",
]
IPYTHON_STUB = (
    '"""A stand-in for IPython.display, which sglang.utils imports for notebooks alone."""\n\n\n'
    "class HTML(str):\n    pass\n\n\ndef display(*objs, **kw):\n    pass\n"
)


def _key(req: str) -> str:
    """A requirement's (NAME==VERSION) normalised name, as its wheels' file names begin."""
    return req.split("==")[0].lower().replace("-", "_").replace(".", "_")


def _wheel_key(wheel: Path) -> str:
    return wheel.name.split("-")[0].lower().replace(".", "_")


def _add_unpacked(tar: tarfile.TarFile, wheel: Path, drop: tuple[str, ...] = ()) -> None:
    """A wheel's files under site/, as they would be installed."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            if info.is_dir() or info.filename.startswith(drop):
                continue
            data = z.read(info)
            ti = tarfile.TarInfo("site/" + info.filename)
            ti.size, ti.mode = len(data), 0o755 if info.filename.endswith((".so", "vllm-rs")) else 0o644
            tar.addfile(ti, io.BytesIO(data))


def _add_text(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode = len(data), 0o644
    tar.addfile(ti, io.BytesIO(data))


def bundle(sglang: bool, cache: Path) -> bytes:
    """The xz-compressed tar of the site's files and the wheels (xz on every core)."""
    raw = cache / ("sglang.tar" if sglang else "vllm.tar")
    cache.mkdir(parents=True, exist_ok=True)  # a fresh checkout has no .e2e/ yet
    with tarfile.open(raw, mode="w") as tar:
        if sglang:
            download(SGLANG_SITE, cache / "sglang")
            download(SGLANG_WHEELS, cache / "sglang_wheels")
            for req in SGLANG_SITE:
                _add_unpacked(tar, next(w for w in (cache / "sglang").glob("*.whl") if _wheel_key(w) == _key(req)))
            _add_text(tar, "site/IPython/__init__.py", "")
            _add_text(tar, "site/IPython/display.py", IPYTHON_STUB)
            reqs, wheels = SGLANG_WHEELS, cache / "sglang_wheels"
        else:
            reqs = [r.strip() for r in (HERE / "requirements-device.txt").read_text().splitlines() if r.strip()]
            download([VLLM], cache / "vllm")
            download(reqs, cache / "wheels")
            _add_unpacked(tar, next((cache / "vllm").glob("vllm-0.26.0-*.whl")), DROP)
            wheels = cache / "wheels"
        wanted = {_key(r) for r in reqs}
        for w in sorted(wheels.glob("*.whl")):
            if _wheel_key(w) in wanted:  # one wheel a package (a second platform tag stops pip)
                wanted.discard(_wheel_key(w))
                tar.add(w, arcname="wheels/" + w.name)
    blob = subprocess.run(["xz", "-T0", "-6", "-c", str(raw)], check=True, capture_output=True).stdout
    raw.unlink()
    return blob


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--pieces", type=int, default=None, help="default: 3 (vLLM), 12 (SGLang: about 17 MB a piece, two a call)"
    )
    ap.add_argument("--sglang", action="store_true", help="pack SGLang 0.5.16 instead of vLLM")
    ap.add_argument("--out", default=str(ROOT / ".e2e"))
    a = ap.parse_args()
    out = Path(a.out)
    blob = bundle(a.sglang, out / "cache")
    n = a.pieces or (12 if a.sglang else 3)
    prefix, folder = ("sgbundle", "sgpart") if a.sglang else ("bundle", "part")
    size = -(-len(blob) // n)
    manifest = []
    for k in range(n):
        part = out / f"{folder}{k + 1}"
        part.mkdir(parents=True, exist_ok=True)
        for old in part.glob(f"{prefix}.*"):
            old.unlink()
        piece = blob[k * size : (k + 1) * size]
        name = f"{prefix}.tar.xz.{k:02d}"
        (part / name).write_bytes(piece)
        manifest.append(f"{hashlib.sha256(piece).hexdigest()}  {name}")
    for k in range(n):
        (out / f"{folder}{k + 1}" / f"{prefix}.sha256").write_text("\n".join(manifest) + "\n")
    print(f"{len(blob) / 2**20:.1f} MiB in {n} pieces of {size / 2**20:.1f} MiB under {out}/{folder}1..{n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
