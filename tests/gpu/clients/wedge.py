"""What wedges an MPS control daemon when clients are killed as they
connect (tests/gpu/probe-wedge.sh), with no daemon of ours: each variant
gets a control daemon of its own, two tenants holding about a quarter of
the card and a neighbour that allocates and frees each try (as
tests/gpu/escape.sh section 4), then up to TRIES escapers
(clients/escape_client.c, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT of the suite's
forms in turn), each killed at the variant's moment:

  first   SIGKILL as its first NEW CLIENT line is read (what the daemon does)
  second  SIGKILL as its second NEW CLIENT line is read (10-20 ms later)
  ctx     SIGKILL once it printed "ctx" (its context is up, nothing allocated)
  stop    SIGSTOP at its first line, SIGKILL once the control daemon answered
          a command after it (the control daemon is past the connection)

and after each, the control daemon asked (get_server_status <server> with
"status" in the variant's name, get_client_list <server> with "clients",
get_server_list otherwise; with "now" also the moment the kill is sent)
with a 3 s timeout, and the neighbour's allocation with a 5 s one. A variant with
"nvml" in its name also runs clients/nvml_cost watch (every 100 ms, as the
daemon's poll). A try whose check times out is a wedge: the probe records
the processes' kernel stacks and the logs, then (on the first wedge only)
what still works and what brings the control daemon back, then tears the
variant down (SIGKILL of its server and control daemon, never another's) and goes on.

  python3 wedge.py EC NVML_COST UUID WORKDIR TRIES DEADLINE_S VARIANT...

Prints one "try" line per try and "## " sections; times in ms.
"""
import os
import signal
import subprocess
import sys
import threading
import time

import follow_log

def now():
    return time.monotonic()


def sh(cmd, timeout=10):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout).stdout
    except subprocess.TimeoutExpired:
        return "(timed out)\n"


class Follower(threading.Thread):
    """Follows control.log as clients/follow_log.py does; calls
    on_line(pid, n) for each NEW CLIENT line (n: how many lines that pid
    has had, 1 for its first)."""

    def __init__(self, path, on_line):
        super().__init__(daemon=True)
        self.path, self.on_line, self.stop = path, on_line, False
        self.count = {}

    def run(self):
        for line in follow_log.follow(self.path, lambda: self.stop):
            m = line and follow_log.NEW_CLIENT.search(line)
            if m:
                pid = int(m.group(1))
                self.count[pid] = self.count.get(pid, 0) + 1
                self.on_line(pid, self.count[pid])


class Variant:
    def __init__(self, name, a):
        self.name, self.a = name, a
        self.kill_at = name.split("+")[0]
        self.pipe = os.path.join(a.work, name.replace("+", "-"), "pipe")
        self.log = os.path.join(a.work, name.replace("+", "-"), "log")
        os.makedirs(self.pipe, exist_ok=True)
        os.makedirs(self.log, exist_ok=True)
        for d in (os.path.dirname(self.pipe), self.pipe, self.log):
            os.chmod(d, 0o755)
        self.env = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=self.pipe, CUDA_MPS_LOG_DIRECTORY=self.log,
                        CUDA_VISIBLE_DEVICES=a.uuid)
        self.env.pop("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", None)
        self.procs = []
        self.target = None  # (pid, Popen) of the escaper of this try
        self.killed_at = None
        self.line_at = None
        self.lock = threading.Lock()

    def ctl(self, cmd, timeout=3.0):
        t0 = now()
        try:
            p = subprocess.run(["nvidia-cuda-mps-control"], input=cmd + "\n", env=self.env, capture_output=True,
                               text=True, timeout=timeout)
            return p.stdout.strip(), (now() - t0) * 1e3
        except subprocess.TimeoutExpired:
            return None, (now() - t0) * 1e3

    def start(self):
        subprocess.run(["nvidia-cuda-mps-control", "-d", "-multiuser-server"], env=self.env, check=True, timeout=20)
        self.ctl("set_default_device_pinned_mem_limit 0 %dM" % self.a.cap, 10)
        self.ctl("set_default_active_thread_percentage 25", 10)
        hold = self.a.cap - 1024
        for i in range(2):
            self.spawn([self.a.ec, "-b", "1024", "alloc", str(hold), "3600"], "holder%d" % i)
        self.nb = self.spawn([self.a.ec, "-b", "1024", "serve"], "neighbour", stdin=True)
        self.wait_out(self.nb, "ready", 60)
        for p in self.procs[:2]:
            self.wait_out(p, "alloc", 60)
        out, _ = self.ctl("get_server_list", 10)
        self.server = int(out.split()[0]) if out and out.split()[0].isdigit() else None
        if "nvml" in self.name:
            self.procs.append(subprocess.Popen([self.a.nvml, "watch", self.a.uuid, "3600", "100"],
                                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.follower = Follower(os.path.join(self.log, "control.log"), self.on_line)
        self.follower.start()
        print("## %s: control daemon up, server %s, neighbour and holders ready" % (self.name, self.server), flush=True)

    def spawn(self, argv, tag, stdin=False, env=None):
        out = open(os.path.join(os.path.dirname(self.pipe), tag + ".out"), "w+")
        p = subprocess.Popen(argv, env=env or self.env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, text=True)
        p.outpath = out.name
        self.procs.append(p)
        return p

    def lines(self, p):
        with open(p.outpath) as f:
            return f.read().splitlines()

    def wait_out(self, p, word, seconds, after=0):
        end = now() + seconds
        while now() < end:
            ls = self.lines(p)[after:]
            for l in ls:
                if l.split()[:1] == [word]:
                    return l
            if p.poll() is not None:
                return None
            time.sleep(0.002)
        return None

    def on_line(self, pid, n):
        with self.lock:
            t = self.target
            if t is None or t.pid != pid:
                return
            if (self.kill_at == "first" and n == 1) or (self.kill_at == "second" and n == 2):
                self.line_at = now()
                os.kill(pid, signal.SIGKILL)
                self.killed_at = now()
                self.check_now()
            elif self.kill_at == "stop" and n == 1:
                self.line_at = now()
                os.kill(pid, signal.SIGSTOP)
                self.stopped = True

    def nb_cmd(self, cmd, timeout=5.0):
        n = len(self.lines(self.nb))
        try:
            self.nb.stdin.write(cmd + "\n")
            self.nb.stdin.flush()
        except OSError:
            return None
        end = now() + timeout
        while now() < end:
            ls = self.lines(self.nb)
            if len(ls) > n:
                return ls[-1]
            time.sleep(0.002)
        return None

    def try_one(self, k, form):
        env = dict(self.env, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=form)
        self.killed_at = self.line_at = None
        self.stopped = False
        self.now_result = "-"
        t0 = now()
        with self.lock:
            e = self.spawn([self.a.ec, "-b", "1024", "alloc", str(self.a.cap * 18 // 10), "2"], "e", env=env)
            self.target = e
        if self.kill_at == "ctx":
            if self.wait_out(e, "ctx", 10):
                os.kill(e.pid, signal.SIGKILL)
                self.killed_at = now()
                self.check_now()
        elif self.kill_at == "stop":
            end = now() + 10
            while not self.stopped and now() < end and e.poll() is None:
                time.sleep(0.001)
            if self.stopped:
                self.ctl("get_server_list")
                os.kill(e.pid, signal.SIGKILL)
                self.killed_at = now()
                self.check_now()
        else:
            end = now() + 10
            while self.killed_at is None and now() < end and e.poll() is None:
                time.sleep(0.001)
        try:
            e.wait(10)
            exited = now()
        except subprocess.TimeoutExpired:
            exited = None
        with self.lock:
            self.target = None
        stage = "none"
        for l in self.lines(e):
            w = l.split()[:1]
            if w and w[0] in ("start", "init", "ctx", "alloc", "refused", "fail"):
                stage = w[0]
        r1 = self.nb_cmd("a %d" % (self.a.cap - 1024))
        r2 = self.nb_cmd("f")
        out, ms = self.ctl(self.check_cmd())
        wedged = out is None or r1 is None or r2 is None or exited is None or self.now_result == "timeout"
        f = lambda x: "%.1f" % ((x - t0) * 1e3) if x else "-"
        print("try %s %d pid=%d form=%s line=%s kill=%s exit=%s stage=%s rc=%s neighbour=%s now=%s ctl_ms=%.0f ctl=%s%s" % (
            self.name, k, e.pid, form, f(self.line_at), f(self.killed_at), f(exited), stage, e.returncode,
            (r1 or "timeout").split()[0], self.now_result, ms, "timeout" if out is None else "ok", " WEDGED" if wedged else ""), flush=True)
        if exited is None:
            os.kill(e.pid, signal.SIGKILL)
        self.procs.remove(e)
        return wedged

    def check_cmd(self):
        if "status" in self.name and self.server:
            return "get_server_status %d" % self.server
        if "clients" in self.name and self.server:
            return "get_client_list %d" % self.server
        return "get_server_list"

    def check_now(self):
        """The variant's check sent the moment a kill is (with "now")."""
        if "now" not in self.name:
            return

        def run():
            out, ms = self.ctl(self.check_cmd())
            self.now_result = "timeout" if out is None else "%.0fms" % ms
        self.now_result = "pending"
        threading.Thread(target=run, daemon=True).start()

    def mps_pids(self):
        """This variant's control daemon (the MPS process whose environment
        names its pipe directory: started from self.env) and its server (a
        child of it), not another's: the first recovery run's SIGKILL
        reached a server the host already ran."""
        pids = [int(x) for x in sh("pgrep -f '[n]vidia-cuda-mps-(control|server)'").split()]
        mine = "CUDA_MPS_PIPE_DIRECTORY=" + self.pipe
        ctl = [p for p in pids if mine in sh("tr '\\0' '\\n' </proc/%d/environ" % p).splitlines()]
        ppid = lambda p: (sh("awk '{print $4}' /proc/%d/stat" % p).split() or ["0"])[0]
        return ctl + [p for p in pids if p not in ctl and ppid(p) in [str(c) for c in ctl]]

    def diagnose(self):
        print("## %s: the wedge, %s" % (self.name, time.strftime("%H:%M:%S")), flush=True)
        print(sh("ps -eo pid,ppid,stat,wchan:32,etimes,args | grep -E 'nvidia-cuda-mps|escape_client|PID' | grep -v grep"))
        for pid in self.mps_pids():
            print("### /proc/%d (%s) threads' kernel stacks, first frames, counted" % (pid, sh("tr '\\0' ' ' </proc/%d/cmdline" % pid).strip()))
            print(sh("for t in /proc/%d/task/*; do head -3 $t/stack 2>/dev/null | tr '\\n' ';'; echo \" [$(cat $t/wchan 2>/dev/null)] $(awk '{print $3}' $t/stat)\"; done | sort | uniq -c | sort -rn | head -12" % pid))
            print("fds: %s; unix sockets: %s" % (sh("ls /proc/%d/fd | wc -l" % pid).strip(),
                  sh("ls -l /proc/%d/fd 2>/dev/null | grep -c socket" % pid).strip()))
        print("### control.log, last 25 lines")
        print(sh("tail -25 %s/control.log" % self.log))
        print("### server.log, last 25 lines")
        print(sh("tail -25 %s/server.log" % self.log))

    def recover(self):
        """What still works while wedged, and what brings it back."""
        print("## %s: what works while wedged, and what brings it back" % self.name, flush=True)
        out, ms = self.ctl("get_server_list", 3)
        print("get_server_list right away: %s (%.0f ms)" % ("timeout" if out is None else repr(out), ms))
        r = self.nb_cmd("a 1024", 10)
        print("existing neighbour allocates 1024 MiB: %s" % r)
        self.nb_cmd("f", 5)
        p = self.spawn([self.a.ec, "-b", "1024", "alloc", "1024"], "fresh1")
        got = self.wait_out(p, "alloc", 15)
        print("a new client allocates 1024 MiB within 15 s: %s (its lines: %s)" % (got, self.lines(p)))
        if p.poll() is None:
            p.kill()
        time.sleep(10)
        out, ms = self.ctl("get_server_list", 3)
        print("get_server_list 10 s later: %s (%.0f ms)" % ("timeout" if out is None else repr(out), ms))
        srv = [pid for pid in self.mps_pids() if (sh("tr '\\0' ' ' </proc/%d/cmdline" % pid).split() or [""])[0].endswith("nvidia-cuda-mps-server")]
        print("SIGKILL of the MPS server(s) %s" % srv)
        for pid in srv:
            os.kill(pid, signal.SIGKILL)
        t0 = now()
        out = None
        while now() - t0 < 15 and out is None:
            out, ms = self.ctl("get_server_list", 3)
        print("control daemon answers after the server's kill: %s after %.0f ms" % ("no" if out is None else "yes %r" % out, (now() - t0) * 1e3))
        p = self.spawn([self.a.ec, "-b", "1024", "alloc", "1024"], "fresh2")
        got = self.wait_out(p, "alloc", 20)
        print("then a new client allocates 1024 MiB within 20 s: %s" % got)
        print("the neighbour then: exit code %s, last lines %s" % (self.nb.poll(), self.lines(self.nb)[-2:]))
        self.ctl("get_server_list", 3)

    def teardown(self):
        self.follower.stop = True
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                print("teardown: pid %d would not exit" % p.pid)
        out, _ = self.ctl("quit", 10)
        if out is None:
            print("teardown: quit timed out; SIGKILL of the control daemon and server", flush=True)
            for pid in self.mps_pids():
                os.kill(pid, signal.SIGKILL)
        time.sleep(1)


def main(argv):
    class A:
        pass
    a = A()
    a.ec, a.nvml, a.uuid, a.work = argv[1:5]
    tries, deadline = int(argv[5]), now() + float(argv[6])
    variants = argv[7:]
    total = int(sh("nvidia-smi --id=%s --query-gpu=memory.total --format=csv,noheader,nounits" % a.uuid).strip())
    a.cap = total // 4
    forms = ["x", "0=0", "0=1M,0=999999M", "0=%dM,1=1M" % a.cap, "1=%dM" % a.cap,
             "GPU-00000000-0000-0000-0000-000000000000=%dM" % a.cap]
    first_wedge = True
    summary = []
    for name in variants:
        if now() > deadline - 60:
            summary.append("%s: not run (time)" % name)
            continue
        v = Variant(name, a)
        try:
            v.start()
        except Exception as err:  # noqa: BLE001 - recorded, next variant
            summary.append("%s: did not start: %s" % (name, err))
            continue
        wedged_at = None
        k = 0
        for k in range(1, tries + 1):
            if now() > deadline - 45:
                break
            if v.try_one(k, forms[(k - 1) // 20 % len(forms)]):
                wedged_at = k
                break
        if wedged_at:
            v.diagnose()
            if first_wedge:
                first_wedge = False
                v.recover()
            summary.append("%s: WEDGED at try %d" % (name, wedged_at))
        else:
            summary.append("%s: %d tries, no wedge" % (name, k))
        v.teardown()
    print("## summary")
    for s in summary:
        print(s)


main(sys.argv)
