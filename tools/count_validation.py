"""Count the lines of params/config validation (issue 48 item 1: at most about 500 in all).

``python tools/count_validation.py [SPEC ...]`` from the repository root. A spec is a module
(every line of it counts) or ``module:name,Class.name,...`` (those functions and classes, their
decorators included). Without specs it counts ``SPEC``, every place validation code lives. Two
counts per spec: raw lines, and code lines (no blank, comment or docstring line).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

SPEC = [
    "nac/fields.py",
    "nac/pipeline/schema.py",
    "nac/pipeline/schema_models.py",
    "nac/tracks/fewshot_params.py",
    "nac/pipeline/params.py:validate",
    "nac/config.py:ConfigDict,_Conv32,_ConvNext,_kind,_as_given,ModelConfig._rules",
    "nac/tracks/image.py:validate,validate_prune",
    "nac/tracks/common.py:validate,validator",
    "nac/training/config.py:TrainConfig._rules",
    "nac/training/compiled.py:check_compile",
    "nac/baselines/neural_interpreter.py:NeuralInterpreterConfig._rules",
    "nac/baselines/modular_networks.py:ModularNetworkConfig._rules",
]


def docstrings(tree: ast.AST) -> list[tuple[int, int]]:
    """The line ranges of the module's, classes' and functions' docstrings."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            value = getattr(first, "value", None)
            if isinstance(first, ast.Expr) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.append((first.lineno, first.end_lineno))
    return out


def code_lines(lines: list[str], start: int, end: int, docs: list[tuple[int, int]]) -> int:
    """Lines ``start..end`` (1-based) that are neither blank, a comment nor in a docstring."""
    n = 0
    for i in range(start, end + 1):
        s = lines[i - 1].strip()
        if s and not s.startswith("#") and not any(a <= i <= b for a, b in docs):
            n += 1
    return n


def find(tree: ast.Module, dotted: str) -> ast.AST:
    node, body = None, tree.body
    for part in dotted.split("."):
        node = next(n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part)
        body = node.body
    return node


def count(spec: str) -> tuple[int, int]:
    """(raw lines, code lines) of one spec."""
    path, _, names = spec.partition(":")
    src = Path(path).read_text()
    lines, tree = src.splitlines(), ast.parse(src)
    docs = docstrings(tree)
    if not names:
        return len(lines), code_lines(lines, 1, len(lines), docs)
    raw = code = 0
    for name in names.split(","):
        node = find(tree, name)
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        raw += node.end_lineno - start + 1
        code += code_lines(lines, start, node.end_lineno, docs)
    return raw, code


def main(specs: list[str]) -> None:
    total_raw = total_code = 0
    for spec in specs or SPEC:
        raw, code = count(spec)
        print(f"{raw:5d} {code:5d}  {spec}")
        total_raw, total_code = total_raw + raw, total_code + code
    print(f"{total_raw:5d} {total_code:5d}  total (raw lines, code lines)")


if __name__ == "__main__":
    main(sys.argv[1:])
