"""The static pre-gate: what a candidate's diff adds that a reviewer should look at
(docs/design/sandbox-and-security.md).

In the spirit of KernelBench's static checker and gpu-mode's kernelguard, with Python's `ast`: every
Python file the commit changes under the mutable paths is parsed at the commit, and each construct below
that sits on a line the commit added is a finding:

* `signal`: signal handlers and timers (`signal.signal`, `sigaction`, `setitimer`, `pthread_kill`, ...);
* `native`: `ctypes` / `cffi` (direct system calls, libc);
* `concurrency`: threads or processes started (`threading.Thread`, `multiprocessing`, `subprocess`,
  `os.fork`/`system`/`spawn*`/`exec*`, executors);
* `write`: file writes (`open` for writing, `Path.write_*`, `os.open` with write flags, `os.remove`, `shutil`
  copies and moves, `mkfifo`, ...) whose target is not a literal under the scratch folder;
* `clock`: clock reads (`time.time`, `perf_counter`, `monotonic`, `*_ns`, `clock_gettime`, `datetime.now`);
* `proc`: string literals naming `/proc/`, `/sys/` or `clear_refs`;
* `locks`: `fcntl`, `mmap`, `mincore`, `inotify`;
* `dynamic`: `exec`, `eval`, `compile`, `__import__`, `importlib.import_module` (what the rules above cannot
  see through);
* `patching`: an assignment to (or `setattr`/`delattr` on) an attribute of `torch`, `sys` or `builtins`
  (`torch.cuda.synchronize = ...`: the worker's own device-wide sync is bound before the candidate is
  imported, but a patch of the runtime is worth a look), and any import of the harness (`pytest_dit_ar`).

The findings **flag, they do not refuse**: every class they point at is closed at run time by
construction (the sandbox, the freezer, the seccomp filter, the harness's own evidence), and a static rule
is both evaded by an indirection and tripped by honest code (a thread pool, a cache write). They are
printed in the summary, written to experiment.json (`pregate`) and named in the ledger row's `flags`.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import asdict, dataclass

SCRATCH_PREFIX = "/tmp/dit-ar/scratch"

CALLS = {
    "signal": ("signal.signal", "signal.sigaction", "signal.setitimer", "signal.alarm", "signal.pthread_kill",
               "signal.siginterrupt", "signal.set_wakeup_fd", "signal.pthread_sigmask", "signal.sigwait",
               "signal.sigwaitinfo", "signal.sigtimedwait", "os.kill", "os.killpg"),
    "concurrency": ("threading.Thread", "threading.Timer", "_thread.start_new_thread", "_thread.start_new",
                    "os.fork", "os.forkpty", "os.system", "os.popen", "os.posix_spawn", "os.posix_spawnp",
                    "concurrent.futures.ThreadPoolExecutor", "concurrent.futures.ProcessPoolExecutor",
                    "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell", "pty.spawn",
                    "torch.multiprocessing.spawn", "torch.multiprocessing.Process"),
    "write": ("os.remove", "os.unlink", "os.rename", "os.replace", "os.makedirs", "os.mkdir", "os.symlink",
              "os.link", "os.chmod", "os.chown", "os.mkfifo", "os.mknod", "os.truncate", "os.rmdir",
              "shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move", "shutil.rmtree",
              "torch.save", "numpy.save", "safetensors.torch.save_file"),
    "clock": ("time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic",
              "time.monotonic_ns", "time.process_time", "time.process_time_ns", "time.thread_time",
              "time.thread_time_ns", "time.clock_gettime", "time.clock_gettime_ns", "datetime.datetime.now",
              "datetime.datetime.utcnow", "datetime.datetime.today", "os.times", "resource.getrusage"),
    "dynamic": ("exec", "eval", "compile", "__import__", "importlib.import_module", "importlib.__import__"),
    "locks": ("fcntl.flock", "fcntl.lockf", "fcntl.fcntl", "mmap.mmap", "os.memfd_create"),
}
MODULES = {  # importing these is itself a finding
    "signal": ("signal",),
    "native": ("ctypes", "_ctypes", "cffi"),
    "concurrency": ("multiprocessing", "subprocess", "_thread"),
    "locks": ("fcntl", "mmap"),
    "patching": ("pytest_dit_ar",),
}
PATCHED_ROOTS = ("torch", "sys", "builtins")  # an attribute assigned on these is a `patching` finding
PREFIXES = {"concurrency": ("multiprocessing.", "subprocess.", "os.spawn", "os.exec"), "native": ("ctypes.", "cffi.")}
WRITE_METHODS = ("write_text", "write_bytes", "touch", "mkdir", "unlink", "rename", "replace", "symlink_to",
                 "hardlink_to", "chmod", "rmdir")
STRINGS = {"proc": ("/proc/", "/sys/", "clear_refs"), "locks": ("mincore", "inotify", "fanotify")}


@dataclass(frozen=True)
class Finding:
    rule: str
    path: str
    line: int
    text: str

    def describe(self) -> str:
        return f"{self.rule}: {self.path}:{self.line}: {self.text}"


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str]):
        self.path, self.lines = path, lines
        self.aliases: dict[str, str] = {}
        self.found: list[Finding] = []

    def _add(self, rule: str, node: ast.AST) -> None:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip()[:160] if 0 < line <= len(self.lines) else ""
        self.found.append(Finding(rule, self.path, line, text))

    def _qualified(self, node: ast.AST) -> str | None:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.aliases[(alias.asname or alias.name).split(".")[0]] = alias.asname and alias.name or \
                alias.name.split(".")[0]
            self._module(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._module(module, node)
        for alias in node.names:
            self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name
        self.generic_visit(node)

    def _module(self, name: str, node: ast.AST) -> None:
        top = name.split(".")[0]
        for rule, modules in MODULES.items():
            if top in modules:
                self._add(rule, node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._patch(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._patch(node.target, node)
        self.generic_visit(node)

    def _patch(self, target: ast.AST, node: ast.AST) -> None:
        name = self._qualified(target) if isinstance(target, ast.Attribute) else None
        if name and name.split(".")[0] in PATCHED_ROOTS:
            self._add("patching", node)

    def visit_Call(self, node: ast.Call) -> None:
        name = self._qualified(node.func)
        if name in ("setattr", "delattr") and node.args:
            root = self._qualified(node.args[0]) if isinstance(node.args[0], (ast.Name, ast.Attribute)) else None
            if root and root.split(".")[0] in PATCHED_ROOTS:
                self._add("patching", node)
        if name:
            self._call(name, node)
        if isinstance(node.func, ast.Attribute) and node.func.attr in WRITE_METHODS and \
                not (name or "").startswith(("os.", "shutil.")):
            self._add("write", node)
        self.generic_visit(node)

    def _call(self, name: str, node: ast.Call) -> None:
        for rule, names in CALLS.items():
            if name in names and not (rule == "write" and _under_scratch(node)):
                self._add(rule, node)
        for rule, prefixes in PREFIXES.items():
            if name.startswith(prefixes):
                self._add(rule, node)
        if name in ("open", "io.open", "os.fdopen") and _writes(node) and not _under_scratch(node):
            self._add("write", node)
        if name == "os.open" and _os_open_writes(node) and not _under_scratch(node):
            self._add("write", node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            for rule, needles in STRINGS.items():
                if any(n in node.value for n in needles):
                    self._add(rule, node)


def _writes(node: ast.Call) -> bool:
    mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return True  # a computed mode: assume the worst


def _os_open_writes(node: ast.Call) -> bool:
    if len(node.args) < 2:
        return False
    names = {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
    return bool(names & {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}) or \
        not isinstance(node.args[1], ast.Attribute)


def _under_scratch(node: ast.Call) -> bool:
    target = node.args[0] if node.args else None
    return isinstance(target, ast.Constant) and isinstance(target.value, str) and \
        target.value.startswith(SCRATCH_PREFIX)


def scan_source(path: str, source: str, added: set[int] | None = None) -> list[Finding]:
    """Findings in one file's source; only those on `added` lines when given. A file that does not parse is
    one finding (`syntax`: the worker will fail to import it anyway)."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError) as exc:
        return [Finding("syntax", path, getattr(exc, "lineno", 0) or 0, str(exc)[:160])]
    visitor = _Visitor(path, source.splitlines())
    visitor.visit(tree)
    found = [f for f in visitor.found if added is None or f.line in added]
    return sorted(set(found), key=lambda f: (f.path, f.line, f.rule))


def added_lines(old: str, new: str) -> set[int]:
    """1-based numbers of the lines of `new` that `old` does not have at that place (a unified diff)."""
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.update(range(j1 + 1, j2 + 1))
    return lines


def scan_diff(files: dict[str, tuple[str | None, str | None]]) -> list[Finding]:
    """Findings over a diff: path -> (source at the parent or None, source at the commit or None)."""
    found: list[Finding] = []
    for path, (old, new) in sorted(files.items()):
        if new is None or not path.endswith(".py"):
            continue
        found += scan_source(path, new, added_lines(old or "", new))
    return found


def scan_commit(repo, parent: str, commit: str, changed: tuple[str, ...]) -> list[Finding]:
    """scan_diff over the Python files a commit changes (read from git objects, never from a worktree)."""
    def show(rev: str, path: str) -> str | None:
        try:
            return repo.git.show(f"{rev}:{path}")
        except Exception:  # noqa: BLE001 - absent at that revision (added or deleted)
            return None

    return scan_diff({p: (show(parent, p), show(commit, p)) for p in changed if p.endswith(".py")})


def summary(findings: list[Finding]) -> str:
    """One line: how many findings of which rules ('' when none)."""
    if not findings:
        return ""
    rules: dict[str, int] = {}
    for f in findings:
        rules[f.rule] = rules.get(f.rule, 0) + 1
    return f"{len(findings)} finding(s): " + ", ".join(f"{r} {n}" for r, n in sorted(rules.items()))


def flag(findings: list[Finding]) -> str:
    """The ledger's flag for the findings, e.g. 'pregate=clock+signal' ('' when none)."""
    return "pregate=" + "+".join(sorted({f.rule for f in findings})) if findings else ""


def as_records(findings: list[Finding]) -> list[dict]:
    return [asdict(f) for f in findings]
