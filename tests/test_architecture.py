"""The package's layout rules, measured from its source (see docs/architecture.md).

Each room may import only the rooms listed for it; no module imports a private name
of another; no module is over 600 lines; restore ops are built in one module; every
error class lives in errors.py; TensorFlow's private attributes are read only in
tf_internals.py. These tests read the code with ``ast``; they import nothing.
"""

import ast
import pathlib
import re

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "subsetsaver"
MAX_LINES = 600

# Room -> the rooms it may import (besides itself). The order is the flow of the pipeline.
ALLOWED = {
    "errors": set(),
    "version": set(),
    "lazy_exports": set(),
    "bounded_json": set(),
    "tf_internals": set(),
    "graph_mode": {"errors"},
    "workers": set(),
    "storage": {"bounded_json", "errors", "lazy_exports", "workers"},
    "formats": {"bounded_json", "errors", "version", "lazy_exports", "storage", "workers"},
    "catalog": {"graph_mode", "errors", "tf_internals", "storage", "formats", "lazy_exports"},
    "selectors": {"errors", "tf_internals", "catalog", "lazy_exports"},
    "audit": {"errors", "catalog", "selectors", "lazy_exports"},
    "planning": {"graph_mode", "bounded_json", "errors", "tf_internals", "storage", "formats", "catalog", "selectors",
                 "audit", "lazy_exports", "workers"},
    "portable": {"graph_mode", "errors", "storage", "formats", "catalog", "selectors", "planning", "lazy_exports"},
    "training": {"graph_mode", "errors", "storage", "formats", "audit", "planning", "lazy_exports"},
    "tools": {"errors", "storage", "formats", "catalog", "selectors", "planning", "lazy_exports"},
    "draw": {"errors", "catalog", "selectors", "audit", "planning", "lazy_exports"},
    "layouts": {"bounded_json", "errors", "storage", "formats", "catalog", "selectors", "lazy_exports"},
    "keras": {"graph_mode", "bounded_json", "errors", "tf_internals", "storage", "formats", "catalog", "selectors",
              "planning", "portable", "lazy_exports"},
    "cli": {"bounded_json", "errors", "storage", "formats", "catalog", "selectors", "audit", "planning", "portable", "tools", "draw",
            "keras", "layouts", "lazy_exports"},
    "__main__": {"cli"},
    "__init__": set(),  # the public surface re-exports every room
}


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _dotted(path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(dotted) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_module(dotted) -> bool:
    path = PACKAGE.parent / dotted.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _imports(path):
    """(imported module, names, line, inside a function) for each import of the package's own code."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rsplit(".", 1)[0]
    functions = {id(node) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    nested = set()
    for node in ast.walk(tree):
        if id(node) in functions:
            nested.update(id(child) for child in ast.walk(node) if child is not node)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "subsetsaver" or module.startswith("subsetsaver."):
                for alias in node.names:
                    submodule = f"{module}.{alias.name}"
                    target = submodule if _is_module(submodule) else module
                    found.append((target, alias.name, node.lineno, id(node) in nested))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("subsetsaver"):
                    found.append((alias.name, None, node.lineno, id(node) in nested))
    return found


def test_every_room_is_listed():
    rooms = {_room(_dotted(path)) for path in _modules()}
    assert rooms == set(ALLOWED)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down_the_pipeline(path):
    room = _room(_dotted(path))
    if room == "__init__":
        return
    wrong = [f"line {line}: {module}" for module, _, line, _ in _imports(path)
             if _room(module) != room and _room(module) not in ALLOWED[room]]
    assert wrong == [], f"{room} may import only {sorted(ALLOWED[room])}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_name_crosses_a_module(path):
    private = [f"line {line}: {name} from {module}" for module, name, line, _ in _imports(path)
               if name and name.startswith("_") and not name.startswith("__")]
    assert private == []


FSSPEC_COROUTINES = frozenset({"_cat_file"})
"""fsspec's documented async interface: an ``AsyncFileSystem``'s coroutines are its methods' names with a leading
underscore (``await fs._cat_file(...)``), public for code already on its event loop."""


def _private_attributes_read(path):
    """``(line, name)`` of each ``x._name`` read in ``path`` where ``x`` is not ``self`` or ``cls`` and ``_name`` is
    not defined in the module itself (its functions, classes and the attributes its methods set)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    own |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)}
    own |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    return sorted((node.lineno, node.attr) for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                  and node.attr not in own and node.attr not in FSSPEC_COROUTINES)


def _foreign_private_imports(path):
    """``(line, dotted name)`` of each import in ``path`` of another library's private module or name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and not node.level:
            dotted = [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            dotted = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in dotted if not name.startswith("subsetsaver")
                  and any(part.startswith("_") and not part.startswith("__") for part in name.split("."))]
    return found


FILE_SIDE = sorted([*(PACKAGE / "storage").rglob("*.py"), *(PACKAGE / "formats").rglob("*.py")])


@pytest.mark.parametrize("path", FILE_SIDE, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_file_side_uses_only_public_apis_of_other_libraries(path):
    """s3fs, gcsfs, aiobotocore, google-crc32c and the rest change their private modules and methods in any
    release: storage and formats import none of them and call only public methods (and fsspec's documented
    coroutines)."""
    assert _foreign_private_imports(path) == []
    assert _private_attributes_read(path) == []


FENCED_PRIVATE_IMPORTS = {
    # the standard library offers no public parse tree of a pattern
    "selectors/re2_syntax.py": {"re._parser"},
}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_other_module_imports_a_private_module_of_another_library(path):
    fenced = FENCED_PRIVATE_IMPORTS.get(str(path.relative_to(PACKAGE)), set())
    assert [(line, name) for line, name in _foreign_private_imports(path) if name not in fenced] == []


# Imports of the package's own code inside a function, each with its reason.
LOADED_ON_FIRST_USE = {
    ("cli/options.py", "subsetsaver.formats.registry"): "a command's --help loads no format",
    ("cli/draw_command.py", "subsetsaver.draw"): "draw --help loads no drawing code",
    ("cli/audit_command.py", "subsetsaver.audit"): "audit --help loads no audit",
}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_own_code_is_imported_at_the_top(path):
    where = str(path.relative_to(PACKAGE))
    local = [f"line {line}: {module}" for module, _, line, inside in _imports(path)
             if inside and (where, module) not in LOADED_ON_FIRST_USE]
    assert local == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_are_short(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_no_import_circle_between_modules():
    graph = {}
    for path in _modules():
        name = _dotted(path)
        graph[name] = {module for module, _, _, _ in _imports(path) if module != name}
    # Importing a package runs its __init__, which imports its modules: an edge to a package is an
    # edge to its __init__ only. A cycle through a package's own __init__ re-exports is not a circle.
    state, stack, circles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in graph:
                continue
            if node.startswith(target + "."):  # a module importing its own package's __init__
                continue
            if state.get(target) == "open":
                circles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert circles == []


def test_restore_ops_are_built_in_one_module():
    building = sorted(str(path.relative_to(PACKAGE)) for path in _modules()
                      if re.search(r"raw_ops\.RestoreV2|gen_io_ops|\brestore_v2\b", path.read_text(encoding="utf-8")))
    assert building == ["planning/restore_ops.py"]


def test_tensorflow_private_access_is_fenced():
    pattern = re.compile(r"_save_slice_info|\._id\b|graph\._collections|_is_ref_dtype|_flatten_layers|"
                         r"tensorflow\.python|saver\._[a-zA-Z]|_distribute_strategy")
    offending = sorted(str(path.relative_to(PACKAGE)) for path in _modules()
                       if path.name != "tf_internals.py" and pattern.search(path.read_text(encoding="utf-8")))
    assert offending == []


def test_every_error_class_lives_in_errors_and_is_exported():
    import subsetsaver  # noqa: F401  (only to read __all__ below without executing any room twice)

    defined_elsewhere = []
    for path in _modules():
        if path.name == "errors.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {getattr(base, "id", getattr(base, "attr", "")) for base in node.bases}
                if any(b.endswith(("Error", "Exception", "Warning")) for b in bases):
                    defined_elsewhere.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert defined_elsewhere == []
    errors = ast.parse((PACKAGE / "errors.py").read_text(encoding="utf-8"))
    classes = {node.name for node in errors.body if isinstance(node, ast.ClassDef)}
    assert classes <= set(subsetsaver.__all__)


def test_each_room_declares_what_others_may_use():
    packages = sorted(p for p in PACKAGE.rglob("__init__.py"))
    missing = [str(p.relative_to(PACKAGE)) for p in packages if "__all__" not in p.read_text(encoding="utf-8")]
    assert missing == []


def _calls(path):
    """``module.function`` (as written) of every call in ``path``, with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            while isinstance(owner, ast.Attribute):
                owner = owner.value
            if isinstance(owner, ast.Name):
                found.append((f"{owner.id}.{node.func.attr}", node.lineno))
    return found


# What only the file layer's backends may call: writes, renames, syncs, deletions, listings and locks.
FILE_SYSTEM_CALLS = {"os.replace", "os.rename", "os.fsync", "os.fdatasync", "os.link", "os.remove", "os.unlink",
                     "os.rmdir", "os.mkdir", "os.makedirs", "os.listdir", "os.scandir", "glob.glob", "shutil.rmtree",
                     "shutil.copyfile", "fcntl.flock"}
FILE_LAYER = {"storage/local.py", "storage/gfile.py", "storage/remote.py"}


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_files_are_written_listed_and_removed_only_by_the_file_layer(path):
    relative = str(path.relative_to(PACKAGE))
    if relative in FILE_LAYER:
        return
    found = [f"line {line}: {call}" for call, line in _calls(path) if call in FILE_SYSTEM_CALLS]
    assert found == [], "ask subsetsaver.storage instead"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_checkpoints_are_published_in_one_module(path):
    relative = str(path.relative_to(PACKAGE))
    if relative in FILE_LAYER | {"storage/__init__.py", "formats/publish.py", "formats/tf/bundle/writer.py"}:
        return  # tf_bundle/writer renames a staged bundle's shards before publishing it
    found = [f"line {line}: {call}" for call, line in _calls(path) if call == "storage.rename"]
    assert found == [], "publish through subsetsaver.formats.publish (or the one writer, formats.checkpoint_writer)"


def test_a_prefix_s_files_are_listed_in_one_module():
    pattern = re.compile(r"(glob\.glob|re\.compile)\([^)]*data-")  # a pattern that finds data files
    holders = sorted(str(path.relative_to(PACKAGE)) for path in _modules()
                     if pattern.search(path.read_text(encoding="utf-8")))
    assert holders == ["formats/tf/bundle/files.py"]


def _declared(room) -> set:
    """The names ``subsetsaver/ROOM/__init__.py`` lists in ``__all__`` (None for a one-module room; ROOM may
    be a package inside a room, ``formats/tf``)."""
    init = PACKAGE / room / "__init__.py"
    if not init.exists():
        return None
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def _cross_room_imports(path):
    """(module as written, resolved, name, line) of each import of another room's code."""
    room = _room(_dotted(path))
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rsplit(".", 1)[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            module, names = None, None
            for alias in node.names:
                if alias.name.startswith("subsetsaver.") and _room(alias.name) != room:
                    found.append((alias.name, None, node.lineno))
            continue
        else:
            continue
        if (module == "subsetsaver" or module.startswith("subsetsaver.")) and _room(module) not in (room, "__init__"):
            found.extend((module, name, node.lineno) for name in names)
    return found


# Packages of the formats room that are front doors of their own: one per checkpoint format.
FORMAT_PACKAGES = ("npz", "safetensors", "tf")


def _format_package(dotted):
    """``subsetsaver.formats.P`` for a module inside the format package P, else None."""
    parts = dotted.split(".")
    return ".".join(parts[:3]) if len(parts) > 2 and parts[1] == "formats" and parts[2] in FORMAT_PACKAGES else None


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_other_rooms_are_entered_through_their_front_door(path):
    """Another room is imported as ``from subsetsaver.ROOM import NAME``, NAME in that room's ``__all__``
    (or, for a format's package, ``from subsetsaver.formats.FORMAT import NAME``)."""
    if _room(_dotted(path)) == "__init__":
        return
    wrong = []
    for module, name, line in _cross_room_imports(path):
        room = _room(module)
        door = module if module == _format_package(module) else f"subsetsaver.{room}"
        declared = _declared(door.split(".", 1)[1].replace(".", "/"))
        if module != door or name is None:
            wrong.append(f"line {line}: {module} (past {door}'s __init__)")
        elif declared is not None and name not in declared:
            wrong.append(f"line {line}: {name} (not in {door}.__all__)")
    assert wrong == [], "import another room's public names from the room itself"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_format_s_insides_stay_in_its_package(path):
    """Outside a format's package (``formats/tf``, ``formats/npz``, ...) only that package's public names are imported."""
    own = _format_package(_dotted(path))
    wrong = []
    for module, name, line, _ in _imports(path):
        package = _format_package(module)
        if package is None or package == own:
            continue
        public = _declared(package.split(".", 1)[1].replace(".", "/"))
        whole_package = module == package and name == package.rsplit(".", 1)[1]
        if not whole_package and (module not in (package, f"{package}.{name}") or name not in public):
            wrong.append(f"line {line}: {module}.{name}")
    assert wrong == [], "import a format's public names from its package (subsetsaver.formats.FORMAT)"


def _lazy_table(path, name):
    """The dict literal assigned to ``name`` in ``path``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found in {path}")


def _lazy_exports(path) -> list:
    """``(module, attribute)`` of each name a package exports through :func:`subsetsaver.lazy_exports.exports`:
    ``names(".module", "a", "b")`` calls and ``"name": (".module", "attribute")`` entries."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "names":
            module, *attributes = (ast.literal_eval(argument) for argument in node.args)
            found += [(module, attribute) for attribute in attributes]
        elif isinstance(node, ast.Dict):
            found += [tuple(ast.literal_eval(value)) for value in node.values
                      if isinstance(value, ast.Tuple) and len(value.elts) == 2
                      and all(isinstance(element, ast.Constant) for element in value.elts)
                      and str(value.elts[0].value).startswith(".")]
    return found


def _defines(module_path, attribute) -> bool:
    """Whether the module at ``module_path`` defines, imports or (a package) exports ``attribute``."""
    if module_path.name == "__init__.py" and attribute in {name for _, name in _lazy_exports(module_path)}:
        return True
    tree = ast.parse(module_path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == attribute for t in node.targets):
            return True
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == attribute:
            return True
        if isinstance(node, ast.ImportFrom) and any((alias.asname or alias.name) == attribute for alias in node.names):
            return True
    return False


def test_names_loaded_on_first_use_are_found_and_only_their_tables_load_them():
    """Packages export names that load on first use (:mod:`subsetsaver.lazy_exports`) and the CLI loads its
    commands on first use: each entry names a module that defines it, and no other module imports
    the package's own code by name at run time."""
    missing, tables = [], 0
    for package_init in PACKAGE.rglob("__init__.py"):
        for module, attribute in _lazy_exports(package_init):
            tables += 1
            path = package_init.parent / module.lstrip(".").replace(".", "/")
            path = path.with_suffix(".py") if path.with_suffix(".py").exists() else path / "__init__.py"
            if not path.exists() or (attribute is not None and not _defines(path, attribute)):
                missing.append(f"{package_init.parent.name}: {module}.{attribute}")
    commands = _lazy_table(PACKAGE / "cli" / "__init__.py", "COMMANDS")
    for module, _summary in commands.values():  # each command module defines the command of its own name
        path = PACKAGE / "cli" / f"{module}.py"
        if not path.exists() or not _defines(path, module):
            missing.append(f"cli.{module}.{module}")
    own_code = re.compile(r"import_module\(f?[\"']\.|import_module\(f?[\"']subsetsaver")  # not a user's module
    loaders = sorted(str(path.relative_to(PACKAGE)) for path in _modules()
                     if own_code.search(path.read_text(encoding="utf-8")))
    assert missing == [] and tables > 100
    assert loaders == ["cli/__init__.py"]


@pytest.mark.parametrize("module", ["formats/checkpoint_writer.py", "formats/publish.py"])
def test_the_one_writer_knows_formats_only_through_their_protocol(module):
    """The writer and publishing import no format's package: what differs between formats (the commit file,
    naming the latest, what is recorded) is declared by each format on its ``CheckpointFormat``."""
    found = sorted({imported for imported, _, _, _ in _imports(PACKAGE / module) if _format_package(imported)})
    assert found == []


def test_worker_threads_are_started_in_one_module():
    """Threads and pools start only in workers.py, where each is bounded and named."""
    pattern = re.compile(r"ThreadPoolExecutor\(|threading\.Thread\(|_thread\.start_new")
    starting = sorted(str(path.relative_to(PACKAGE)) for path in _modules()
                      if pattern.search(path.read_text(encoding="utf-8")))
    assert starting == ["workers.py"]
