"""The measuring machinery of ``make bench``: runs, medians, prepared copies, table rows."""

from __future__ import annotations

import enum
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dsh_fork.generations import CURRENT_NAME

REPO = Path(__file__).resolve().parent.parent.parent

SETTLE_S = 1.0  # after a sync, before a timed run that writes: let writeback go quiet


class Profile(enum.Enum):
    QUICK = "quick"  # tiny data, nothing judged: the smoke run of the test suite
    DEFAULT = "default"  # make bench
    LARGE = "large"  # make bench-large: adds the 1 GB log and 5,000 agents


@dataclass
class Row:
    """One line of the table; ``ok`` is None when nothing is judged (quick, or report only).
    ``ours`` is the command's CPU time (user + sys of its process tree), ``wall`` beside it;
    ``floor`` what the same work cannot cost less than, measured in the same rounds."""

    case: str
    ours: str
    wall: str
    rss: str
    floor: str
    ratio: str
    goal: str
    ok: bool | None
    load: str
    contention: tuple[float, float] | None = None
    """(others' share, stolen share) of all CPUs while the case's timed runs ran
    (``Contention``); None where ``/proc/stat`` could not be read."""

    @property
    def others(self) -> str:
        """The table cell of ``contention``."""
        if self.contention is None:
            return "-"
        others, stolen = self.contention
        return f"{others:.0%}" + (f", steal {stolen:.0%}" if stolen >= 0.005 else "")


@dataclass(frozen=True)
class Install:
    """The interpreter and the console script the commands run with, and how they got there."""

    python: str
    dsh_fork: str
    how: str


def development_install() -> Install:
    bin_dir = Path(sys.executable).parent
    return Install(sys.executable, str(bin_dir / "dsh-fork"), "the development install")


def wheel_install(base: Path) -> Install:
    """dsh-fork as users get it: a wheel of this checkout installed by pip into a new venv
    (bytecode compiled at install, no editable-install hook at start-up, the console script
    pip writes). Falls back to the development install, saying so, when that cannot be done
    (no network for the dependencies, say)."""
    wheels, venv = base / "wheel", base / "venv"
    log("installing a wheel of this checkout into a new venv …")
    steps = (
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(REPO),
        ],
        [sys.executable, "-m", "venv", str(venv)],
    )
    for step in steps:
        if subprocess.run(step, capture_output=True, check=False).returncode != 0:
            return _fallback(step)
    python = str(venv / "bin" / "python")
    install = [python, "-m", "pip", "install", "--quiet", *map(str, wheels.glob("*.whl"))]
    if subprocess.run(install, capture_output=True, check=False).returncode != 0:
        return _fallback(install)
    return Install(python, str(venv / "bin" / "dsh-fork"), "a wheel installed in a new venv")


def _fallback(step: Sequence[str]) -> Install:
    log(f"  could not run {' '.join(step[:4])} …: measuring the development install instead")
    return development_install()


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    rss_mb: float


@dataclass(frozen=True)
class Figures:
    """Medians of one command's timed runs (CPU time, wall time) and the largest peak memory."""

    wall: float
    cpu: float
    rss_mb: float

    @staticmethod
    def of(runs: Sequence[Run]) -> Figures:
        return Figures(
            statistics.median(r.wall for r in runs),
            statistics.median(r.cpu for r in runs),
            max(r.rss_mb for r in runs),
        )


# Every run goes through this launcher: Linux starts a child's ru_maxrss at the size of the
# process it was forked from (the harness holds generated data), and the launcher is small.
# It times fork..wait4 itself, so its own start-up is not counted. wait4's usage is the
# command's own and that of every child it waited for: the CPU time (user + sys) of the
# process tree, and the largest peak memory among its processes.
LAUNCHER = (
    "import os,sys,time\n"
    "t=time.perf_counter()\n"
    "pid=os.fork()\n"
    "if pid==0:\n"
    "  os.execvp(sys.argv[1],sys.argv[1:])\n"
    "_,status,usage=os.wait4(pid,0)\n"
    "print(time.perf_counter()-t,usage.ru_utime+usage.ru_stime,usage.ru_maxrss)\n"
    "sys.exit(1 if status else 0)\n"
)


ENVELOPE = (
    "import msgspec,zstandard\n"
    "class Envelope(msgspec.Struct,gc=False):\n"
    "  type:str\n"
    "  seq:int\n"
    "check=msgspec.json.Decoder(Envelope).decode\n"
    "dctx=zstandard.ZstdDecompressor()\n"
)
"""What every floor script starts with: the envelope every event line is checked against
(msgspec, its type and seq) and one zstd decompressor."""

# The read floor: what any reader of the logs that checks what it reads must do, in Python —
# find the session dirs, decompress every frame in-process, split the lines, check each event
# line's envelope with msgspec (the header line parsed as JSON). Arguments: log files, or
# sessions roots (every log two levels below). Exits 1 when a line does not check.
FLOOR = (
    "import os,sys\n" + ENVELOPE + "header=msgspec.json.Decoder().decode\n"
    "def read(path):\n"
    "  with open(path,'rb') as fh:\n"
    "    reader=dctx.stream_reader(fh,read_across_frames=True)\n"
    "    rest=b'';first=True\n"
    "    while True:\n"
    "      chunk=reader.read(1<<20)\n"
    "      if not chunk: break\n"
    "      lines=(rest+chunk).split(b'\\n');rest=lines.pop()\n"
    "      if first: header(lines.pop(0));first=False\n"
    "      for line in lines: check(line)\n"
    "def logs(root):\n"
    "  for project in os.scandir(root):\n"
    "    for session in os.scandir(project.path):\n"
    f"      yield os.path.join(session.path,{CURRENT_NAME!r})\n"
    "for arg in sys.argv[1:]:\n"
    "  for path in (logs(arg) if os.path.isdir(arg) else [arg]): read(path)\n"
)

# The list floor: what a listing cannot skip beyond the read floor, in Python — each session
# dir listed with the sizes of its files (a row's size), the log opened once and read whole,
# every frame decompressed, the header validated into a Struct, each event line's envelope
# checked, the lines a row is folded from (turns, title) parsed, one row per session with its
# two ISO times, sorted, written as one JSON document. Argument: a sessions root.
LIST_FLOOR = (
    "import os,sys,time,orjson\n" + ENVELOPE + "class Header(msgspec.Struct,gc=False):\n"
    "  id:str\n"
    "  version:int\n"
    "  createdAt:int\n"
    "  cwd:str|None=None\n"
    "  parentSession:str|None=None\n"
    "  origin:str|None=None\n"
    "header=msgspec.json.Decoder(Header).decode\n"
    "ROW=('turn/end','session/title','subagent/descriptor')\n"
    "def iso(ms):\n"
    "  t=time.gmtime(ms//1000)\n"
    "  return f'{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T{t.tm_hour:02d}:{t.tm_min:02d}:"
    "{t.tm_sec:02d}.{ms%1000:03d}Z'\n"
    "rows=[]\n"
    "for project in os.scandir(sys.argv[1]):\n"
    "  for session in os.scandir(project.path):\n"
    "    size=0\n"
    "    with os.scandir(session.path) as it:\n"
    "      for e in it:\n"
    "        if e.is_file(follow_symlinks=False): size+=e.stat(follow_symlinks=False).st_size\n"
    f"    log=os.path.join(session.path,{CURRENT_NAME!r})\n"
    "    fd=os.open(log,os.O_RDONLY|os.O_NOFOLLOW|os.O_NONBLOCK)\n"
    "    st=os.fstat(fd);data=os.read(fd,st.st_size+1);os.close(fd)\n"
    "    plain=dctx.stream_reader(data,read_across_frames=True).readall()\n"
    "    lines=plain.split(b'\\n');lines.pop()\n"
    "    h=header(lines[0]);title=None;turns=0\n"
    "    for line in lines[1:]:\n"
    "      kind=check(line).type\n"
    "      if kind in ROW:\n"
    "        event=orjson.loads(line)\n"
    "        if kind=='turn/end': turns+=1\n"
    "        elif kind=='session/title': title=event['data'].get('title')\n"
    "    ms=st.st_mtime_ns//1000000\n"
    "    rows.append({'id':h.id,'project':project.name,'path':session.path,'cwd':h.cwd,"
    "'parentSession':h.parentSession,'createdAt':h.createdAt,'createdAtIso':iso(h.createdAt),"
    "'title':title,'turns':turns,'lastActivity':ms,'lastActivityIso':iso(ms),'bytes':size})\n"
    "rows.sort(key=lambda r:(-r['lastActivity'],r['id']))\n"
    "sys.stdout.buffer.write(orjson.dumps({'sessions':rows})+b'\\n')\n"
)

# The search floor: what a search cannot skip beyond the read floor — each session dir listed
# (a log is chosen among its generations), the header validated (the id, and the parent and
# origin the inherited-prefix rule asks for), the decoded text of every log searched for the
# needle (lowered under smart case) and for a \\u escape, which may spell any character; the
# lines holding the needle parsed and their string leaves matched. No frame boundaries, no
# turns, no inherited prefixes, no unreadable session to name. Arguments: a sessions root and
# the needle (a phrase JSON never escapes); prints the number of events that matched (every
# event of the searched types, inherited or not).
SEARCH_FLOOR = (
    "import os,re,sys,orjson\n" + ENVELOPE + "class Header(msgspec.Struct,gc=False):\n"
    "  id:str\n"
    "  version:int\n"
    "  parentSession:str|None=None\n"
    "  origin:str|None=None\n"
    "header=msgspec.json.Decoder(Header).decode\n"
    "text=sys.argv[2];fold=text==text.lower()\n"
    "match=re.compile(re.escape(text),re.I if fold else 0).search\n"
    "token=text.encode();escape=b'\\\\u'\n"
    "def leaves(v):\n"
    "  if isinstance(v,str): yield v\n"
    "  elif isinstance(v,list):\n"
    "    for x in v: yield from leaves(x)\n"
    "  elif isinstance(v,dict):\n"
    "    for x in v.values(): yield from leaves(x)\n"
    "TYPES={'session/title','user/message','assistant/message','tool/result'}\n"
    f"hits=0;name={CURRENT_NAME!r}\n"
    "for project in os.scandir(sys.argv[1]):\n"
    "  for session in os.scandir(project.path):\n"
    "    if name not in os.listdir(session.path): continue\n"
    "    log=os.path.join(session.path,name)\n"
    "    fd=os.open(log,os.O_RDONLY|os.O_NOFOLLOW|os.O_NONBLOCK)\n"
    "    st=os.fstat(fd);data=os.read(fd,st.st_size+1);os.close(fd)\n"
    "    plain=dctx.stream_reader(data,read_across_frames=True).readall()\n"
    "    lines=plain.split(b'\\n');lines.pop()\n"
    "    h=header(lines[0])\n"
    "    kinds=[check(line).type for line in lines[1:]]\n"
    "    hay=plain.lower() if fold else plain\n"
    "    if token not in hay and escape not in hay: continue\n"
    "    for kind,line in zip(kinds,lines[1:]):\n"
    "      if kind in TYPES and (token in (line.lower() if fold else line) or escape in line):\n"
    "        if any(map(match,leaves(orjson.loads(line)['data']))): hits+=1\n"
    "print(hits)\n"
)

# The doctor floor: what doctor cannot skip beyond the read floor — every log of the root
# opened by the read recipe (``reader.open_log``: stable read, frame scan, every event line
# parsed whole) and every event through the v4 checklist (``eventcheck.Validator``); no
# listing, root rule, lock probe or lineage. Argument: a sessions root.
DOCTOR_FLOOR = (
    "import os,sys\n"
    "from pathlib import Path\n"
    "from dsh_fork.generations import Generation\n"
    "from dsh_fork.reader import open_log\n"
    "from dsh_fork.eventcheck import Validator\n"
    "for project in os.scandir(sys.argv[1]):\n"
    "  for session in os.scandir(project.path):\n"
    f"    path=Path(session.path,{CURRENT_NAME!r})\n"
    "    log=open_log(Generation(path,4,'zstd'),index=False,check_dir=False)\n"
    "    check=Validator(log.header,log.version)\n"
    "    for event in log.events(): check.feed(event)\n"
    "    check.finish()\n"
)

# The export floor: what an export cannot skip beyond the read floor — each session dir's log
# read as the read floor reads it (every frame decompressed in-process, lines split, each
# event's envelope checked) with its seqs checked dense (seq == index: DSH refuses a log whose
# seqs skip), the sha256 of its stored bytes (the manifest's checksum, which import verifies),
# and a tar of the dir written by the stdlib's tarfile in the same process (no zstd frame
# around it, no manifest, no spool). Arguments: the tar to write, then session dirs; prints
# each log's sha256. Exits 1 when a line does not check or a seq skips.
EXPORT_FLOOR = (
    "import hashlib,os,sys,tarfile\n" + ENVELOPE + "header=msgspec.json.Decoder().decode\n"
    "def read(path):\n"
    "  with open(path,'rb') as fh:\n"
    "    reader=dctx.stream_reader(fh,read_across_frames=True)\n"
    "    rest=b'';first=True;seq=0\n"
    "    while True:\n"
    "      chunk=reader.read(1<<20)\n"
    "      if not chunk: break\n"
    "      lines=(rest+chunk).split(b'\\n');rest=lines.pop()\n"
    "      if first: header(lines.pop(0));first=False\n"
    "      for line in lines:\n"
    "        if check(line).seq!=seq: sys.exit(f'{path}: seq {seq} skipped')\n"
    "        seq+=1\n"
    "def digest(path):\n"
    "  sha=hashlib.sha256()\n"
    "  with open(path,'rb',buffering=0) as fh:\n"
    "    while chunk:=fh.read(1<<20): sha.update(chunk)\n"
    "  return sha.hexdigest()\n"
    "with tarfile.open(sys.argv[1],'w') as tar:\n"
    "  for session in sys.argv[2:]:\n"
    f"    log=os.path.join(session,{CURRENT_NAME!r})\n"
    "    read(log);print(digest(log))\n"
    "    parent=os.path.dirname(os.path.abspath(session))\n"
    "    tar.add(session,os.path.relpath(session,os.path.dirname(parent)))\n"
)

# The disk kept busy by another process: 4 MiB written and fsynced, over and over.
DISK_HOG = (
    "import os,sys\n"
    "b=os.urandom(1<<22)\n"
    "fd=os.open(sys.argv[1],os.O_WRONLY|os.O_CREAT|os.O_TRUNC)\n"
    "while True:\n"
    "  os.pwrite(fd,b,0); os.fsync(fd)\n"
)

Argv = Sequence[str]
ArgvOf = Callable[[int], Argv]  # the command of run i (a fresh child id or root per run)


def loadavg() -> str:
    return f"{os.getloadavg()[0]:.2f}"


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _cpu_counters() -> tuple[float, float, int] | None:
    """(seconds all CPUs spent busy, seconds the hypervisor stole, number of CPUs) from
    ``/proc/stat``; None where there is none."""
    try:
        with open("/proc/stat", "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    fields = [int(x) for x in lines[0].split()[1:]]
    cpus = sum(1 for line in lines[1:] if line[:3] == b"cpu")
    busy = sum(fields[i] for i in (0, 1, 2, 5, 6) if i < len(fields))  # user nice system irq soft
    steal = fields[7] if len(fields) > 7 else 0
    return busy * _TICK_S, steal * _TICK_S, cpus


def _own_cpu() -> float:
    """CPU seconds of this process and of every child it has waited for."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


@dataclass
class Contention:
    """What the rest of the machine took while our timed runs ran: the CPU time of every other
    process (the machine's busy time less ours) and the time the hypervisor stole, as shares
    of all CPUs over those runs. A load average cannot tell this apart from our own load: a
    listing runs on two cores, so it alone puts a two-core machine at load 2."""

    wall: float = 0.0
    foreign: float = 0.0
    steal: float = 0.0
    cpus: int = 0

    @contextmanager
    def measuring(self) -> Iterator[None]:
        before, own = _cpu_counters(), _own_cpu()
        started = time.perf_counter()
        try:
            yield
        finally:
            after = _cpu_counters()
            if before is not None and after is not None:
                self.wall += time.perf_counter() - started
                self.foreign += max(0.0, after[0] - before[0] - (_own_cpu() - own))
                self.steal += after[1] - before[1]
                self.cpus = after[2]

    def shares(self) -> tuple[float, float] | None:
        """(others' share, stolen share) of all CPUs, None when nothing was measured."""
        capacity = self.wall * self.cpus
        if capacity <= 0:
            return None
        return self.foreign / capacity, self.steal / capacity

    def taken(self) -> tuple[float, float] | None:
        """This reading's ``shares``; the meter starts again for the next case."""
        shares = self.shares()
        self.wall = self.foreign = self.steal = 0.0
        return shares


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shell(command: str) -> list[str]:
    return ["/bin/sh", "-c", command]


class Bench:
    """Runs commands as a user would, each run measured (wall time, peak memory)."""

    def __init__(self, base: Path, repeat: int, profile: Profile, install: Install) -> None:
        self.base = base
        self.repeat = repeat
        self.profile = profile
        self.quick = profile is Profile.QUICK
        self.install = install
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("DSH_FORK_FAULT", None)
        if install.python == sys.executable:  # a development install: no bytecode in the tree
            env["PYTHONPYCACHEPREFIX"] = str(base / "pycache")
        env["DSH_HOME"] = str(base / "home")  # the operations log stays in the benchmark
        self.env = env
        self._cache: dict[str, object] = {}
        self.contention = Contention()
        """Measured over the timed runs since the last row (``cases.row`` takes it)."""

    def dsh(self, root: Path, *args: str) -> list[str]:
        return [self.install.dsh_fork, "--root", str(root), *args]

    def run(self, argv: Argv) -> Run:
        """One run through the launcher; stdout discarded; a failing command aborts."""
        with self.contention.measuring():
            proc = subprocess.run(
                [sys.executable, "-c", LAUNCHER, *argv],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=self.env,
                check=False,
            )
        if proc.returncode != 0:
            raise SystemExit(f"benchmark command failed: {list(argv)}\n{proc.stderr.decode()}")
        wall, cpu, rss = proc.stdout.split()[-3:]
        return Run(float(wall), float(cpu), int(rss) / 1024)

    def floor(self, *paths: Path) -> list[str]:
        """The read floor (``FLOOR``) of these logs or roots, as a command to run."""
        return [self.install.python, "-c", FLOOR, *map(str, paths)]

    def list_floor(self, root: Path) -> list[str]:
        """The list floor (``LIST_FLOOR``) of a root, as a command to run."""
        return [self.install.python, "-c", LIST_FLOOR, str(root)]

    def search_floor(self, root: Path, text: str) -> list[str]:
        """The search floor (``SEARCH_FLOOR``) of a root and a needle, as a command to run."""
        return [self.install.python, "-c", SEARCH_FLOOR, str(root), text]

    def export_floor(self, tar: Path, *sessions: Path) -> list[str]:
        """The export floor (``EXPORT_FLOOR``) of session dirs into a tar, as a command to run."""
        return [self.install.python, "-c", EXPORT_FLOOR, str(tar), *map(str, sessions)]

    def doctor_floor(self, root: Path) -> list[str]:
        """The doctor floor (``DOCTOR_FLOOR``) of a root, as a command to run."""
        return [self.install.python, "-c", DOCTOR_FLOOR, str(root)]

    def pair(
        self,
        ours: ArgvOf,
        baseline: Argv | None,
        *,
        between: Callable[[], None] | None = None,
    ) -> tuple[Figures, Figures | None]:
        """Ours and the baseline run alternately (after one warm-up of ours): run i of ours is
        ``ours(i)``, i = 0 the warm-up; ``between`` runs after each of ours, untimed."""
        if not self.quick:  # a smoke run times nothing worth a warm-up
            self.run(ours(0))
            if between is not None:
                between()
        mine: list[Run] = []
        theirs: list[Run] = []
        for i in range(1, self.repeat + 1):
            if baseline is not None:
                theirs.append(self.run(baseline))
            mine.append(self.run(ours(i)))
            if between is not None:
                between()
        return Figures.of(mine), Figures.of(theirs) if theirs else None

    def rounds(
        self, commands: Sequence[ArgvOf], *, between: Callable[[], None] | None = None
    ) -> list[list[Run]]:
        """Each command once as a warm-up, then ``repeat`` rounds of all of them, one after
        the other (the order rotating): figures of one round saw the same load, so ratios of
        differences are taken round by round. Returns the runs per command."""
        for command in () if self.quick else commands:
            self.run(command(0))
            if between is not None:
                between()
        runs: list[list[Run]] = [[] for _ in commands]
        for i in range(1, self.repeat + 1):
            for k in range(len(commands)):
                j = (k + i) % len(commands)
                runs[j].append(self.run(commands[j](i)))
                if between is not None:
                    between()
        return runs

    def judged(self, ok: bool) -> bool | None:
        return None if self.quick else ok

    def cached(self, key: str, build: Callable[[], object]) -> object:
        """Data shared by several cases (a large log), built once per benchmark run."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]


def copies(tree: Path, count: int, *, settle_s: float = SETTLE_S) -> list[Path]:
    """``count`` identical copies of ``tree`` made now, flushed, then left to settle: every
    timed run that writes gets one that nothing has touched since."""
    made = []
    for i in range(count):
        copy = tree.with_name(f"{tree.name}-copy{i}")
        shutil.copytree(tree, copy, symlinks=True)
        made.append(copy)
    os.sync()
    time.sleep(settle_s)
    return made


@contextmanager
def busy_disk(base: Path) -> Iterator[None]:
    """Another process writing and fsyncing 4 MiB over and over while the block runs."""
    hog = subprocess.Popen([sys.executable, "-c", DISK_HOG, str(base / "disk-hog")])
    try:
        time.sleep(0.5)
        yield
    finally:
        hog.kill()
        hog.wait()
        (base / "disk-hog").unlink(missing_ok=True)


def duration(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def cpu(figures: Figures) -> str:
    return duration(figures.cpu)


def wall(figures: Figures) -> str:
    return duration(figures.wall)


def mb(figures: Figures) -> str:
    return f"{figures.rss_mb:.0f} MB"
