"""What images cost when documents are indexed: OCR time per image and per page, and what one image adds to a
document's indexing time.

1. OCR per image: Tesseract (``TesseractOcr``, the embedded backend's engine, languages from ``--languages``) on a
   screenshot-sized PNG (1000 x 260, two lines of text) and on a full page (A4 at 150 dpi, 1240 x 1754, 30 lines
   of text): median and p95 over ``--rounds`` calls, and the share of the drawn words found in the output.
2. Indexing: the same one-page PDF (20 lines of text) with and without an embedded diagram (a JPEG with two lines
   of text), uploaded and indexed on the embedded backend (SQLite store, file index, jobs inline, no embedder):
   ``with OCR``, ``image, OCR off`` (stored and sectioned, not read) and ``no image`` take turns in each round, so
   drift in the machine's load hits them alike. Reported: median seconds per document and the ratios to ``no image``.

    .venv/bin/python tests/bench/image_indexing.py [--rounds 15] [--languages eng+chi_sim] [--json]

Numbers depend on the machine (a shared 2-core box here): quote the ratios, never assert on them.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mcpbridge.adapters.local.tesseract_ocr import TesseractOcr, tesseract_unavailable
from mcpbridge.bootstrap import Container
from mcpbridge.domain.knowledge import KnowledgeAccess
from mcpbridge.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.images import pdf_with_image, text_image

SCREENSHOT = ["Error 4711: gateway firmware outdated", "Press Update to install it"]
DIAGRAM = ["COOLANT PUMP FEEDS TURBINE", "Valve pressure limit 300 kPa"]
PAGE_LINES = [f"Line {n}: the coolant loop valve {n} opens at {100 + n} kPa" for n in range(30)]
PDF_LINES = [f"Section {n}: inspect pump seal {n} weekly and log the reading" for n in range(20)]


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _recall(expected: list[str], text: str) -> float:
    words = [w.strip(":,").lower() for line in expected for w in line.split()]
    found = {w.strip(":,").lower() for w in text.split()}
    return sum(w in found for w in words) / len(words)


def bench_ocr(rounds: int, languages: str) -> dict[str, Any]:
    ocr = TesseractOcr(languages)
    cases = {
        "screenshot 1000x260": (text_image(SCREENSHOT), SCREENSHOT),
        "page 1240x1754": (text_image(PAGE_LINES, size=(1240, 1754)), PAGE_LINES),
    }
    out: dict[str, Any] = {"engine": ocr.name}
    for name, (image, expected) in cases.items():
        ocr.recognise(image)  # warm-up
        times, text = [], ""
        for _ in range(rounds):
            start = time.perf_counter()
            text = ocr.recognise(image)
            times.append(time.perf_counter() - start)
        out[name] = {"median_s": statistics.median(times), "p95_s": _p95(times), "word_recall": _recall(expected, text)}
    return out


def bench_indexing(rounds: int, languages: str) -> dict[str, Any]:
    diagram = text_image(DIAGRAM, fmt="JPEG", frame=True)
    with_image = pdf_with_image("\n".join(PDF_LINES), diagram, 1000, 260)
    without = pdf_with_image("\n".join(PDF_LINES), None)
    results: dict[str, list[float]] = {"with OCR": [], "image, OCR off": [], "no image": []}
    with tempfile.TemporaryDirectory() as tmp:
        containers = {
            name: Container(
                Settings(
                    data_dir=Path(tmp) / name.replace(" ", "_").replace(",", ""),
                    jobs="inline",
                    embedding_provider="none",
                    ocr_engine=engine,
                    ocr_languages=languages,
                )
            )
            for name, engine in (("with OCR", "tesseract"), ("image, OCR off", "none"), ("no image", "none"))
        }
        try:
            kbs = {}
            for name, container in containers.items():
                workspace = container.identity.initialize().workspace_id
                access = KnowledgeAccess(workspace)
                kbs[name] = (access, container.knowledge_bases.create(access, name="Bench").id)
            for round_number in range(rounds + 1):
                for name, container in containers.items():
                    access, kb_id = kbs[name]
                    data = without if name == "no image" else with_image
                    start = time.perf_counter()
                    document = container.documents.create_from_file(
                        access, kb_id, title="Pump", filename="pump.pdf", content_type="application/pdf", data=data
                    )
                    elapsed = time.perf_counter() - start
                    stored = container.documents.get(access, document.id)
                    assert stored.parse_status == "completed", stored
                    if round_number:  # the first round warms imports and caches
                        results[name].append(elapsed)
        finally:
            for container in containers.values():
                container.close()
    base = statistics.median(results["no image"])
    return {
        name: {
            "median_s": statistics.median(times),
            "p95_s": _p95(times),
            "ratio_to_no_image": statistics.median(times) / base,
            "added_s": statistics.median(times) - base,
        }
        for name, times in results.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--languages", default="eng+chi_sim")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    reason = tesseract_unavailable()
    if reason is not None:
        sys.exit(f"cannot run: {reason}")
    report = {
        "machine": f"{platform.machine()} {platform.python_version()}",
        "ocr": bench_ocr(args.rounds, args.languages),
        "indexing": bench_indexing(args.rounds, args.languages),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"machine: {report['machine']}; OCR engine: {report['ocr']['engine']}; rounds: {args.rounds}")
    print("\nOCR per image                median s   p95 s   word recall")
    for name, row in report["ocr"].items():
        if name != "engine":
            print(f"  {name:<26} {row['median_s']:8.3f} {row['p95_s']:7.3f}   {row['word_recall']:.0%}")
    print("\nIndexing a one-page PDF      median s   p95 s   ratio to no image   added s")
    for name, row in report["indexing"].items():
        print(
            f"  {name:<26} {row['median_s']:8.3f} {row['p95_s']:7.3f}   {row['ratio_to_no_image']:17.2f}"
            f"   {row['added_s']:+7.3f}"
        )


if __name__ == "__main__":
    main()
