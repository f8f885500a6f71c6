"""The type stub of the extension module (crates/python/python/alnsort/
_alnsort.pyi, the one in the source tree) against the module as built: every
function the module has is declared there with the module's parameters (as
`inspect.signature` reads the binding's own text signature), in its order,
with a default where the module has one, and the stub declares nothing the
module lacks. A binding whose parameters change (a stage's keyword list)
fails here until the stub says the same.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import alnsort._alnsort as ext  # a missing package is an error, not a skip

STUB = Path(__file__).resolve().parents[2] / "crates" / "python" / "python" / "alnsort" / "_alnsort.pyi"


def stub_functions() -> dict:
    """Each `def` of the stub: name -> [(parameter, has a default)]."""
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            args = node.args.posonlyargs + node.args.args
            defaults = [False] * (len(args) - len(node.args.defaults)) + [True] * len(node.args.defaults)
            params = list(zip((a.arg for a in args), defaults))
            params += [(a.arg, d is not None) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)]
            out[node.name] = params
    return out


def module_functions() -> dict:
    """Each function of the built module: name -> [(parameter, has a default)]."""
    out = {}
    for name in dir(ext):
        fn = getattr(ext, name)
        if name.startswith("_") or not callable(fn) or isinstance(fn, type):
            continue
        sig = inspect.signature(fn)
        out[name] = [(p.name, p.default is not inspect.Parameter.empty) for p in sig.parameters.values()]
    return out


def test_the_stub_declares_every_function_with_the_modules_parameters():
    stub, built = stub_functions(), module_functions()
    assert len(built) >= 20, sorted(built)  # the stages and markdup tasks are among them
    assert sorted(stub) == sorted(built), (sorted(set(stub) ^ set(built)))
    for name, params in built.items():
        assert stub[name] == params, f"{name}: the stub has {stub[name]}, the module {params}"


def test_the_stub_declares_the_modules_constants():
    tree = ast.parse(STUB.read_text())
    declared = {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    constants = {n for n in dir(ext) if not n.startswith("_") and not callable(getattr(ext, n))}
    assert {"ARGV0"} <= constants
    assert constants <= declared | {"__version__"}, constants - declared
