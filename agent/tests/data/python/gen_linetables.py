"""Generate line-table test vectors for agent/src/python/linetable.rs.

Run it under each CPython whose line table the agent decodes (it writes
next to itself), e.g.

    for v in 3.10.13 3.11.7 3.12.1 3.13.0; do
        /root/.pyenv/versions/$v/bin/python3 gen_linetables.py
    done

Each run writes linetables-<major>.<minor>.json: every code object compiled
from SAMPLE (recursively through co_consts), with its co_firstlineno, its
co_linetable in hex, and the line co_lines() gives each code unit. co_lines()
is the interpreter's own decoding of the table, so it is the authority the
Rust decoder is checked against.

On 3.11 and later the sample is compiled a second time in a child
interpreter started with -X no_debug_ranges: without column information the
compiler writes the "no column info" entry kind (code 13), which a normal
compile almost never emits.
"""

import json
import os
import subprocess
import sys
import types

# Nesting puts statements at many columns, so that the 3.11+ short forms
# (codes 0-9: start column // 8) all occur; long lines reach columns past 80
# (one-line forms) and past 128 (long form).
WIDE_LINE = "    " + "; ".join(f"v{i} = {i}" for i in range(24))


def _sample():
    parts = []
    add = parts.append
    add("import functools")
    add("")
    add("def decorator(f):")
    add("    @functools.wraps(f)")
    add("    def wrapper(*args, **kwargs):")
    add("        return f(*args, **kwargs)")
    add("    return wrapper")
    add("")
    # A long function: a jump of more than 255 lines between two statements,
    # a single line with more than 254 bytes of bytecode, and a loop whose
    # back edge goes more than 127 lines backwards.
    add("@decorator")
    add("@functools.lru_cache(maxsize=None)")
    add("def long_function(x):")
    add("    total = 0")
    for i in range(300):
        add(f"    # filler comment {i}")
    add("    total += x")
    add("    items = [" + ", ".join(["x"] * 200) + "]")
    add("    while total < 1000:")
    add("        total += 1")
    for i in range(150):
        add(f"        total += {i}")
    add("    for i in range(3):")
    add("        total += i")
    for i in range(140):
        add("")
    add("        total -= i")
    add("    return total + len(items)")
    add("")
    # A call whose arguments span many lines: the call instruction itself is
    # attributed to the first line, far behind the last argument.
    add("def backwards(a):")
    add("    return max(")
    for i in range(200):
        add("        a,")
    add("    )")
    add("")
    add("def columns(a):")
    add(WIDE_LINE)
    add("    if a:")
    add("        if a > 1:")
    add("            if a > 2:")
    add("                if a > 3:")
    add("                    if a > 4:")
    add("                        if a > 5:")
    add("                            if a > 6:")
    add("                                if a > 7:")
    add("                                    if a > 8:")
    add("                                        return a")
    add("")
    add("    return 0")
    add("")
    add("def lambdas_and_comprehensions(xs):")
    add("    f = lambda y: y * 2")
    add("    g = lambda: (lambda z: z + 1)")
    add("    squares = [f(x) for x in xs if x % 2]")
    add("    pairs = {x: [y for y in range(x)] for x in xs}")
    add("    total = sum(x for x in xs)")
    add("    unique = {x for x in xs}")
    add("    return squares, pairs, total, unique, g()")
    add("")
    add("def exceptions(path):")
    add("    try:")
    add("        with open(path) as fh:")
    add("            data = fh.read()")
    add("    except FileNotFoundError as e:")
    add("        data = str(e)")
    add("    except (ValueError, OSError):")
    add("        raise")
    add("    else:")
    add("        data = data.strip()")
    add("    finally:")
    add("        path = None")
    add("    for ch in data:")
    add("        try:")
    add("            if ch == 'x':")
    add("                break")
    add("            continue")
    add("        finally:")
    add("            pass")
    add("    return data")
    add("")
    # Artificial instructions (implicit returns, exception cleanup, loop
    # exits) that the compiler gives no line.
    add("def no_line(xs):")
    add("    for x in xs:")
    add("        if x:")
    add("            try:")
    add("                return x")
    add("            finally:")
    add("                print(x)")
    add("    while xs:")
    add("        xs.pop()")
    add("")
    add("def multi_line_expression(a, b, c):")
    add("    value = (a +")
    add("             b *")
    add("             c -")
    add("             (a if b else")
    add("              c))")
    add("    return {")
    add("        'a': a,")
    add("        'b': [b,")
    add("              c],")
    add("    }[")
    add("        'a'")
    add("    ]")
    add("")
    add("class Example:")
    add("    attr = 1")
    add("")
    add("    @property")
    add("    def prop(self):")
    add("        return self.attr")
    add("")
    add("    @staticmethod")
    add("    def gen(n):")
    add("        for i in range(n):")
    add("            yield i")
    add("        yield from range(n)")
    add("")
    add("async def coroutine(aw):")
    add("    async with aw as v:")
    add("        async for item in v:")
    add("            await item")
    add("    return [i async for i in aw]")
    add("")
    add("def matcher(cmd):")
    add("    match cmd:")
    add("        case [x, y]:")
    add("            return x + y")
    add("        case {'k': v}:")
    add("            return v")
    add("        case Example(attr=1):")
    add("            return 1")
    add("        case _:")
    add("            return None")
    add("")
    add("RESULT = [long_function, backwards, columns, Example]")
    return "\n".join(parts) + "\n"


SAMPLE = _sample()


def walk(code):
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from walk(const)


def describe(code):
    # One entry per 2-byte code unit: the line co_lines() gives it.
    units = len(code.co_code) // 2
    lines = [None] * units
    covered = 0
    for start, end, line in code.co_lines():
        assert start % 2 == 0 and end % 2 == 0, (start, end)
        for unit in range(start // 2, end // 2):
            lines[unit] = line
        covered = max(covered, end)
    # The table must describe the whole bytecode and no more, so that an
    # offset past the end has no line in the Rust decoder either.
    assert covered == len(code.co_code), (code.co_name, covered, len(code.co_code))
    return {
        "name": code.co_qualname if hasattr(code, "co_qualname") else code.co_name,
        "first_line": code.co_firstlineno,
        "linetable": code.co_linetable.hex(),
        "code_len": len(code.co_code),
        "lines": lines,
    }


def code_objects():
    top = compile(SAMPLE, "<kiln-linetable-sample>", "exec")
    return [describe(c) for c in walk(top)]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        json.dump(code_objects(), sys.stdout)
        return
    objects = code_objects()
    if sys.version_info >= (3, 11):
        child = subprocess.run(
            [sys.executable, "-X", "no_debug_ranges", __file__, "--child"],
            check=True,
            capture_output=True,
            text=True,
        )
        for obj in json.loads(child.stdout):
            obj["name"] += " (no_debug_ranges)"
            objects.append(obj)
    version = "%d.%d.%d" % sys.version_info[:3]
    out = {
        "version": version,
        "format": "Pep626" if sys.version_info < (3, 11) else "Locations",
        "code_objects": objects,
    }
    name = "linetables-%d.%d.json" % sys.version_info[:2]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    with open(path, "w") as fh:
        # One code object per line keeps the file diffable.
        fh.write('{"version": %s, "format": %s, "code_objects": [\n'
                 % (json.dumps(out["version"]), json.dumps(out["format"])))
        fh.write(",\n".join(json.dumps(o, separators=(",", ":")) for o in objects))
        fh.write("\n]}\n")
    pairs = sum(len(o["lines"]) for o in objects)
    print(f"{path}: {len(objects)} code objects, {pairs} offsets", file=sys.stderr)


if __name__ == "__main__":
    main()
