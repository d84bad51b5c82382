"""python/pyepp/_pyepp.pyi against the native module it describes.

The stub is written by hand; these checks keep it from drifting from python/src/bindings.cc:
every public name of ``pyepp._pyepp`` (module level and in each class) is declared in the stub
and every name the stub declares exists, and each function's and method's parameter names, in
order, are the ones pybind11 reports in its signature line. Types are not compared.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, List, Optional, Set

import pytest

from pyepp._native import lib

STUB = Path(__file__).resolve().parents[2] / "python" / "pyepp" / "_pyepp.pyi"


def _stub() -> ast.Module:
    return ast.parse(STUB.read_text(encoding="utf-8"), filename=str(STUB))


def _public(name: str) -> bool:
    return not name.startswith("_")


def _declared(body: List[ast.stmt]) -> Dict[str, ast.AST]:
    """Names a module or class body declares: functions, classes and annotated names."""
    out: Dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node
    return out


def _native_members(cls: type) -> Set[str]:
    return {name for name in vars(cls) if _public(name)}


def _top_level_commas(text: str) -> List[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:])
    return parts


def _native_params(obj: object, name: str) -> Optional[List[str]]:
    """Parameter names from pybind11's signature line ("name(a: int, b: str = '') -> ..."), self
    left out; None when the docstring has no single signature (e.g. overloads)."""
    doc = getattr(obj, "__doc__", None) or ""
    first = doc.lstrip().split("\n", 1)[0]
    match = re.match(re.escape(name) + r"\((.*)\)\s*->", first)
    if not match:
        return None
    names = [p.split(":", 1)[0].split("=", 1)[0].strip() for p in _top_level_commas(match.group(1))]
    return [n for n in names if n and n != "self"]


def _stub_params(node: ast.FunctionDef) -> List[str]:
    args = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    return [a for a in args if a != "self"]


def test_every_native_name_is_in_the_stub_and_back() -> None:
    declared = {n for n in _declared(_stub().body) if _public(n)}
    native = {n for n in dir(lib) if _public(n)}
    assert sorted(native - declared) == [], "bound in bindings.cc, missing from _pyepp.pyi"
    assert sorted(declared - native) == [], "declared in _pyepp.pyi, not bound in bindings.cc"
    assert "__version__" in _declared(_stub().body)


def _classes() -> List[str]:
    return sorted(n for n, node in _declared(_stub().body).items() if isinstance(node, ast.ClassDef))


@pytest.mark.parametrize("name", _classes())
def test_class_members_match(name: str) -> None:
    node = _declared(_stub().body)[name]
    assert isinstance(node, ast.ClassDef)
    declared = {n for n in _declared(node.body) if _public(n)}
    native = _native_members(getattr(lib, name))
    assert sorted(native - declared) == [], f"{name}: bound, missing from the stub"
    assert sorted(declared - native) == [], f"{name}: in the stub, not bound"


def _functions() -> list:
    """(qualified name, stub node, native object) of every function and method."""
    out = []
    for name, node in _declared(_stub().body).items():
        if isinstance(node, ast.FunctionDef) and hasattr(lib, name):
            out.append((name, node, getattr(lib, name)))
        elif isinstance(node, ast.ClassDef) and hasattr(lib, name):
            cls = getattr(lib, name)
            for member, sub in _declared(node.body).items():
                if isinstance(sub, ast.FunctionDef) and member in vars(cls) and not any(
                        isinstance(d, ast.Name) and d.id == "property" for d in sub.decorator_list):
                    native = cls.__init__ if member == "__init__" else getattr(cls, member)
                    out.append((f"{name}.{member}", sub, native))
    return [pytest.param(q, node, native, id=q) for q, node, native in sorted(out, key=lambda t: t[0])]


@pytest.mark.parametrize("qualified,node,native", _functions())
def test_parameter_names_match(qualified: str, node: ast.FunctionDef, native: object) -> None:
    params = _native_params(native, qualified.rsplit(".", 1)[-1])
    if params is None:
        pytest.skip(f"{qualified}: no single pybind11 signature to compare")
    if all(re.fullmatch(r"arg\d+", p) for p in params) and params:
        pytest.skip(f"{qualified}: bound without py::arg names")
    assert _stub_params(node) == params
