"""A dataset name never reaches outside its folder: a TU name, a vision name or hub id, a book of the text corpus
and a Gymnasium id with a path in it (absolute, ``..``) are refused in one line that names the value, exit 2,
before anything is read or written. Through the CLI in a subprocess, one case per domain; the name checks
themselves in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_domain import harness

from domains.errors import UserError


def _refused(tmp_path: Path, domain: str, dataset: str, *extra: str) -> str:
    proc = harness("run", "--domain", domain, "--dataset", dataset, "--loss", "infonce", "--seeds", "0", "--quiet",
                   "--results", str(tmp_path / "results"), *extra)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "Warning" not in line and not line.startswith("  ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert not (tmp_path / "results").exists()
    return lines[0]


def test_graph_a_path_for_a_tu_name(tmp_path):
    pytest.importorskip("torch_geometric")
    (tmp_path / "data" / "TU").mkdir(parents=True)
    line = _refused(tmp_path, "graph", "../../etc", "--data-root", str(tmp_path / "data"))
    assert "unknown dataset '../../etc' for domain 'graph'" in line


@pytest.mark.parametrize("name", ["../MUTAG", "/etc", "MUTAG/../../x", "..", "a b", ""])
def test_a_tu_name_is_checked_before_it_names_a_folder(tmp_path, name):
    pytest.importorskip("torch_geometric")
    from domains.graph import data

    with pytest.raises(UserError, match=f"'{name}' is not a TU dataset name"):
        data.locate_raw(name, tmp_path, download=True)
    assert not any(tmp_path.iterdir())


def test_vision_a_hub_id_with_dot_dot(tmp_path):
    pytest.importorskip("torchvision")
    line = _refused(tmp_path, "vision", "hf:owner/../../etc", "--data-root", str(tmp_path))
    assert "'hf:owner/../../etc' is neither a folder nor a hub id" in line


def test_a_hub_id_is_looked_for_under_the_data_root_only_without_dot_dot(tmp_path):
    from domains.vision import hub

    root = tmp_path / "root"
    (root / "owner" / "set").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    assert hub.locate("owner/set", root) == (root / "owner" / "set").resolve()
    assert hub.locate("owner/other", root) == "owner/other"  # a hub id
    for name in ("owner/..", "owner/../../outside", "a/b/c", "a:b"):
        with pytest.raises(UserError, match=f"'hf:{name}' is neither a folder nor a hub id"):
            hub.locate(name, root)
    assert hub.locate(str(tmp_path / "outside"), root) == (tmp_path / "outside").resolve()  # a path, as given


def test_text_a_book_outside_the_books_folder(tmp_path, data_root, data_set):
    pytest.importorskip("pysbd")
    data_set("senteval")
    root = tmp_path / "data"
    (root / "books").mkdir(parents=True)
    (root / "senteval").symlink_to(data_root / "senteval", target_is_directory=True)
    (root / "books" / "inside.txt").write_text("A book. It has sentences.\n")
    (root / "outside.txt").write_text("Not a book of the corpus.\n")
    line = _refused(tmp_path, "text", "books", "--data-root", str(root), "--set", "books=../outside")
    assert "unknown book(s) ../outside" in line


def test_rl_a_path_for_a_gymnasium_id(tmp_path):
    pytest.importorskip("gymnasium")
    line = _refused(tmp_path, "rl", "gym:../../etc/x")
    assert "'gym:../../etc/x' is not a Gymnasium id" in line


def test_rl_a_module_that_does_not_exist_is_a_user_error(tmp_path):
    pytest.importorskip("gymnasium")
    from domains.rl.gym_envs import make_gym

    with pytest.raises(UserError, match="cannot make Gymnasium environment 'nosuchmodule:Env-v0'.*nosuchmodule"):
        make_gym("nosuchmodule:Env-v0")
    for name in ("a:b:c", "/abs/Env-v0", "ns/../Env-v0"):
        with pytest.raises(UserError, match="is not a Gymnasium id"):
            make_gym(name)
