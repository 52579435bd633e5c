"""projectKey and encodeSegment against every vector of format §2.5, and root resolution."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dsh_fork.layout import (
    decode_segment,
    encode_segment,
    oplog_path,
    project_dir_name,
    project_key,
    resolve_home,
    resolve_root,
)

PROJECT_KEY_VECTORS = [
    ("/home/u/proj", "--home-u-proj--"),
    ("/", "--root--"),
    ("/home/u/proj/", "--home-u-proj---"),
    ("C:\\Users\\W\\dsh-app", "--C-Users-W-dsh-app--"),
    ("C:/", "--C---"),
    ("\\\\srv\\share\\x", "--srv-share-x--"),
    ("/home/José/x", "--home-Jos~00E9-x--"),
    ("/tmp/日本", "--tmp-~65E5~672C--"),
    ("/tmp/😀", "--tmp-~D83D~DE00--"),
    ("/home/~u/my proj", "--home-~007Eu-my~0020proj--"),
    ("/a//b/./c/../d", "--a-b-.-c-..-d--"),
    ("/opt/x:y", "--opt-x-y--"),
    ("/-lead", "--lead--"),
    ("/a_b.c-d", "--a_b.c-d--"),
    ("/" + "a" * 300, "--" + "a" * 251 + "--"),
    ("/" + "a" * 249 + "é", "--" + "a" * 249 + "~0--"),
]

UUID_ID = "session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a"
ENCODE_SEGMENT_VECTORS = [
    (
        "session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a",
        "session-68a2dc34-7012-4c1e-9a55-0b7c1f2e3d4a",
    ),
    (".", "~002E"),
    ("..", "~002E~002E"),
    ("...", "..."),
    (".hidden", ".hidden"),
    ("a/b", "a~002Fb"),
    ("a\\b:c", "a~005Cb~003Ac"),
    ("~x", "~007Ex"),
    ("my id", "my~0020id"),
    ("Café", "Caf~00E9"),
    ("😀", "~D83D~DE00"),
    ("ab\ud800c", "ab~D800c"),
]


@pytest.mark.parametrize(("cwd", "expected"), PROJECT_KEY_VECTORS)
def test_project_key_vectors(cwd: str, expected: str) -> None:
    assert project_key(cwd) == expected
    assert len(project_key(cwd)) <= 255


def test_no_cwd_uses_its_own_project_dir() -> None:
    assert project_dir_name(None) == "_no-cwd"


def test_project_key_of_empty_cwd_is_an_error() -> None:
    with pytest.raises(ValueError):
        project_key("")


def test_two_cwds_can_share_a_project_dir() -> None:
    assert project_key("/a/b") == project_key("/a:b") == project_key("/a\\b") == "--a-b--"


@pytest.mark.parametrize(("session_id", "expected"), ENCODE_SEGMENT_VECTORS)
def test_encode_segment_vectors(session_id: str, expected: str) -> None:
    assert encode_segment(session_id) == expected
    assert decode_segment(expected) == session_id


def test_encode_segment_of_empty_id_is_an_error() -> None:
    with pytest.raises(ValueError):
        encode_segment("")


@pytest.mark.parametrize("name", ["a~00", "~zzzz", "é", "a/b", "~002E", "~002E~002E"])
def test_decode_segment_rejects_non_encodings_and_keeps_dot_names(name: str) -> None:
    decoded = decode_segment(name)
    if name.startswith("~002E"):
        assert decoded in (".", "..")
    else:
        assert decoded is None


def test_home_defaults_and_blank_values() -> None:
    home = Path("~/.dsh").expanduser().resolve()
    assert resolve_home({}) == home
    assert resolve_home({"DSH_HOME": "   "}) == home
    assert resolve_home({"DSH_HOME": "/srv/dsh"}) == Path("/srv/dsh")
    assert resolve_root(None, {"DSH_HOME": "/srv/dsh"}) == Path("/srv/dsh/sessions")
    assert resolve_root("/data/roots/r1", {"DSH_HOME": "/srv/dsh"}) == Path("/data/roots/r1")


def test_operation_log_location() -> None:
    assert oplog_path(None, {"DSH_HOME": "/srv/dsh"}) == Path("/srv/dsh/dsh-fork-relink.log")
    assert oplog_path("/data/r1/sessions", {}) == Path("/data/r1/dsh-fork-relink.log")
    assert oplog_path("/data/r1/sessions", {"DSH_HOME": "/srv/dsh"}) == Path(
        "/srv/dsh/dsh-fork-relink.log"
    )


def _encoded_unit_by_unit(session_id: str) -> str:
    """format §2.4 read literally: every UTF-16 code unit kept if safe, else ``~XXXX``."""
    raw = session_id.encode("utf-16-le", "surrogatepass")
    units = [raw[i] | (raw[i + 1] << 8) for i in range(0, len(raw), 2)]
    safe = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
    return "".join(chr(u) if chr(u) in safe and u < 128 else f"~{u:04X}" for u in units)


@given(st.text(min_size=1).filter(lambda s: s not in (".", "..")))
@example("session-0b5c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3")
@example("abc\n")
@example("ABC-xyz_09.")
@example("a\u0130")
def test_encode_segment_keeps_a_safe_id_as_is_and_encodes_every_other_unit(
    session_id: str,
) -> None:
    """The shortcut for an id of safe characters only gives what the unit-by-unit rule
    gives, and decodes back."""
    assert encode_segment(session_id) == _encoded_unit_by_unit(session_id)
    assert decode_segment(encode_segment(session_id)) == session_id


@given(st.text(min_size=1))
@example("/home/u/proj")
def test_project_key_asked_twice_answers_the_same(cwd: str) -> None:
    assert project_key(cwd) == project_key(cwd) == project_key.__wrapped__(cwd)
