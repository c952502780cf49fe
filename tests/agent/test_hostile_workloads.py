"""Hostile workloads through the agent's own command runner (`Worker.run_command`, the code a
lease runs): each tries to read the provider's secrets, write outside its directory, reach the
network, escape or exhaust the machine. Each is blocked or contained, the reason is what the
orchestrator would be told, nothing secret reaches the result, no process of it survives, and
the same agent then runs an honest task."""

from __future__ import annotations

import os
import secrets
import socket
import tarfile
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from eth_account import Account

from agent.config import AgentConfig
from agent.daemon import Agent
from agent.sandbox import Limits, bubblewrap

pytestmark = pytest.mark.skipif(bubblewrap() is None, reason="bubblewrap not usable here")

LIMITS = Limits(cpu_s=3, memory_bytes=768 << 20, file_bytes=8 << 20, output_bytes=16 << 20,
                processes=32, wall_s=10, tmp_bytes=16 << 20, output_files=1_000)
PROLOGUE = textwrap.dedent("""\
    import ctypes, glob, os, signal, socket, sys, threading, time
    OUT = os.environ["MESH_OUT"]
    def report(text):
        with open(os.path.join(OUT, "result"), "a") as handle:
            handle.write(str(text) + "\\n")
    def attempt(name, action):
        try:
            report(f"{name}: GOT {action()!r}"[:2000])
        except BaseException as exc:
            report(f"{name}: blocked {type(exc).__name__}")
    """)


@dataclass
class Host:
    """What a hostile task is after on the provider's machine."""

    agent: Agent
    keystore: Path  # the provider's key file, outside any sandbox
    secret: str  # in the keystore, in the agent's environment and state dir
    sentinel: Path  # a host path no task may create
    port: int  # a loopback TCP server (and UDP socket) no task may reach
    abstract: str  # an abstract unix socket name no task may reach
    contacts: list[str]  # what the servers heard

    def values(self) -> dict[str, object]:
        return {"keystore": str(self.keystore), "secret": self.secret, "port": self.port,
                "sentinel": str(self.sentinel), "agent_pid": os.getpid(),
                "state": str(self.agent.config.state_dir), "abstract": self.abstract}


def _serve(listener: socket.socket, contacts: list[str], label: str) -> None:
    while True:
        try:
            if listener.type == socket.SOCK_DGRAM:
                listener.recvfrom(1024)
            else:
                listener.accept()[0].close()
        except OSError:
            return
        contacts.append(label)


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    secret = "mesh-secret-" + secrets.token_hex(8)
    keystore = tmp_path / "provider" / "keystore.json"
    keystore.parent.mkdir()
    keystore.write_text(f'{{"crypto": "{secret}"}}')
    monkeypatch.setenv("MESH_AGENT_PASSWORD", secret)
    state = tmp_path / "agent-state"
    (state / "spool").mkdir(parents=True)
    (state / "spool" / "token").write_text(secret)
    agent = Agent(AgentConfig(orchestrator="http://127.0.0.1:9", node_id="hostile-test",
                              state_dir=state, limits=LIMITS), Account.create())
    contacts: list[str] = []
    tcp, udp = socket.socket(), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    udp.bind(("127.0.0.1", tcp.getsockname()[1]))
    abstract_name = "mesh-hostile-" + secrets.token_hex(4)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + abstract_name)
    unix.listen()
    for listener, label in ((tcp, "tcp"), (udp, "udp"), (unix, "unix")):
        threading.Thread(target=_serve, args=(listener, contacts, label), daemon=True).start()
    yield Host(agent, keystore, secret, tmp_path / "host" / "sentinel", tcp.getsockname()[1],
               abstract_name, contacts)
    for listener in (tcp, udp, unix):
        listener.close()


def run(host: Host, code: str, *, outputs: tuple[str, ...] = ("result",)
        ) -> tuple[str, str]:
    """(the result's text, "") or ("", why it failed), as the orchestrator would hear it."""
    program = PROLOGUE + textwrap.dedent(code).format(**host.values())
    payload = {"command": ["{python}", "-c", program], "outputs": list(outputs), "shard": 0,
               "shards": 1}
    with host.agent.worker.run_command(payload) as (archive, problem):
        if archive is None:
            return "", problem
        with tarfile.open(archive) as tar:
            files = [tar.extractfile(member) for member in tar.getmembers()]
            return "".join(f.read().decode(errors="replace") for f in files if f), ""


def no_process_left(marker: str) -> bool:
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if marker.encode() in Path(entry.path, "cmdline").read_bytes():
                    return False
            except OSError:
                continue
    return True


# (case id, attack, what must come back: "report" = the task ran and its report shows no
# success; "contained" = it ran, and what it did stayed inside (the host checks below); or
# the start(s) of the refusal the orchestrator is told)
CASES: list[tuple[str, str, str | tuple[str, ...]]] = [
    # --- the provider's secrets
    ("keystore-by-path", 'attempt("read", lambda: open("{keystore}").read())', "report"),
    ("environment", 'attempt("env", lambda: [k for k in os.environ if k.startswith("MESH_A")] '
                    'or 1/0)', "report"),
    ("agent-proc-environ", 'attempt("environ", lambda: open("/proc/{agent_pid}/environ").read())',
     "report"),
    ("pid1-environ", 'attempt("pid1", lambda: "MESH_AGENT_PASSWORD" in '
                     'open("/proc/1/environ").read() or 1/0)', "report"),
    ("parent-process", 'attempt("ppid", lambda: "MESH_AGENT_PASSWORD" in open(f"/proc/'
                       '{{os.getppid()}}/environ").read() or 1/0)', "report"),
    ("host-homes", 'attempt("homes", lambda: glob.glob("/root/*") + glob.glob("/home/*/*") '
                   'or 1/0)', "report"),
    ("etc-shadow", 'attempt("shadow", lambda: open("/etc/shadow").read())', "report"),
    ("etc-passwd", 'attempt("passwd", lambda: open("/etc/passwd").read())', "report"),
    # (the paths up to the task's own dirs and the Python runtime exist inside, empty)
    ("agent-spool", 'attempt("spool", lambda: open("{state}/spool/token").read())', "report"),
    ("repository", 'attempt("repo", lambda: open("/work/main/README.md").read())', "report"),
    ("hardlink-keystore", 'attempt("link", lambda: os.link("{keystore}", OUT + "/k"))', "report"),
    ("output-symlink-to-keystore", 'os.symlink("{keystore}", OUT + "/result")', "output 'result' "
     "is a symlink"),
    ("output-dir-symlink", 'os.symlink("/", OUT + "/sub")\nreport("x")', "output 'sub/etc/passwd' "
     "is a symlink"),
    ("output-fifo", 'os.mkfifo(OUT + "/result")', "output 'result' is not a regular file"),
    ("output-traversal", 'report("x")', "output '../in/result' leaves the output directory"),
    # --- writing outside its directory
    ("write-host-path", 'attempt("write", lambda: os.open("{sentinel}", os.O_WRONLY | os.O_CREAT))',
     "report"),
    ("write-tmp-is-private", 'open("/tmp/{secret}", "w").write("x")\nreport("tmp ok")', "report"),
    ("write-usr", 'attempt("usr", lambda: os.open("/usr/lib/mesh-owned", '
                  'os.O_WRONLY | os.O_CREAT))',
     "report"),
    ("write-inputs", 'attempt("in", lambda: open(OUT + "/../in/x", "w"))', "report"),
    ("core-pattern", 'attempt("core", lambda: os.write(os.open("/proc/sys/kernel/core_pattern",'
                     ' os.O_WRONLY), b"|/tmp/x"))', "report"),
    ("drop-caches", 'attempt("vm", lambda: os.write(os.open("/proc/sys/vm/drop_caches", '
                    'os.O_WRONLY), b"3"))', "report"),
    ("hostname", 'attempt("uts", lambda: os.write(os.open("/proc/sys/kernel/hostname", '
                 'os.O_WRONLY), b"owned"))', "report"),
    # --- the network
    ("tcp-loopback", 'attempt("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), 2))',
     "report"),
    # its own network namespace has a loopback of its own: the host's servers hear nothing
    ("udp-loopback", 'socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", '
                     '("127.0.0.1", {port}))\nreport("sent")', "contained"),
    ("abstract-unix-socket", 'attempt("unix", lambda: socket.socket(socket.AF_UNIX)'
                             '.connect("\\0{abstract}"))', "report"),
    ("dns", 'attempt("dns", lambda: socket.getaddrinfo("example.com", 443))', "report"),
    ("internet", 'attempt("inet", lambda: socket.create_connection(("1.1.1.1", 443), 2))',
     "report"),
    ("raw-socket", 'attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1))',
     "report"),
    # --- privileges and the kernel
    ("setuid-root", 'attempt("setuid", lambda: os.setuid(0))\nreport(f"uid {{os.getuid()}}")',
     "report"),
    ("chroot", 'attempt("chroot", lambda: os.chroot("/"))', "report"),
    ("mount", 'attempt("mount", lambda: ctypes.CDLL(None, use_errno=True).mount(b"none", b"/tmp", '
              'b"tmpfs", 0, None) == 0 or 1/0)', "report"),
    ("ptrace-agent", 'attempt("ptrace", lambda: ctypes.CDLL(None).ptrace(16, {agent_pid}, 0, 0) '
                     '== 0 or 1/0)', "report"),
    ("kill-agent", 'attempt("kill", lambda: os.kill({agent_pid}, signal.SIGKILL))', "report"),
    ("devices", 'attempt("dev", lambda: [p for p in ("/dev/mem", "/dev/kmsg", "/dev/sda") '
                'if os.path.exists(p)] or 1/0)', "report"),
    # --- exhausting the machine
    ("fork-bomb", 'while True:\n    os.fork()', "process_limit"),
    ("thread-bomb", 'ts = []\nwhile True:\n    t = threading.Thread(target=time.sleep, '
                    'args=(60,)); t.start(); ts.append(t)',
     # each thread reserves a malloc arena: the address-space limit stops it at about a dozen,
     # which then sleep until the wall clock (or, with more memory, the thread count bites)
     ("process_limit", "wall_clock_limit")),
    ("memory-hog", 'blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))',
     "memory_limit"),
    ("cpu-spin", 'while True:\n    pass', ("cpu_limit", "wall_clock_limit")),  # a busy host
    ("sleep-forever", 'time.sleep(3600)', "wall_clock_limit"),
    ("disk-fill-files", 'i = 0\nwhile True:\n    open(f"{{OUT}}/f{{i}}", "wb")'
                        '.write(os.urandom(1 << 20)); i += 1', "output_limit"),
    ("disk-fill-inodes", 'i = 0\nwhile True:\n    open(f"{{OUT}}/e{{i}}", "w").close(); i += 1',
     "output_limit"),
    ("one-huge-file", 'open(OUT + "/result", "wb").write(b"x" * (64 << 20))', "output_limit"),
    ("tmp-fill", 'attempt("tmp", lambda: [open(f"/tmp/f{{i}}", "wb").write(b"x" * (4 << 20)) '
                 'for i in range(16)])', "report"),
]
CORE_PATTERN = Path("/proc/sys/kernel/core_pattern")
OUTPUTS = {"output-dir-symlink": ("sub/etc/passwd",), "output-traversal": ("../in/result",)}


def test_the_suite_is_at_least_thirty_attacks() -> None:
    assert len(CASES) >= 30 and len({case for case, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize("case,attack,expected", CASES, ids=[case for case, _, _ in CASES])
def test_a_hostile_workload_is_blocked_or_contained(host: Host, case: str, attack: str,
                                                    expected: str | tuple[str, ...]) -> None:
    marker = f"hostile-{case}-{secrets.token_hex(4)}"
    report, refusal = run(host, f"MARKER = {marker!r}\n{attack}",
                          outputs=OUTPUTS.get(case, ("result",)))
    hostname, core = socket.gethostname(), CORE_PATTERN.read_text()
    if expected == "report":
        assert not refusal, refusal
        assert "GOT" not in report, report
    elif expected == "contained":
        assert not refusal and report, refusal
    else:
        assert refusal.startswith(expected), (refusal, report)
    assert host.secret not in report
    assert not host.sentinel.exists() and not Path("/tmp", host.secret).exists()
    assert host.contacts == [] and socket.gethostname() == hostname
    assert CORE_PATTERN.read_text() == core
    deadline = time.monotonic() + 5
    while not no_process_left(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert no_process_left(marker), "a process of the task outlived it"
    assert not list((host.agent.config.state_dir / "tmp").iterdir()), "its directory was kept"
    # the agent keeps serving: an honest task right after
    assert run(host, 'report("honest")') == ("honest\n", "")


def test_a_daemon_that_detaches_does_not_outlive_its_task(host: Host) -> None:
    marker = f"hostile-daemon-{secrets.token_hex(4)}"
    report, refusal = run(host, f"""
        MARKER = {marker!r}
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c",
                         "import time; time.sleep(30)", MARKER])
            os._exit(0)
        report("parent left")
        """)
    assert (report, refusal) == ("parent left\n", "")
    deadline = time.monotonic() + 5
    while not no_process_left(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert no_process_left(marker)


def test_a_declared_output_that_escapes_is_refused_by_the_job_schema() -> None:
    from pydantic import ValidationError

    from orchestrator.api.schemas import CommandWorkload

    for name in ("../in/result", "a/../../etc/passwd", "./x", "a//b"):
        with pytest.raises(ValidationError, match="relative path"):
            CommandWorkload(kind="command", command=["true"], outputs=[name])
    CommandWorkload(kind="command", command=["true"], outputs=["frames/0001.png", ".hidden"])


# A .blend that tries to run its own Python when opened or rendered: a text block registered
# as a module (runs on load with auto-run on), a frame-change handler it installs, and a
# driver whose expression is arbitrary Python. Each would leave a marker in the output dir.
HOSTILE_BLEND = textwrap.dedent("""\
    import sys
    import bpy
    bpy.ops.wm.open_mainfile(filepath=sys.argv[1])
    text = bpy.data.texts.new("evil.py")  # the worker's cwd is its output dir
    text.write("open('pwned-module', 'w').write('x')\\n"
               "import bpy\\n"
               "def h(*args):\\n"
               "    open('pwned-handler', 'w').write('x')\\n"
               "bpy.app.handlers.frame_change_pre.append(h)\\n")
    text.use_module = True
    sphere = next(o for o in bpy.data.objects if o.type == 'MESH' and 'Sphere' in o.name)
    driver = sphere.driver_add("location", 2).driver
    driver.type = "SCRIPTED"
    driver.expression = "__import__('os').makedirs('pwned-driver', exist_ok=True) or 1.0"
    bpy.ops.wm.save_as_mainfile(filepath=sys.argv[2])
    """)


@pytest.fixture(scope="module")
def hostile_blend(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("hostile-blend")
    scene, hostile = root / "scene.blend", root / "hostile.blend"
    subprocess.run([sys.executable, "-m", "mesh.sample_scene", str(scene)],
                   check=True, capture_output=True, timeout=300)
    subprocess.run([sys.executable, "-c", HOSTILE_BLEND, str(scene), str(hostile)],
                   check=True, capture_output=True, timeout=300)
    return hostile


def test_a_blend_with_scripts_and_drivers_renders_without_running_them(
        hostile_blend: Path, tmp_path: Path) -> None:
    from agent.sandbox import Outcome, Sandbox
    from agent.workloads.blender import WORKER, FrameTask, render

    task = FrameTask(blend=hostile_blend, frame=2, samples=4, chunk_samples=4,
                     resolution=(32, 24))
    with Sandbox(limits=Limits(memory_bytes=3 << 30, wall_s=120),
                 read_only=[hostile_blend, WORKER.parent], parent_dir=tmp_path) as box:
        rendered = render(task, box)
        written = sorted(p.name for p in box.out.rglob("*"))
    assert rendered.run.outcome is Outcome.OK, rendered.run.stderr_tail
    assert not [name for name in written if name.startswith("pwned")], written
