"""src/layers.txt, the one table of the layers of src/ (the include- and link-graph tests read it;
src/CMakeLists.txt builds a library per line from it)."""
import os

SRC = os.environ.get("PAGODA_SRC_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src"))


def read_layers(path=None):
    """{layer: set of the layers it may use, or None for '*'} in file order (bottom first)."""
    path = path or os.path.join(SRC, "layers.txt")
    table = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, deps = line.partition(":")
            if not sep or not name:
                raise ValueError(f"{path}:{lineno}: expected '<layer>: <deps>', got {line!r}")
            deps = deps.split()
            if deps == ["*"]:
                table[name] = None
                continue
            for d in deps:
                if d not in table:
                    raise ValueError(f"{path}:{lineno}: {name} uses {d}, which is not a layer listed above it")
            table[name] = set(deps)
    return table


def layer_of(rel_path):
    """'backend/cpu/x.h' -> 'backend/cpu'; 'model/families/llama.cc' -> 'model'."""
    parts = rel_path.split("/")
    if parts[0] == "backend" and len(parts) > 2:
        return "backend/" + parts[1]
    return parts[0]


def closure(table, layer):
    """Every layer `layer` reaches through its dependencies (not itself unless through a cycle)."""
    reach, todo = set(), [layer]
    while todo:
        for dep in table[todo.pop()] or ():
            if dep not in reach:
                reach.add(dep)
                todo.append(dep)
    return reach
