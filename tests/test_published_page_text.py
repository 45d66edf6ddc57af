"""A domain's page text (its published rows and notes) lives in its own module, which only the pages load: a run
imports the domain without it, so that editing a note or a published number touches none of a run's code. A
plugin's class attributes still set its page text."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
from tiny_domain import REPO, TinyDomain

import domains
from domains.base import Domain, Reference

BUILTIN = ("graph", "text", "vision", "rl")


@pytest.mark.parametrize("name", BUILTIN)
def test_a_builtin_domain_shows_its_published_modules_rows_and_notes(name):
    published = importlib.import_module(f"domains.{name}.published")
    domain = domains.get(name)
    assert domain.published_module == published.__name__
    assert domain.references == published.REFERENCES and domain.notes == published.NOTES
    assert published.REFERENCES and all(isinstance(r, Reference) for r in published.REFERENCES)


def test_a_process_that_runs_loads_no_page_text_until_a_page_asks():
    # In a fresh interpreter: what the run command imports, and every built-in domain built, as a run builds it.
    script = (
        "import json, sys\n"
        "import domains, harness.run\n"
        f"built = [domains.get(name) for name in {BUILTIN!r}]\n"
        "loaded = lambda: sorted(m for m in sys.modules if m.endswith('.published'))\n"
        "before = loaded()\n"
        "rows = {d.name: len(d.references) for d in built}\n"
        "print(json.dumps({'before': before, 'after': loaded(), 'rows': rows}))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120,
                         check=True)
    seen = json.loads(out.stdout.splitlines()[-1])
    assert seen["before"] == []
    assert seen["after"] == sorted(f"domains.{name}.published" for name in BUILTIN)
    assert all(seen["rows"].values())


class _Bare(Domain):
    """A plugin domain that says nothing of its page text."""

    name = "bare"

    def prepare(self, spec, ctx):
        raise NotImplementedError

    def pretrain(self, spec, ctx, data):
        raise NotImplementedError

    def evaluate(self, spec, pretrained, ctx, data):
        raise NotImplementedError


def test_a_plugins_class_attributes_are_its_page_text(tmp_path, monkeypatch):
    assert TinyDomain().references == (Reference("Tiny et al. 2024, Table 1", "blobs", "Linear+InfoNCE", 90.0, 1.0),)
    assert TinyDomain().notes == {} and _Bare().references == () and _Bare().notes == {}
    # A module of its own is read too, and a class attribute set beside it wins over it.
    (tmp_path / "bare_page_text.py").write_text(
        "from domains.base import Reference\n"
        "REFERENCES = (Reference('Bare 2025', 'blobs', 'Bare', 1.0),)\n"
        "NOTES = {'blobs': 'from the module'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_Bare, "published_module", "bare_page_text")
    assert _Bare().references == (Reference("Bare 2025", "blobs", "Bare", 1.0),)
    assert _Bare().notes == {"blobs": "from the module"}
    monkeypatch.setattr(_Bare, "notes", {"blobs": "by hand"})
    assert _Bare().notes == {"blobs": "by hand"} and _Bare().references[0].source == "Bare 2025"
