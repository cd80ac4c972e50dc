"""Chunking: exact offsets and lines, reading order, full coverage, heading paths, fences kept whole, CJK cuts."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import pytest

from mcpbridge.domain.knowledge import ChunkDraft, DocumentFormat
from mcpbridge.knowledge.chunking import Heading, chunk_document, markdown_outline
from mcpbridge.knowledge.parsing import parse_document


def check_invariants(text: str, chunks: list[ChunkDraft], max_chars: int) -> None:
    """What every chunking must hold: exact trimmed slices, right lines, order, no overlap, full coverage."""
    lines = text.split("\n")
    previous_end = 0
    for index, chunk in enumerate(chunks):
        assert chunk.seq == index
        assert chunk.type == "text"
        assert chunk.text, "no empty chunks"
        assert text[chunk.start_offset : chunk.end_offset] == chunk.text
        assert chunk.text == chunk.text.strip()
        assert len(chunk.text) <= max_chars
        assert chunk.start_line == text.count("\n", 0, chunk.start_offset) + 1
        assert chunk.end_line == text.count("\n", 0, chunk.end_offset - 1) + 1
        assert chunk.start_line <= chunk.end_line
        assert chunk.text in "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        assert chunk.start_offset >= previous_end, "chunks overlap or are out of order"
        gap = text[previous_end : chunk.start_offset]
        assert not gap.strip(), f"uncovered text before chunk {index}: {gap.strip()[:60]!r}"
        previous_end = chunk.end_offset
    assert not text[previous_end:].strip(), "uncovered text at the end"


def chunks_of(
    text: str, format: DocumentFormat = "markdown", max_chars: int = 1500, min_chars: int = 200
) -> list[ChunkDraft]:
    chunks = chunk_document(text, format=format, max_chars=max_chars, min_chars=min_chars)
    check_invariants(text, chunks, max_chars)
    return chunks


def chunk_at(chunks: list[ChunkDraft], offset: int) -> ChunkDraft:
    return next(c for c in chunks if c.start_offset <= offset < c.end_offset)


GUIDE = """# Guide

The guide explains how to install and configure the tool. It is short on purpose.

## Install

Install the package with pip. Any recent Python works.

```bash
# this comment is not a heading
pip install tool

tool --version
```

### Linux

On Linux, use the system Python or a virtual environment.

### macOS

Homebrew works well.

## Configure

Configuration lives in a TOML file.

~~~toml
[server]
port = 8080
~~~
"""


def test_english_markdown_sections_carry_their_heading_paths() -> None:
    chunks = chunks_of(GUIDE, max_chars=200, min_chars=0)
    paths = [c.heading_path for c in chunks]
    assert paths == [
        ("Guide",),
        ("Guide", "Install"),
        ("Guide", "Install", "Linux"),
        ("Guide", "Install", "macOS"),
        ("Guide", "Configure"),
    ]
    assert chunks[0].text.startswith("# Guide")
    install = chunks[1]
    assert install.text.startswith("## Install")
    assert install.text.endswith("```")
    assert "# this comment is not a heading" in install.text
    assert (install.start_line, install.end_line) == (5, 14)
    assert chunks[-1].text.endswith("~~~")
    assert markdown_outline(GUIDE) == [
        Heading(1, "Guide", 1),
        Heading(2, "Install", 5),
        Heading(3, "Linux", 16),
        Heading(3, "macOS", 20),
        Heading(2, "Configure", 24),
    ]


def test_small_sections_merge_only_under_the_same_parent() -> None:
    chunks = chunks_of(GUIDE, max_chars=1500, min_chars=200)
    # "Guide" intro is small and "Install" is its child: merged, both have body text, so the path is the parent's.
    assert chunks[0].heading_path == ("Guide",)
    assert "## Install" in chunks[0].text
    # Linux and macOS are siblings: merged under their parent. Configure has another parent: not merged into them.
    linux = chunk_at(chunks, GUIDE.index("### Linux"))
    assert linux is chunk_at(chunks, GUIDE.index("### macOS"))
    assert linux.heading_path == ("Guide", "Install")
    configure = chunk_at(chunks, GUIDE.index("## Configure"))
    assert configure is not linux
    assert configure.heading_path == ("Guide", "Configure")


def test_a_bare_heading_merged_with_its_child_takes_the_child_path() -> None:
    text = "# Manual\n\n## Setup\n\nSetup takes two steps.\n\n## Usage\n\n" + "Usage text goes on. " * 30
    chunks = chunks_of(text, max_chars=300, min_chars=100)
    assert chunks[0].text.startswith("# Manual\n\n## Setup")
    # The "# Manual" section has no text of its own; the chunk's words all belong to Setup (and then Usage).
    assert chunks[0].heading_path[:1] == ("Manual",)
    bare = chunks_of("# Manual\n\n## Setup\n\n" + "Setup takes two steps. " * 10, max_chars=1500)
    assert len(bare) == 1
    assert bare[0].heading_path == ("Manual", "Setup")


def test_min_chars_zero_keeps_every_section_apart() -> None:
    chunks = chunks_of("# A\n\none\n\n# B\n\ntwo\n\n## C\n\nthree\n", max_chars=1500, min_chars=0)
    assert [(c.text, c.heading_path) for c in chunks] == [
        ("# A\n\none", ("A",)),
        ("# B\n\ntwo", ("B",)),
        ("## C\n\nthree", ("B", "C")),
    ]


def test_heading_stays_with_the_start_of_its_text() -> None:
    paragraph = " ".join(f"Sentence number {i} says something." for i in range(40))
    text = f"## Long\n\n{paragraph}\n"
    chunks = chunks_of(text, max_chars=300, min_chars=50)
    assert chunks[0].text.startswith("## Long\n\nSentence number 0")
    assert all(c.heading_path == ("Long",) for c in chunks)
    # Cut at sentence ends, not inside sentences.
    assert all(c.text.endswith(".") for c in chunks)


def test_a_fence_that_fits_is_never_split() -> None:
    fence = "```python\n" + "\n".join(f"x{i} = {i}  # line" for i in range(40)) + "\n```"
    before = "Intro. " * 100
    text = f"# Code\n\n{before}\n\n{fence}\n\nAfter the code.\n"
    assert len(fence) < 1000
    chunks = chunks_of(text, max_chars=1000, min_chars=200)
    holder = chunk_at(chunks, text.index("```python"))
    assert holder.start_offset <= text.index("```python")
    assert text.rindex("```") + 3 <= holder.end_offset


def test_a_fence_longer_than_max_is_split_on_lines() -> None:
    body = "\n".join(f"    value_{i} = compute({i})" for i in range(200))
    text = f"## Big\n\n```python\n{body}\n```\n"
    chunks = chunks_of(text, max_chars=500, min_chars=100)
    assert len(chunks) > 5
    lines = text.split("\n")
    for chunk in chunks:
        start_line_text = lines[chunk.start_line - 1]
        end_line_text = lines[chunk.end_line - 1]
        assert chunk.text.startswith(start_line_text.strip())
        assert chunk.text.endswith(end_line_text.strip())
        assert chunk.heading_path == ("Big",)
    assert chunks[0].text.startswith("## Big\n\n```python")


def test_long_single_line_splits_on_sentences_then_words_then_hard() -> None:
    sentences = " ".join(f"This is sentence {i} of a very long line without any line break." for i in range(100))
    chunks = chunks_of(sentences, format="text", max_chars=400, min_chars=100)
    assert len(chunks) > 10
    assert all(c.start_line == c.end_line == 1 for c in chunks)
    assert all(c.text.endswith("break.") for c in chunks)
    assert all(c.heading_path == () for c in chunks)

    words = " ".join(f"word{i}" for i in range(2000))
    chunks = chunks_of(words, format="text", max_chars=100, min_chars=0)
    assert all(re.fullmatch(r"word\d+(?: word\d+)*", c.text) for c in chunks)

    blob = "x" * 1050
    chunks = chunks_of(f"start\n\n{blob}\n\nend", format="text", max_chars=100, min_chars=0)
    assert [len(c.text) for c in chunks] == [5] + [100] * 10 + [55]


CHINESE = """# 用户指南

本文介绍如何安装和配置本工具。安装过程非常简单！只需要几分钟。你准备好了吗？

## 安装

请先下载安装包，然后运行安装程序。安装程序会自动检测系统环境，并选择合适的组件。如果安装失败，请查看日志文件；日志文件位于安装目录下。

## 配置

配置文件使用简单的格式。每一项配置都有默认值。修改配置后需要重新启动服务。
"""


def test_chinese_markdown_splits_at_sentence_ends() -> None:
    chunks = chunks_of(CHINESE, max_chars=40, min_chars=0)
    assert len(chunks) > 5
    for chunk in chunks:
        if not chunk.text.startswith("#"):
            assert chunk.text[-1] in "。！？；", chunk.text
    assert {c.heading_path for c in chunks} == {("用户指南",), ("用户指南", "安装"), ("用户指南", "配置")}
    assert chunk_at(chunks, CHINESE.index("## 安装")).text.startswith("## 安装\n\n请先下载安装包")


def test_chinese_without_punctuation_is_cut_hard() -> None:
    text = "中文" * 300
    chunks = chunks_of(text, format="text", max_chars=100, min_chars=0)
    assert [len(c.text) for c in chunks] == [100] * 6


def test_crlf_text_chunks_with_exact_offsets() -> None:
    raw = GUIDE.replace("\n", "\r\n")
    # Straight into the chunker, a stray "\r" is whitespace at line ends: trimmed, never inside a chunk's ends.
    chunks = chunks_of(raw, max_chars=200, min_chars=0)
    assert [c.heading_path for c in chunks][:2] == [("Guide",), ("Guide", "Install")]
    # Through the parser, line endings are normalised first and lines match the LF version.
    parsed = parse_document(raw.encode(), filename="guide.md")
    assert parsed.text == GUIDE
    assert chunks_of(parsed.text, max_chars=200, min_chars=0) == chunks_of(GUIDE, max_chars=200, min_chars=0)


def test_setext_headings_and_front_matter() -> None:
    text = "---\ntitle: Notes\n---\n\nTitle\n=====\n\nIntro.\n\nPart two\n--------\n\nMore.\n\n- item\n---\n"
    chunks = chunks_of(text, max_chars=1500, min_chars=0)
    assert markdown_outline(text) == [Heading(1, "Title", 5), Heading(2, "Part two", 10)]
    assert chunks[0].heading_path == ()
    assert chunks[0].text == "---\ntitle: Notes\n---"
    assert [c.heading_path for c in chunks[1:]] == [("Title",), ("Title", "Part two")]
    assert chunks[-1].text.endswith("- item\n---")


def test_plain_text_packs_paragraphs_without_heading_path() -> None:
    paragraphs = [f"# Paragraph {i}. " + "Words in the paragraph. " * (i % 7 + 1) for i in range(60)]
    text = "\n\n".join(paragraphs) + "\n"
    chunks = chunks_of(text, format="text", max_chars=500, min_chars=100)
    assert all(c.heading_path == () for c in chunks)
    # Paragraphs that fit are never cut: every chunk starts at a paragraph start.
    assert all(c.text.startswith("# Paragraph") for c in chunks)


def test_unclosed_fence_runs_to_the_end() -> None:
    text = "# A\n\n```\ncode\n\n# not a heading\n"
    assert markdown_outline(text) == [Heading(1, "A", 1)]
    chunks = chunks_of(text)
    assert len(chunks) == 1
    assert chunks[0].heading_path == ("A",)


def test_whitespace_only_has_no_chunks_and_bad_sizes_are_refused() -> None:
    assert chunk_document(" \n\t\n", format="markdown") == []
    assert chunk_document("", format="text") == []
    with pytest.raises(ValueError, match="max_chars"):
        chunk_document("x", format="text", max_chars=0)
    with pytest.raises(ValueError, match="min_chars"):
        chunk_document("x", format="text", max_chars=10, min_chars=11)


def test_two_megabytes_of_markdown_chunk_whole() -> None:
    # Its speed is measured in tests/bench/chunking.py, not here.
    section = GUIDE + "\n" + CHINESE + "\n" + ("A line of prose that goes on for a while. " * 8 + "\n\n") * 10
    text = section * (2_000_000 // len(section) + 1)
    chunks = chunk_document(text, format="markdown")
    assert len(chunks) > 1000
    check_invariants(text, chunks, 1500)


# --- property-style: random Markdown ------------------------------------------------------------------------------


@dataclass
class Section:
    path: tuple[str, ...]
    heading_start: int  # offset of the heading line (-1 for text before the first heading)
    body_start: int  # offset where the section's body begins (after the heading)
    end: int

    @property
    def start(self) -> int:
        return self.heading_start if self.heading_start >= 0 else self.body_start


@dataclass
class Generated:
    text: str
    sections: list[Section]
    fences: list[tuple[int, int]]  # (start, end) of each fenced block
    fence_blocks: set[int]  # body_start offsets of sections whose body begins with a fence


WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "search",
)
CJK = "文档知识库搜索答案系统用户配置安装服务数据模型"


def _sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.2:
        return "".join(rng.choice(CJK) for _ in range(rng.randint(3, 25))) + rng.choice("。！？；")
    if kind < 0.25:
        return "z" * rng.randint(10, 90)
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 18))]
    return " ".join(words).capitalize() + rng.choice([".", "!", "?", ",", ""])


def _paragraph(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.15:
        return "\n".join(f"{rng.choice(['-', '*', '1.'])} {_sentence(rng)}" for _ in range(rng.randint(1, 6)))
    if kind < 0.25:
        # One long line, as editors that do not wrap write it.
        return " ".join(_sentence(rng) for _ in range(rng.randint(10, 40)))
    lines = [" ".join(_sentence(rng) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 5))]
    return "\n".join(lines)


def _fence(rng: random.Random) -> str:
    mark = rng.choice(["```", "~~~", "````"])
    body = []
    for _ in range(rng.randint(1, 40 if rng.random() < 0.3 else 8)):
        body.append(rng.choice(["# comment", "", "x = 1", "    indented()", "## not a heading", "print('hi')"]))
    return f"{mark}{rng.choice(['', 'python', 'bash'])}\n" + "\n".join(body) + f"\n{mark}"


def generate_markdown(rng: random.Random) -> Generated:
    parts: list[str] = []
    sections: list[Section] = []
    fences: list[tuple[int, int]] = []
    fence_blocks: set[int] = set()
    pos = 0
    stack: list[tuple[int, str]] = []

    def add(chunk: str, separator: str) -> int:
        nonlocal pos
        start = pos + len(separator) if parts else pos
        parts.append((separator if parts else "") + chunk)
        pos = start + len(chunk)
        return start

    def body(count: int) -> None:
        for index in range(count):
            separator = rng.choice(["\n\n", "\n\n\n", "\n \n"])
            if rng.random() < 0.2:
                text = _fence(rng)
                start = add(text, separator)
                fences.append((start, start + len(text)))
                if index == 0:
                    fence_blocks.add(start)
            else:
                add(_paragraph(rng), separator)

    if rng.random() < 0.5:
        sections.append(Section((), -1, 0, 0))
        body(rng.randint(1, 3))
        sections[-1].end = pos
    for _ in range(rng.randint(0, 12)):
        level = rng.randint(1, min(6, (stack[-1][0] if stack else 0) + 1))
        title = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))[:20].strip() or "t"
        if title in {s.path[-1] for s in sections if s.path}:
            title += str(len(sections))
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        if level <= 2 and rng.random() < 0.2:
            heading = title + "\n" + ("=" if level == 1 else "-") * rng.randint(3, 20)
        else:
            heading = "#" * level + " " + title + rng.choice(["", " #", "  "])
        start = add(heading, "\n\n")
        sections.append(Section(tuple(t for _, t in stack), start, start + len(heading), 0))
        body(rng.randint(0, 4))
        sections[-1].end = pos
    text = "".join(parts) + rng.choice(["", "\n", "\n\n  \n"])
    return Generated(text, sections, fences, fence_blocks)


def _first_word_end(text: str, start: int) -> int:
    match = re.compile(r"\S+").search(text, start)
    assert match is not None
    return match.end()


@pytest.mark.parametrize("seed", range(300))
def test_random_markdown_keeps_every_invariant(seed: int) -> None:
    rng = random.Random(seed)
    doc = generate_markdown(rng)
    max_chars = rng.choice([60, 80, 120, 200, 400, 800, 1500])
    min_chars = rng.choice([0, max_chars // 4, max_chars // 2])
    chunks = chunks_of(doc.text, max_chars=max_chars, min_chars=min_chars)
    text = doc.text
    for fence_start, fence_end in doc.fences:
        if fence_end - fence_start <= max_chars:
            holder = chunk_at(chunks, fence_start)
            assert holder.end_offset >= fence_end, f"fence at {fence_start} split although it fits"
        else:
            for chunk in chunks:
                if fence_start < chunk.start_offset < fence_end:
                    line_start = text.rfind("\n", 0, chunk.start_offset) + 1
                    assert not text[line_start : chunk.start_offset].strip(), "fence cut inside a line"
                if fence_start < chunk.end_offset < fence_end:
                    line_end = text.find("\n", chunk.end_offset)
                    assert not text[chunk.end_offset : line_end].strip(), "fence cut inside a line"
    for chunk in chunks:
        owners = [
            s
            for s in doc.sections
            if text[max(s.body_start, chunk.start_offset) : min(s.end, chunk.end_offset)].strip()
        ]
        touched = [s for s in doc.sections if s.start < chunk.end_offset and s.end > chunk.start_offset]
        for section in owners:
            assert section.path[: len(chunk.heading_path)] == chunk.heading_path
        if len(touched) == 1:
            assert chunk.heading_path == touched[0].path
    for section in doc.sections:
        if section.heading_start < 0 or not text[section.body_start : section.end].strip():
            continue
        rest = text[section.body_start :]
        first_body = section.body_start + len(rest) - len(rest.lstrip())
        if first_body in doc.fence_blocks:
            continue
        if _first_word_end(text, first_body) - section.heading_start > max_chars:
            continue
        holder = chunk_at(chunks, section.heading_start)
        assert holder.end_offset > first_body, f"heading at {section.heading_start} left alone"
