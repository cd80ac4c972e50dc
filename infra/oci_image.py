#!/usr/bin/env python3
"""The search function's container image as an OCI image layout, written without Docker, and its push to a registry.

    python3 infra/oci_image.py write --root .aws-sam/search-image --base .aws-sam/lambda-base:3.13-arm64 \\
        --out .aws-sam/search-image-oci --tag search-index
    python3 infra/oci_image.py push --layout .aws-sam/search-image-oci:search-index \\
        --to <account>.dkr.ecr.<region>.amazonaws.com/<repository>
    python3 infra/oci_image.py check-registry --layout .aws-sam/search-image-oci:search-index

``write`` appends one layer, the file system ``infra/build_search_image.py build`` assembled (``var/task``: what
the Dockerfile's ``pip install`` and ``COPY`` put there), to a base image read from an OCI layout (the Lambda base
image, copied there by ``skopeo copy docker://public.ecr.aws/lambda/python:3.13-arm64 oci:<dir>:<tag>``), and sets
the Dockerfile's ``CMD``. The layer is a gzip'd tar with fixed times and owners, so the same tree gives the same
digest. ``--base none`` writes the layer alone (an image Lambda cannot run: for checking the writer and the push).

``push`` copies the layout to a registry with ``skopeo copy --preserve-digests`` (no daemon) and prints the image as
``<repository>@sha256:<digest>``, the value of the template's ``SearchImageUri``. ``check-registry`` starts Debian's
``docker-registry`` on 127.0.0.1, pushes the layout there, pulls it back into a new layout and compares the
manifest, config and layer digests, then stops the registry. Only the standard library is needed (and skopeo,
docker-registry on PATH for those two).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"
# The Dockerfile's CMD (functions/search_index/Dockerfile); the base image's ENTRYPOINT runs it.
CMD = ["handler.handler"]
# 2000-01-01: a fixed time for every file of the layer, so that its digest depends on the tree's content alone.
EPOCH = 946_684_800


class ImageError(Exception):
    """An image that cannot be written or pushed; the message says why."""


def log(message: str) -> None:
    print(f"oci: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------ layout


def _blob_path(layout: Path, digest: str) -> Path:
    algorithm, _, hex_digest = digest.partition(":")
    return layout / "blobs" / algorithm / hex_digest


def _write_blob(layout: Path, data: bytes) -> dict[str, Any]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = _blob_path(layout, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"digest": digest, "size": len(data)}


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def split_reference(reference: str) -> tuple[Path, str]:
    """``dir:tag`` -> (dir, tag); a tag may not hold ``/``, so ``a:b/c`` is a directory."""
    directory, sep, tag = reference.rpartition(":")
    if not sep or "/" in tag or not directory:
        raise ImageError(f"{reference!r}: expected <layout directory>:<tag>")
    return Path(directory), tag


def read_image(layout: Path, tag: str, *, arch: str = "arm64") -> tuple[dict[str, Any], dict[str, Any]]:
    """The manifest and config of ``tag`` in the layout (for an index: its ``linux/arch`` manifest)."""
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError) as exc:
        raise ImageError(f"{layout}: not an OCI image layout ({exc})") from exc
    found = [m for m in index.get("manifests", []) if m.get("annotations", {}).get(REF_NAME) == tag]
    if len(found) != 1:
        raise ImageError(f"{layout}: {len(found)} images tagged {tag!r}, expected one")
    descriptor = found[0]
    if descriptor["mediaType"] == INDEX:
        nested = json.loads(_blob_path(layout, descriptor["digest"]).read_bytes())
        platforms = [m for m in nested["manifests"] if m.get("platform", {}) == {"architecture": arch, "os": "linux"}]
        if not platforms:
            raise ImageError(f"{layout}:{tag} has no linux/{arch} image")
        descriptor = platforms[0]
    if descriptor["mediaType"] != MANIFEST:
        raise ImageError(f"{layout}:{tag}: {descriptor['mediaType']} is not an OCI manifest (skopeo copy to oci:)")
    manifest = json.loads(_blob_path(layout, descriptor["digest"]).read_bytes())
    config = json.loads(_blob_path(layout, manifest["config"]["digest"]).read_bytes())
    return manifest, config


# ------------------------------------------------------------------------------------------------ the layer


class _Hashing:
    """A write-only file that hashes and counts what goes through it to ``sink``."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink, self.sha256, self.size = sink, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self.sink.write(data)

    def flush(self) -> None:
        self.sink.flush()


def _normalised(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = EPOCH
    info.mode = 0o755 if info.isdir() or info.mode & 0o111 else 0o644
    return info


def _entries(top: Path) -> Iterator[Path]:
    """``top`` and every path under it, parents before children, in a fixed order."""
    for directory, names, files in os.walk(top):
        names.sort()
        here = Path(directory)
        yield here
        for name in sorted(files):
            yield here / name


def write_layer(root: Path, layout: Path) -> tuple[dict[str, Any], str]:
    """``root/var`` (the image's ``/var/task``) as a gzip'd tar blob of the layout: its descriptor and its diff ID
    (the digest of the tar). Nothing else of ``root`` (the build's reports) goes in."""
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=layout / "blobs" / "sha256", delete=False) as raw:
        compressed = _Hashing(raw)
        with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0, compresslevel=6) as zipped:  # type: ignore[arg-type]
            tar_stream = _Hashing(zipped)  # type: ignore[arg-type]
            with tarfile.open(fileobj=tar_stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                for path in _entries(root / "var"):
                    tar.add(path, arcname=path.relative_to(root).as_posix(), recursive=False, filter=_normalised)
    digest = "sha256:" + compressed.sha256.hexdigest()
    os.replace(raw.name, _blob_path(layout, digest))
    return {
        "mediaType": LAYER_GZIP,
        "digest": digest,
        "size": compressed.size,
    }, "sha256:" + tar_stream.sha256.hexdigest()


# ------------------------------------------------------------------------------------------------ the image


def _base_of(base: str, out: Path, arch: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The base image's layers (their blobs copied into ``out``) and config; none and a bare config for ``none``."""
    if base == "none":
        return [], {"architecture": arch, "os": "linux", "config": {}, "rootfs": {"type": "layers", "diff_ids": []}}
    layout, tag = split_reference(base)
    manifest, config = read_image(layout, tag, arch=arch)
    if (config.get("architecture"), config.get("os")) != (arch, "linux"):
        raise ImageError(f"{base} is {config.get('os')}/{config.get('architecture')}, not linux/{arch}")
    for layer in manifest["layers"]:
        target = _blob_path(out, layer["digest"])
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copyfile(_blob_path(layout, layer["digest"]), target)
    return list(manifest["layers"]), config


def write_image(root: Path, out: Path, tag: str, *, base: str, arch: str = "arm64") -> str:
    """An OCI layout at ``out`` holding one image, ``tag``: the base's layers, then ``root``. Its manifest digest."""
    if not (root / "var" / "task").is_dir():
        raise ImageError(f"{root}/var/task: no such directory (make search-image builds it)")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    layers, config = _base_of(base, out, arch)
    layer, diff_id = write_layer(root, out)
    config["rootfs"]["diff_ids"].append(diff_id)
    config["config"]["Cmd"] = CMD
    config.pop("created", None)
    config["history"] = [*config.get("history", []), {"created_by": "infra/oci_image.py: var/task", "comment": tag}]
    config_descriptor = {"mediaType": CONFIG, **_write_blob(out, _json_bytes(config))}
    manifest = {"schemaVersion": 2, "mediaType": MANIFEST, "config": config_descriptor, "layers": [*layers, layer]}
    manifest_descriptor = {"mediaType": MANIFEST, **_write_blob(out, _json_bytes(manifest))}
    manifest_descriptor |= {"annotations": {REF_NAME: tag}, "platform": {"architecture": arch, "os": "linux"}}
    index = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [manifest_descriptor]}
    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n")
    size = sum(int(d["size"]) for d in manifest["layers"]) / 2**20
    log(f"{out}:{tag}: {len(manifest['layers'])} layers, {size:.1f} MiB compressed, {manifest_descriptor['digest']}")
    return str(manifest_descriptor["digest"])


# ------------------------------------------------------------------------------------------------ registries


def skopeo(*args: str, stdin: str | None = None) -> str:
    if shutil.which("skopeo") is None:
        raise ImageError("skopeo is not installed (make oci-tools, or apt-get install skopeo)")
    result = subprocess.run(["skopeo", *args], capture_output=True, text=True, input=stdin, timeout=1800)  # noqa: S603,S607
    if result.returncode != 0:
        raise ImageError(f"skopeo {args[0]} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout


def push(layout: str, repository: str, *, tls_verify: bool = True) -> str:
    """Copy ``dir:tag`` to ``repository:tag`` (digests kept); the pushed image as ``repository@sha256:...``."""
    directory, tag = split_reference(layout)
    with tempfile.TemporaryDirectory(prefix="mcpbridge-oci-") as tmp:
        digest_file = Path(tmp) / "digest"
        skopeo(
            "copy", "--quiet", "--preserve-digests", f"--dest-tls-verify={str(tls_verify).lower()}",
            "--digestfile", str(digest_file), f"oci:{directory}:{tag}", f"docker://{repository}:{tag}",
        )  # fmt: skip
        digest = digest_file.read_text().strip()
    return f"{repository}@{digest}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_registry(url: str, process: subprocess.Popen[bytes], deadline: float) -> None:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 - 127.0.0.1
                return
        except (urllib.error.URLError, OSError):
            if process.poll() is not None:
                raise ImageError(f"docker-registry exited with {process.returncode}") from None
            if time.monotonic() > deadline:
                raise ImageError("docker-registry did not answer on 127.0.0.1") from None
            time.sleep(0.1)


@contextmanager
def local_registry(storage: Path, *, startup_seconds: float = 60) -> Iterator[str]:
    """Debian's docker-registry serving ``storage`` on 127.0.0.1 (plain HTTP, no auth): its host:port."""
    if shutil.which("docker-registry") is None:
        raise ImageError("docker-registry is not installed (make oci-tools, or apt-get install docker-registry)")
    address = f"127.0.0.1:{_free_port()}"
    config = storage / "config.yml"
    storage.mkdir(parents=True, exist_ok=True)
    config.write_text(
        json.dumps(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(storage / "data")}},
                "http": {"addr": address, "secret": os.urandom(16).hex()},
            }
        )
    )
    log_file = (storage / "registry.log").open("wb")
    command = ["docker-registry", "serve", str(config)]
    process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)  # noqa: S603
    try:
        try:
            _wait_for_registry(f"http://{address}/v2/", process, time.monotonic() + startup_seconds)
        except ImageError as exc:
            raise ImageError(f"{exc}: {(storage / 'registry.log').read_text(errors='replace')[-2000:]}") from None
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log_file.close()


def _digests(layout: Path, tag: str) -> dict[str, Any]:
    manifest, _config = read_image(layout, tag)
    return {
        "manifest": "sha256:" + hashlib.sha256(_json_bytes(manifest)).hexdigest(),
        "config": manifest["config"]["digest"],
        "layers": [layer["digest"] for layer in manifest["layers"]],
    }


def check_registry(layout: str, work: Path) -> dict[str, Any]:
    """Push ``dir:tag`` to a local registry, pull it back, and compare every digest; the pushed image's."""
    directory, tag = split_reference(layout)
    index = json.loads((directory / "index.json").read_text())
    local = next(m["digest"] for m in index["manifests"] if m.get("annotations", {}).get(REF_NAME) == tag)
    with local_registry(work / "registry") as address:
        pushed = push(layout, f"{address}/mcpbridge/{tag}", tls_verify=False)
        remote = json.loads(skopeo("inspect", "--tls-verify=false", f"docker://{pushed}"))
        pulled = work / "pulled"
        shutil.rmtree(pulled, ignore_errors=True)
        skopeo(
            "copy",
            "--quiet",
            "--preserve-digests",
            "--src-tls-verify=false",
            f"docker://{pushed}",
            f"oci:{pulled}:{tag}",
        )
    ours, theirs = _digests(directory, tag), _digests(pulled, tag)
    pulled_index = json.loads((pulled / "index.json").read_text())
    checks = {
        "pushed digest": (pushed.rpartition("@")[2], local),
        "registry's digest": (remote["Digest"], local),
        "pulled manifest digest": (pulled_index["manifests"][0]["digest"], local),
        "config and layers": (theirs, ours),
    }
    wrong = [f"{name}: {got} != {expected}" for name, (got, expected) in checks.items() if got != expected]
    if wrong:
        raise ImageError("the image came back changed from the registry: " + "; ".join(wrong))
    log(f"pushed to {address}, pulled back: manifest {local}, config and {len(ours['layers'])} layers identical")
    return {"digest": local, "layers": ours["layers"], "registry": remote}


# ------------------------------------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="write the image as an OCI layout")
    write.add_argument("--root", type=Path, required=True, help="the image's file system (holds var/task)")
    write.add_argument("--base", required=True, help="<OCI layout>:<tag> of the base image, or none")
    write.add_argument("--out", type=Path, required=True)
    write.add_argument("--tag", default="search-index")
    write.add_argument("--arch", default="arm64")
    pushed = commands.add_parser("push", help="push a layout's image to a registry with skopeo")
    pushed.add_argument("--layout", required=True, help="<OCI layout>:<tag>")
    pushed.add_argument("--to", required=True, help="<registry>/<repository>, e.g. an ECR repository's URI")
    pushed.add_argument("--tls-verify", choices=["true", "false"], default="true", help="false: plain HTTP")
    checked = commands.add_parser("check-registry", help="push to a local registry, pull back, compare digests")
    checked.add_argument("--layout", required=True, help="<OCI layout>:<tag>")
    args = parser.parse_args(argv)
    try:
        if args.command == "write":
            write_image(args.root, args.out, args.tag, base=args.base, arch=args.arch)
        elif args.command == "push":
            print(push(args.layout, args.to, tls_verify=args.tls_verify == "true"))
        else:
            with tempfile.TemporaryDirectory(prefix="mcpbridge-registry-") as tmp:
                check_registry(args.layout, Path(tmp))
    except ImageError as exc:
        print(f"oci: FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
