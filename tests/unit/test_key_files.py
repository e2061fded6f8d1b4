"""Key files are made with explicit modes and the admitted public keys cannot be planted."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.rpc.keys import (
    PRIVATE_DIR,
    PUBLIC_DIR,
    generate_cluster_keys,
    generate_key,
    load_members,
)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A careless shell: everything it creates would be writable by everyone."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generated_files_have_their_modes_whatever_the_umask(
    tmp_path: Path, open_umask: None
) -> None:
    generate_cluster_keys(tmp_path)
    assert _mode(tmp_path / PUBLIC_DIR) == 0o755
    assert _mode(tmp_path / PRIVATE_DIR) == 0o700
    for public in (tmp_path / PUBLIC_DIR).iterdir():
        assert _mode(public) == 0o644, public
    for secret in (tmp_path / PRIVATE_DIR).iterdir():
        assert _mode(secret) == 0o600, secret
    load_members(tmp_path / PUBLIC_DIR, "security.curve.public-keys-dir")  # accepted as made


def test_a_public_keys_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    generate_key(tmp_path, "client", "alice")
    public_dir = tmp_path / PUBLIC_DIR
    public_dir.chmod(0o777)  # anyone could plant dispatcher-x.key here
    with pytest.raises(ConfigurationError, match="chmod go-w"):
        load_members(public_dir, "security.curve.public-keys-dir")
    public_dir.chmod(0o755)
    key = public_dir / "client-alice.key"
    key.chmod(0o666)  # anyone could swap the key
    with pytest.raises(ConfigurationError, match="writable by group or others"):
        load_members(public_dir, "security.curve.public-keys-dir")
    key.chmod(0o644)
    assert len(load_members(public_dir, "security.curve.public-keys-dir")) == 1
