"""The shape of every ``--json`` document, as msgspec Structs: the one source of the JSON Schemas.

The Structs live in one module per family of commands, each imported only by the commands it
serves: ``forkdocs`` (fork, salvage, relink, and what every document shares: errors, the
PARTIAL member, ``schemaVersion``), ``sessiondocs`` (inspect, list-agents, diff),
``rootdocs`` (doctor, list, tree, du), ``archivedocs`` (export, import, fixture),
``searchdocs`` (search) and ``registrydocs`` (attach, trash, restore). This module names each
document's Struct once, in ``DOCUMENTS``, for the schemas; no command imports it.

Each command's result is, holds or builds its document as one of these Structs (a row or item
that carries the same facts as its document is the document's Struct, made once where its
facts are known: docs/schemas.md), ``to_document`` (results.py) returns it, and ``--json``
prints that Struct as msgspec encodes it, so mypy holds every key a command prints to its
Struct; ``schemas.py`` turns the same Structs into the JSON Schemas shipped in the package
(``dsh_fork/schemas/``, printed by ``dsh-fork schema``), and the test suite checks every
document a command prints against them. A field's place is its key's place in the
document. To add or change a field: edit its Struct in its family's module, set it where the
command makes the Struct, then ``make schemas`` (docs/schemas.md).

Field names are snake_case and rename to the documents' camelCase keys. A key a document holds
only in some runs is ``UNSET`` by default (absent, never null); a key that is always there but
may be null is ``X | None`` without a default. ``forbid_unknown_fields`` marks the objects whose
keys are closed (``additionalProperties: false``).
"""

from __future__ import annotations

from msgspec import Struct

from .archivedocs import ExportDocument, FixtureDocument, ImportDocument
from .forkdocs import (
    ErrorDocument,
    ForkDocument,
    RelinkAllDocument,
    RelinkDocument,
    SalvageDocument,
)
from .registrydocs import (
    AttachDocument,
    RestoreDocument,
    TrashDocument,
    TrashEmptyDocument,
    TrashListDocument,
)
from .rootdocs import DoctorDocument, DuDocument, ListDocument, TreeDocument
from .searchdocs import SearchDocument
from .sessiondocs import DiffDocument, InspectDocument, ListAgentsDocument

DOCUMENTS: dict[str, type[Struct]] = {
    "attach": AttachDocument,
    "diff": DiffDocument,
    "doctor": DoctorDocument,
    "du": DuDocument,
    "error": ErrorDocument,
    "export": ExportDocument,
    "fixture": FixtureDocument,
    "fork": ForkDocument,
    "import": ImportDocument,
    "inspect": InspectDocument,
    "list": ListDocument,
    "list-agents": ListAgentsDocument,
    "relink": RelinkDocument,
    "relink-all": RelinkAllDocument,
    "restore": RestoreDocument,
    "salvage": SalvageDocument,
    "search": SearchDocument,
    "trash": TrashDocument,
    "trash-empty": TrashEmptyDocument,
    "trash-list": TrashListDocument,
    "tree": TreeDocument,
}
"""Each schema's name (the command, ``relink-all`` for ``relink --all``, ``error`` for a run
that ended with an error) and its document's Struct, whose docstring is the schema's title."""
