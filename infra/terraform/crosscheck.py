#!/usr/bin/env python3
"""Cross-checks Kiln's Terraform without a provider (no `tofu validate`).

For every directory of infra/terraform that holds .tf files (the modules
and the examples), parsed with python-hcl2:

1. every variable has a description and a type;
2. every output has a description;
3. every variable is referenced (var.NAME) somewhere in its directory,
   outside its own declaration;
4. every module call with a local source names an existing module and
   passes every variable of it that has no default, and no variable it
   does not declare;
5. every output of a called module is referenced by the caller
   (module.CALL.OUTPUT or module.CALL[KEY].OUTPUT, in its resources,
   locals, other module calls or outputs);
6. every module under modules/ is called by at least one example, and has
   versions.tf, variables.tf, outputs.tf and README.md;
7. every checkov skip is in place and gives its reason
   (`#checkov:skip=CKV_…:reason`), and no checkov configuration file
   skips checks wholesale.

Prints what it checked, one finding per line, and exits 1 on any finding.

    crosscheck.py [ROOT]      (default: the directory of this file)
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import hcl2

# Arguments of a module block that are not the module's variables.
MODULE_META_ARGUMENTS = {"source", "version", "providers", "count", "for_each", "depends_on"}
REQUIRED_MODULE_FILES = ("versions.tf", "variables.tf", "outputs.tf", "README.md")
CHECKOV_SKIP = re.compile(r"checkov:skip=([A-Z0-9_]+)(?::(.*))?")
CHECKOV_CONFIGS = (".checkov.yaml", ".checkov.yml")


def unquote(name: str) -> str:
    """python-hcl2 keeps the quotes of block labels: '"name"' -> 'name'."""
    return name[1:-1] if len(name) >= 2 and name[0] == name[-1] == '"' else name


def strip_internal(value):
    """Drops python-hcl2's bookkeeping keys (__is_block__, __comments__…)."""
    if isinstance(value, dict):
        return {k: strip_internal(v) for k, v in value.items() if not (k.startswith("__") and k.endswith("__"))}
    if isinstance(value, list):
        return [strip_internal(v) for v in value]
    return value


@dataclass
class Directory:
    """What one directory of .tf files declares and references."""

    path: Path
    variables: dict[str, dict] = field(default_factory=dict)
    outputs: dict[str, dict] = field(default_factory=dict)
    modules: dict[str, dict] = field(default_factory=dict)
    # Every expression of the directory except variable declarations, as
    # text: references are searched in it.
    referencing_text: str = ""


def load_directory(path: Path) -> Directory:
    directory = Directory(path)
    texts = []
    for tf in sorted(path.glob("*.tf")):
        with tf.open() as f:
            try:
                parsed = strip_internal(hcl2.load(f))
            except Exception as error:  # the parser's own exception types vary by version
                raise SystemExit(f"crosscheck: {tf}: does not parse: {error}") from error
        for block_type, blocks in parsed.items():
            for block in blocks:
                if block_type == "variable":
                    for name, body in block.items():
                        directory.variables[unquote(name)] = body
                    continue
                if block_type == "output":
                    for name, body in block.items():
                        directory.outputs[unquote(name)] = body
                if block_type == "module":
                    for name, body in block.items():
                        directory.modules[unquote(name)] = body
                texts.append(json.dumps(block))
    directory.referencing_text = "\n".join(texts)
    return directory


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent).resolve()
    directories = sorted({tf.parent for tf in root.rglob("*.tf") if ".terraform" not in tf.parts})
    if not directories:
        print(f"crosscheck: no .tf files under {root}")
        return 1
    loaded = {d: load_directory(d) for d in directories}

    findings: list[str] = []
    counts = {"directories": len(loaded), "variables": 0, "outputs": 0, "module calls": 0,
              "module inputs": 0, "module outputs used": 0}
    called: set[Path] = set()

    def rel(path: Path) -> str:
        return str(path.relative_to(root))

    for d in loaded.values():
        for name, body in d.variables.items():
            counts["variables"] += 1
            for attribute in ("description", "type"):
                if attribute not in body or body[attribute] in ("", '""'):
                    findings.append(f"{rel(d.path)}: variable {name!r} has no {attribute}")
            if not re.search(rf"\bvar\.{re.escape(name)}\b", d.referencing_text):
                findings.append(f"{rel(d.path)}: variable {name!r} is declared but never used")
        for name, body in d.outputs.items():
            counts["outputs"] += 1
            if "description" not in body or body["description"] in ("", '""'):
                findings.append(f"{rel(d.path)}: output {name!r} has no description")

        for call, body in d.modules.items():
            counts["module calls"] += 1
            source = unquote(str(body.get("source", "")))
            if not source.startswith(("./", "../")):
                findings.append(f"{rel(d.path)}: module {call!r} has source {source!r}, not a local module")
                continue
            target = (d.path / source).resolve()
            if target not in loaded:
                findings.append(f"{rel(d.path)}: module {call!r} calls {source}, which holds no .tf files")
                continue
            called.add(target)
            callee = loaded[target]
            given = set(body) - MODULE_META_ARGUMENTS
            counts["module inputs"] += len(given)
            for unknown in sorted(given - set(callee.variables)):
                findings.append(f"{rel(d.path)}: module {call!r} passes {unknown!r}, "
                                f"which {rel(target)} does not declare")
            for variable, declaration in sorted(callee.variables.items()):
                if "default" not in declaration and variable not in given:
                    findings.append(f"{rel(d.path)}: module {call!r} does not pass {variable!r}, "
                                    f"which {rel(target)} requires (no default)")
            for output in sorted(callee.outputs):
                pattern = rf"\bmodule\.{re.escape(call)}(\[[^\]]*\])?\.{re.escape(output)}\b"
                if re.search(pattern, d.referencing_text):
                    counts["module outputs used"] += 1
                else:
                    findings.append(f"{rel(d.path)}: output {output!r} of module {call!r} "
                                    f"({rel(target)}) is never used")

    for d in loaded.values():
        if d.path.parent.name == "modules":
            if d.path not in called:
                findings.append(f"{rel(d.path)}: no example calls this module")
            for required in REQUIRED_MODULE_FILES:
                if not (d.path / required).is_file():
                    findings.append(f"{rel(d.path)}: has no {required}")

    counts["checkov skips"] = 0
    for path in sorted(root.rglob("*")):
        if not path.is_file() or ".terraform" in path.parts:
            continue
        if path.name in CHECKOV_CONFIGS:
            findings.append(f"{rel(path)}: a checkov configuration file; skip checks in place instead")
            continue
        if path.suffix not in (".tf", ".tftpl"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in CHECKOV_SKIP.finditer(line):
                counts["checkov skips"] += 1
                reason = (match.group(2) or "").strip()
                if len(reason) < 10:
                    findings.append(f"{rel(path)}:{number}: checkov skip of {match.group(1)} gives no reason")

    summary = ", ".join(f"{n} {what}" for what, n in counts.items())
    for finding in findings:
        print(f"crosscheck: {finding}")
    if findings:
        print(f"crosscheck: FAILED, {len(findings)} finding(s) ({summary})")
        return 1
    print(f"crosscheck: ok ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
