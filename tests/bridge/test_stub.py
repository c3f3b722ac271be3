"""The typed stub ``_ferrule.pyi`` must describe the compiled module ``ferrule._ferrule``.

The stub is parsed with ``ast``; each public name it declares must exist on the compiled module
with the same kind, and every method, property and attribute it lists on a class must exist on
the compiled class. A stub that drifts from the extension fails here, naming the missing member.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from dataclasses import dataclass
from pathlib import Path

import ferrule
import pytest
from bridgeutil import REQUIRED_COUNTERS
from ferrule import _ferrule

STUB_PATH = Path(ferrule.__file__).with_name("_ferrule.pyi")
#: Classes whose members are checked one by one.
CHECKED_CLASSES = ("Bridge", "NativeFuture")


@dataclass(frozen=True)
class StubName:
    """A name the stub declares: ``kind`` is ``class``, ``function`` or ``attribute``."""

    name: str
    kind: str
    annotation: str | None = None


def _is_typing_only(node: ast.Assign) -> bool:
    """``T = TypeVar(...)`` and ``Mode = Literal[...]`` exist for type checkers only."""
    value = node.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        return value.func.id in ("TypeVar", "ParamSpec", "TypeVarTuple", "NewType")
    return isinstance(value, ast.Subscript)


def _annotation_base(annotation: ast.expr) -> str:
    """``tuple[str, ...]`` -> ``tuple``; ``str`` -> ``str``."""
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    return ast.unparse(annotation)


def _declared(body: list[ast.stmt], *, public_only: bool) -> list[StubName]:
    names: list[StubName] = []
    for node in body:
        if isinstance(node, ast.ClassDef):
            names.append(StubName(node.name, "class"))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            is_property = any(
                isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list
            )
            names.append(StubName(node.name, "property" if is_property else "function"))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation = _annotation_base(node.annotation)
            names.append(StubName(node.target.id, "attribute", annotation))
        elif isinstance(node, ast.Assign) and not _is_typing_only(node):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.append(StubName(target.id, "attribute"))
    if public_only:
        names = [n for n in names if not n.name.startswith("_") or n.name == "__version__"]
    return names


STUB = ast.parse(STUB_PATH.read_text(), filename=str(STUB_PATH))
MODULE_NAMES = _declared(STUB.body, public_only=True)
CLASS_NODES = {node.name: node for node in STUB.body if isinstance(node, ast.ClassDef)}
CLASS_MEMBERS = [
    (class_name, member)
    for class_name in CHECKED_CLASSES
    for member in _declared(CLASS_NODES[class_name].body, public_only=False)
]


def test_stub_declares_the_checked_classes() -> None:
    """The stub itself must keep declaring Bridge and NativeFuture; if it stopped, the
    per-member checks below would silently check nothing."""
    assert set(CHECKED_CLASSES) <= set(CLASS_NODES)
    assert {"Bridge", "NativeFuture", "COUNTERS", "__version__"} <= {n.name for n in MODULE_NAMES}


@pytest.mark.parametrize("declared", MODULE_NAMES, ids=lambda n: n.name)
def test_stub_module_name_exists_with_same_kind(declared: StubName) -> None:
    """Each public module-level name of the stub exists on ``ferrule._ferrule`` with the kind
    the stub gives it (class, function, or attribute of the annotated builtin type). Fails with
    AttributeError-like messages when the extension lacks a name or exports it as another kind."""
    assert hasattr(_ferrule, declared.name), f"_ferrule has no {declared.name!r}"
    value = getattr(_ferrule, declared.name)
    if declared.kind == "class":
        assert inspect.isclass(value), f"{declared.name} is not a class: {value!r}"
    elif declared.kind == "function":
        assert callable(value) and not inspect.isclass(value), f"{declared.name}: {value!r}"
    else:
        assert not inspect.isclass(value) and not inspect.isroutine(value), repr(value)
        expected_type = getattr(builtins, declared.annotation or "", None)
        if isinstance(expected_type, type):
            assert isinstance(value, expected_type), f"{declared.name}: {value!r}"


@pytest.mark.parametrize("class_name, member", CLASS_MEMBERS, ids=lambda v: getattr(v, "name", v))
def test_stub_class_member_exists(class_name: str, member: StubName) -> None:
    """Every method, property and attribute the stub lists on Bridge and NativeFuture exists on
    the compiled class: methods are callable, properties are data descriptors. Fails when the
    Rust class lacks a member the stub promises (type checkers would accept a call that raises
    AttributeError at run time)."""
    cls = getattr(_ferrule, class_name)
    assert hasattr(cls, member.name), f"{class_name} has no {member.name!r}"
    found = inspect.getattr_static(cls, member.name)
    if member.kind == "function":
        assert callable(getattr(cls, member.name)), f"{class_name}.{member.name}: {found!r}"
    elif member.kind == "property":
        assert inspect.isdatadescriptor(found), f"{class_name}.{member.name} is {found!r}"


def test_counters_constant_names_every_required_counter() -> None:
    """``COUNTERS`` lists the counter names ``Bridge.counters()`` reports; it must include every
    counter the tests and the benchmark suite read, or they fail with KeyError."""
    assert isinstance(_ferrule.COUNTERS, tuple)
    assert all(isinstance(name, str) for name in _ferrule.COUNTERS)
    missing = set(REQUIRED_COUNTERS) - set(_ferrule.COUNTERS)
    assert not missing, f"COUNTERS lacks {sorted(missing)}"
