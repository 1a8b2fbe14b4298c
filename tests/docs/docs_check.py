#!/usr/bin/env python3
"""docs_check.py: the docs say what the programs do.

1. Every --flag named in README.md, docs/*.md and bench/*/README.md exists in the --help of the
   program it belongs to. A flag belongs to the program its command names: the nearest program
   before it on the same code-block line (a line ending in \\ continues the command) or in the
   same `inline code` span (`phubd --topology F`, `sudo bench/racks/run_racks.py --mib 8`). A
   flag in a table whose first column is "flag" belongs to the program that commands in the same
   section before the table name most often (operations.md's phubd table, bench READMEs' tables).
   Anything else (a flag in prose, or in a command of a program that is not ours: cmake,
   mpirun, torchrun, ...) cannot be attributed: an unattributed flag must exist in at least one
   of our programs' --help, and a flag of a foreign program is not checked.
2. The protocol version docs/protocol.md states ("currently **N**") equals kProtocolVersion in
   phub/common/version.h, and so does any other "protocol version N" in the docs.

Our programs and where their flags are read from:
  phubd, phub-worker, phubctl (and phubctl's subcommands): the built binaries' --help
    (--phubd, --phub-worker, --phubctl: ctest passes them);
  the C++ benchmarks (aggregation_bench, phub_exchange_worker, ...): the built binary's --help
    under --build when it is there (not in sanitizer builds), else its source's option names;
  Python drivers (bench/*/*.py, deploy/local/demo.py, examples/*.py): `python3 X --help`
    (argparse), else, when it cannot start (e.g. PyTorch missing), its source's "--flag"s;
  shell scripts (deploy/**/*.sh; demo.sh passes its flags to demo.py): the script's text.
For each flag missing, prints FILE:LINE, the flag, the program and what to do; exit 1.
Runs in about a second (one --help per program named).
"""

import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys

# Programs that are not ours: flags on their command lines are theirs, not checked.
FOREIGN = {
    "cmake", "ninja", "ctest", "make", "mpirun", "srun", "sbatch", "salloc", "torchrun",
    "systemctl", "systemd-analyze", "journalctl", "ethtool", "ip", "tc", "ib_write_bw",
    "ibv_devinfo", "ibv_devices", "show_gids", "curl", "lstopo", "apt-get", "apt", "pip",
    "pip3", "git", "docker", "qemu-system-x86_64", "perf", "taskset", "numactl", "sysctl",
    "promtool", "prometheus", "ssh", "scp", "grep", "sed", "awk", "ls", "cat", "tar", "rm",
    "cp", "install", "sudoedit", "watch", "ompi_info", "nvidia-smi", "ss", "iperf3", "rdma",
    "gdb", "valgrind", "useradd", "kill", "timeout", "env", "nproc", "lscpu", "dd", "ping", "mount",
    "venv",  # python3 -m venv
}
TOKEN = re.compile(r"[\w./+=${}*:-]+|\|\|?|&&?|;|\$\(")
SEPARATORS = {"|", "||", "&", "&&", ";", "$("}
# Words that run the next word as the command (their own flags come before it).
WRAPPERS = {"sudo", "env", "exec", "python3", "/usr/bin/python3", "bash", "sh", "time", "nohup",
            "timeout", "torchrun", "mpirun", "srun", "sbatch", "taskset", "numactl", "netns"}
FLAG = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9_-]*[a-z0-9]|--[a-z0-9])(?![\w])", re.I)
CODE_SPAN = re.compile(r"`([^`\n]+)`")


class Programs:
    """Our programs by name, and the flags each one's --help (or source) lists."""

    def __init__(self, root, build, binaries):
        self.root, self.build = root, build
        self.binaries = binaries  # name -> built path, must run
        self.sources = {}  # name -> (kind, path)
        for path in glob.glob(os.path.join(root, "bench", "*", "*.py")) + \
                glob.glob(os.path.join(root, "bench", "*.py")) + \
                glob.glob(os.path.join(root, "deploy", "local", "*.py")) + \
                glob.glob(os.path.join(root, "examples", "*.py")):
            if "parse_args(" in open(path).read():  # a driver, not a module
                self.sources.setdefault(os.path.basename(path), ("python", path))
        for path in glob.glob(os.path.join(root, "deploy", "**", "*.sh"), recursive=True) + \
                glob.glob(os.path.join(root, "bench", "*", "*.sh")) + \
                glob.glob(os.path.join(root, "tests", "*", "*.sh")):
            self.sources.setdefault(os.path.basename(path), ("shell", path))
        self.sources["demo.sh"] = ("python", os.path.join(root, "deploy", "local", "demo.py"))
        # Everything after phub.sbatch's name goes to phub-worker.
        self.aliases = {"phub.sbatch": "phub-worker"}
        # C++ programs of bench/: add_executable(NAME FILE.cc) in their CMakeLists.
        for cml in glob.glob(os.path.join(root, "bench", "*", "CMakeLists.txt")):
            d = os.path.dirname(cml)
            for name, src in re.findall(r"add_executable\((\S+)\s+(\S+\.cc)", open(cml).read()):
                rel = os.path.relpath(d, root)
                self.sources[name] = ("cxx", os.path.join(d, src), os.path.join(build, rel, name))
        self.cache = {}
        self.notes = []

    def known(self, name):
        return name in self.binaries or name in self.sources or name in self.aliases

    def flags(self, name):
        name = self.aliases.get(name, name)
        if name not in self.cache:
            self.cache[name] = self._flags(name)
        return self.cache[name]

    def _flags(self, name):
        if name in self.binaries:
            return help_flags_of(self.binaries[name], required=True)
        kind, path, *built = self.sources[name]
        if kind == "cxx":
            if built and os.access(built[0], os.X_OK):
                return help_flags_of(built[0], required=True)
            self.notes.append(f"{name}: not built here; its flags read from {rel(self.root, path)}")
            return set(re.findall(r'[",](--[\w-]+)(?=[",])', open(path).read()))
        if kind == "python":
            out = run([sys.executable, path, "--help"], cwd=self.root)
            if out is not None:
                return help_flags(out)
            self.notes.append(f"{name}: --help did not run here (a module missing?); its flags "
                              f"read from {rel(self.root, path)}")
            return set(re.findall(r'["\'](--[\w-]+)["\']', open(path).read()))
        text = open(path).read()  # shell: the flags its text names
        return set(FLAG.findall(text))

    def all_flags(self):
        """Every flag of every program (their --help run in parallel: a few seconds)."""
        names = sorted(set(self.binaries) | set(self.sources))
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            flag_sets = list(pool.map(self.flags, names))
        return set().union(*flag_sets)


def rel(root, path):
    return os.path.relpath(path, root)


def run(argv, cwd=None):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd,
                           env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 and p.stdout.strip() else None


def help_flags(text):
    """The option names of a CLI11 or argparse --help: on lines that start (after indentation)
    with an option, the leading option tokens ("-h,--help", "-o OUT, --out OUT",
    "--max-world-size,--world-size UINT")."""
    flags = set()
    for line in text.splitlines():
        s = line.strip()
        if not line[:1].isspace() or not s.startswith("-"):
            continue
        for tok in s.split():
            if not tok.startswith("-") and not tok.endswith(","):
                break
            for part in tok.rstrip(",").split(","):
                part = part.split("=")[0].split("[")[0]
                if part.startswith("--"):
                    flags.add(part)
    return flags


def help_flags_of(binary, required):
    out = run([binary, "--help"])
    if out is None:
        raise SystemExit(f"docs_check: `{binary} --help` failed")
    flags = help_flags(out)
    # Subcommands (phubctl status): their options count as the program's.
    m = re.search(r"^Subcommands:\n((?:\s+\S.*\n?)+)", out, re.M)
    if m:
        for sub in re.findall(r"^\s+(\S+)", m.group(1), re.M):
            sub_out = run([binary, sub, "--help"])
            if sub_out:
                flags |= help_flags(sub_out)
    return flags


def program_of(tokens, programs):
    """The program a flag after `tokens` (the command's words before it) belongs to: ours by
    name, None for a foreign one, '' where none is named. Walking back from the flag: a word
    naming one of our programs counts where it is a command (a path, the first word, or after a
    wrapper such as sudo or python3), so `journalctl -u phubd --since` is journalctl's; a
    foreign command or a | && ; ends the search."""
    for i in range(len(tokens) - 1, -1, -1):
        tok = tokens[i]
        if tok in SEPARATORS:
            return ""
        if re.match(r"[A-Za-z_]\w*=", tok):  # VAR=value before a command
            continue
        base = os.path.basename(tok.rstrip(":;,)"))
        prev = tokens[i - 1] if i > 0 else None
        is_command = "/" in tok or prev is None or prev in SEPARATORS or \
            os.path.basename(prev) in WRAPPERS or re.fullmatch(r"[A-Z_]+=\S*", prev or "")
        if programs.known(base) and is_command:
            return base
        if base in FOREIGN:  # sbatch --nodes, torchrun --nproc_per_node
            return None
    return ""


def most_named(counts):
    """The program commands in a section named most often (the last on a tie), or ''."""
    if not counts:
        return ""
    top = max(counts.values())
    return [p for p in counts if counts[p] == top][-1]


def scan(path, programs, root):
    """(line, flag, program or '' (unattributed)) for every flag of one markdown file; program
    None (foreign) is left out."""
    found = []
    in_code = False
    carried = []  # a code line ending in "\": its words go on
    section = {}  # program -> commands naming it in this section, in order first named
    table_program = None
    for lineno, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.lstrip().startswith("```"):
            in_code = not in_code
            carried = []
            continue
        if not in_code and line.startswith("#"):
            section, table_program = {}, None
            continue
        if in_code or (line.startswith("    ") and not line.lstrip().startswith(("-", "*", "|"))):
            hash_at = re.search(r"(?:^|\s)#", line)
            code, comment = (line[:hash_at.start()], line[hash_at.end():]) if hash_at \
                else (line, "")
            words = carried + TOKEN.findall(code)
            for i, w in enumerate(words):
                m = re.fullmatch(r"(--[a-z0-9](?:[\w-]*[a-z0-9])?)(?:=.*)?", w, re.I)
                if m:
                    prog = program_of(words[:i], programs)
                    if prog is not None:
                        found.append((lineno, m.group(1), prog))
            for m in FLAG.finditer(comment):  # a "# comment": prose
                found.append((lineno, m.group(1), ""))
            first = program_of(TOKEN.findall(code) + ["--"], programs)
            if first:
                section[first] = section.get(first, 0) + 1
            carried = words if code.rstrip().endswith("\\") else []
            continue
        carried = []
        # Tables: a header row "| flag | ..." makes its rows the section's program's flags.
        if line.startswith("|"):
            cells = [c.strip().lower() for c in line.strip("|").split("|")]
            if table_program is None and cells and cells[0] in ("flag", "flags", "option"):
                table_program = most_named(section)
            elif re.fullmatch(r"\|[\s:|-]+\|?", line):
                pass
        else:
            table_program = None
        spans = [(m.start(), m.end(), m.group(1)) for m in CODE_SPAN.finditer(line)]
        for m in FLAG.finditer(line):
            flag = m.group(1)
            span = next((s for s in spans if s[0] < m.start() < s[1]), None)
            prog = ""
            if span is not None and line[m.start() - 1] != "<":  # <--flag>: a placeholder
                inner = line[span[0] + 1:m.start()]
                prog = program_of(TOKEN.findall(inner), programs)
                if prog is None:
                    continue
            if not prog and table_program and line.startswith("|"):
                first_cell = line.strip("|").split("|")[0]
                if m.start() < line.index(first_cell) + len(first_cell) + 1:
                    prog = table_program
            found.append((lineno, flag, prog))
        for sp in spans:
            first = program_of(TOKEN.findall(sp[2]) + ["--"], programs)
            if first:
                section[first] = section.get(first, 0) + 1
    return found


def check_flags(root, programs, files):
    ours = sorted(set(programs.binaries))
    missing, checked, everything = [], 0, None
    for path in files:
        for lineno, flag, prog in scan(path, programs, root):
            checked += 1
            where = f"{rel(root, path)}:{lineno}"
            if prog:
                have = programs.flags(prog)
                if flag in have:
                    continue
                missing.append(f"{where}: {flag} is not in `{prog} --help`: the doc names "
                               f"it on {prog}'s command line. Fix the doc (the flag renamed "
                               f"or gone?), or give {prog} the flag.")
            else:
                if any(flag in programs.flags(p) for p in ours):
                    continue
                if everything is None:
                    everything = programs.all_flags()
                if flag in everything:
                    continue
                missing.append(f"{where}: {flag} is named where no program's command line or "
                               f"flag table attributes it to one, and no program here has it "
                               f"({', '.join(ours)}, the bench programs and drivers, deploy's "
                               f"scripts): fix the doc, or name the program (`program --flag`), "
                               f"or, for a program that is not ours, add it to FOREIGN in "
                               f"tests/docs/docs_check.py.")
    return missing, checked


def check_protocol(root, files):
    code = re.search(r"kProtocolVersion\s*=\s*(\d+)",
                     open(os.path.join(root, "phub", "common", "version.h")).read())
    if not code:
        return ["phub/common/version.h: no `kProtocolVersion = N` found (renamed? fix "
                "tests/docs/docs_check.py)"]
    want = int(code.group(1))
    problems, stated = [], 0
    for path in files:
        for lineno, line in enumerate(open(path, encoding="utf-8"), 1):
            for m in re.finditer(r"[Pp]rotocol version\b[^*\n]{0,120}?\*\*(\d+)\*\*"
                                 r"|[Pp]rotocol version (\d+)\b", line):
                stated += 1
                said = int(m.group(1) or m.group(2))
                if said != want:
                    problems.append(f"{rel(root, path)}:{lineno}: says protocol version {said}, "
                                    f"kProtocolVersion (phub/common/version.h) is {want}: fix "
                                    f"the doc (and say what version {want} changed)")
    proto = os.path.join(root, "docs", "protocol.md")
    if not any(re.search(r"currently \*\*\d+\*\*", line) for line in open(proto)):
        problems.append("docs/protocol.md: no \"currently **N**\" protocol version statement "
                        "found; state it (the check reads that phrase)")
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                                  "..", "..")))
    p.add_argument("--build", default=None, help="the build dir (default ROOT/build)")
    p.add_argument("--phubd", required=True)
    p.add_argument("--phub-worker", required=True)
    p.add_argument("--phubctl", required=True)
    a = p.parse_args()
    root = a.root
    programs = Programs(root, a.build or os.path.join(root, "build"),
                        {"phubd": a.phubd, "phub-worker": a.phub_worker, "phubctl": a.phubctl})
    files = [os.path.join(root, "README.md")] + sorted(
        glob.glob(os.path.join(root, "docs", "*.md"))) + sorted(
        glob.glob(os.path.join(root, "bench", "*", "README.md")))
    missing, checked = check_flags(root, programs, files)
    problems = check_protocol(root, files)
    for n in programs.notes:
        print(f"note: {n}")
    for m in missing + problems:
        print(f"FAIL {m}")
    print(f"{checked} flag mentions in {len(files)} files checked against "
          f"{len(programs.cache)} programs' --help; {len(missing)} missing; "
          f"protocol version: {'ok' if not problems else 'WRONG'}")
    return 1 if missing or problems else 0


if __name__ == "__main__":
    sys.exit(main())
