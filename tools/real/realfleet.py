"""A fleet of real llama.cpp engines on loopback, built from source.

Everything lives in a cache directory outside the repository
(``$LR_REAL_CACHE``, else ``$XDG_CACHE_HOME/libroute-real``, else
``~/.cache/libroute-real``); nothing of llama.cpp is copied into the tree:

- ``llama.cpp-<npm version>/src``: llama.cpp's source, cloned from the git
  bundle the npm package node-llama-cpp ships (``npm pack``, then
  ``package/llama/gitRelease.bundle``);
- ``llama.cpp-<npm version>/build``: the CMake build (ninja, target
  llama-server, static, no tests or examples, no OpenSSL, no prebuilt web
  UI), and ``bin/llama-server`` once it succeeded, with ``build.json``
  saying how it was built; reused when present;
- ``models/*.gguf``: random-weight llama models with a real vocabulary
  (write_model.py), named by their shape and seed; reused when present;
- ``fleet.json``: the engines ``tools/real-fleet start`` left running.

Used by tools/real-fleet (command line), tools/real-bench and the
real-engine end-to-end test. Standard library only; the model writer runs
under a python3 that has numpy.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

NPM_PACKAGE = "node-llama-cpp"
NPM_VERSION = "3.21.1"
BUNDLE = "package/llama/gitRelease.bundle"
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF",
               "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
               "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF"]
# What building and running needs: a command, or a Python module for the
# model writer, and the Debian 12 packages that provide it. Only what is
# missing is installed (a machine may have npm from elsewhere: Debian's
# npm package then conflicts with its nodejs).
NEEDS = [("cmake", ["cmake"]), ("ninja", ["ninja-build"]), ("g++", ["g++"]),
         ("git", ["git"]), ("npm", ["nodejs", "npm"]),
         ("numpy", ["python3-numpy"]), ("yaml", ["python3-yaml"])]

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg: str) -> None:
    print(f"real-fleet: {msg}", file=sys.stderr, flush=True)


def cache_dir() -> str:
    d = os.environ.get("LR_REAL_CACHE")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(
            os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "libroute-real")
    return d


def llama_dir() -> str:
    return os.path.join(cache_dir(), f"llama.cpp-{NPM_PACKAGE}-{NPM_VERSION}")


def server_path() -> str:
    return os.path.join(llama_dir(), "bin", "llama-server")


# ---- Debian packages ---------------------------------------------------------

def missing_debs(pkgs: Sequence[str]) -> List[str]:
    out = []
    for p in pkgs:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p],
                           capture_output=True, text=True)
        if r.returncode != 0 or not r.stdout.endswith(" installed"):
            out.append(p)
    return out


def _have(need: str) -> bool:
    if need in ("numpy", "yaml"):
        return any(subprocess.run([py, "-c", f"import {need}"],
                                  capture_output=True).returncode == 0
                   for py in (sys.executable, "/usr/bin/python3")
                   if os.path.exists(py))
    return shutil.which(need) is not None


def ensure_debs() -> None:
    """Install the Debian packages of what is missing (root, or sudo -n),
    or say what is missing and stop."""
    pkgs = [p for need, debs in NEEDS if not _have(need) for p in debs]
    if not pkgs:
        return
    if shutil.which("dpkg-query") is None:
        raise SystemExit(f"real-fleet: missing: install the equivalent of "
                         f"{' '.join(pkgs)}")
    missing = missing_debs(pkgs)
    if not missing:
        return
    sudo: List[str] = []
    if os.geteuid() != 0:
        if shutil.which("sudo") and subprocess.run(
                ["sudo", "-n", "true"], capture_output=True).returncode == 0:
            sudo = ["sudo", "-n"]
        else:
            raise SystemExit(f"real-fleet: missing Debian packages: "
                             f"{' '.join(missing)} (run as root, or "
                             f"apt-get install them)")
    log(f"installing {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = sudo + ["apt-get", "install", "-q", "-y",
                  "--no-install-recommends"] + missing
    if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode:
        subprocess.run(sudo + ["apt-get", "update", "-q"], env=env,
                       stdout=subprocess.DEVNULL, check=True)
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
    still = missing_debs(missing)
    if still:
        raise SystemExit(f"real-fleet: still missing: {' '.join(still)}")


# ---- source and build --------------------------------------------------------

def source_dir() -> str:
    """llama.cpp's source, cloned from the npm package's git bundle."""
    src = os.path.join(llama_dir(), "src")
    if os.path.isfile(os.path.join(src, "tools", "server", "server.cpp")):
        return src
    os.makedirs(llama_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=llama_dir()) as tmp:
        spec = f"{NPM_PACKAGE}@{NPM_VERSION}"
        log(f"npm pack {spec}")
        r = subprocess.run(["npm", "pack", spec, "--pack-destination", tmp],
                           capture_output=True, text=True, cwd=tmp)
        if r.returncode != 0:
            raise SystemExit(f"real-fleet: npm pack {spec} failed:\n"
                             f"{r.stderr[-2000:]}")
        tgz = os.path.join(tmp, r.stdout.strip().splitlines()[-1])
        with tarfile.open(tgz) as t:
            member = t.getmember(BUNDLE)
            bundle = os.path.join(tmp, "llama.bundle")
            with t.extractfile(member) as f, open(bundle, "wb") as g:
                shutil.copyfileobj(f, g)
        log("cloning llama.cpp from the bundle")
        subprocess.run(["git", "-c", "advice.detachedHead=false", "clone",
                        "-q", bundle, os.path.join(tmp, "src")], check=True)
        if os.path.exists(src):
            shutil.rmtree(src)
        os.replace(os.path.join(tmp, "src"), src)
    return src


def _build_info(src: str) -> Dict[str, Any]:
    head = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    return {"npm": f"{NPM_PACKAGE}@{NPM_VERSION}", "commit": head,
            "cmake": CMAKE_FLAGS}


def ensure_server(rebuild: bool = False, jobs: Optional[int] = None) -> str:
    """The llama-server binary, built once into the cache."""
    ensure_debs()
    exe = server_path()
    info_path = os.path.join(llama_dir(), "build.json")
    src = source_dir()
    want = _build_info(src)
    if not rebuild and os.access(exe, os.X_OK):
        try:
            with open(info_path) as f:
                if json.load(f) == want:
                    return exe
        except (OSError, ValueError):
            pass
        log("the cached build was made differently: rebuilding")
    build = os.path.join(llama_dir(), "build")
    if rebuild and os.path.isdir(build):
        shutil.rmtree(build)
    jobs = jobs or os.cpu_count() or 2
    blog = os.path.join(llama_dir(), "build.log")
    log(f"building llama-server with {jobs} jobs (about 10 minutes on 2 "
        f"cores; log: {blog})")
    t0 = time.monotonic()
    with open(blog, "w") as lf:
        for cmd in (["cmake", "-S", src, "-B", build, "-G", "Ninja"]
                    + CMAKE_FLAGS,
                    ["ninja", "-C", build, f"-j{jobs}", "llama-server"]):
            lf.write("$ " + " ".join(cmd) + "\n")
            lf.flush()
            if subprocess.run(cmd, stdout=lf, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL).returncode != 0:
                lf.close()
                with open(blog) as f:
                    tail = f.read()[-3000:]
                raise SystemExit(f"real-fleet: build failed:\n{tail}")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    shutil.copy2(os.path.join(build, "bin", "llama-server"), exe + ".tmp")
    os.replace(exe + ".tmp", exe)
    with open(info_path, "w") as f:
        json.dump(want, f, indent=1)
    log(f"built {exe} in {time.monotonic() - t0:.0f} s")
    return exe


# ---- the model ---------------------------------------------------------------

class ModelSpec:
    """The random model's shape. Defaults: 8 layers x 512 wide, llama-spm
    vocabulary (32000), f16: 121 MB."""

    def __init__(self, layers: int = 8, width: int = 512, ffn: int = 0,
                 heads: int = 8, kv_heads: int = 0, ctx: int = 16384,
                 vocab: str = "llama-spm", seed: int = 1) -> None:
        self.layers, self.width, self.ffn = layers, width, ffn or 3 * width
        self.heads, self.kv_heads = heads, kv_heads or heads
        self.ctx, self.vocab, self.seed = ctx, vocab, seed

    def name(self) -> str:
        return (f"rand-llama-{self.vocab}-L{self.layers}-W{self.width}-"
                f"F{self.ffn}-H{self.heads}x{self.kv_heads}-C{self.ctx}-"
                f"s{self.seed}.gguf")

    def args(self) -> List[str]:
        return ["--layers", str(self.layers), "--width", str(self.width),
                "--ffn", str(self.ffn), "--heads", str(self.heads),
                "--kv-heads", str(self.kv_heads), "--ctx", str(self.ctx),
                "--seed", str(self.seed)]


def numpy_python() -> str:
    """A python3 that can import numpy: this one, else Debian's."""
    for py in (sys.executable, "/usr/bin/python3"):
        if py and subprocess.run([py, "-c", "import numpy, yaml"],
                                 capture_output=True).returncode == 0:
            return py
    raise SystemExit("real-fleet: no python3 with numpy and yaml "
                     "(apt-get install python3-numpy python3-yaml)")


def ensure_model(spec: Optional[ModelSpec] = None) -> str:
    spec = spec or ModelSpec()
    path = os.path.join(cache_dir(), "models", spec.name())
    if os.path.isfile(path):
        return path
    ensure_debs()
    src = source_dir()
    vocab = os.path.join(src, "models", f"ggml-vocab-{spec.vocab}.gguf")
    if not os.path.isfile(vocab):
        have = sorted(n[len("ggml-vocab-"):-len(".gguf")]
                      for n in os.listdir(os.path.join(src, "models"))
                      if n.startswith("ggml-vocab-") and n.endswith(".gguf"))
        raise SystemExit(f"real-fleet: no vocabulary {spec.vocab!r}; "
                         f"there are: {', '.join(have)}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.path.join(src, "gguf-py"))
    log(f"writing {path}")
    subprocess.run([numpy_python(), os.path.join(HERE, "write_model.py"),
                    "--vocab", vocab, "--out", path] + spec.args(),
                   env=env, check=True)
    return path


# ---- engines -----------------------------------------------------------------

class EngineSpec:
    """How each engine runs: one CPU thread, prompt caching on (llama.cpp's
    default), `parallel` slots sharing one KV buffer of `ctx` tokens, and a
    host-memory prompt cache of `cache_ram_mib`."""

    def __init__(self, threads: int = 1, parallel: int = 4,
                 ctx: int = 16384, cache_ram_mib: int = 1024,
                 metrics: bool = True,
                 extra: Optional[Sequence[str]] = None) -> None:
        self.threads, self.parallel, self.ctx = threads, parallel, ctx
        self.cache_ram_mib, self.metrics = cache_ram_mib, metrics
        self.extra = list(extra or [])

    def argv(self, exe: str, model: str, port: int, name: str) -> List[str]:
        a = [exe, "-m", model, "--host", "127.0.0.1", "--port", str(port),
             "-t", str(self.threads), "-tb", str(self.threads),
             "-c", str(self.ctx), "-np", str(self.parallel), "-kvu",
             "--cache-ram", str(self.cache_ram_mib), "--cache-prompt",
             "--no-webui", "-a", name]
        if self.metrics:
            a.append("--metrics")
        return a + self.extra


def http_get(port: int, path: str, timeout: float = 2.0) -> "tuple[int, bytes]":
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class Engine:
    """One llama-server process."""

    def __init__(self, name: str, port: int, argv: List[str],
                 log_path: str) -> None:
        self.name, self.port, self.argv, self.log_path = (name, port, argv,
                                                          log_path)
        self.proc: Optional[subprocess.Popen] = None
        self.pid = 0

    def start(self) -> None:
        with open(self.log_path, "ab") as lf:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=lf,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid

    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return _is_ours(self.pid)

    def ready(self) -> bool:
        try:
            return http_get(self.port, "/health", 1.0)[0] == 200
        except OSError:
            return False

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name}: llama-server exited; see "
                                   f"{self.log_path}:\n{self.log_tail()}")
            if self.ready():
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: not ready after {timeout_s:.0f} s")

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        """Stop the process (SIGKILL after timeout_s)."""
        if not self.pid or not self.alive():
            self._reap()
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.pid)


def _is_ours(pid: int) -> bool:
    """pid is a live llama-server (so a stale pid of another program is
    never signalled)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0]
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return argv0.endswith(b"llama-server") and state != "Z"


_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int, children: bool = False) -> float:
    """utime + stime of a process (all its threads); with children, plus
    those of its waited-for children. 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # fields[0] is field 3 (state): utime is field 14, stime 15, cutime 16,
    # cstime 17.
    t = int(fields[11]) + int(fields[12])
    if children:
        t += int(fields[13]) + int(fields[14])
    return t / _TICK


class Fleet:
    """N engines on consecutive loopback ports from base_port."""

    def __init__(self, n: int, *, base_port: int = 8301,
                 model: Optional[str] = None,
                 engine: Optional[EngineSpec] = None,
                 log_dir: Optional[str] = None,
                 exe: Optional[str] = None) -> None:
        self.exe = exe or ensure_server()
        self.model = model or ensure_model()
        self.spec = engine or EngineSpec()
        self.log_dir = log_dir or os.path.join(cache_dir(), "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        self.engines = []
        for i in range(n):
            name = f"e{i + 1}"
            port = base_port + i
            self.engines.append(Engine(
                name, port, self.spec.argv(self.exe, self.model, port, name),
                os.path.join(self.log_dir, f"{name}-{port}.log")))

    def start(self, timeout_s: float = 120.0) -> "Fleet":
        for e in self.engines:
            busy = _port_in_use(e.port)
            if busy:
                raise RuntimeError(f"port {e.port} is in use ({busy})")
        for e in self.engines:
            e.start()
        try:
            for e in self.engines:
                e.wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self, timeout_s: float = 120.0) -> None:
        """Every engine stopped and started again: empty caches."""
        self.stop()
        self.start(timeout_s)

    def stop(self) -> None:
        for e in self.engines:
            e.stop()

    def backends(self) -> List["tuple[str, str, int]"]:
        return [(e.name, "127.0.0.1", e.port) for e in self.engines]

    def pids(self) -> List[int]:
        return [e.pid for e in self.engines if e.pid]

    def __enter__(self) -> "Fleet":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _port_in_use(port: int) -> str:
    try:
        status, _ = http_get(port, "/health", 0.5)
        return f"something answers HTTP {status} there"
    except ConnectionRefusedError:
        return ""
    except OSError as e:
        return str(e)


# ---- state of `real-fleet start` ---------------------------------------------

def state_path() -> str:
    return os.path.join(cache_dir(), "fleet.json")


def save_state(fleet: Fleet) -> None:
    st = {"engines": [{"name": e.name, "port": e.port, "pid": e.pid,
                       "log": e.log_path} for e in fleet.engines],
          "model": fleet.model, "argv": fleet.engines[0].argv
          if fleet.engines else []}
    with open(state_path() + ".tmp", "w") as f:
        json.dump(st, f, indent=1)
    os.replace(state_path() + ".tmp", state_path())


def load_state() -> Optional[Dict[str, Any]]:
    try:
        with open(state_path()) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def stop_saved() -> int:
    """Stop the engines of the last `start`; returns how many were alive."""
    st = load_state()
    n = 0
    for row in (st or {}).get("engines", []):
        e = Engine(row["name"], row["port"], [], row.get("log", ""))
        e.pid = int(row["pid"])
        if _is_ours(e.pid):
            n += 1
            e.stop()
    try:
        os.remove(state_path())
    except OSError:
        pass
    return n
