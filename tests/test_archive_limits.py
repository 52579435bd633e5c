"""Archives from untrusted bytes: every read bounded, every refusal a contract code.

Scenarios (each an attack that once took gigabytes or a traceback): a bundle followed by 2 GiB
of zeros, a PAX header or GNU long name of hundreds of megabytes in a few kilobytes (zstd and
gzip), a member name given twice, data after the archive's end, a named FIFO given as the
archive. Each runs the real command in a child whose address space is capped (``setrlimit``)
and whose peak resident memory must stay under 100 MB: a regression fails here instead of
swapping.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import tarfile
import textwrap
import zlib
from pathlib import Path

import pytest
import zstandard
from conftest import run_cli
from safetykit import PEAK_LINE, peaked_run

from dsh_fork.fixtureroot import generate

PEAK_LIMIT_MB = 100
HEADROOM_MIB = 100
"""Address space the command may map beyond the interpreter and every module it imports."""
TIMEOUT = 120
MIB = 1 << 20

LIMITED = textwrap.dedent(
    """
    import os, resource, runpy, sys
    import dsh_fork.cli.app, dsh_fork.export, dsh_fork.importer  # every module, first
    import bz2, gzip, lzma, tarfile, zstandard
    with open("/proc/self/status") as status:
        size = next(int(l.split()[1]) for l in status if l.startswith("VmSize:")) * 1024
    limit = size + (int(sys.argv[1]) << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    def peak():
        with open("/proc/self/status") as status:
            kb = next(int(l.split()[1]) for l in status if l.startswith("VmHWM:"))
        sys.stderr.write(f"PEAK_RSS_KB={kb}\\n")
        sys.stderr.flush()
    leave = os._exit
    def report(code):
        peak()
        leave(code)
    os._exit = report
    sys.argv = ["dsh-fork", *sys.argv[2:]]
    try:
        runpy.run_module("dsh_fork", run_name="__main__")
    finally:
        peak()
    """
)


def limited(*args: str | Path, stdin: int | None = None) -> tuple[int, str, float]:
    """The CLI in a child with a capped address space: exit code, stderr, peak RSS in MB."""
    command = [sys.executable, "-c", LIMITED, str(HEADROOM_MIB), *map(str, args)]
    done, peak = peaked_run(command, timeout=TIMEOUT, stdin=stdin)
    errors = [line for line in done.stderr.splitlines() if not line.startswith(PEAK_LINE)]
    return done.returncode, "\n".join(errors), peak


def rle_frame(size: int, byte: bytes = b"\x00") -> bytes:
    """One zstd frame of ``size`` bytes of ``byte`` in RLE blocks: 4 bytes per 128 KiB."""
    block = 128 * 1024
    count = -(-size // block)
    parts = [b"\x28\xb5\x2f\xfd", b"\x00", bytes([(17 - 10) << 3])]
    for k in range(count):
        length = min(block, size - k * block)
        parts.append(((length << 3) | (1 << 1) | (k == count - 1)).to_bytes(3, "little") + byte)
    return b"".join(parts)


def gzip_of(head: bytes, size: int, byte: bytes = b"a") -> bytes:
    """A gzip stream of ``head`` followed by ``size`` bytes of ``byte``, made piece by piece."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as stream:
        stream.write(head)
        piece = byte * MIB
        for _ in range(size // MIB):
            stream.write(piece)
    return out.getvalue()


def extended_header(kind: bytes, size: int) -> bytes:
    """The 512-byte header block of a PAX header (``x``) or GNU long name (``L``) claiming
    ``size`` bytes of content."""
    info = tarfile.TarInfo("././@LongLink" if kind == b"L" else "././@PaxHeader")
    info.type = kind
    info.size = size
    return info.tobuf(tarfile.USTAR_FORMAT)


@pytest.fixture
def bundle_zst(tmp_path: Path) -> tuple[Path, Path]:
    """A real bundle of a small family, and an empty root to import into."""
    root = tmp_path / "a" / "sessions"
    top = generate(root, sessions=1, agents=2, depth=1, turns=2, seed=3).top_level[0]
    archive = tmp_path / "family.tar.zst"
    assert run_cli("--root", root, "export", top, "-o", archive).exit_code == 0
    target = tmp_path / "b" / "sessions"
    target.mkdir(parents=True)
    return archive, target


def assert_import_refused(target: Path, archive: Path, *words: str) -> None:
    """``import ARCHIVE`` into the empty root ``target``, with capped memory: refused as
    CORRUPT_LOG in one line that says ``words``, within the memory bound, nothing written."""
    code, stderr, peak = limited("--root", target, "import", archive)
    assert code == 9, stderr
    assert len(stderr.splitlines()) == 1, stderr
    for word in words:
        assert word in stderr, stderr
    assert peak <= PEAK_LIMIT_MB, f"peak RSS {peak:.0f} MB"
    assert list(target.iterdir()) == []


def test_a_bundle_followed_by_2_gib_of_zeros_is_refused_unread(
    bundle_zst: tuple[Path, Path], tmp_path: Path
) -> None:
    archive, target = bundle_zst
    bomb = tmp_path / "zeros.tar.zst"
    bomb.write_bytes(archive.read_bytes() + rle_frame(2048 * MIB))
    assert bomb.stat().st_size < archive.stat().st_size + 100_000

    assert_import_refused(target, bomb, "follow the tar archive's end", "too large")


def test_data_after_the_archives_end_is_refused(
    bundle_zst: tuple[Path, Path], tmp_path: Path
) -> None:
    archive, target = bundle_zst
    tail = tmp_path / "tail.tar.zst"
    tail.write_bytes(archive.read_bytes() + zstandard.ZstdCompressor().compress(b"x" * 600))

    assert_import_refused(target, tail, "data follows the tar archive's end")


@pytest.mark.parametrize("kind", [b"x", b"L"], ids=["PAX header", "GNU long name"])
@pytest.mark.parametrize("compression", ["zst", "gz"])
def test_a_huge_extended_header_in_a_small_archive_is_refused_too_large(
    tmp_path: Path, kind: bytes, compression: str
) -> None:
    """600 MiB (zstd) or 300 MiB (gzip, which compresses 1000:1 at most) claimed by one
    header, before the manifest: refused as too large before any of it is read."""
    size = (600 if compression == "zst" else 300) * MIB
    head = extended_header(kind, size)
    if compression == "zst":
        data = zstandard.ZstdCompressor().compress(head) + rle_frame(size, b"a")
    else:
        data = gzip_of(head, size)
    archive = tmp_path / f"header.tar.{compression}"
    archive.write_bytes(data)
    assert archive.stat().st_size < (32_000 if compression == "zst" else 400_000)
    target = tmp_path / "b" / "sessions"
    target.mkdir(parents=True)

    assert_import_refused(target, archive, "too large", "65,536")


def test_a_member_name_given_twice_is_refused_by_name(
    bundle_zst: tuple[Path, Path], tmp_path: Path
) -> None:
    archive, target = bundle_zst
    plain = zstandard.ZstdDecompressor().stream_reader(archive.read_bytes()).read()
    with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    twice = tmp_path / "twice.tar"
    with tarfile.open(twice, "w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in [*members, members[-1]]:
            tar.addfile(info, io.BytesIO(data))

    assert_import_refused(target, twice, "in the archive twice", members[-1][0].name)


def test_a_compressed_stream_cut_inside_a_frame_is_refused(
    bundle_zst: tuple[Path, Path], tmp_path: Path
) -> None:
    """The tar inside is whole; only the stream's last frame is cut (its checksum)."""
    archive, target = bundle_zst
    cut = tmp_path / "cut.tar.zst"
    cut.write_bytes(archive.read_bytes()[:-2])

    result = run_cli("--root", target, "import", cut)

    assert result.exit_code == 9
    assert "ends inside a frame" in result.stderr


def test_a_named_fifo_is_refused_at_once_with_a_hint(tmp_path: Path) -> None:
    fifo = tmp_path / "archive.tar.zst"
    os.mkfifo(fifo)
    target = tmp_path / "b" / "sessions"
    target.mkdir(parents=True)

    code, stderr, _ = limited("--root", target, "import", fifo)

    assert code == 2
    assert "is a FIFO" in stderr and "'-'" in stderr


def test_a_gzip_bomb_behind_a_valid_tar_is_bounded(
    bundle_zst: tuple[Path, Path], tmp_path: Path
) -> None:
    """The gzip form of the trailing zeros: a second gzip member of 512 MiB of zeros."""
    archive, target = bundle_zst
    plain = zstandard.ZstdDecompressor().stream_reader(archive.read_bytes()).read()
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(MIB)
    tail = b"".join(compressor.compress(zeros) for _ in range(512)) + compressor.flush()
    bomb = tmp_path / "zeros.tar.gz"
    bomb.write_bytes(gzip.compress(plain, mtime=0) + tail)

    assert_import_refused(target, bomb, "too large")


@pytest.mark.parametrize(
    "sizes", [[0], [1], [128 * 1024], [100_000, 200_000, 7], [1, 131_071, 131_073]]
)
def test_a_member_given_in_pieces_is_the_member_given_whole(sizes: list[int]) -> None:
    """A log is copied into the archive a buffer at a time: however its pieces are cut, the
    stored member is the bytes given whole, in raw blocks a tar reader takes as they are."""
    from dsh_fork.tarstream import TarWriter

    data = os.urandom(sum(sizes))
    pieces: list[bytes | memoryview] = []
    pos = 0
    for size in sizes:
        pieces.append(memoryview(data)[pos : pos + size])
        pos += size
    whole, cut = io.BytesIO(), io.BytesIO()
    given: list[tuple[io.BytesIO, list[bytes | memoryview]]] = [(whole, [data]), (cut, pieces)]
    for out, parts in given:
        writer = TarWriter(out, "zst")
        writer.add_pieces("log", len(data), iter(parts), 0, stored=True)
        writer.close()
    assert cut.getvalue() == whole.getvalue()
    plain = (
        zstandard.ZstdDecompressor()
        .stream_reader(io.BytesIO(cut.getvalue()), read_across_frames=True)
        .read()
    )
    with tarfile.open(fileobj=io.BytesIO(plain)) as tar:
        member = tar.extractfile("log")
        assert member is not None
        assert member.read() == data


def test_a_member_given_fewer_bytes_than_its_size_is_a_defect() -> None:
    from dsh_fork.tarstream import TarWriter

    writer = TarWriter(io.BytesIO(), "zst")
    with pytest.raises(ValueError, match="10 bytes"):
        writer.add_pieces("log", 10, iter([b"12345"]), 0, stored=True)


def test_a_log_larger_than_the_memory_budget_is_exported_and_imported_in_pieces(
    tmp_path: Path,
) -> None:
    """A log of 128 MiB of incompressible text goes out and back in under the address-space
    cap: export copies it through one buffer, import checks and publishes it from a spool
    file read in windows. Holding it whole once fails here."""
    from test_fork_memory import SRC, large_source

    from dsh_fork.fixtures import Clock

    root = tmp_path / "a" / "sessions"
    path, events, _ = large_source(root, Clock(), 128)
    archive = tmp_path / "large.tar.zst"
    target = tmp_path / "b" / "sessions"
    target.mkdir(parents=True)

    exported = limited("--root", root, "export", SRC, "-o", archive)
    imported = limited("--root", target, "import", archive)

    assert exported[0] == 0, exported[1]
    assert imported[0] == 0, imported[1]
    assert max(exported[2], imported[2]) <= PEAK_LIMIT_MB, (exported[2], imported[2])
    copy = target / path.parent.parent.name / path.parent.name / path.name
    assert copy.stat().st_size == path.stat().st_size
    with path.open("rb") as a, copy.open("rb") as b:
        while piece := a.read(MIB):
            assert b.read(MIB) == piece
    assert events > 0
